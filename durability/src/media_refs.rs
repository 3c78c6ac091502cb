//! The stored shape of a journaled media reference.
//!
//! The inbox never stores a message's media bytes, only a serializable, versioned reference
//! that the provider produced (`serialize_media_ref` → `{ v, data }`) and the name of that
//! provider. On replay the runtime hands the stored value back to the provider, which validates
//! it and rebuilds its live reference. This module only holds the shape and the provider check:
//! it has no provider logic, never interprets `data`, and `data` must never hold credentials.
//!
//! | on replay | outcome (runtime's `MediaUnavailable` reason) |
//! | --- | --- |
//! | no stored reference (`media_refs: false`, view-once, old record) | `not-durable` |
//! | stored by another provider ([`StoredMediaRef::check_provider`]) | `provider-mismatch` |
//! | the provider refuses `{ v, data }` | `rehydrate-failed` |

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A media reference as journaled with an inbound record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMediaRef {
    /// The provider that wrote it (`telegram`, `whatsapp-cloud`, …).
    pub provider: String,
    /// The provider's format version of `data`.
    pub v: u32,
    /// The provider's serialized reference (opaque here).
    pub data: Value,
}

/// A stored media reference read back by a provider other than the one that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("media reference written by provider `{stored}` cannot be read by `{reader}`")]
pub struct ProviderMismatch {
    /// The provider that wrote the reference.
    pub stored: String,
    /// The provider reading it.
    pub reader: String,
}

impl StoredMediaRef {
    /// A reference written by `provider`.
    pub fn new(provider: impl Into<String>, v: u32, data: Value) -> Self {
        StoredMediaRef {
            provider: provider.into(),
            v,
            data,
        }
    }

    /// The `{ v, data }` value the provider's `rehydrate_media_ref` receives, if `reader` is the
    /// provider that wrote it.
    pub fn check_provider(&self, reader: &str) -> Result<Value, ProviderMismatch> {
        if self.provider == reader {
            Ok(serde_json::json!({ "v": self.v, "data": self.data }))
        } else {
            Err(ProviderMismatch {
                stored: self.provider.clone(),
                reader: reader.to_owned(),
            })
        }
    }
}
