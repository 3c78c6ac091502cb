//! A fake API's call log, shared by the fakes whose API creates messages (Twilio and the
//! gateways): every call, what was delivered, the media kept, and what the next calls do
//! (fail with a queued answer, or drop their connection). The calls and deliveries of such a
//! fake are read the same way on each ([`Logs`]).

use std::collections::VecDeque;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Served, json_resp};

/// The state of a fake that keeps a [`Log`] of its calls (`Call`), for the calls of an
/// [`Account`].
pub trait Logs: Default + Send + 'static {
    type Call: Clone;

    fn log(&mut self) -> &mut Log<Self::Call>;

    fn account(&mut self) -> &mut Account;
}

/// What the calls to a fake must carry: its secret (an API key or token) and the account
/// they name where the API names one (an Evolution instance, a WPPConnect session, a Twilio
/// account SID, a TikTok business).
#[derive(Default)]
pub struct Account {
    pub secret: String,
    pub id: String,
}

impl Account {
    pub fn new(secret: &str, id: &str) -> Self {
        Self {
            secret: secret.to_owned(),
            id: id.to_owned(),
        }
    }

    /// An account known by its secret alone (Gupshup's API key, HighLevel's token).
    pub fn of_secret(secret: &str) -> Self {
        Self::new(secret, "")
    }
}

/// Implements [`Logs`] for the fakes' states: `State: Call` (the state's `log` and `account`
/// fields).
macro_rules! logs {
    ($($(#[$cfg:meta])* $state:ty: $call:ty),* $(,)?) => {$(
        $(#[$cfg])*
        impl Logs for $state {
            type Call = $call;

            fn log(&mut self) -> &mut Log<$call> {
                &mut self.log
            }

            fn account(&mut self) -> &mut Account {
                &mut self.account
            }
        }
    )*};
}

logs!(
    #[cfg(feature = "evolution")]
    super::evolution::S: (String, Value),
    #[cfg(feature = "gohighlevel")]
    super::gohighlevel::S: Value,
    #[cfg(feature = "gupshup")]
    super::gupshup::S: (String, Vec<(String, String)>),
    #[cfg(feature = "tiktok")]
    super::tiktok::S: Value,
    #[cfg(feature = "twilio")]
    super::twilio::S: Vec<(String, String)>,
    #[cfg(feature = "wppconnect")]
    super::wppconnect::S: (String, Value),
);

/// What a fake with a [`Log`] answers about its calls.
impl<S: Logs> Served<S> {
    /// Serves `router` as the fake `name` (`Twilio`) whose calls must carry `account`.
    pub async fn serve_account(
        name: &'static str,
        account: Account,
        router: axum::Router<std::sync::Arc<std::sync::Mutex<S>>>,
    ) -> Self {
        let mut state = S::default();
        *state.account() = account;
        Self::serve_state(name, state, router).await
    }

    /// Every call, in order (failures too).
    pub fn sent(&self) -> Vec<S::Call> {
        self.s().log().sent.clone()
    }

    /// The texts accepted for `to` (the recipient as the API names it), in order.
    pub fn delivered_to(&self, to: &str) -> Vec<String> {
        super::recorded_under(&self.s().log().delivered, to)
    }

    /// The next accepted call drops its connection instead of answering: the bot cannot know
    /// whether it went out.
    pub fn drop_next(&self) {
        self.s().log().drops += 1;
    }
}

/// A fake API's log: every call `C`, what was delivered, and what the next calls do.
pub struct Log<C> {
    /// Every call, in order (failures too).
    pub sent: Vec<C>,
    /// (recipient, text) of every message accepted, in order.
    pub delivered: Vec<(String, String)>,
    /// The media kept, by id.
    pub media: Vec<(String, Vec<u8>)>,
    /// How many messages were accepted.
    pub next: u64,
    /// How many of the next accepted answers drop their connection.
    pub drops: usize,
    failures: VecDeque<(u16, Value, Option<u64>)>,
}

impl<C> Default for Log<C> {
    fn default() -> Self {
        Self {
            sent: Vec::new(),
            delivered: Vec::new(),
            media: Vec::new(),
            next: 0,
            drops: 0,
            failures: VecDeque::new(),
        }
    }
}

impl<C> Log<C> {
    /// The next call is answered `status` with `body` (and `Retry-After`).
    pub fn fail_next(&mut self, status: u16, body: Value, retry_after: Option<u64>) {
        self.failures.push_back((status, body, retry_after));
    }

    /// The answer of the next queued failure, if any.
    pub fn failure(&mut self) -> Option<Response> {
        let (status, body, retry_after) = self.failures.pop_front()?;
        let mut resp = json_resp(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            body,
        );
        if let Some(r) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(r));
        }
        Some(resp)
    }

    /// Records a message accepted for `to`; the count of accepted messages.
    pub fn deliver(&mut self, to: &str, text: &str) -> u64 {
        self.delivered.push((to.to_owned(), text.to_owned()));
        self.next += 1;
        self.next
    }

    /// `answer`, or a dropped connection when one is due.
    pub fn answer(&mut self, answer: Response) -> Response {
        super::server::answer_or_drop(&mut self.drops, answer)
    }

    /// The media kept as `id`, served as a JPEG (404 when there is none).
    pub fn serve_media(&self, id: &str) -> Response {
        match self.media_of(id) {
            Some(bytes) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "image/jpeg")],
                bytes,
            )
                .into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }

    /// The media kept as `id`.
    pub fn media_of(&self, id: &str) -> Option<Vec<u8>> {
        self.media
            .iter()
            .find(|(m, _)| m == id)
            .map(|(_, b)| b.clone())
    }
}
