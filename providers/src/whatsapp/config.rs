//! [`WhatsAppConfig`]: the Cloud API credentials, ids and webhook settings, from code or
//! from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `WHATSAPP_ACCESS_TOKEN` | the system-user access token (required) | — |
//! | `WHATSAPP_PHONE_NUMBER_ID` | the sender's phone number id (required) | — |
//! | `WHATSAPP_APP_SECRET` | the app secret that signs webhooks (`X-Hub-Signature-256`) (required) | — |
//! | `WHATSAPP_VERIFY_TOKEN` | the token of the `hub.challenge` handshake (required) | — |
//! | `WHATSAPP_API_BASE` | the Graph base URL | `https://graph.facebook.com` |
//! | `WHATSAPP_API_VERSION` | the Graph version | `v21.0` |
//! | `WHATSAPP_WEBHOOK_PATH` | the route on the webhook server | `/whatsapp` |
//! | `WHATSAPP_WINDOW_TEMPLATE` | the approved template sent instead of a message outside the 24-hour window, with the message's text as its one body parameter (`{{1}}`) | none: such a send fails with `OutsideSessionWindow` |
//! | `WHATSAPP_WINDOW_TEMPLATE_LANGUAGE` | that template's language code | `en_US` |

use crate::meta::{EnvNames, GraphSettings, MetaConfigError, graph_config_builders};

/// The WhatsApp Cloud provider's configuration error (the Meta channels share it).
pub use crate::meta::MetaConfigError as WhatsAppConfigError;

/// The environment variables of the shared Graph settings.
const ENV: EnvNames = EnvNames {
    token: "WHATSAPP_ACCESS_TOKEN",
    app_secret: "WHATSAPP_APP_SECRET",
    verify_token: "WHATSAPP_VERIFY_TOKEN",
    api_base: "WHATSAPP_API_BASE",
    api_version: "WHATSAPP_API_VERSION",
    webhook_path: "WHATSAPP_WEBHOOK_PATH",
};

/// The WhatsApp Cloud provider's settings.
#[derive(Clone, Debug)]
pub struct WhatsAppConfig {
    pub(crate) graph: GraphSettings,
    pub(crate) phone_number_id: String,
    pub(crate) window_template: Option<WindowTemplate>,
}

/// The approved template a send outside the 24-hour customer-service window goes out as
/// ([`WhatsAppConfig::window_template`]): the message's text (its caption for media) is its one
/// body parameter, `{{1}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowTemplate {
    /// The template's name.
    pub name: String,
    /// Its language code (`en_US`).
    pub language: String,
}

impl WhatsAppConfig {
    /// Settings with the required credentials and the defaults.
    pub fn new(
        access_token: impl Into<String>,
        phone_number_id: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
    ) -> Self {
        Self {
            graph: GraphSettings::new(access_token, app_secret, verify_token, "/whatsapp"),
            phone_number_id: phone_number_id.into(),
            window_template: None,
        }
    }

    crate::settings::from_env_fn!(WhatsAppConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, WhatsAppConfigError> {
        let get = crate::settings::trimmed(get);
        let graph = GraphSettings::from_lookup(&get, &ENV, "/whatsapp")?;
        let phone_number_id = get("WHATSAPP_PHONE_NUMBER_ID")
            .ok_or(MetaConfigError::MissingEnv("WHATSAPP_PHONE_NUMBER_ID"))?;
        if !phone_number_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MetaConfigError::Invalid {
                setting: "WHATSAPP_PHONE_NUMBER_ID",
                reason: "must be the numeric phone number id".to_owned(),
            });
        }
        let mut cfg = Self {
            graph,
            phone_number_id,
            window_template: None,
        };
        if let Some(name) = get("WHATSAPP_WINDOW_TEMPLATE") {
            let language =
                get("WHATSAPP_WINDOW_TEMPLATE_LANGUAGE").unwrap_or_else(|| "en_US".to_owned());
            cfg = cfg.window_template(name, language);
        }
        Ok(cfg)
    }

    /// Sends outside the 24-hour customer-service window (the chat wrote more than 24 h ago,
    /// or Meta answers 131047) go out as this approved template, with the message's text as
    /// its one body parameter. Without it, such a send fails with
    /// `ProviderError::OutsideSessionWindow` (final: dead-lettered, not retried).
    pub fn window_template(mut self, name: impl Into<String>, language: impl Into<String>) -> Self {
        self.window_template = Some(WindowTemplate {
            name: name.into(),
            language: language.into(),
        });
        self
    }
}

graph_config_builders!([] WhatsAppConfig, "/whatsapp");

impl crate::meta::MetaConfig for WhatsAppConfig {
    fn graph(&self) -> &GraphSettings {
        &self.graph
    }
}
