//! The admin page (feature `http`): over plain HTTP, a request without the token gets the
//! login form, a read-only page has no buttons, a form not from the page is refused, and the
//! scheduled jobs are listed and cancelled; in a real headless Chromium driven over WebDriver,
//! an operator opens the page with the token, sees a dead letter with its error, retries it,
//! and the reply goes out, then cancels a scheduled job. The browser test
//! saves screenshots (the path is printed) and needs `chromedriver` (Debian's
//! `chromium-driver`; or `BOTMESH_CHROMEDRIVER`): without it the test says it skipped, and
//! fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::eventually::eventually;
use crate::common::order;
use botmesh::durability::{DurabilityConfig, OutboxState};
use botmesh::durable::DurabilityOptions;
use botmesh::operating::admin::AdminOptions;
use botmesh::operating::http::MetricsServer;
use botmesh::prelude::*;
use botmesh::schedule::{Job, JobCtx};
use botmesh::testing::MockProvider;
use fantoccini::{ClientBuilder, Locator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// With a space and a semicolon: any token works, in the cookie too.
const TOKEN: &str = "s3cret admin;token";

/// A running bot with the admin page on its own port: alice's order waiting at its ask, and
/// bob's reply to `/hi` dead (the channel refused it). Returns the dead send's key.
async fn seeded(actions: bool) -> (Bot, MockProvider, MetricsServer, String) {
    let mock = MockProvider::new();
    let server = MetricsServer::new("127.0.0.1:0").admin(AdminOptions::new(TOKEN).actions(actions));
    let mut config = DurabilityConfig::default();
    // The sweeper delivers a retried send within this period.
    config.poll = Duration::from_millis(50);
    let bot = Bot::builder(mock.clone())
        .durability(DurabilityOptions::memory().config(config))
        .step(server.clone())
        .build()
        .unwrap();
    bot.flow(order);
    crate::common::hello_on_hi(&bot);
    bot.task("digest", |_job: JobCtx| async move { Ok(()) });
    bot.start().await.unwrap();
    bot.schedule(Job::cron("digest", "0 9 * * MON-FRI"))
        .await
        .unwrap();
    mock.say("alice", "m1", "/order").await.unwrap();
    bot.idle().await;
    crate::common::dead_reply_to_bob(&bot, &mock).await;
    let dead = dead_sends(&bot).await;
    assert_eq!(dead.len(), 1, "bob's reply is dead");
    (bot, mock, server, dead[0].clone())
}

/// The keys of the dead sends.
async fn dead_sends(bot: &Bot) -> Vec<String> {
    let journals = bot.durability().unwrap();
    let dead = journals.outbox().list(OutboxState::Dead, 10).await.unwrap();
    dead.into_iter().map(|r| r.key).collect()
}

/// One HTTP/1.1 request over a plain socket: (status code, headers lowercased, body).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    (code, headers.to_lowercase(), body.to_owned())
}

#[tokio::test]
async fn the_page_asks_for_the_token_and_read_only_has_no_buttons() {
    let (bot, _mock, server, key) = seeded(false).await;
    let addr = server.local_addr().unwrap();

    let (code, _, body) = request(addr, "GET", "/admin", "", "").await;
    assert_eq!(code, 401);
    assert!(
        body.contains("Token required") && !body.contains(&key),
        "{body}"
    );
    let (code, _, body) = request(addr, "GET", "/admin?token=wrong", "", "").await;
    assert_eq!(code, 401);
    assert!(body.contains("not this bot"), "{body}");

    let query = "/admin?token=s3cret%20admin%3Btoken";
    let (code, headers, _) = request(addr, "GET", query, "", "").await;
    assert_eq!(code, 303);
    let cookie = headers
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_owned();
    assert!(
        cookie.starts_with("botmesh_admin=") && !cookie.contains(' '),
        "{cookie}"
    );
    assert!(headers.contains("httponly") && headers.contains("samesite=strict"));
    let (code, _, _) = request(addr, "GET", "/admin", &format!("Cookie: {cookie}\r\n"), "").await;
    assert_eq!(code, 200, "the cookie opens the page");

    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (code, _, body) = request(addr, "GET", "/admin", &bearer, "").await;
    assert_eq!(code, 200);
    assert!(body.contains(&key), "the dead letter is listed");
    assert!(body.contains("unsupported content"), "with its error");
    assert!(
        body.contains("alice") && body.contains("conversation"),
        "alice's order waits"
    );
    assert!(body.contains("<svg id=\"sends-chart\""), "the chart");
    assert!(
        body.contains("tr class=\"job\" data-id=\"digest\"")
            && body.contains("cron 0 9 * * MON-FRI"),
        "the scheduled job is listed"
    );
    assert!(
        body.contains("Read-only") && !body.contains("<button"),
        "no buttons"
    );
    assert!(!body.contains("<script"), "no script");

    let form = format!("kind=outbound&id={key}&csrf=x");
    let form_headers = format!("{bearer}Content-Type: application/x-www-form-urlencoded\r\n");
    let (code, _, _) = request(addr, "POST", "/admin/dead/retry", &form_headers, &form).await;
    assert_eq!(code, 403, "actions are disabled");
    let form = "id=digest&csrf=x";
    let (code, _, _) = request(addr, "POST", "/admin/jobs/cancel", &form_headers, form).await;
    assert_eq!(code, 403, "actions are disabled");
    assert_eq!(bot.jobs(10).await.unwrap().len(), 1, "still scheduled");
    bot.stop().await.unwrap();
}

/// The page's form token (each form carries it).
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn an_operator_cancels_a_scheduled_job() {
    let (bot, _mock, server, _key) = seeded(true).await;
    let addr = server.local_addr().unwrap();
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (code, _, page) = request(addr, "GET", "/admin", &bearer, "").await;
    assert_eq!(code, 200);
    let row = page
        .split("<tr class=\"job\" data-id=\"digest\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap();
    assert!(
        row.contains("scheduled") && row.contains("cron 0 9 * * MON-FRI"),
        "{row}"
    );
    assert!(
        row.contains("value=\"cancel\">Cancel</button>"),
        "a cancel button: {row}"
    );
    let form_headers = format!("{bearer}Content-Type: application/x-www-form-urlencoded\r\n");
    let form = format!("id=digest&csrf={}", csrf_of(&page));
    let (code, headers, _) =
        request(addr, "POST", "/admin/jobs/cancel", &form_headers, &form).await;
    assert_eq!(code, 303, "back to the page");
    assert!(
        headers.contains("job%20digest%20cancelled") || headers.contains("job+digest+cancelled"),
        "{headers}"
    );
    assert!(bot.jobs(10).await.unwrap().is_empty(), "the job is gone");
    let (_, _, page) = request(addr, "GET", "/admin", &bearer, "").await;
    assert!(!page.contains("data-id=\"digest\""), "no longer listed");
    let (code, _, _) = request(addr, "POST", "/admin/jobs/cancel", &form_headers, &form).await;
    assert_eq!(code, 303, "a job already gone is said so");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_form_not_from_the_page_is_refused() {
    let (bot, _mock, server, key) = seeded(true).await;
    let addr = server.local_addr().unwrap();
    let headers = format!(
        "Authorization: Bearer {TOKEN}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    );
    let form = format!("kind=outbound&id={key}&csrf=guessed");
    let (code, _, _) = request(addr, "POST", "/admin/dead/retry", &headers, &form).await;
    assert_eq!(code, 403);
    let form_only = "Content-Type: application/x-www-form-urlencoded\r\n";
    let (code, _, _) = request(addr, "POST", "/admin/dead/retry", form_only, &form).await;
    assert_eq!(code, 401, "no token");
    assert_eq!(dead_sends(&bot).await, [key], "still dead");
    bot.stop().await.unwrap();
}

/// `chromedriver`: `BOTMESH_CHROMEDRIVER`, else on the `PATH`. `None` (the test says it
/// skipped) when absent; a panic under `CI=true`.
fn chromedriver() -> Option<PathBuf> {
    let found = std::env::var_os("BOTMESH_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("chromedriver"))
                .find(|p| p.is_file())
        })
        .filter(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!(
                "chromedriver is not installed and CI=true: the admin page's browser test cannot run (apt-get install chromium chromium-driver)"
            );
        }
        eprintln!(
            "SKIPPED: chromedriver not found (apt-get install chromium chromium-driver, or set BOTMESH_CHROMEDRIVER)"
        );
    }
    found
}

/// The chromedriver process, ended with the test.
struct Driver(std::process::Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the screenshots go: `target/admin-page/`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("admin-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Clicks the element `css` names.
async fn click(browser: &fantoccini::Client, css: &str) {
    let element = browser.find(Locator::Css(css)).await.unwrap();
    element.click().await.unwrap();
}

/// Clicks the button `css` names and reads what the page it leads to says it did.
async fn press(browser: &fantoccini::Client, css: &str) -> String {
    click(browser, css).await;
    let flash = browser
        .wait()
        .for_element(Locator::Id("flash"))
        .await
        .unwrap();
    flash.text().await.unwrap()
}

/// The text of the element at `locator`.
async fn text_at(browser: &fantoccini::Client, locator: Locator<'_>) -> String {
    let element = browser.find(locator).await.unwrap();
    element.text().await.unwrap()
}

/// Saves what the browser shows as `path`.
async fn screenshot(browser: &fantoccini::Client, path: PathBuf) {
    std::fs::write(path, browser.screenshot().await.unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_retries_a_dead_letter_in_a_browser_and_the_reply_goes_out() {
    let Some(driver) = chromedriver() else {
        return;
    };
    let (bot, mock, server, key) = seeded(true).await;
    let addr = server.local_addr().unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _driver = Driver(
        std::process::Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display())),
    );
    let up = eventually(Duration::from_secs(20), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "chromedriver listens on {port}");

    let mut chrome = serde_json::json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1200,1000"]
    });
    if std::path::Path::new("/usr/bin/chromium").is_file() {
        chrome["binary"] = "/usr/bin/chromium".into();
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), chrome);
    // Two rustls crypto providers may be built in (aws-lc-rs, and ring with the WhatsApp Web
    // client): the process picks one, as a program using both must.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let browser = ClientBuilder::rustls()
        .unwrap()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let shots = screenshot_dir();
    let base = format!("http://{addr}/admin");

    // Without the token: the form asks for it; the operator types it.
    browser.goto(&base).await.unwrap();
    let field = browser
        .find(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(TOKEN).await.unwrap();
    click(&browser, "button[type=submit]").await;

    // The page: bob's dead reply with its error, alice's conversation.
    let row = format!("tr.dead[data-id=\"{key}\"]");
    let dead = browser
        .wait()
        .for_element(Locator::Css(&row))
        .await
        .unwrap();
    let text = dead.text().await.unwrap();
    assert!(text.contains("unsupported content"), "{text}");
    let conversations = text_at(&browser, Locator::Id("conversations")).await;
    assert!(conversations.contains("alice"), "{conversations}");
    screenshot(&browser, shots.join("dead-letter.png")).await;

    // Retry it: the page says so, and the bot's sweeper sends bob his reply.
    let flash = press(&browser, &format!("{row} button[value=retry]")).await;
    assert!(flash.contains("pending again"), "{flash}");
    let sent = mock
        .wait_until(Duration::from_secs(20), |sent| {
            sent.iter()
                .any(|s| s.chat.as_str() == "bob" && s.text() == "hello")
        })
        .await;
    assert!(sent, "bob got his reply: {:?}", mock.texts("bob"));

    // Reloaded: no dead letter left, the sends in the chart.
    browser.goto(&base).await.unwrap();
    let section = text_at(&browser, Locator::Id("dead-letters")).await;
    assert!(section.contains("None."), "{section}");
    let bars = browser
        .find_all(Locator::Css("#sends-chart rect.sent"))
        .await
        .unwrap();
    assert!(!bars.is_empty(), "the chart shows the sends");
    screenshot(&browser, shots.join("after-retry.png")).await;

    // The scheduled job, cancelled from its row.
    let job = "tr.job[data-id=\"digest\"]";
    let text = text_at(&browser, Locator::Css(job)).await;
    assert!(text.contains("cron 0 9 * * MON-FRI"), "{text}");
    let flash = press(&browser, &format!("{job} button[value=cancel]")).await;
    assert!(flash.contains("job digest cancelled"), "{flash}");
    assert!(bot.jobs(10).await.unwrap().is_empty(), "the job is gone");
    eprintln!("admin page screenshots in {}", shots.display());

    browser.close().await.unwrap();
    bot.stop().await.unwrap();
}
