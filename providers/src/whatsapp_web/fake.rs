//! [`FakeSession`]: a WhatsApp Web server and the users' phones, faked in a directory, for
//! tests and for running the shop without a phone (`WHATSAPP_WEB_REPLAY_DIR`).
//!
//! | file | who writes it | what it holds |
//! | --- | --- | --- |
//! | `events.jsonl` | the test ([`FakeSession::push`]) | recorded event shapes ([`WaEvent`] as JSON), one a line: each line is one delivery by the server. Every connect replays the file from its start, as the server delivers its offline queue after a (re)connect: the events, and every message not acknowledged before that connect; then it follows the file, every new line delivered as it is (a line written twice is a duplicate delivery) |
//! | `acks.jsonl` | the session | the messages acknowledged to the server (chat, sender, id), one a line: a message is acknowledged only once the bot accepted it ([`WaEvents::deliver`]); one not accepted stays unacknowledged, and the session reconnects after a pause (half a second), so the server delivers it again |
//! | `sent.jsonl` | the session | every send the "server" accepted ([`WaSend`]), resends included |
//! | `edits.jsonl` | the session | every edit |
//! | `faults.jsonl`, `faults.taken` | the test ([`FakeSession::fail_next`]); the session | failures for the next sends, taken in order |
//! | `media.json` | the test ([`FakeSession::put_media`], [`FakeSession::expire_media`]) | the CDN's files, the expired paths, and what the phone uploads again |
//!
//! The fake keeps the client's credentials where a real client does: in the
//! [`SessionStore`] it is given. Without them a connect pairs (a QR code, a pair code when a
//! number is given, then `PairSuccess`) and writes them; with them it connects at once.
//! What a user's phone shows is one message per id ([`FakeSession::delivered_to`]): a
//! resend under the same id is the same message, as on WhatsApp. It checks no crypto.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::CLIENT_PREFIX;
use super::session::{
    Pairing, WaContent, WaError, WaEvent, WaEvents, WaMedia, WaMediaOrigin, WaMessage,
    WaMessageInfo, WaOutgoing, WaSend, WaSession, WaSource,
};
use super::store::SessionStore;
use crate::task::TaskSlot;

/// The account the fake links as.
const ACCOUNT: &str = "15550000000:7@s.whatsapp.net";

/// How long the fake waits before it reconnects after a message the bot did not accept.
const REDELIVER_AFTER: Duration = Duration::from_millis(500);

/// A message's key on the server: chat, sender and id.
fn ack_key(info: &WaMessageInfo) -> String {
    format!("{}|{}|{}", info.source.chat, info.source.sender, info.id)
}

/// A failure the fake answers the next send with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FakeFault {
    /// The socket is down.
    NotConnected,
    /// The message reached the server, the answer was lost.
    Timeout,
    /// Rate limited (one second).
    RateLimited,
    /// A server error.
    ServerError,
    /// The recipient has no WhatsApp account.
    Unreachable,
}

impl FakeFault {
    fn error(self, to: &str) -> WaError {
        match self {
            FakeFault::NotConnected => WaError::NotConnected,
            FakeFault::Timeout => WaError::Timeout(Duration::from_secs(20)),
            FakeFault::RateLimited => WaError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
            },
            FakeFault::ServerError => WaError::Server {
                code: 500,
                message: "internal-server-error".to_owned(),
            },
            FakeFault::Unreachable => WaError::Unreachable {
                to: to.to_owned(),
                reason: "not on WhatsApp".to_owned(),
            },
        }
    }
}

/// The fake CDN and phones (`media.json`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct MediaState {
    /// Direct path → the file (base64).
    files: BTreeMap<String, String>,
    /// Paths the CDN answers 410 for.
    expired: HashSet<String>,
    /// Expired path → the path the phone uploads it to again.
    reupload: BTreeMap<String, String>,
}

/// The fake session (see the module documentation). Cheap to clone.
#[derive(Clone, Debug)]
pub struct FakeSession {
    dir: PathBuf,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    connected: AtomicBool,
    pairings: AtomicUsize,
    connects: AtomicUsize,
    not_accepted: AtomicUsize,
    /// The task following the events file, between a connect and a disconnect.
    follow: TaskSlot,
    /// Serializes this process's writes to the fault position.
    faults: Mutex<()>,
}

impl FakeSession {
    /// A fake over `dir` (created).
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            state: Arc::new(State::default()),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends an event for the bot (delivered now if connected, and at every later connect).
    pub fn push(&self, event: &WaEvent) -> std::io::Result<()> {
        append(&self.dir.join("events.jsonl"), event)
    }

    /// A text message from `sender` (a phone-number or LID JID; `sender_alt`: the other one,
    /// when the server names it), in the direct chat with that user.
    pub fn text(id: &str, sender: &str, sender_alt: Option<&str>, text: &str) -> WaEvent {
        Self::message(
            id,
            sender,
            sender_alt,
            WaContent::Text {
                text: text.to_owned(),
            },
        )
    }

    /// A message from `sender` in the direct chat with that user.
    pub fn message(
        id: &str,
        sender: &str,
        sender_alt: Option<&str>,
        content: WaContent,
    ) -> WaEvent {
        WaEvent::Message(Box::new(WaMessage {
            info: WaMessageInfo {
                id: id.to_owned(),
                source: WaSource {
                    chat: sender.to_owned(),
                    sender: sender.to_owned(),
                    sender_alt: sender_alt.map(str::to_owned),
                    is_from_me: false,
                    is_group: false,
                },
                push_name: Some("Fake User".to_owned()),
                timestamp: 1_767_225_600,
                is_offline: false,
            },
            content,
        }))
    }

    /// The ids of the messages acknowledged to the server, in order (one line per
    /// acknowledgement: a duplicate delivery accepted again is acknowledged again).
    pub fn acked(&self) -> Vec<String> {
        read_lines::<(String, String, String)>(&self.dir.join("acks.jsonl"))
            .into_iter()
            .map(|(_, _, id)| id)
            .collect()
    }

    /// The server forgets every acknowledgement (as if the process had died before they
    /// reached it): the next connect delivers every message of the file again.
    pub fn lose_acks(&self) -> std::io::Result<()> {
        match std::fs::remove_file(self.dir.join("acks.jsonl")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// How many messages the bot did not accept (each then delivered again after a reconnect).
    pub fn not_accepted(&self) -> usize {
        self.state.not_accepted.load(Ordering::Relaxed)
    }

    /// Every send the server accepted, resends included, in order.
    pub fn sent(&self) -> Vec<WaSend> {
        read_lines(&self.dir.join("sent.jsonl"))
    }

    /// The texts `jid`'s phone shows, in order: one per message id.
    pub fn delivered_to(&self, jid: &str) -> Vec<String> {
        let mut seen = HashSet::new();
        self.sent()
            .into_iter()
            .filter(|s| s.to == jid && seen.insert(s.id.clone()))
            .map(|s| match s.content {
                WaOutgoing::Text { text, .. } => text,
                WaOutgoing::Upload { caption, .. } => caption.unwrap_or_default(),
                WaOutgoing::Forward(media) => media.caption.unwrap_or_default(),
                WaOutgoing::Reaction { emoji, .. } => emoji,
            })
            .collect()
    }

    /// The edits made: (recipient, message id, new text).
    pub fn edits(&self) -> Vec<(String, String, String)> {
        read_lines(&self.dir.join("edits.jsonl"))
    }

    /// The next send not yet failed fails with `fault`.
    pub fn fail_next(&self, fault: FakeFault) -> std::io::Result<()> {
        append(&self.dir.join("faults.jsonl"), &fault)
    }

    /// Puts a file on the fake CDN under `direct_path`.
    pub fn put_media(&self, direct_path: &str, data: &[u8]) -> std::io::Result<()> {
        self.update_media(|m| {
            m.files
                .insert(direct_path.to_owned(), botmesh::codec::encode_base64(data));
            m.expired.remove(direct_path);
        })
    }

    /// The CDN forgets `direct_path` (410); the phone uploads the file again to `reupload_to`,
    /// or no longer has it (`None`).
    pub fn expire_media(
        &self,
        direct_path: &str,
        reupload_to: Option<&str>,
    ) -> std::io::Result<()> {
        self.update_media(|m| {
            m.expired.insert(direct_path.to_owned());
            match reupload_to {
                Some(to) => {
                    if let Some(data) = m.files.get(direct_path).cloned() {
                        m.files.insert(to.to_owned(), data);
                    }
                    m.reupload.insert(direct_path.to_owned(), to.to_owned());
                }
                None => {
                    m.reupload.remove(direct_path);
                }
            }
        })
    }

    /// How many sends were failed by [`fail_next`](Self::fail_next) so far.
    pub fn faults_taken(&self) -> usize {
        std::fs::read_to_string(self.dir.join("faults.taken"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// How many times this fake paired (wrote new credentials).
    pub fn pairings(&self) -> usize {
        self.state.pairings.load(Ordering::Relaxed)
    }

    /// How many times it connected.
    pub fn connects(&self) -> usize {
        self.state.connects.load(Ordering::Relaxed)
    }

    /// Whether it is connected.
    pub fn is_connected(&self) -> bool {
        self.state.connected.load(Ordering::Relaxed)
    }

    fn update_media(&self, f: impl FnOnce(&mut MediaState)) -> std::io::Result<()> {
        let mut media = self.media();
        f(&mut media);
        let text = serde_json::to_vec(&media).map_err(std::io::Error::other)?;
        let tmp = self.dir.join("media.json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, self.dir.join("media.json"))
    }

    fn media(&self) -> MediaState {
        std::fs::read(self.dir.join("media.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn check_connected(&self) -> Result<(), WaError> {
        if self.is_connected() {
            Ok(())
        } else {
            Err(WaError::NotConnected)
        }
    }

    /// The next fault, if one is queued (taken: its position advances).
    fn take_fault(&self) -> Result<Option<FakeFault>, WaError> {
        let _one = self.state.faults.lock().unwrap_or_else(|e| e.into_inner());
        let faults: Vec<FakeFault> = read_lines(&self.dir.join("faults.jsonl"));
        let at_path = self.dir.join("faults.taken");
        let taken = self.faults_taken();
        let Some(fault) = faults.get(taken).copied() else {
            return Ok(None);
        };
        std::fs::write(&at_path, (taken + 1).to_string()).map_err(io_error)?;
        Ok(Some(fault))
    }

    /// Replays `events.jsonl` from its start (skipping the messages acknowledged before this
    /// connect), then follows it, until disconnected; after a message the bot did not accept,
    /// reconnects (replays again) after [`REDELIVER_AFTER`].
    async fn follow(self, events: WaEvents) {
        let path = self.dir.join("events.jsonl");
        'connect: loop {
            let acked_before: HashSet<String> =
                read_lines::<(String, String, String)>(&self.dir.join("acks.jsonl"))
                    .into_iter()
                    .map(|(chat, sender, id)| format!("{chat}|{sender}|{id}"))
                    .collect();
            // The first read is the offline queue (what was acknowledged is not in it); later
            // reads are new deliveries, every line as written.
            let (mut offset, mut queued) = (0, true);
            loop {
                let (lines, next) = read_from::<WaEvent>(&path, offset);
                offset = next;
                for event in lines {
                    if queued
                        && matches!(&event, WaEvent::Message(m) if acked_before.contains(&ack_key(&m.info)))
                    {
                        continue;
                    }
                    match self.hand_over(&events, event).await {
                        Handed::Done => {}
                        Handed::NotAccepted => {
                            tokio::time::sleep(REDELIVER_AFTER).await;
                            continue 'connect;
                        }
                        Handed::Closed => return,
                    }
                }
                queued = false;
                // Real time: the test appends events from another task or process.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Hands one event to the provider; a message is acknowledged once the bot accepted it.
    async fn hand_over(&self, events: &WaEvents, event: WaEvent) -> Handed {
        match event {
            WaEvent::Message(message) => {
                let info = message.info.clone();
                match events.deliver(*message).await {
                    Ok(()) => {
                        let ack = (&info.source.chat, &info.source.sender, &info.id);
                        if let Err(e) = append(&self.dir.join("acks.jsonl"), &ack) {
                            tracing::warn!(error = %e, "the fake could not write an acknowledgement");
                        }
                        Handed::Done
                    }
                    Err(_) if events.is_closed() => Handed::Closed,
                    Err(e) => {
                        tracing::info!(id = %info.id, error = %e, "not accepted: not acknowledged; the fake server delivers it again after a reconnect");
                        self.state.not_accepted.fetch_add(1, Ordering::Relaxed);
                        Handed::NotAccepted
                    }
                }
            }
            other => match events.report(other).await {
                Ok(()) => Handed::Done,
                Err(_) => Handed::Closed,
            },
        }
    }
}

/// What became of an event the fake handed over.
enum Handed {
    /// Reported, or a message accepted (and acknowledged).
    Done,
    /// A message the bot did not accept (not acknowledged).
    NotAccepted,
    /// The provider stopped.
    Closed,
}

#[async_trait]
impl WaSession for FakeSession {
    async fn connect(
        &self,
        store: SessionStore,
        pairing: Pairing,
        events: WaEvents,
    ) -> Result<(), WaError> {
        let creds = format!("{CLIENT_PREFIX}creds");
        if store.get(&creds).await?.is_none() {
            let _ = events
                .report(WaEvent::PairingQrCode {
                    code: "2@fake-qr-code,ref,key".to_owned(),
                    timeout_secs: 20,
                })
                .await;
            if pairing.phone_number.is_some() {
                let _ = events
                    .report(WaEvent::PairingCode {
                        code: "FAKE1234".to_owned(),
                        timeout_secs: 180,
                    })
                    .await;
            }
            // The phone scans at once.
            store.put(&creds, ACCOUNT.as_bytes().to_vec()).await?;
            self.state.pairings.fetch_add(1, Ordering::Relaxed);
            let _ = events
                .report(WaEvent::PairSuccess {
                    id: ACCOUNT.to_owned(),
                })
                .await;
        }
        self.state.connects.fetch_add(1, Ordering::Relaxed);
        self.state.connected.store(true, Ordering::Relaxed);
        let _ = events.report(WaEvent::Connected).await;
        let task = tokio::spawn(self.clone().follow(events));
        self.state.follow.set(task);
        Ok(())
    }

    async fn disconnect(&self) {
        self.state.connected.store(false, Ordering::Relaxed);
        self.state.follow.abort();
    }

    async fn send(&self, send: &WaSend) -> Result<String, WaError> {
        self.check_connected()?;
        match self.take_fault()? {
            Some(FakeFault::Timeout) => {
                // The request reached the server; the answer did not come back.
                append(&self.dir.join("sent.jsonl"), send).map_err(io_error)?;
                Err(FakeFault::Timeout.error(&send.to))
            }
            Some(fault) => Err(fault.error(&send.to)),
            None => {
                append(&self.dir.join("sent.jsonl"), send).map_err(io_error)?;
                Ok(send.id.clone())
            }
        }
    }

    async fn edit(&self, to: &str, id: &str, text: &str) -> Result<(), WaError> {
        self.check_connected()?;
        append(&self.dir.join("edits.jsonl"), &(to, id, text)).map_err(io_error)
    }

    async fn typing(&self, _to: &str) -> Result<(), WaError> {
        self.check_connected()
    }

    async fn mark_read(&self, _chat: &str, _sender: &str, _ids: &[String]) -> Result<(), WaError> {
        self.check_connected()
    }

    async fn download(&self, media: &WaMedia) -> Result<Vec<u8>, WaError> {
        self.check_connected()?;
        let state = self.media();
        if state.expired.contains(&media.direct_path) {
            return Err(WaError::MediaExpired { status: 410 });
        }
        let Some(data) = state.files.get(&media.direct_path) else {
            return Err(WaError::MediaExpired { status: 404 });
        };
        botmesh::codec::decode_base64(data)
            .ok_or_else(|| WaError::MediaCorrupt("the fake CDN holds invalid base64".to_owned()))
    }

    async fn request_reupload(
        &self,
        media: &WaMedia,
        _origin: &WaMediaOrigin,
    ) -> Result<String, WaError> {
        self.check_connected()?;
        self.media()
            .reupload
            .get(&media.direct_path)
            .cloned()
            .ok_or_else(|| WaError::MediaGone("NotFound".to_owned()))
    }
}

fn io_error(e: std::io::Error) -> WaError {
    WaError::Client(format!("fake session files: {e}"))
}

/// Appends `value` as one JSON line (one write).
fn append(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(&line)
}

/// Every complete line of `path`, parsed (lines that do not parse are skipped).
fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    read_from(path, 0).0
}

/// The complete lines of `path` after `offset`, parsed, and the offset after them.
fn read_from<T: for<'de> Deserialize<'de>>(path: &Path, offset: u64) -> (Vec<T>, u64) {
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_end(&mut bytes)
    });
    if read.is_err() {
        return (Vec::new(), offset);
    }
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let out = bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_slice(l) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "a fake session line does not parse");
                None
            }
        })
        .collect();
    (out, offset + complete as u64)
}
