//! [`EmailConfig`]: the bot's address, the SMTP server, and the inbound paths (IMAP, the
//! Mailgun and SendGrid inbound-parse routes), from code or from environment variables. The
//! bot's durable store (where threads, attachments and the IMAP read position are kept) is
//! always given in code.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `EMAIL_FROM` | the bot's mailbox, `Shop <bot@shop.example>` (required) | — |
//! | `EMAIL_SMTP_URL` | the SMTP server: `smtps://user:pass@smtp.example:465` (implicit TLS), `smtp://user:pass@smtp.example:587?tls=required` (STARTTLS), `smtp://127.0.0.1:2525` (plain, local relays and tests) (required) | — |
//! | `EMAIL_SUBJECT` | the subject of a mail that starts a thread (a send to a bare address) | `Message from <the From name or address>` |
//! | `EMAIL_IMAP_HOST` | the IMAP server; turns IMAP IDLE on | unset: no IMAP |
//! | `EMAIL_IMAP_PORT` | its port | `993` |
//! | `EMAIL_IMAP_TLS` | `off` for a plain connection (a local server) | `on` (implicit TLS) |
//! | `EMAIL_IMAP_USER`, `EMAIL_IMAP_PASSWORD` | the `LOGIN` credentials (required with `EMAIL_IMAP_HOST`) | — |
//! | `EMAIL_IMAP_MAILBOX` | the mailbox read | `INBOX` |
//! | `EMAIL_MAILGUN_SIGNING_KEY` | the Mailgun HTTP webhook signing key; turns the Mailgun route on | unset: no route |
//! | `EMAIL_MAILGUN_PATH` | its route | `/email/mailgun` |
//! | `EMAIL_SENDGRID_SECRET` | the shared secret of the SendGrid Inbound Parse route (unsigned: the secret is the URL's last path segment or the basic-auth password); turns the route on | unset: no route |
//! | `EMAIL_SENDGRID_PATH` | its route (the URL given to SendGrid is `<public><path>/<secret>`) | `/email/sendgrid` |
//! | `EMAIL_ACCOUNT` | names this mailbox's state in the store (two bots on one store, two accounts) | `default` |

use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::kv::DurableKv;
use derive_setters::Setters;

use crate::settings::{Redacted, invalid};

/// The email provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type EmailConfigError = crate::settings::ConfigError;

/// How long IDLE waits before it is ended and issued again: under the 29 minutes RFC 2177
/// allows a server to keep an idle client, with a minute to spare.
pub const IDLE_RENEW: Duration = Duration::from_secs(28 * 60);

/// The IMAP side: where mail is read with IDLE.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false)]
pub struct ImapConfig {
    pub(crate) host: String,
    /// Another port.
    #[setters(generate)]
    pub(crate) port: u16,
    pub(crate) tls: bool,
    pub(crate) user: String,
    pub(crate) password: Redacted,
    /// Another mailbox than `INBOX`.
    #[setters(generate, into)]
    pub(crate) mailbox: String,
    pub(crate) idle_renew: Duration,
    pub(crate) reconnect_max: Duration,
}

impl ImapConfig {
    /// A server over implicit TLS (port 993), reading `INBOX`.
    pub fn new(
        host: impl Into<String>,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Self {
            host: host.into(),
            port: 993,
            tls: true,
            user: user.into(),
            password: Redacted::from(password.into()),
            mailbox: "INBOX".to_owned(),
            idle_renew: IDLE_RENEW,
            reconnect_max: Duration::from_secs(60),
        }
    }

    /// A plain TCP connection, without TLS (a server on this machine; tests).
    pub fn plain(mut self) -> Self {
        self.tls = false;
        self
    }

    /// How long one IDLE lasts before it is ended and issued again ([`IDLE_RENEW`]; capped at
    /// it: servers may drop a client idle for 30 minutes).
    pub fn idle_renew(mut self, every: Duration) -> Self {
        self.idle_renew = every.min(IDLE_RENEW);
        self
    }

    /// The longest wait between two reconnection attempts (the wait doubles from 1 s up to
    /// it; 60 s by default).
    pub fn reconnect_max(mut self, max: Duration) -> Self {
        self.reconnect_max = max.max(Duration::from_millis(10));
        self
    }
}

/// The email provider's settings.
#[derive(Clone, Setters)]
#[setters(generate = false, strip_option)]
pub struct EmailConfig {
    pub(crate) from: lettre::message::Mailbox,
    pub(crate) smtp_url: String,
    /// How long an SMTP command may wait for the server (60 s).
    #[setters(generate)]
    pub(crate) smtp_timeout: Duration,
    /// The subject of a mail that starts a thread.
    #[setters(generate, into)]
    pub(crate) subject: Option<String>,
    pub(crate) kv: Arc<dyn DurableKv>,
    /// Names this mailbox's state in the store (`default`).
    #[setters(generate, into)]
    pub(crate) account: String,
    /// Reads mail with IMAP IDLE.
    #[setters(generate)]
    pub(crate) imap: Option<ImapConfig>,
    pub(crate) mailgun_key: Option<String>,
    pub(crate) mailgun_path: String,
    /// How old a Mailgun `timestamp` may be (5 minutes).
    #[setters(generate)]
    pub(crate) mailgun_tolerance: Duration,
    pub(crate) sendgrid_secret: Option<String>,
    pub(crate) sendgrid_path: String,
}

impl std::fmt::Debug for EmailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailConfig")
            .field("from", &self.from.to_string())
            .field("account", &self.account)
            .field("imap", &self.imap)
            .field("mailgun", &self.mailgun_key.is_some())
            .field("sendgrid", &self.sendgrid_secret.is_some())
            .finish_non_exhaustive()
    }
}

const SECRET_TOO_SHORT: &str = "at least 16 characters: it is the route's only protection";

fn route_checked(value: String, setting: &'static str) -> Result<String, EmailConfigError> {
    crate::settings::route(value, setting).map_err(|e| match e {
        crate::settings::ConfigError::Invalid { reason, .. } => invalid(setting, reason),
        other => invalid(setting, other.to_string()),
    })
}

impl EmailConfig {
    /// Settings with the bot's mailbox (`Shop <bot@shop.example>`), the SMTP URL (see the
    /// module table) and the bot's durable store; no inbound path yet.
    pub fn new(
        from: &str,
        smtp_url: &str,
        kv: Arc<dyn DurableKv>,
    ) -> Result<Self, EmailConfigError> {
        let from: lettre::message::Mailbox = from
            .parse()
            .map_err(|e| invalid("from", format!("not a mailbox: {e}")))?;
        let url = url::Url::parse(smtp_url).map_err(|e| invalid("smtp_url", e.to_string()))?;
        if !matches!(url.scheme(), "smtp" | "smtps") || url.host_str().is_none() {
            return Err(invalid(
                "smtp_url",
                "must be smtp://host[:port] or smtps://host[:port]",
            ));
        }
        Ok(Self {
            from,
            smtp_url: smtp_url.to_owned(),
            smtp_timeout: Duration::from_secs(60),
            subject: None,
            kv,
            account: "default".to_owned(),
            imap: None,
            mailgun_key: None,
            mailgun_path: "/email/mailgun".to_owned(),
            mailgun_tolerance: Duration::from_secs(5 * 60),
            sendgrid_secret: None,
            sendgrid_path: "/email/sendgrid".to_owned(),
        })
    }

    /// Reads the settings from the environment (see the module table).
    pub fn from_env(kv: Arc<dyn DurableKv>) -> Result<Self, EmailConfigError> {
        Self::from_lookup(kv, |k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(
        kv: Arc<dyn DurableKv>,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, EmailConfigError> {
        let get = crate::settings::trimmed(get);
        let from = get("EMAIL_FROM").ok_or(EmailConfigError::MissingEnv("EMAIL_FROM"))?;
        let smtp = get("EMAIL_SMTP_URL").ok_or(EmailConfigError::MissingEnv("EMAIL_SMTP_URL"))?;
        let mut cfg = Self::new(&from, &smtp, kv).map_err(|e| match e {
            EmailConfigError::Invalid { setting, reason } => invalid(
                if setting == "from" {
                    "EMAIL_FROM"
                } else {
                    "EMAIL_SMTP_URL"
                },
                reason,
            ),
            other => other,
        })?;
        cfg.subject = get("EMAIL_SUBJECT");
        if let Some(account) = get("EMAIL_ACCOUNT") {
            cfg.account = account;
        }
        if let Some(host) = get("EMAIL_IMAP_HOST") {
            let user =
                get("EMAIL_IMAP_USER").ok_or(EmailConfigError::MissingEnv("EMAIL_IMAP_USER"))?;
            let password = get("EMAIL_IMAP_PASSWORD")
                .ok_or(EmailConfigError::MissingEnv("EMAIL_IMAP_PASSWORD"))?;
            let mut imap = ImapConfig::new(host, user, password);
            if let Some(port) = get("EMAIL_IMAP_PORT") {
                imap.port = port
                    .parse()
                    .map_err(|_| invalid("EMAIL_IMAP_PORT", "not a port number"))?;
            }
            match get("EMAIL_IMAP_TLS").as_deref() {
                None | Some("on" | "true" | "1") => {}
                Some("off" | "false" | "0") => imap.tls = false,
                Some(_) => return Err(invalid("EMAIL_IMAP_TLS", "on or off")),
            }
            if let Some(mailbox) = get("EMAIL_IMAP_MAILBOX") {
                imap.mailbox = mailbox;
            }
            cfg.imap = Some(imap);
        }
        cfg.mailgun_key = get("EMAIL_MAILGUN_SIGNING_KEY");
        if let Some(p) = get("EMAIL_MAILGUN_PATH") {
            cfg.mailgun_path = route_checked(p, "EMAIL_MAILGUN_PATH")?;
        }
        if let Some(p) = get("EMAIL_SENDGRID_PATH") {
            cfg.sendgrid_path = route_checked(p, "EMAIL_SENDGRID_PATH")?;
        }
        if let Some(secret) = get("EMAIL_SENDGRID_SECRET") {
            let path = cfg.sendgrid_path.clone();
            cfg = cfg
                .sendgrid(&secret, &path)
                .map_err(|_| invalid("EMAIL_SENDGRID_SECRET", SECRET_TOO_SHORT))?;
        }
        Ok(cfg)
    }

    /// Takes Mailgun Routes' `forward()` posts on `path`, checked with the HTTP webhook
    /// signing key.
    pub fn mailgun(mut self, signing_key: &str, path: &str) -> Result<Self, EmailConfigError> {
        if signing_key.is_empty() {
            return Err(invalid("mailgun signing key", "empty"));
        }
        self.mailgun_key = Some(signing_key.to_owned());
        self.mailgun_path = route_checked(path.to_owned(), "mailgun path")?;
        Ok(self)
    }

    /// Takes SendGrid Inbound Parse posts on `path`, which carry no signature: the URL given
    /// to SendGrid is `<public><path>/<secret>` (or carries `secret` as the basic-auth
    /// password).
    pub fn sendgrid(mut self, secret: &str, path: &str) -> Result<Self, EmailConfigError> {
        if secret.len() < 16 {
            return Err(invalid("sendgrid secret", SECRET_TOO_SHORT));
        }
        self.sendgrid_secret = Some(secret.to_owned());
        self.sendgrid_path = route_checked(path.to_owned(), "sendgrid path")?;
        Ok(self)
    }

    /// The bot's address, lower-case.
    pub(crate) fn own_address(&self) -> String {
        self.from.email.to_string().to_ascii_lowercase()
    }

    /// The domain of the bot's address (the right side of its Message-IDs).
    pub(crate) fn domain(&self) -> String {
        self.from.email.domain().to_ascii_lowercase()
    }
}
