//! [`MessagingConfig`]: a Messenger or Instagram provider's settings, from code or from the
//! environment (the channel's module has the table of variables), and the [`MessageTag`]s
//! that let a message out of the 24-hour window.

use std::marker::PhantomData;

use super::Channel;
use crate::meta::{EnvNames, GraphSettings, MetaConfigError, graph_config_builders};

/// The hosts of Meta's CDNs whose attachment URLs are journaled as media refs and downloaded
/// (subdomains included).
pub const DEFAULT_MEDIA_HOSTS: [&str; 3] = ["fbcdn.net", "fbsbx.com", "cdninstagram.com"];

/// A message tag: what lets a message go out after the 24-hour standard window closed
/// (`messaging_type: MESSAGE_TAG`). Not for promotions; Instagram takes `HUMAN_AGENT` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageTag {
    /// `ACCOUNT_UPDATE`: a change to the user's account or application (Messenger).
    AccountUpdate,
    /// `CONFIRMED_EVENT_UPDATE`: a reminder or update of an event the user registered for
    /// (Messenger).
    ConfirmedEventUpdate,
    /// `POST_PURCHASE_UPDATE`: an update on a purchase the user made (Messenger).
    PostPurchaseUpdate,
    /// `HUMAN_AGENT`: a human agent's reply, up to 7 days after the user's last message
    /// (needs Meta's Human Agent permission; never for the bot's own answers).
    HumanAgent,
}

impl MessageTag {
    /// The tag as the Send API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageTag::AccountUpdate => "ACCOUNT_UPDATE",
            MessageTag::ConfirmedEventUpdate => "CONFIRMED_EVENT_UPDATE",
            MessageTag::PostPurchaseUpdate => "POST_PURCHASE_UPDATE",
            MessageTag::HumanAgent => "HUMAN_AGENT",
        }
    }

    /// How long after the user's last message the tag may be used (`None`: no limit).
    pub fn reach_ms(self) -> Option<i64> {
        match self {
            MessageTag::HumanAgent => Some(7 * 24 * 60 * 60 * 1000),
            _ => None,
        }
    }
}

impl std::str::FromStr for MessageTag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            MessageTag::AccountUpdate,
            MessageTag::ConfirmedEventUpdate,
            MessageTag::PostPurchaseUpdate,
            MessageTag::HumanAgent,
        ]
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown message tag {s:?}"))
    }
}

/// A Messenger or Instagram provider's settings (`MessengerConfig`, `InstagramConfig`).
#[derive(Debug)]
pub struct MessagingConfig<C> {
    pub(crate) graph: GraphSettings,
    pub(crate) account_id: Option<String>,
    pub(crate) window_tag: Option<MessageTag>,
    pub(crate) media_hosts: Vec<String>,
    channel: PhantomData<fn() -> C>,
}

impl<C> Clone for MessagingConfig<C> {
    fn clone(&self) -> Self {
        Self {
            graph: self.graph.clone(),
            account_id: self.account_id.clone(),
            window_tag: self.window_tag,
            media_hosts: self.media_hosts.clone(),
            channel: PhantomData,
        }
    }
}

impl<C: Channel> MessagingConfig<C> {
    /// Settings with the required credentials (the Page or Instagram access token, the app
    /// secret that signs webhooks, the verify token of the handshake) and the defaults.
    pub fn new(
        access_token: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
    ) -> Self {
        Self {
            graph: GraphSettings::new(access_token, app_secret, verify_token, C::DEFAULT_PATH),
            account_id: None,
            window_tag: None,
            media_hosts: DEFAULT_MEDIA_HOSTS.map(str::to_owned).to_vec(),
            channel: PhantomData,
        }
    }

    crate::settings::from_env_fn!(
        MetaConfigError,
        "Reads the settings from the environment (the channel module's table)."
    );

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, MetaConfigError> {
        let get = crate::settings::trimmed(get);
        let [graph @ .., account, tag, hosts] = C::ENV;
        let names = EnvNames::from(graph);
        let mut cfg = Self::new("", "", "");
        cfg.graph = GraphSettings::from_lookup(&get, &names, C::DEFAULT_PATH)?;
        if let Some(id) = get(account) {
            cfg = cfg.account_id_checked(id, account)?;
        }
        if let Some(t) = get(tag) {
            let t = t.parse().map_err(|reason| MetaConfigError::Invalid {
                setting: tag,
                reason,
            })?;
            cfg = cfg.tag_checked(t, tag)?;
        }
        if let Some(list) = get(hosts) {
            cfg = cfg.media_hosts(list.split(',').map(str::trim).filter(|h| !h.is_empty()));
        }
        Ok(cfg)
    }

    fn account_id_checked(
        mut self,
        id: String,
        setting: &'static str,
    ) -> Result<Self, MetaConfigError> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MetaConfigError::Invalid {
                setting,
                reason: "must be the numeric id".to_owned(),
            });
        }
        self.account_id = Some(id);
        Ok(self)
    }

    fn tag_checked(
        mut self,
        tag: MessageTag,
        setting: &'static str,
    ) -> Result<Self, MetaConfigError> {
        if !C::TAGS.contains(&tag) {
            return Err(MetaConfigError::Invalid {
                setting,
                reason: format!("{} does not take the tag {}", C::NAME, tag.as_str()),
            });
        }
        self.window_tag = Some(tag);
        Ok(self)
    }

    /// The Page id (Messenger) or Instagram account id the provider sends from: sends go to
    /// `/<id>/messages` instead of `/me/messages`, and webhook events addressed to another
    /// account are skipped (logged). Numeric.
    pub fn account_id(self, id: impl Into<String>) -> Result<Self, MetaConfigError> {
        self.account_id_checked(id.into(), "account id")
    }

    /// Sends to a chat known to have been silent for more than 24 hours go out with this
    /// tag (`HUMAN_AGENT`: up to 7 days). Without one, such a send fails with
    /// `ProviderError::OutsideSessionWindow` (final: dead-lettered, not retried). Refused
    /// for a tag the channel does not take.
    pub fn window_tag(self, tag: MessageTag) -> Result<Self, MetaConfigError> {
        self.tag_checked(tag, "window tag")
    }

    /// The hosts whose attachment URLs are journaled as media refs and downloaded
    /// ([`DEFAULT_MEDIA_HOSTS`] by default); replaces the list.
    pub fn media_hosts<S: Into<String>>(mut self, hosts: impl IntoIterator<Item = S>) -> Self {
        self.media_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }
}

graph_config_builders!([C: Channel] MessagingConfig<C>, "/messenger` or `/instagram");

impl<C> crate::meta::MetaConfig for MessagingConfig<C> {
    fn graph(&self) -> &GraphSettings {
        &self.graph
    }
}
