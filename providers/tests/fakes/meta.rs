//! What the fakes of Meta's channels share: signing a webhook body as Meta does.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Signs `body` with the app secret as Meta does (`X-Hub-Signature-256: sha256=<hex>`).
pub fn sign(app_secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()).expect("hmac key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Meta's subscription handshake on the webhook at `url`: `GET ?hub.mode=…&hub.verify_token=…
/// &hub.challenge=…` (no challenge when `None`); the status and the body.
pub async fn handshake(
    url: &str,
    mode: &str,
    token: &str,
    challenge: Option<&str>,
) -> (u16, String) {
    let mut query = vec![("hub.mode", mode), ("hub.verify_token", token)];
    query.extend(challenge.map(|c| ("hub.challenge", c)));
    let r = super::client()
        .get(url)
        .query(&query)
        .send()
        .await
        .expect("a handshake answer");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}
