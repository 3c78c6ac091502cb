//! A fake Discord: the REST API under `/api/v10` (bot auth, `GET /users/@me`,
//! `GET /gateway/bot`, message creation that enforces nonces as Discord does, interaction
//! callbacks and `@original` edits, rate-limit headers and documented error bodies) and a
//! gateway WebSocket (Hello, Identify → READY, heartbeats → ACK, Resume → the missed
//! dispatches replayed then RESUMED, a new Identify replays nothing), plus a signer for
//! interactions requests.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use ed25519_dalek::{Signer, SigningKey};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message as Ws;

use super::json_resp;

/// The bot's own user id.
pub const BOT_ID: &str = "900000000000000001";
/// The application's id.
pub const APP_ID: &str = "900000000000000002";
/// How long a nonce dedupes (Discord: "a few minutes").
const NONCE_WINDOW: Duration = Duration::from_secs(300);

/// The application's signing key (its public half is the app's "Public Key").
pub fn signing_key() -> SigningKey {
    SigningKey::from_bytes(&[42; 32])
}

/// The public key, hex, as the Developer Portal shows it.
pub fn public_key_hex() -> String {
    hex::encode(signing_key().verifying_key().to_bytes())
}

/// `(X-Signature-Ed25519, X-Signature-Timestamp)` for `body`, as Discord signs.
pub fn sign(body: &[u8], timestamp: &str) -> (String, String) {
    let mut message = timestamp.as_bytes().to_vec();
    message.extend_from_slice(body);
    (
        hex::encode(signing_key().sign(&message).to_bytes()),
        timestamp.to_owned(),
    )
}

#[derive(Default)]
pub struct S {
    token: String,
    next_id: u64,
    /// (channel, content) of every message created, in order.
    delivered: Vec<(String, String)>,
    /// Every creation request's body, in order (nonce replays included), with when.
    creates: Vec<(Instant, Value)>,
    /// nonce → (message, when created).
    nonces: HashMap<String, (Value, Instant)>,
    failures: VecDeque<(u16, Value)>,
    /// The next creations that create and then never answer (a process killed mid-request).
    hangs: usize,
    /// The next creations that create and then drop their connection.
    drops: usize,
    /// Interaction callbacks (interaction id, body), in order.
    callbacks: Vec<(String, Value)>,
    /// Interaction token → its channel (the tests register what they send).
    tokens: HashMap<String, String>,
    /// Interaction token → where its `@original` message is in `delivered`.
    originals: HashMap<String, usize>,
    gateway: Gateway,
    changed: Arc<Notify>,
}

/// The gateway's side: one session's dispatch log, and what clients said.
#[derive(Default)]
pub struct Gateway {
    addr: String,
    /// The dispatches of the current session, each with its `s`.
    log: Vec<Value>,
    seq: u64,
    session: Option<String>,
    sessions: u64,
    /// The first frame of each connection after the Hello (Identify or Resume).
    greetings: Vec<Value>,
    /// Bumped to drop every open connection without a close frame.
    drop_generation: u64,
    connections: usize,
    heartbeat_ms: u64,
    /// Dispatches made before the bot's first session: delivered right after its READY (the
    /// tests' users write as soon as the bot starts; on Discord the bot is online first).
    early: Vec<(String, Value)>,
}

/// The fake Discord.
#[derive(Clone)]
pub struct FakeDiscord {
    pub api: super::Served<S>,
    changed: Arc<Notify>,
}

impl std::ops::Deref for FakeDiscord {
    type Target = super::Served<S>;
    fn deref(&self) -> &Self::Target {
        &self.api
    }
}

fn message_json(id: &str, channel: &str, author: &str, content: &str, bot: bool) -> Value {
    json!({"id": id, "channel_id": channel, "author": {"id": author, "username": format!("user{author}"), "bot": bot},
           "content": content, "timestamp": "2026-12-06T05:00:00.000000+00:00", "type": 0,
           "mentions": [], "attachments": [], "embeds": []})
}

impl FakeDiscord {
    pub async fn start(token: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the gateway");
        let ws_addr = listener.local_addr().expect("gateway addr");
        let changed = Arc::new(Notify::new());
        let state = S {
            changed: changed.clone(),
            token: token.to_owned(),
            next_id: 1_000_000_000_000_000_000,
            gateway: Gateway {
                addr: format!("ws://{ws_addr}"),
                heartbeat_ms: 41_250,
                ..Gateway::default()
            },
            ..S::default()
        };
        let router = Router::new()
            .route("/api/v10/users/@me", get(me))
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/channels/{channel}/messages", post(create))
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                patch(edit),
            )
            .route("/api/v10/channels/{channel}/typing", post(typing))
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(callback),
            )
            .route(
                "/api/v10/webhooks/{app}/{token}/messages/@original",
                patch(original),
            );
        let api = super::Served::serve_state("Discord", state, router).await;
        let fake = Self { api, changed };
        let gw = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let gw = gw.clone();
                tokio::spawn(async move { gw.connection(stream).await });
            }
        });
        fake
    }

    /// The REST base (with the version), for `DISCORD_API_BASE`.
    pub fn api_base(&self) -> String {
        format!("{}/api/v10", self.base_url())
    }

    /// The gateway's URL, for `DISCORD_GATEWAY_URL`.
    pub fn gateway_url(&self) -> String {
        self.s().gateway.addr.clone()
    }

    /// The contents of the messages created in `channel`, in order.
    pub fn delivered_to(&self, channel: &str) -> Vec<String> {
        super::recorded_under(&self.s().delivered, channel)
    }

    /// Every creation request (nonce replays and failures included).
    pub fn creates(&self) -> Vec<Value> {
        self.s().creates.iter().map(|(_, v)| v.clone()).collect()
    }

    /// When each creation request came.
    pub fn create_times(&self) -> Vec<Instant> {
        self.s().creates.iter().map(|(t, _)| *t).collect()
    }

    pub fn callbacks(&self) -> Vec<(String, Value)> {
        self.s().callbacks.clone()
    }

    /// The next creation answers `status` with Discord's error `body`.
    pub fn fail_next(&self, status: u16, body: Value) {
        self.s().failures.push_back((status, body));
    }

    /// The next creation creates the message and never answers.
    pub fn hang_next(&self) {
        self.s().hangs += 1;
    }

    /// The next creation creates the message and drops its connection.
    pub fn drop_next(&self) {
        self.s().drops += 1;
    }

    /// An interaction token Discord gave for `channel` (its `@original` edits land there).
    pub fn token_for(&self, token: &str, channel: &str) {
        self.s().tokens.insert(token.to_owned(), channel.to_owned());
    }

    /// The gateway's greetings (Identify, Resume), in order.
    pub fn greetings(&self) -> Vec<Value> {
        self.s().gateway.greetings.clone()
    }

    /// How many gateway connections were opened.
    pub fn connections(&self) -> usize {
        self.s().gateway.connections
    }

    /// The last dispatch sequence number.
    pub fn seq(&self) -> u64 {
        self.s().gateway.seq
    }

    /// Drops every gateway connection without a close frame (a network cut).
    pub fn drop_gateway(&self) {
        self.s().gateway.drop_generation += 1;
        self.changed.notify_waiters();
    }

    /// The heartbeat interval the Hello announces.
    pub fn heartbeat_every(&self, ms: u64) {
        self.s().gateway.heartbeat_ms = ms;
    }

    /// A dispatch on the gateway (sent now, or replayed on resume).
    pub fn dispatch(&self, t: &str, d: Value) {
        {
            let mut s = self.s();
            let g = &mut s.gateway;
            if g.sessions == 0 {
                g.early.push((t.to_owned(), d));
                return;
            }
            g.seq += 1;
            let frame = json!({"op": 0, "t": t, "s": g.seq, "d": d});
            g.log.push(frame);
        }
        self.changed.notify_waiters();
    }

    /// User `user` writes `text` in `channel` as message `id`.
    pub fn user_message(&self, channel: &str, user: &str, id: &str, text: &str) {
        self.dispatch(
            "MESSAGE_CREATE",
            message_json(id, channel, user, text, false),
        );
    }

    /// Waits until `cond` holds (or 20 s).
    pub async fn wait(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        assert!(
            super::eventually(|| cond(self)).await,
            "timed out waiting for {what}"
        );
    }

    async fn connection(&self, stream: tokio::net::TcpStream) {
        let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        let (generation, hello) = {
            let mut s = self.s();
            s.gateway.connections += 1;
            (s.gateway.drop_generation, s.gateway.heartbeat_ms)
        };
        let hello = json!({"op": 10, "d": {"heartbeat_interval": hello}});
        if ws.send(Ws::text(hello.to_string())).await.is_err() {
            return;
        }
        let Some(Ok(Ws::Text(first))) = ws.next().await else {
            return;
        };
        let greeting: Value = serde_json::from_str(first.as_str()).expect("a JSON greeting");
        // Where this connection's dispatches start in the log; `Err`: the frame to refuse it with.
        let start: Result<usize, Ws> = {
            let mut s = self.s();
            s.gateway.greetings.push(greeting.clone());
            let token = s.token.clone();
            let g = &mut s.gateway;
            match greeting["op"].as_u64() {
                Some(2) if greeting["d"]["token"] == token.as_str() => {
                    g.sessions += 1;
                    let session = format!("session-{}", g.sessions);
                    g.session = Some(session.clone());
                    // A new session replays nothing of the old one.
                    let from = g.log.len();
                    g.seq += 1;
                    let ready = json!({"op": 0, "t": "READY", "s": g.seq, "d": {
                        "v": 10, "session_id": session, "resume_gateway_url": g.addr,
                        "user": {"id": BOT_ID, "username": "shop", "bot": true}}});
                    g.log.push(ready);
                    for (t, d) in std::mem::take(&mut g.early) {
                        g.seq += 1;
                        g.log.push(json!({"op": 0, "t": t, "s": g.seq, "d": d}));
                    }
                    Ok(from)
                }
                Some(6)
                    if greeting["d"]["session_id"].as_str() == g.session.as_deref()
                        && greeting["d"]["token"] == token.as_str() =>
                {
                    let after = greeting["d"]["seq"].as_u64().unwrap_or(0);
                    let from = g
                        .log
                        .iter()
                        .position(|f| f["s"].as_u64().is_some_and(|s| s > after))
                        .unwrap_or(g.log.len());
                    g.seq += 1;
                    g.log
                        .push(json!({"op": 0, "t": "RESUMED", "s": g.seq, "d": {}}));
                    Ok(from)
                }
                Some(6) => Err(Ws::text(json!({"op": 9, "d": false}).to_string())),
                _ => Err(Ws::Close(Some(
                    tokio_tungstenite::tungstenite::protocol::CloseFrame {
                        code: 4004u16.into(),
                        reason: "Authentication failed.".into(),
                    },
                ))),
            }
        };
        let mut sent = match start {
            Ok(from) => from,
            Err(refusal) => {
                let _ = ws.send(refusal).await;
                return;
            }
        };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (frames, dropped) = {
                let s = self.s();
                let frames: Vec<Value> = s.gateway.log[sent..].to_vec();
                (frames, s.gateway.drop_generation != generation)
            };
            if dropped {
                // No close frame: the TCP connection just ends.
                return;
            }
            for f in frames {
                sent += 1;
                if ws.send(Ws::text(f.to_string())).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                () = &mut notified => {}
                frame = ws.next() => match frame {
                    Some(Ok(Ws::Text(t))) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                        if v["op"] == 1 && ws.send(Ws::text(json!({"op": 11}).to_string())).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => return,
                },
            }
        }
    }
}

/// A REST request that carries the bot token (`Authorization: Bot <token>`): a handler that
/// takes it answers only such requests, the others 401 as Discord does.
struct BotToken;

impl FromRequestParts<Arc<Mutex<S>>> for BotToken {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Mutex<S>>,
    ) -> Result<Self, Response> {
        let expected = format!("Bot {}", lock(state).token);
        let given = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given == Some(expected.as_str()) {
            Ok(BotToken)
        } else {
            Err(json_resp(
                StatusCode::UNAUTHORIZED,
                json!({"message": "401: Unauthorized", "code": 0}),
            ))
        }
    }
}

type St = State<Arc<Mutex<S>>>;

fn lock(state: &Arc<Mutex<S>>) -> std::sync::MutexGuard<'_, S> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

async fn me(_: BotToken) -> Response {
    json_resp(
        StatusCode::OK,
        json!({"id": BOT_ID, "username": "shop", "bot": true}),
    )
}

async fn gateway_bot(_: BotToken, State(state): St) -> Response {
    let s = lock(&state);
    json_resp(
        StatusCode::OK,
        json!({"url": s.gateway.addr, "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}}),
    )
}

fn with_rate_headers(mut resp: Response, remaining: u32) -> Response {
    let h = resp.headers_mut();
    h.insert("x-ratelimit-limit", "5".parse().expect("header"));
    h.insert(
        "x-ratelimit-remaining",
        remaining.to_string().parse().expect("header"),
    );
    h.insert("x-ratelimit-reset-after", "0.010".parse().expect("header"));
    h.insert(
        "x-ratelimit-bucket",
        "fake-messages".parse().expect("header"),
    );
    resp
}

async fn create(
    _: BotToken,
    State(state): St,
    Path(channel): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let hang = {
        let mut s = lock(&state);
        let body: Value = serde_json::from_slice(&body).expect("a JSON message body");
        s.creates.push((Instant::now(), body.clone()));
        if let Some((status, err)) = s.failures.pop_front() {
            let mut resp = json_resp(StatusCode::from_u16(status).expect("a status"), err.clone());
            if status == 429 {
                let after = err["retry_after"].as_f64().unwrap_or(1.0);
                resp.headers_mut().insert(
                    "retry-after",
                    (after.ceil() as u64).to_string().parse().expect("header"),
                );
            }
            return resp;
        }
        let content = body["content"].as_str().unwrap_or_default().to_owned();
        assert!(
            content.chars().count() <= 2000,
            "content over 2000 characters"
        );
        assert_eq!(
            body["allowed_mentions"],
            json!({"parse": []}),
            "mentions not suppressed"
        );
        let nonce = body["nonce"].as_str().map(str::to_owned);
        if let Some(n) = &nonce {
            assert!(n.len() <= 25, "a nonce of more than 25 characters");
            assert_eq!(body["enforce_nonce"], true, "a nonce without enforce_nonce");
            if let Some((existing, at)) = s.nonces.get(n) {
                if at.elapsed() < NONCE_WINDOW {
                    // Discord returns the message created with this nonce; nothing new.
                    return with_rate_headers(json_resp(StatusCode::OK, existing.clone()), 4);
                }
            }
        }
        s.next_id += 1;
        let id = s.next_id.to_string();
        let mut message = message_json(&id, &channel, BOT_ID, &content, true);
        message["nonce"] = json!(nonce);
        if let Some(n) = nonce {
            s.nonces.insert(n, (message.clone(), Instant::now()));
        }
        s.delivered.push((channel.clone(), content));
        if s.hangs > 0 {
            s.hangs -= 1;
            true
        } else {
            let answer = with_rate_headers(json_resp(StatusCode::OK, message.clone()), 4);
            let mut drops = s.drops;
            let answer = super::server::answer_or_drop(&mut drops, answer);
            s.drops = drops;
            // The bot's own message comes back over the gateway, as on Discord.
            s.gateway.seq += 1;
            let frame = json!({"op": 0, "t": "MESSAGE_CREATE", "s": s.gateway.seq, "d": message});
            s.gateway.log.push(frame);
            s.changed.notify_waiters();
            return answer;
        }
    };
    if hang {
        std::future::pending::<()>().await;
    }
    StatusCode::INTERNAL_SERVER_ERROR.into_response()
}

async fn edit(_: BotToken, Path((channel, message)): Path<(String, String)>) -> Response {
    json_resp(
        StatusCode::OK,
        message_json(&message, &channel, BOT_ID, "", true),
    )
}

async fn typing(_: BotToken) -> StatusCode {
    StatusCode::NO_CONTENT
}

async fn callback(
    State(state): St,
    Path((id, _token)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let mut s = lock(&state);
    if s.callbacks.iter().any(|(i, _)| *i == id) {
        return json_resp(
            StatusCode::BAD_REQUEST,
            json!({"message": "Interaction has already been acknowledged.", "code": 40060}),
        );
    }
    let body: Value = serde_json::from_slice(&body).expect("a JSON callback");
    s.callbacks.push((id, body));
    StatusCode::NO_CONTENT.into_response()
}

async fn original(
    State(state): St,
    Path((app, token)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    assert_eq!(app, APP_ID, "an @original edit for another application");
    let mut s = lock(&state);
    let Some(channel) = s.tokens.get(&token).cloned() else {
        return json_resp(
            StatusCode::NOT_FOUND,
            json!({"message": "Unknown Webhook", "code": 10015}),
        );
    };
    let body: Value = serde_json::from_slice(&body).expect("a JSON edit");
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    // One message per token: a second edit changes it again.
    match s.originals.get(&token).copied() {
        Some(at) => s.delivered[at].1 = content.clone(),
        None => {
            let at = s.delivered.len();
            s.originals.insert(token.clone(), at);
            s.delivered.push((channel.clone(), content.clone()));
        }
    }
    let id = format!(
        "{}",
        800_000_000_000_000_000u64 + s.originals[&token] as u64
    );
    json_resp(
        StatusCode::OK,
        message_json(&id, &channel, BOT_ID, &content, true),
    )
}
