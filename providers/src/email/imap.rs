//! Inbound mail by IMAP IDLE (RFC 2177) with `async-imap`: one task per provider, holding one
//! connection.
//!
//! 1. Connect (implicit TLS through `tokio-rustls` with the system's roots, or plain TCP for a
//!    local server), read the greeting, `LOGIN`, `SELECT` the mailbox.
//! 2. Poll: `UID FETCH <last+1>:* (UID BODY.PEEK[])` (`PEEK`: the mail stays unread), in UID
//!    order, skipping UIDs at or under the position (`n:*` always returns the newest mail).
//!    Each mail's events are delivered; once the pipeline accepted all of them the position
//!    moves to its UID in the bot's store. A mail the pipeline refused ends the round: the
//!    connection is dropped and the mail is read again after the reconnect.
//! 3. `IDLE` until the server announces new mail or 28 minutes pass (servers may drop a client
//!    idle for 30), `DONE`, and poll again.
//! 4. On any error: the transport reports `Disconnected`, and the task reconnects after 1 s,
//!    2 s, … up to the configured maximum, polling first (IDLE misses what arrived while
//!    disconnected).
//!
//! The position is `(UIDVALIDITY, UID)`. Without a stored position (the first start) it begins
//! at the mailbox's end: mail already there is not answered. When the server's `UIDVALIDITY`
//! differs from the stored one, the UIDs mean nothing any more: the whole mailbox is read
//! again, and the inbox drops what it had (events are keyed by Message-ID).
//!
//! It does not use a second connection to move or flag mail, nor `AUTHENTICATE XOAUTH2`
//! (Gmail and Microsoft 365 accounts need an app password, or a relay).

use std::sync::Arc;
use std::time::Duration;

use async_imap::Client;
use async_imap::extensions::idle::IdleResponse;
use botmesh::provider::{EventSink, TransportStatus};
use futures_util::TryStreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::Shared;
use super::config::ImapConfig;
use super::error::EmailError;
use super::inbound::{self, Outcome};
use super::store::Position;

/// Runs the IMAP side until aborted (the provider's `stop`).
pub(super) async fn run(shared: Arc<Shared>, imap: ImapConfig, sink: EventSink) {
    let first_wait = Duration::from_secs(1).min(imap.reconnect_max);
    let mut wait = first_wait;
    loop {
        let mut connected = false;
        let error = match connect(&shared, &imap, &sink, &mut connected).await {
            Ok(never) => match never {},
            Err(e) => e,
        };
        sink.transport_status(TransportStatus::Disconnected);
        if connected {
            wait = first_wait;
        }
        tracing::warn!(error = %error, retry_in = ?wait, "email: IMAP connection ended; reconnecting");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(imap.reconnect_max);
    }
}

fn imap_error(imap: &ImapConfig, reason: impl std::fmt::Display) -> EmailError {
    EmailError::Imap {
        server: format!("{}:{}", imap.host, imap.port),
        reason: reason.to_string(),
    }
}

/// The TLS client configuration: rustls with the aws-lc-rs provider (as reqwest's and
/// lettre's) and the system's roots, nothing installed process-wide.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added == 0 {
        return Err("no TLS root certificates on this system".to_owned());
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One connection, over TLS or plain TCP; returns only with an error.
async fn connect(
    shared: &Shared,
    imap: &ImapConfig,
    sink: &EventSink,
    connected: &mut bool,
) -> Result<std::convert::Infallible, EmailError> {
    let tcp = TcpStream::connect((imap.host.as_str(), imap.port))
        .await
        .map_err(|e| imap_error(imap, e))?;
    if !imap.tls {
        return serve(shared, imap, sink, Client::new(tcp), connected).await;
    }
    let server_name = rustls::pki_types::ServerName::try_from(imap.host.clone())
        .map_err(|e| imap_error(imap, e))?;
    let connector =
        tokio_rustls::TlsConnector::from(tls_config().map_err(|e| imap_error(imap, e))?);
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| imap_error(imap, format!("TLS: {e}")))?;
    serve(shared, imap, sink, Client::new(tls), connected).await
}

/// Logs in, selects, then polls and idles until an error.
async fn serve<T>(
    shared: &Shared,
    imap: &ImapConfig,
    sink: &EventSink,
    mut client: Client<T>,
    connected: &mut bool,
) -> Result<std::convert::Infallible, EmailError>
where
    T: AsyncRead + AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    let fail = |e: &dyn std::fmt::Display| imap_error(imap, e);
    client
        .read_response()
        .await
        .map_err(|e| fail(&e))?
        .ok_or_else(|| fail(&"closed before its greeting"))?;
    let mut session = client
        .login(&imap.user, &*imap.password)
        .await
        .map_err(|(e, _)| fail(&format!("LOGIN: {e}")))?;
    let mailbox = session
        .select(&imap.mailbox)
        .await
        .map_err(|e| fail(&format!("SELECT {}: {e}", imap.mailbox)))?;
    let validity = mailbox.uid_validity.unwrap_or(0);
    let store = &shared.store;
    if store.position(&imap.mailbox).await?.is_none() {
        let end = mailbox.uid_next.unwrap_or(1).saturating_sub(1);
        store
            .set_position(
                &imap.mailbox,
                Position {
                    uid_validity: validity,
                    uid: end,
                },
            )
            .await?;
    }
    *connected = true;
    sink.transport_status(TransportStatus::Ready);
    tracing::info!(server = %imap.host, mailbox = %imap.mailbox, "email: IMAP connected");
    loop {
        poll(shared, imap, sink, &mut session, validity).await?;
        let mut idle = session.idle();
        idle.init().await.map_err(|e| fail(&format!("IDLE: {e}")))?;
        let (wait, stop) = idle.wait_with_timeout(imap.idle_renew);
        let response = wait.await;
        drop(stop);
        match response.map_err(|e| fail(&format!("IDLE: {e}")))? {
            IdleResponse::NewData(_) => tracing::debug!("email: IMAP IDLE: new data"),
            IdleResponse::Timeout => tracing::debug!("email: IMAP IDLE renewed"),
            IdleResponse::ManualInterrupt => {}
        }
        session = idle.done().await.map_err(|e| fail(&format!("DONE: {e}")))?;
    }
}

/// Reads and delivers every mail after the position, moving it mail by mail.
async fn poll<T>(
    shared: &Shared,
    imap: &ImapConfig,
    sink: &EventSink,
    session: &mut async_imap::Session<T>,
    validity: u32,
) -> Result<(), EmailError>
where
    T: AsyncRead + AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    let store = &shared.store;
    let last = match store.position(&imap.mailbox).await? {
        Some(p) if p.uid_validity == validity => p.uid,
        Some(p) => {
            tracing::warn!(old = p.uid_validity, new = validity, mailbox = %imap.mailbox,
                "email: UIDVALIDITY changed; reading the mailbox again (duplicates are dropped by Message-ID)");
            0
        }
        None => 0,
    };
    let fetches: Vec<async_imap::types::Fetch> = session
        .uid_fetch(format!("{}:*", last.saturating_add(1)), "(UID BODY.PEEK[])")
        .await
        .map_err(|e| imap_error(imap, format!("UID FETCH: {e}")))?
        .try_collect()
        .await
        .map_err(|e| imap_error(imap, format!("UID FETCH: {e}")))?;
    let mut mails: Vec<(u32, Vec<u8>)> = fetches
        .iter()
        .filter_map(|f| Some((f.uid?, f.body()?.to_vec())))
        .filter(|(uid, _)| *uid > last)
        .collect();
    mails.sort_by_key(|(uid, _)| *uid);
    for (uid, raw) in mails {
        deliver(shared, sink, uid, &raw).await?;
        store
            .set_position(
                &imap.mailbox,
                Position {
                    uid_validity: validity,
                    uid,
                },
            )
            .await?;
    }
    Ok(())
}

/// Delivers one fetched mail; `Ok` once every event was accepted (or nothing was to deliver).
async fn deliver(
    shared: &Shared,
    sink: &EventSink,
    uid: u32,
    raw: &[u8],
) -> Result<(), EmailError> {
    let outcome = inbound::from_mime(raw).and_then(|mail| inbound::prepare(mail, &shared.own));
    let prepared = match outcome.map(Outcome::into_prepared) {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::warn!(uid, error = %e, "email: an unreadable mail is skipped");
            return Ok(());
        }
    };
    inbound::keep(&shared.store, &prepared).await?;
    let results = sink.deliver_batch(prepared.events).await;
    if let Some(rejected) = results.into_iter().find_map(Result::err) {
        return Err(EmailError::NotAccepted {
            mail: prepared.id,
            reason: rejected.to_string(),
        });
    }
    Ok(())
}
