//! A fake Twilio REST API: `POST /2010-04-01/Accounts/<sid>/Messages.json` (Basic auth, form
//! body, 201 with the documented Message resource, documented error bodies), media resources
//! that redirect to a CDN path, and a webhook sender that signs forms as Twilio does.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::json_resp;
use super::log::Account;

#[derive(Default)]
pub struct S {
    /// The auth token and the account SID.
    pub(super) account: Account,
    /// Every created message's form; (To, Body) of every message created with success.
    pub(super) log: super::log::Log<Vec<(String, String)>>,
}

/// The fake Twilio REST API.
pub type FakeTwilio = super::Served<S>;

impl FakeTwilio {
    pub async fn start(sid: &str, token: &str) -> Self {
        let router = Router::new()
            .route("/2010-04-01/Accounts/{sid}/Messages.json", post(create))
            .route(
                "/2010-04-01/Accounts/{sid}/Messages/{mm}/Media/{me}",
                get(media),
            )
            .route("/cdn/{me}", get(cdn));
        Self::serve_account("Twilio", Account::new(token, sid), router).await
    }

    /// The value of `key` in the `n`-th created message.
    pub fn param(&self, n: usize, key: &str) -> Option<String> {
        self.sent()
            .get(n)
            .and_then(|f| f.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    }

    pub fn fail_next(&self, status: u16, code: i64, message: &str, retry_after: Option<u64>) {
        self.s()
            .log
            .fail_next(status, error_body(status, code, message), retry_after);
    }

    /// Adds media `me` of message `mm`; returns its MediaUrl.
    pub fn add_media(&self, mm: &str, me: &str, bytes: &[u8]) -> String {
        let mut s = self.s();
        s.log.media.push((me.to_owned(), bytes.to_vec()));
        format!(
            "http://{}/2010-04-01/Accounts/{}/Messages/{mm}/Media/{me}",
            self.addr, s.account.id
        )
    }

    /// POSTs `params` to `url`, signed for `signed_url` with `token` (None: no header).
    pub async fn post_webhook(
        url: &str,
        signed_url: &str,
        token: Option<&str>,
        params: &[(&str, &str)],
    ) -> (u16, String) {
        let body = serde_urlencoded::to_string(params).expect("form");
        let mut req = super::client()
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(t) = token {
            req = req.header(
                "X-Twilio-Signature",
                botmesh_providers::twilio::signature(t, signed_url, params),
            );
        }
        match req.send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }
}

fn authorized(s: &S, headers: &HeaderMap) -> bool {
    let expected = format!(
        "Basic {}",
        botmesh::codec::encode_base64(format!("{}:{}", s.account.id, s.account.secret).as_bytes())
    );
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(expected.as_str())
}

/// Twilio's error body.
fn error_body(status: u16, code: i64, message: &str) -> Value {
    json!({"code": code, "message": message, "more_info": format!("https://www.twilio.com/docs/errors/{code}"), "status": status})
}

fn error(status: u16, code: i64, message: &str) -> Response {
    json_resp(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        error_body(status, code, message),
    )
}

async fn create(
    State(state): State<Arc<Mutex<S>>>,
    Path(sid): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = state.lock().expect("lock");
    if sid != s.account.id || !authorized(&s, &headers) {
        return error(401, 20003, "Authenticate");
    }
    let Ok(form) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body) else {
        return error(400, 21601, "Invalid form");
    };
    s.log.sent.push(form.clone());
    if let Some(resp) = s.log.failure() {
        return resp;
    }
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if get("To").is_none() {
        return error(400, 21604, "A 'To' phone number is required.");
    }
    if get("From").is_none() && get("MessagingServiceSid").is_none() {
        return error(400, 21603, "A 'From' phone number is required.");
    }
    if get("Body").is_none() && get("MediaUrl").is_none() && get("ContentSid").is_none() {
        return error(
            400,
            21619,
            "A text message body or media urls must be specified.",
        );
    }
    if get("Body").is_some_and(|b| b.chars().count() > 1600) {
        return error(
            400,
            21617,
            "The concatenated message body exceeds the 1600 character limit.",
        );
    }
    let n = s.log.deliver(
        get("To").unwrap_or_default(),
        get("Body").unwrap_or_default(),
    );
    let sid = format!("SM{n:032x}");
    let answer = json_resp(
        StatusCode::CREATED,
        json!({"sid": sid, "account_sid": s.account.id, "api_version": "2010-04-01", "body": get("Body"),
               "date_created": "Thu, 30 Jul 2015 20:12:31 +0000", "date_sent": null, "direction": "outbound-api",
               "error_code": null, "error_message": null, "from": get("From"), "messaging_service_sid": get("MessagingServiceSid"),
               "num_media": "0", "num_segments": "1", "price": null, "price_unit": "USD", "status": "queued",
               "to": get("To"), "uri": format!("/2010-04-01/Accounts/{}/Messages/{sid}.json", s.account.id)}),
    );
    s.log.answer(answer)
}

async fn media(
    State(state): State<Arc<Mutex<S>>>,
    Path((_sid, _mm, me)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, format!("/cdn/{me}"))],
    )
        .into_response()
}

async fn cdn(State(state): State<Arc<Mutex<S>>>, Path(me): Path<String>) -> Response {
    let s = state.lock().expect("lock");
    s.log.serve_media(&me)
}
