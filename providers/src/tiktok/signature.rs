//! TikTok's webhook signature: `TikTok-Signature: t=<unix seconds>,s=<hex>`, where `s` is
//! HMAC-SHA256 with the app's client secret over `"<t>.<raw body>"`. A missing header is 401;
//! a wrong signature, or a timestamp further from now than the tolerance (a replay), 403.
//! Compared in constant time; the secret is never logged.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::webhook::{Refused, WebhookRequest};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "tiktok-signature";

const NAMED: &str = "TikTok-Signature";

/// The hex HMAC-SHA256 of `"<timestamp>.<body>"` with `secret`: the `s` of the header TikTok
/// sends (for tests and fakes that play TikTok).
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    mac(secret, timestamp, body)
        .map_or_else(String::new, |m| hex::encode(m.finalize().into_bytes()))
}

/// The HMAC of `"<timestamp>.<body>"` (`None` only if the key were refused: HMAC takes any).
fn mac(secret: &str, timestamp: i64, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

/// Checks `request`'s `TikTok-Signature` with `secret`, its timestamp within `tolerance_secs`
/// of `now_secs`.
pub(crate) fn check(
    secret: &str,
    tolerance_secs: i64,
    now_secs: i64,
    request: &WebhookRequest,
) -> Result<(), Refused> {
    let header = request
        .header(SIGNATURE_HEADER)
        .ok_or(Refused::MissingSignature(NAMED))?;
    let mut timestamp = None;
    let mut given = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = t.trim().parse::<i64>().ok(),
            Some(("s", s)) => given = hex::decode(s.trim()).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(given)) = (timestamp, given) else {
        return Err(Refused::BadSignature(NAMED));
    };
    if secret.is_empty() || (now_secs - t).abs() > tolerance_secs {
        return Err(Refused::BadSignature(NAMED));
    }
    mac(secret, t, &request.body)
        .is_some_and(|m| m.verify_slice(&given).is_ok())
        .then_some(())
        .ok_or(Refused::BadSignature(NAMED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, Uri};

    fn request(header: &str, body: &'static [u8]) -> WebhookRequest {
        let mut headers = HeaderMap::new();
        headers.insert(
            SIGNATURE_HEADER,
            HeaderValue::from_str(header).expect("header"),
        );
        WebhookRequest {
            uri: Uri::from_static("/tiktok"),
            headers,
            body: body.into(),
        }
    }

    #[test]
    fn signatures_and_timestamps() {
        let s = signature("secret", 1000, b"{}");
        assert!(
            check(
                "secret",
                300,
                1100,
                &request(&format!("t=1000,s={s}"), b"{}")
            )
            .is_ok()
        );
        let refused = [
            (format!("t=1000,s={s}"), b"{ }" as &[u8], 1100),
            (format!("t=1000,s={s}"), b"{}", 1400),
            (format!("t=1001,s={s}"), b"{}", 1100),
            ("t=1000".to_owned(), b"{}", 1100),
        ];
        for (header, body, now) in refused {
            let body: &'static [u8] = Box::leak(body.to_vec().into_boxed_slice());
            assert_eq!(
                check("secret", 300, now, &request(&header, body)),
                Err(Refused::BadSignature(NAMED)),
                "{header}"
            );
        }
        assert!(check("", 300, 1100, &request(&format!("t=1000,s={s}"), b"{}")).is_err());
    }
}
