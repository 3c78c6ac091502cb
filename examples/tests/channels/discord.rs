//! The Discord channel of the crash harness: the fake Discord (`providers/tests/fakes/`),
//! users' messages dispatched over its gateway, the shop's replies created through its REST
//! API, which enforces nonces. The shop keeps its gateway session in a file, so a restarted
//! shop resumes it and gets what users wrote while it was down.

use serde_json::json;

use super::{Channel, FakeApi, Fault, Listen, Posting};
use crate::fakes::discord::FakeDiscord;

const TOKEN: &str = "discord-crash-token";

/// Discord; messages over the gateway.
pub(crate) struct Discord {
    fake: FakeDiscord,
    /// Where the shop keeps its gateway session (the same file across its restarts).
    dir: tempfile::TempDir,
}

impl Discord {
    pub(crate) async fn start() -> Self {
        Self {
            fake: FakeDiscord::start(TOKEN).await,
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }
}

impl Channel for Discord {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
        vec![
            ("DISCORD_BOT_TOKEN", TOKEN.to_owned()),
            ("DISCORD_API_BASE", self.fake.api_base()),
            ("DISCORD_GATEWAY_URL", self.fake.gateway_url()),
            (
                "DISCORD_SESSION_FILE",
                self.dir.path().join("session.json").display().to_string(),
            ),
        ]
    }

    fn chat(&self, user: u32) -> String {
        format!("50000000000000{user:04}")
    }

    fn write(&self, user: u32, id: u64, text: &str, _listen: &Listen) -> Posting {
        let author = format!("40000000000000{user:04}");
        let message = format!("6{id:018}");
        self.fake
            .user_message(&self.chat(user), &author, &message, text);
        None
    }

    fn fake(&self) -> &dyn FakeApi {
        &self.fake
    }

    fn fail_next_send(&self, fault: Fault) {
        match fault {
            Fault::ServerError => self
                .fake
                .fail_next(502, json!({"message": "502: Bad Gateway", "code": 0})),
            Fault::RateLimited => self.fake.fail_next(
                429,
                json!({"message": "You are being rate limited.", "retry_after": 1.0, "global": false}),
            ),
        }
    }

    fn resends_deduplicated(&self) -> bool {
        true
    }
}
