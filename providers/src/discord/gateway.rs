//! The gateway connection: one WebSocket (`?v=10&encoding=json`) that Identifies once and
//! Resumes after every drop, so Discord replays what the bot missed instead of losing it.
//!
//! | step | what the bot does |
//! | --- | --- |
//! | connect | the URL from `GET /gateway/bot` (or the configured one); after a READY, the session's `resume_gateway_url` |
//! | Hello (op 10) | heartbeats (op 1 with the last sequence seen) every `heartbeat_interval`, the first after a random part of it |
//! | no ACK (op 11) between two heartbeats | a zombie connection: closed with 4000 (resumable), then resumed |
//! | no session yet | Identify (op 2) with the token, the intents and `properties` |
//! | a session (`session_id` from READY) | Resume (op 6) with `session_id` and the last sequence the pipeline *accepted*: Discord replays everything after it |
//! | dispatch (op 0) | `MESSAGE_CREATE` and `INTERACTION_CREATE` delivered one at a time, in order; the sequence counts as accepted once `deliver` returned `Ok`, so a rejected event (the journal down) closes the connection and the resume gets it again |
//! | op 1 | a heartbeat at once |
//! | op 7 Reconnect, a drop without close code, a resumable close code | resume |
//! | op 9 Invalid Session `d: true` / `d: false` | resume / Identify afresh after 1–5 s |
//! | close 4007 (invalid seq), 4009 (session timed out) | Identify afresh |
//! | close 4004, 4010–4014 (bad token, sharding, intents) | stop for good, logged as an error (reconnecting would not help) |
//!
//! With a session file ([`DiscordConfig::session_file`](super::DiscordConfig::session_file)),
//! the session and its last accepted sequence are kept on disk after each event, and a
//! restarted process resumes it: what users wrote while the process was down is replayed (the
//! runtime drops what it had accepted already), as long as Discord still holds the session
//! (a few minutes). Without one, a restart Identifies afresh and that gap is lost.
//!
//! Reconnects back off (1 s doubling to 60 s, reset by a READY or RESUMED) so a failing loop
//! never burns Discord's budget of 1000 Identifies a day. The transport status follows the
//! connection (Ready after READY/RESUMED, Disconnected while away). The bot's own user id (from
//! READY) filters its own messages. It does not shard, compress, or request guild members.

use std::sync::Arc;
use std::time::Duration;

use botmesh::provider::{EventSink, ProviderEvent, TransportStatus};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{Inner, inbound};

/// How long connecting and the Hello may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The running gateway task.
pub(crate) struct Gateway {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Gateway {
    /// Connects in a task of its own, delivering to `sink` until [`stop`](Self::stop).
    pub(crate) fn spawn(inner: Arc<Inner>, sink: EventSink) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(inner, sink, stopped));
        Self { stop, task }
    }

    /// Closes the connection (1000: the bot goes offline) and waits for the task.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        if timeout(Duration::from_secs(5), self.task).await.is_err() {
            tracing::warn!("discord gateway did not close in time");
        }
    }
}

/// A session to resume.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Session {
    id: String,
    resume_url: String,
    /// The last sequence number the pipeline accepted (or that needed no delivery).
    seq: Option<u64>,
}

/// How a connection ended.
#[derive(Debug)]
enum End {
    Stopped,
    /// A close code after which reconnecting cannot help.
    Fatal(u16),
    Reconnect {
        /// Resume the session (else Identify afresh).
        resumable: bool,
        /// The connection reached READY or RESUMED (the backoff starts over).
        healthy: bool,
    },
}

fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(6)).min(Duration::from_secs(60))
}

/// The session kept in the session file, if one is configured and readable.
fn load(inner: &Inner) -> Option<Session> {
    let path = inner.config.session_file.as_ref()?;
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(session) => Some(session),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "discord session file unreadable: identifying afresh");
            None
        }
    }
}

/// Writes the session to the session file (replaced whole: a kill leaves the old or the new).
fn save(inner: &Inner, session: Option<&Session>) {
    let Some(path) = inner.config.session_file.as_ref() else {
        return;
    };
    let written = match session {
        Some(session) => {
            let tmp = path.with_extension("tmp");
            serde_json::to_vec(session)
                .map_err(std::io::Error::other)
                .and_then(|bytes| std::fs::write(&tmp, bytes))
                .and_then(|()| std::fs::rename(&tmp, path))
        }
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        },
    };
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "discord session file not written");
    }
}

async fn run(inner: Arc<Inner>, sink: EventSink, mut stop: watch::Receiver<bool>) {
    // A session of an earlier process, resumable for a few minutes after it died: Discord
    // replays what came since, instead of losing it to a new Identify.
    let mut session: Option<Session> = load(&inner);
    let mut url = inner.config.gateway_url.clone();
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        let target = match (&session, &url) {
            (Some(s), _) => Some(s.resume_url.clone()),
            (None, Some(u)) => Some(u.clone()),
            (None, None) => match inner.gateway_url().await {
                Ok(u) => {
                    url = Some(u.clone());
                    Some(u)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "discord: GET /gateway/bot failed");
                    None
                }
            },
        };
        let end = match target {
            Some(target) => connection(&inner, &sink, &target, &mut session, &mut stop).await,
            None => End::Reconnect {
                resumable: false,
                healthy: false,
            },
        };
        sink.transport_status(TransportStatus::Disconnected);
        let wait = match end {
            End::Stopped => {
                // Closed with 1000: the session is gone.
                save(&inner, None);
                return;
            }
            End::Fatal(code) => {
                tracing::error!(
                    code,
                    "discord gateway closed for good (4004 bad token, 4010–4012 sharding, 4013 invalid or 4014 disallowed intents: enable the privileged intents in the Developer Portal)"
                );
                return;
            }
            End::Reconnect { resumable, healthy } => {
                if !resumable {
                    session = None;
                    save(&inner, None);
                }
                failures = if healthy { 0 } else { failures + 1 };
                if resumable && healthy {
                    Duration::ZERO
                } else if !resumable && healthy {
                    // Invalid session: Discord asks for 1–5 s before the next Identify.
                    Duration::from_millis(fastrand::u64(1000..5000))
                } else {
                    backoff(failures)
                }
            }
        };
        tracing::info!(
            ?wait,
            resume = session.is_some(),
            "discord gateway reconnecting"
        );
        tokio::select! {
            () = sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The URL to open: `base` with the version and encoding.
fn with_query(base: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{}/{sep}v=10&encoding=json", base.trim_end_matches('/'))
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(inner: &Inner, target: &str) -> Result<Socket, String> {
    let url = with_query(target);
    let connector = if url.starts_with("wss:") {
        Some(tokio_tungstenite::Connector::Rustls(inner.tls()?))
    } else {
        None
    };
    let connecting = tokio_tungstenite::connect_async_tls_with_config(url, None, true, connector);
    match timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}

fn close_frame(code: u16) -> Ws {
    Ws::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: "".into(),
    }))
}

async fn send(ws: &mut Socket, payload: Value) -> Result<(), String> {
    ws.send(Ws::text(payload.to_string()))
        .await
        .map_err(|e| e.to_string())
}

/// The Hello's heartbeat interval.
async fn hello(ws: &mut Socket) -> Result<Duration, String> {
    let first = timeout(CONNECT_TIMEOUT, ws.next())
        .await
        .map_err(|_| "no Hello".to_owned())?;
    let Some(Ok(Ws::Text(text))) = first else {
        return Err("the connection ended before the Hello".to_owned());
    };
    let v: Value = serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
    match (v["op"].as_u64(), v["d"]["heartbeat_interval"].as_u64()) {
        (Some(10), Some(ms)) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!("expected a Hello, got op {}", v["op"])),
    }
}

/// One connection, from opening to its end.
async fn connection(
    inner: &Inner,
    sink: &EventSink,
    target: &str,
    session: &mut Option<Session>,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let lost = |healthy| End::Reconnect {
        resumable: true,
        healthy,
    };
    let mut ws = match open(inner, target).await {
        Ok(ws) => ws,
        Err(e) => {
            tracing::warn!(error = %e, "discord gateway: cannot connect");
            return lost(false);
        }
    };
    let interval = match hello(&mut ws).await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, "discord gateway: no Hello");
            return lost(false);
        }
    };
    let token: &str = &inner.config.token;
    let greeting = match session {
        Some(s) => {
            tracing::info!(seq = ?s.seq, "discord gateway: resuming");
            json!({"op": 6, "d": {"token": token, "session_id": s.id, "seq": s.seq}})
        }
        None => json!({"op": 2, "d": {
            "token": token,
            "intents": inner.config.intents,
            "properties": {"os": std::env::consts::OS, "browser": "botmesh", "device": "botmesh"},
        }}),
    };
    if let Err(e) = send(&mut ws, greeting).await {
        tracing::warn!(error = %e, "discord gateway: Identify/Resume not sent");
        return lost(false);
    }
    let mut healthy = false;
    let mut seen: Option<u64> = session.as_ref().and_then(|s| s.seq);
    let mut acked = true;
    let mut next_beat = Instant::now() + interval.mul_f64(fastrand::f64());
    loop {
        tokio::select! {
            _ = stop.changed() => {
                let _ = ws.send(close_frame(1000)).await;
                return End::Stopped;
            }
            () = sleep_until(next_beat) => {
                if !acked {
                    tracing::warn!("discord gateway: no heartbeat ACK (zombie connection); resuming");
                    let _ = ws.send(close_frame(4000)).await;
                    return lost(healthy);
                }
                acked = false;
                next_beat = Instant::now() + interval;
                if send(&mut ws, json!({"op": 1, "d": seen})).await.is_err() {
                    return lost(healthy);
                }
            }
            frame = ws.next() => {
                let text = match frame {
                    Some(Ok(Ws::Text(t))) => t,
                    Some(Ok(Ws::Close(close))) => {
                        let code = close.map_or(1005, |c| u16::from(c.code));
                        return closed(code, healthy);
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "discord gateway: connection lost");
                        return lost(healthy);
                    }
                    None => return lost(healthy),
                };
                let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else {
                    tracing::warn!("discord gateway: a frame that is not JSON, ignored");
                    continue;
                };
                match v["op"].as_u64() {
                    Some(0) => {
                        let s = v["s"].as_u64();
                        seen = s.or(seen);
                        let t = v["t"].as_str().unwrap_or("");
                        if t == "READY" {
                            *session = Some(Session {
                                id: v["d"]["session_id"].as_str().unwrap_or_default().to_owned(),
                                resume_url: v["d"]["resume_gateway_url"]
                                    .as_str()
                                    .map_or_else(|| target.to_owned(), str::to_owned),
                                seq: s,
                            });
                            inner.set_own_id(v["d"]["user"]["id"].as_str());
                        }
                        tracing::debug!(t, seq = ?s, "discord gateway dispatch");
                        if matches!(t, "READY" | "RESUMED") {
                            tracing::info!(event = t, seq = ?s, "discord gateway connected");
                            healthy = true;
                            sink.transport_status(TransportStatus::Ready);
                        }
                        if !dispatch(inner, sink, t, &v["d"]).await {
                            // Not accepted: resume from the last accepted event, which
                            // Discord replays.
                            let _ = ws.send(close_frame(4000)).await;
                            return lost(healthy);
                        }
                        if let (Some(session), Some(s)) = (session.as_mut(), s) {
                            session.seq = Some(s);
                        }
                        if s.is_some() {
                            save(inner, session.as_ref());
                        }
                    }
                    Some(1) if send(&mut ws, json!({"op": 1, "d": seen})).await.is_err() => {
                        return lost(healthy);
                    }
                    Some(7) => {
                        tracing::info!("discord gateway: Reconnect requested");
                        let _ = ws.send(close_frame(4000)).await;
                        return lost(healthy);
                    }
                    Some(9) => {
                        let resumable = v["d"].as_bool() == Some(true);
                        tracing::info!(resumable, "discord gateway: invalid session");
                        let _ = ws.send(close_frame(4000)).await;
                        return End::Reconnect { resumable, healthy: true };
                    }
                    Some(11) => acked = true,
                    _ => {}
                }
            }
        }
    }
}

/// What a close code from Discord means.
fn closed(code: u16, healthy: bool) -> End {
    tracing::warn!(code, "discord gateway closed the connection");
    match code {
        4004 | 4010..=4014 => End::Fatal(code),
        4007 | 4009 => End::Reconnect {
            resumable: false,
            healthy,
        },
        _ => End::Reconnect {
            resumable: true,
            healthy,
        },
    }
}

/// Delivers a dispatch the bot handles; `false` when the pipeline did not accept it.
async fn dispatch(inner: &Inner, sink: &EventSink, t: &str, d: &Value) -> bool {
    let event = match t {
        "MESSAGE_CREATE" => {
            inbound::message(d, inner.own_id().as_deref()).map(ProviderEvent::Message)
        }
        "INTERACTION_CREATE" => match inbound::interaction(d, botmesh::clock::now_ms()) {
            Ok(Some(parsed)) => Some(inner.interactions.open(parsed, false)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "discord gateway: an interaction that does not parse");
                None
            }
        },
        _ => None,
    };
    let Some(event) = event else {
        return true;
    };
    match sink.deliver(event).await {
        Ok(_) => true,
        Err(rejected) => {
            tracing::warn!(reason = %rejected, "discord gateway: event not accepted; resuming to get it again");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_gets_the_version_and_close_codes_their_meaning() {
        assert_eq!(
            with_query("wss://gateway.discord.gg"),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
        assert!(matches!(closed(4004, true), End::Fatal(4004)));
        assert!(matches!(closed(4014, true), End::Fatal(4014)));
        assert!(matches!(
            closed(4009, true),
            End::Reconnect {
                resumable: false,
                ..
            }
        ));
        assert!(matches!(
            closed(4000, false),
            End::Reconnect {
                resumable: true,
                ..
            }
        ));
        assert!(matches!(
            closed(1006, false),
            End::Reconnect {
                resumable: true,
                ..
            }
        ));
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(30), Duration::from_secs(60));
    }
}
