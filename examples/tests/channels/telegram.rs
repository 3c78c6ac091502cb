//! The Telegram channel of the crash harness: the fake Bot API (`providers/tests/fakes/`),
//! updates handed out by `getUpdates` (long polling) or POSTed to the shop's webhook.

use serde_json::json;

use super::{Channel, FakeApi, Fault, Listen, Posting, post_until_accepted};
use crate::fakes::telegram::{FakeTelegram, updates};

const TOKEN: &str = "4242:crash-token";
const SECRET: &str = "crash-secret";

/// Telegram; updates by `getUpdates` (`webhook: false`) or POSTed to the shop's webhook.
pub(crate) struct Telegram {
    fake: FakeTelegram,
    webhook: bool,
}

impl Telegram {
    pub(crate) async fn start(webhook: bool) -> Self {
        Self {
            fake: FakeTelegram::start(TOKEN).await,
            webhook,
        }
    }

    fn user_id(user: u32) -> i64 {
        1000 + i64::from(user)
    }
}

impl FakeApi for FakeTelegram {
    fn check(&self) {
        FakeTelegram::check(self);
    }
    fn delivered(&self, chat: &str) -> Vec<String> {
        self.delivered_to(chat.parse().expect("a Telegram chat id"))
    }
    fn send_calls(&self) -> usize {
        self.calls("sendMessage").len()
    }
}

impl Channel for Telegram {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn env(&self, listen: &str) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TELEGRAM_BOT_TOKEN", TOKEN.to_owned()),
            // Each shop calls through a base URL of its own: the fake tells pollers apart.
            (
                "TELEGRAM_API_BASE",
                self.fake.base_url_for(&listen.replace(['.', ':'], "-")),
            ),
            ("TELEGRAM_POLL_TIMEOUT_SECS", "1".to_owned()),
        ];
        if self.webhook {
            env.push(("TELEGRAM_WEBHOOK_SECRET", SECRET.to_owned()));
            env.push(("TELEGRAM_WEBHOOK_PATH", "/telegram".to_owned()));
        }
        env
    }

    fn chat(&self, user: u32) -> String {
        Self::user_id(user).to_string()
    }

    fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
        let message_id = i64::try_from(id).expect("a message id");
        let update = updates::text(Self::user_id(user), message_id, text);
        if !self.webhook {
            self.fake.push_update(update);
            return None;
        }
        let mut update = update;
        update["update_id"] = json!(100_000_000 + message_id);
        let listen = listen.clone();
        Some(post_until_accepted(
            format!("update {message_id}"),
            move |client| {
                client
                    .post(format!("http://{}/telegram", listen.pick()))
                    .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
                    .json(&update)
            },
        ))
    }

    fn fake(&self) -> &dyn FakeApi {
        &self.fake
    }

    fn poll_overlaps(&self) -> Option<Vec<(std::time::Instant, String, String)>> {
        (!self.webhook).then(|| self.fake.poll_overlaps())
    }

    fn fail_next_send(&self, fault: Fault) {
        match fault {
            Fault::ServerError => self.fake.fail_next(
                "sendMessage",
                502,
                json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
            ),
            Fault::RateLimited => self.fake.fail_next(
                "sendMessage",
                429,
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
            ),
        }
    }
}
