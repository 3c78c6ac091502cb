//! A fake SMTP server (RFC 5321, the part a client sending one mail uses): `EHLO`/`HELO`,
//! `MAIL FROM`, `RCPT TO`, `DATA` (dot-unstuffed), `RSET`, `NOOP`, `QUIT`. It records every
//! accepted mail, and answers the next command of a stage with a scripted reply when told
//! (`fail_next(Stage::Rcpt, "550 5.1.1 no such user")`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// Where a scripted reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Mail,
    Rcpt,
    Data,
}

/// A mail the server accepted.
#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
}

impl Received {
    /// The plain-text body, decoded (quoted-printable, base64).
    pub fn text(&self) -> String {
        mail_parser::MessageParser::default()
            .parse(self.data.as_bytes())
            .and_then(|m| m.body_text(0).map(|t| t.into_owned()))
            .unwrap_or_default()
    }

    /// A header's value (unfolded), by name.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next().unwrap_or_default();
        let mut out: Option<String> = None;
        let mut current = false;
        for line in head.split("\r\n") {
            if line.starts_with(' ') || line.starts_with('\t') {
                if current {
                    if let Some(v) = out.as_mut() {
                        v.push(' ');
                        v.push_str(line.trim());
                    }
                }
                continue;
            }
            current = false;
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case(name) && out.is_none() {
                    out = Some(v.trim().to_owned());
                    current = true;
                }
            }
        }
        out
    }
}

#[derive(Default)]
struct State {
    mails: Vec<Received>,
    scripted: VecDeque<(Stage, String)>,
    connections: usize,
    /// Transactions answered: mails accepted and scripted failures.
    calls: usize,
}

/// Serves each connection `listener` accepts with `session`, in a task of its own.
pub fn each_connection<F, Fut>(listener: TcpListener, session: F)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(session(socket));
        }
    });
}

/// The fake server.
#[derive(Clone)]
pub struct FakeSmtp {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl FakeSmtp {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind smtp");
        let addr = listener.local_addr().expect("addr");
        let fake = Self {
            addr,
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
        };
        let server = fake.clone();
        each_connection(listener, move |socket| {
            let server = server.clone();
            async move { server.session(socket).await }
        });
        fake
    }

    /// `smtp://127.0.0.1:<port>` (plain: a loopback server).
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// Answers the next command of `stage` with `reply` (`"451 4.7.1 try later"`).
    pub fn fail_next(&self, stage: Stage, reply: &str) {
        self.state
            .lock()
            .expect("smtp state")
            .scripted
            .push_back((stage, reply.to_owned()));
    }

    /// The texts of the mails accepted for `address`, in order, as the recipient's mailbox
    /// shows them: one mail per Message-ID (a resend with the same Message-ID, after a crash
    /// mid-send, is the same mail to Gmail and most clients; [`resent`](Self::resent) counts
    /// them).
    pub fn delivered_to(&self, address: &str) -> Vec<String> {
        let rcpt = format!("<{address}>");
        let mut seen = std::collections::HashSet::new();
        self.mails()
            .iter()
            .filter(|m| m.to.contains(&rcpt))
            .filter(|m| m.header("Message-ID").is_none_or(|id| seen.insert(id)))
            .map(Received::text)
            .collect()
    }

    /// How many accepted mails repeated a Message-ID accepted before (resends).
    pub fn resent(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        self.mails()
            .iter()
            .filter_map(|m| m.header("Message-ID"))
            .filter(|id| !seen.insert(id.clone()))
            .count()
    }

    /// How many transactions the server answered (mails accepted, scripted failures).
    pub fn calls(&self) -> usize {
        self.state.lock().expect("smtp state").calls
    }

    pub fn mails(&self) -> Vec<Received> {
        self.state.lock().expect("smtp state").mails.clone()
    }

    /// Waits until `n` mails were accepted (or 10 s); returns them.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.mails().len() >= n {
                return self.mails();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.mails();
            }
        }
    }

    fn scripted(&self, stage: Stage) -> Option<String> {
        let mut state = self.state.lock().expect("smtp state");
        let at = state.scripted.iter().position(|(s, _)| *s == stage)?;
        state.calls += 1;
        state.scripted.remove(at).map(|(_, r)| r)
    }

    async fn session(&self, socket: tokio::net::TcpStream) -> std::io::Result<()> {
        self.state.lock().expect("smtp state").connections += 1;
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read);
        write.write_all(b"220 fake.smtp ESMTP ready\r\n").await?;
        let mut from = String::new();
        let mut to: Vec<String> = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let command = line.trim_end().to_owned();
            let upper = command.to_ascii_uppercase();
            let reply = if upper.starts_with("EHLO") {
                "250-fake.smtp\r\n250-8BITMIME\r\n250 SMTPUTF8".to_owned()
            } else if upper.starts_with("HELO") {
                "250 fake.smtp".to_owned()
            } else if upper.starts_with("MAIL FROM:") {
                from = command[10..].trim().to_owned();
                to.clear();
                self.scripted(Stage::Mail)
                    .unwrap_or_else(|| "250 2.1.0 ok".to_owned())
            } else if upper.starts_with("RCPT TO:") {
                match self.scripted(Stage::Rcpt) {
                    Some(r) => r,
                    None => {
                        to.push(command[8..].trim().to_owned());
                        "250 2.1.5 ok".to_owned()
                    }
                }
            } else if upper == "DATA" {
                write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
                let mut data = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).await? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" {
                        break;
                    }
                    let unstuffed = line.strip_prefix('.').unwrap_or(&line);
                    data.push_str(unstuffed);
                }
                match self.scripted(Stage::Data) {
                    Some(r) => r,
                    None => {
                        let mut state = self.state.lock().expect("smtp state");
                        state.calls += 1;
                        state.mails.push(Received {
                            from: from.clone(),
                            to: to.clone(),
                            data,
                        });
                        drop(state);
                        self.changed.notify_waiters();
                        "250 2.0.0 queued".to_owned()
                    }
                }
            } else if upper == "QUIT" {
                write.write_all(b"221 2.0.0 bye\r\n").await?;
                return Ok(());
            } else if upper == "RSET" || upper == "NOOP" {
                "250 2.0.0 ok".to_owned()
            } else {
                "502 5.5.2 not implemented".to_owned()
            };
            write.write_all(format!("{reply}\r\n").as_bytes()).await?;
        }
    }
}
