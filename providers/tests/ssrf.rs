//! The SSRF-guarded client refuses private, loopback and link-local addresses, as IP literals,
//! after DNS resolution and on every redirect, unless they are allow-listed.

use crate::fakes;

use std::net::IpAddr;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use botmesh_providers::http::{GuardedClient, HttpError, IpNet};

fn net(s: &str) -> IpNet {
    s.parse().expect("valid cidr")
}

fn localhost_client() -> GuardedClient {
    GuardedClient::allowing_localhost().expect("client")
}

/// A server on `bind` that serves `/ok` and redirects `/to?u=<url>` to `<url>`.
async fn server(bind: &str) -> std::net::SocketAddr {
    let router = Router::new()
        .route("/ok", get(|| async { "payload" }))
        .route("/big", get(|| async { vec![7u8; 4096] }))
        .route(
            "/to",
            get(|q: axum::extract::RawQuery| async move {
                let target = q.0.unwrap_or_default();
                let target = target.strip_prefix("u=").unwrap_or_default().to_owned();
                (
                    StatusCode::FOUND,
                    [(
                        header::LOCATION,
                        HeaderValue::from_str(&target).expect("header"),
                    )],
                )
                    .into_response()
            }),
        )
        .route(
            "/loop",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/loop")]).into_response() }),
        );
    let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

fn blocked_addr(err: &HttpError) -> Option<IpAddr> {
    match err {
        HttpError::Blocked { addr, .. } => Some(*addr),
        _ => None,
    }
}

const FORBIDDEN: [(&str, &str); 7] = [
    ("http://127.0.0.1/", "127.0.0.1"),
    ("http://10.1.2.3/", "10.1.2.3"),
    ("http://172.16.5.4/", "172.16.5.4"),
    ("http://192.168.0.10/", "192.168.0.10"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
    ("http://[::1]/", "::1"),
    ("http://[fd00::1]/", "fd00::1"),
];

/// The error of downloading `url` with `client` (under a channel's own size cap `cap`), which
/// must fail.
async fn download_err(client: &GuardedClient, url: &str, cap: Option<u64>) -> HttpError {
    let got = match cap {
        Some(cap) => client.download_limited(url, None, cap).await,
        None => client.download(url, None).await,
    };
    got.expect_err(url)
}

#[tokio::test]
async fn refuses_private_literals_before_connecting() {
    let client = GuardedClient::new().expect("client");
    for (url, ip) in FORBIDDEN {
        let err = client.download(url, None).await.expect_err(url);
        assert_eq!(
            blocked_addr(&err),
            Some(ip.parse().expect("ip")),
            "{url}: {err}"
        );
    }
    // Other spellings of loopback the URL parser normalises.
    for url in [
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
    ] {
        let err = client.download(url, None).await.expect_err(url);
        assert!(matches!(err, HttpError::Blocked { .. }), "{url}: {err}");
    }
}

#[tokio::test]
async fn refuses_a_name_that_resolves_to_loopback() {
    let addr = server("127.0.0.1:0").await;
    let client = GuardedClient::new().expect("client");
    let err = download_err(
        &client,
        &format!("http://localhost:{}/ok", addr.port()),
        None,
    )
    .await;
    assert!(matches!(err, HttpError::Blocked { .. }), "{err}");
}

#[tokio::test]
async fn allow_list_permits_exactly_what_it_lists() {
    let addr = server("127.0.0.1:0").await;
    let got = localhost_client()
        .download(&format!("http://{addr}/ok"), None)
        .await
        .expect("allow-listed");
    assert_eq!(got.bytes, b"payload");
    // The same name is refused without the allow-list, and resolved through it with it.
    let by_name = localhost_client()
        .download(&format!("http://localhost:{}/ok", addr.port()), None)
        .await
        .expect("localhost resolves to an allow-listed 127.0.0.1");
    assert_eq!(by_name.bytes, b"payload");
}

#[tokio::test]
async fn refuses_a_redirect_to_any_private_address() {
    let addr = server("127.0.0.1:0").await;
    let client = localhost_client();
    for (target, ip) in FORBIDDEN.iter().skip(1) {
        let url = format!("http://{addr}/to?u={target}");
        let err = client.download(&url, None).await.expect_err(target);
        assert_eq!(
            blocked_addr(&err),
            Some(ip.parse().expect("ip")),
            "{target}: {err}"
        );
    }
}

#[tokio::test]
async fn redirects_are_checked_on_every_hop_against_the_allow_list() {
    let first = server("127.0.0.1:0").await;
    let second = server("127.0.0.2:0").await;
    let url = format!("http://{first}/to?u=http://{second}/ok");

    // 127.0.0.1 is allowed, 127.0.0.2 is not.
    let err = download_err(&localhost_client(), &url, None).await;
    assert_eq!(blocked_addr(&err), Some("127.0.0.2".parse().expect("ip")));

    // Allow-listing the whole loopback range permits both hops.
    let wide = GuardedClient::builder()
        .allow(net("127.0.0.0/8"))
        .build()
        .expect("client");
    assert_eq!(
        wide.download(&url, None).await.expect("both hops").bytes,
        b"payload"
    );

    // A redirect loop ends.
    let err = download_err(&wide, &format!("http://{first}/loop"), None).await;
    assert!(matches!(err, HttpError::TooManyRedirects { .. }), "{err}");
}

#[tokio::test]
async fn bodies_over_the_limit_and_odd_schemes_are_refused() {
    let addr = server("127.0.0.1:0").await;
    let small = GuardedClient::builder()
        .allow(net("127.0.0.1"))
        .max_bytes(1000)
        .build()
        .expect("client");
    let err = download_err(&small, &format!("http://{addr}/big"), None).await;
    assert!(
        matches!(err, HttpError::TooLarge { limit: 1000, .. }),
        "{err}"
    );
    // A channel's own cap never raises the client's (WhatsApp asks for 100 MiB).
    let err = download_err(
        &small,
        &format!("http://{addr}/big"),
        Some(100 * 1024 * 1024),
    )
    .await;
    assert!(
        matches!(err, HttpError::TooLarge { limit: 1000, .. }),
        "{err}"
    );
    let err = download_err(&small, &format!("http://{addr}/ok"), Some(3)).await;
    assert!(matches!(err, HttpError::TooLarge { limit: 3, .. }), "{err}");
    for url in ["file:///etc/passwd", "ftp://example.com/a", "not a url"] {
        let err = small.download(url, None).await.expect_err(url);
        assert!(matches!(err, HttpError::InvalidUrl { .. }), "{url}: {err}");
    }
    // Errors name the host, never the path (tokens live in paths).
    let err = small
        .download(
            &format!("http://{addr}/to?u=http://10.0.0.1/bot123:SECRET/x"),
            None,
        )
        .await
        .expect_err("blocked");
    assert!(!err.to_string().contains("SECRET"), "{err}");
}

#[tokio::test]
async fn a_status_error_is_reported_with_its_code() {
    let addr = server("127.0.0.1:0").await;
    let err = download_err(&localhost_client(), &format!("http://{addr}/missing"), None).await;
    assert!(
        matches!(err, HttpError::Status { status: 404, .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
    let _ = fakes::client();
}
