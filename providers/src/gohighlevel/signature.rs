//! HighLevel's webhook signatures: [`WebhookKey`] (a public key HighLevel publishes, as PEM)
//! and the check of a request's signature over its raw body.
//!
//! | header | algorithm | key | since |
//! | --- | --- | --- | --- |
//! | `X-GHL-Signature` | Ed25519, base64 | HighLevel's Ed25519 public key | the current scheme |
//! | `X-WH-Signature` | RSA PKCS#1 v1.5 with SHA-256, base64 | HighLevel's RSA public key | legacy, deprecated by HighLevel on 1 July 2026 |
//!
//! A key's algorithm is read from the key itself (its `SubjectPublicKeyInfo`); each key checks
//! its own header only, so configuring the legacy RSA key never lets an unsigned-by-Ed25519
//! request through once the Ed25519 key is configured and the header is present. The
//! signatures are over the raw body as received (never a re-serialized form). It does not fetch
//! keys from HighLevel (they are configured), nor check a timestamp (the message id dedupes a
//! replay; see `FACTS.md`).

use aws_lc_rs::signature::{ED25519, ParsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

use crate::webhook::{Refused, WebhookRequest};

/// The current signature header (Ed25519).
pub const ED25519_HEADER: &str = "x-ghl-signature";

/// The legacy signature header (RSA-SHA256).
pub const RSA_HEADER: &str = "x-wh-signature";

/// What a missing signature is named in the 401.
const EITHER: &str = "X-GHL-Signature (or the legacy X-WH-Signature)";

/// A public key HighLevel signs its webhooks for. Cheap to clone.
#[derive(Clone)]
pub struct WebhookKey {
    key: std::sync::Arc<ParsedPublicKey>,
    rsa: bool,
}

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.rsa {
            "WebhookKey(RSA, X-WH-Signature)"
        } else {
            "WebhookKey(Ed25519, X-GHL-Signature)"
        })
    }
}

impl WebhookKey {
    /// Reads a PEM public key (`-----BEGIN PUBLIC KEY-----`, as HighLevel publishes it; a
    /// `\n` written as two characters, as in an environment variable, is taken as a line
    /// break) or its base64 DER alone; `Err` says why it is not an Ed25519 or RSA key.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        let pem = pem.replace("\\n", "\n");
        let body: String = pem
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = botmesh::codec::decode_base64(&body)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| "not a PEM public key (no base64 body)".to_owned())?;
        Self::from_der(&der)
    }

    /// The key from its DER form (`SubjectPublicKeyInfo`; a raw 32-byte Ed25519 key and a
    /// PKCS#1 `RSAPublicKey` are taken too).
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        if let Ok(key) = ParsedPublicKey::new(&ED25519, der) {
            return Ok(Self {
                key: std::sync::Arc::new(key),
                rsa: false,
            });
        }
        match ParsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, der) {
            Ok(key) => Ok(Self {
                key: std::sync::Arc::new(key),
                rsa: true,
            }),
            Err(e) => Err(format!("neither an Ed25519 nor an RSA public key: {e}")),
        }
    }

    /// The header this key checks.
    pub fn header(&self) -> &'static str {
        if self.rsa { RSA_HEADER } else { ED25519_HEADER }
    }

    /// Whether `signature` (base64) is this key's signature of `body`.
    pub fn verifies(&self, body: &[u8], signature: &str) -> bool {
        botmesh::codec::decode_base64(signature.trim())
            .is_some_and(|sig| self.key.verify_sig(body, &sig).is_ok())
    }
}

/// Checks `request` against `keys`: the first key whose header the request carries decides
/// (the Ed25519 key first when both are configured). No header of any key: 401; a signature
/// that does not verify: 403.
pub(crate) fn check(keys: &[WebhookKey], request: &WebhookRequest) -> Result<(), Refused> {
    let mut ordered: Vec<&WebhookKey> = keys.iter().collect();
    ordered.sort_by_key(|k| k.rsa);
    for key in ordered {
        if let Some(signature) = request.header(key.header()) {
            return if key.verifies(&request.body, signature) {
                Ok(())
            } else if key.rsa {
                Err(Refused::BadSignature("X-WH-Signature"))
            } else {
                Err(Refused::BadSignature("X-GHL-Signature"))
            };
        }
    }
    Err(Refused::MissingSignature(EITHER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};

    #[test]
    fn ed25519_keys_verify_their_own_signatures() {
        let pair = Ed25519KeyPair::generate().expect("key");
        let der = pair.public_key().as_ref().to_vec();
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\\n{}\\n-----END PUBLIC KEY-----",
            botmesh::codec::encode_base64(&der)
        );
        let key = WebhookKey::from_pem(&pem).expect("an Ed25519 key");
        assert_eq!(key.header(), ED25519_HEADER);
        let sig = botmesh::codec::encode_base64(pair.sign(b"{\"a\":1}").as_ref());
        assert!(key.verifies(b"{\"a\":1}", &sig));
        assert!(!key.verifies(b"{\"a\":2}", &sig));
        assert!(!key.verifies(b"{\"a\":1}", "not base64!"));
        assert!(WebhookKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END").is_err());
    }
}
