//! A fake IMAP4rev1 server (RFC 3501, with IDLE from RFC 2177), the part a client reading one
//! mailbox uses: `CAPABILITY`, `LOGIN`, `SELECT` (with `UIDVALIDITY` and `UIDNEXT`),
//! `UID FETCH <n>:* (UID BODY.PEEK[])` (the newest mail when nothing is at or over `n`, as
//! real servers do), `IDLE` … `DONE` (announcing `* n EXISTS` when mail is added meanwhile),
//! `NOOP`, `LOGOUT`. It counts logins and IDLE commands, and can drop every connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

#[derive(Default)]
struct State {
    uid_validity: u32,
    next_uid: u32,
    mails: Vec<(u32, Vec<u8>)>,
    logins: usize,
    idles: usize,
    fetches: Vec<String>,
}

/// The fake server.
#[derive(Clone)]
pub struct FakeImap {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    /// Bumped on every added mail (IDLE announces it) and on `drop_connections`.
    mail_tx: Arc<watch::Sender<u64>>,
    kill_tx: Arc<watch::Sender<u64>>,
}

pub const USER: &str = "bot@shop.example";
pub const PASSWORD: &str = "imap-password";

impl FakeImap {
    pub async fn start(uid_validity: u32) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind imap");
        let addr = listener.local_addr().expect("addr");
        let fake = Self {
            addr,
            state: Arc::new(Mutex::new(State {
                uid_validity,
                next_uid: 1,
                ..State::default()
            })),
            changed: Arc::new(Notify::new()),
            mail_tx: Arc::new(watch::channel(0).0),
            kill_tx: Arc::new(watch::channel(0).0),
        };
        let server = fake.clone();
        super::smtp::each_connection(listener, move |socket| {
            let server = server.clone();
            async move { server.session(socket).await }
        });
        fake
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Adds a mail; returns its UID.
    pub fn add(&self, raw: &str) -> u32 {
        let uid = {
            let mut s = self.state.lock().expect("imap state");
            let uid = s.next_uid;
            s.next_uid += 1;
            s.mails.push((uid, raw.as_bytes().to_vec()));
            uid
        };
        self.mail_tx.send_modify(|n| *n += 1);
        uid
    }

    /// A new UIDVALIDITY, the mails renumbered from 1 (a mailbox rebuilt by the server).
    pub fn renumber(&self, uid_validity: u32) {
        let mut s = self.state.lock().expect("imap state");
        s.uid_validity = uid_validity;
        let mut uid = 0;
        for m in &mut s.mails {
            uid += 1;
            m.0 = uid;
        }
        s.next_uid = uid + 1;
    }

    /// Drops every open connection (the server restarting).
    pub fn drop_connections(&self) {
        self.kill_tx.send_modify(|n| *n += 1);
    }

    pub fn logins(&self) -> usize {
        self.state.lock().expect("imap state").logins
    }

    pub fn idles(&self) -> usize {
        self.state.lock().expect("imap state").idles
    }

    /// The `UID FETCH` ranges asked for, in order.
    pub fn fetches(&self) -> Vec<String> {
        self.state.lock().expect("imap state").fetches.clone()
    }

    /// Waits until `done` holds for (logins, idles) (or 10 s); returns whether it does.
    pub async fn wait_until(&self, done: impl Fn(usize, usize) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(self.logins(), self.idles()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    async fn session(&self, socket: tokio::net::TcpStream) -> std::io::Result<()> {
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read);
        let mut kill = self.kill_tx.subscribe();
        kill.borrow_and_update();
        write
            .write_all(b"* OK [CAPABILITY IMAP4rev1 IDLE] fake ready\r\n")
            .await?;
        let mut line = String::new();
        loop {
            line.clear();
            let n = tokio::select! {
                n = lines.read_line(&mut line) => n?,
                _ = kill.changed() => return Ok(()),
            };
            if n == 0 {
                return Ok(());
            }
            let command = line.trim_end().to_owned();
            let (tag, rest) = command.split_once(' ').unwrap_or((command.as_str(), ""));
            let upper = rest.to_ascii_uppercase();
            let mut out = String::new();
            if upper.starts_with("CAPABILITY") {
                out.push_str("* CAPABILITY IMAP4rev1 IDLE\r\n");
                out.push_str(&format!("{tag} OK CAPABILITY completed\r\n"));
            } else if upper.starts_with("LOGIN") {
                let ok = rest.contains(USER) && rest.contains(PASSWORD);
                if ok {
                    self.state.lock().expect("imap state").logins += 1;
                    self.changed.notify_waiters();
                    out.push_str(&format!("{tag} OK LOGIN completed\r\n"));
                } else {
                    out.push_str(&format!(
                        "{tag} NO [AUTHENTICATIONFAILED] bad credentials\r\n"
                    ));
                }
            } else if upper.starts_with("SELECT") {
                let s = self.state.lock().expect("imap state");
                out.push_str(&format!("* {} EXISTS\r\n* 0 RECENT\r\n", s.mails.len()));
                out.push_str("* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n");
                out.push_str(&format!(
                    "* OK [UIDVALIDITY {}] UIDs valid\r\n",
                    s.uid_validity
                ));
                out.push_str(&format!(
                    "* OK [UIDNEXT {}] predicted next UID\r\n",
                    s.next_uid
                ));
                out.push_str(&format!("{tag} OK [READ-WRITE] SELECT completed\r\n"));
            } else if upper.starts_with("UID FETCH") {
                let range = rest.split_whitespace().nth(2).unwrap_or("1:*").to_owned();
                let from: u32 = range
                    .split(':')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                let s = {
                    let mut s = self.state.lock().expect("imap state");
                    s.fetches.push(range);
                    s.mails.clone()
                };
                let mut picked: Vec<(usize, &(u32, Vec<u8>))> =
                    s.iter().enumerate().filter(|(_, m)| m.0 >= from).collect();
                if picked.is_empty() {
                    if let Some(last) = s.last() {
                        picked.push((s.len() - 1, last));
                    }
                }
                let mut bytes = out.into_bytes();
                for (seq, (uid, raw)) in picked {
                    bytes.extend_from_slice(
                        format!(
                            "* {} FETCH (UID {uid} BODY[] {{{}}}\r\n",
                            seq + 1,
                            raw.len()
                        )
                        .as_bytes(),
                    );
                    bytes.extend_from_slice(raw);
                    bytes.extend_from_slice(b")\r\n");
                }
                bytes.extend_from_slice(format!("{tag} OK UID FETCH completed\r\n").as_bytes());
                write.write_all(&bytes).await?;
                continue;
            } else if upper.starts_with("IDLE") {
                self.state.lock().expect("imap state").idles += 1;
                self.changed.notify_waiters();
                let mut mail = self.mail_tx.subscribe();
                mail.borrow_and_update();
                write.write_all(b"+ idling\r\n").await?;
                loop {
                    line.clear();
                    tokio::select! {
                        n = lines.read_line(&mut line) => {
                            if n? == 0 {
                                return Ok(());
                            }
                            break;
                        }
                        _ = mail.changed() => {
                            let count = self.state.lock().expect("imap state").mails.len();
                            write.write_all(format!("* {count} EXISTS\r\n").as_bytes()).await?;
                        }
                        _ = kill.changed() => return Ok(()),
                    }
                }
                // `line` is DONE.
                out.push_str(&format!("{tag} OK IDLE terminated\r\n"));
            } else if upper.starts_with("LOGOUT") {
                write
                    .write_all(
                        format!("* BYE logging out\r\n{tag} OK LOGOUT completed\r\n").as_bytes(),
                    )
                    .await?;
                return Ok(());
            } else {
                out.push_str(&format!("{tag} OK done\r\n"));
            }
            write.write_all(out.as_bytes()).await?;
        }
    }
}
