//! The default lease owner id of a bot whose durability options name none.
//!
//! A restarted bot reclaims the leases its earlier run held at once only when it runs under the
//! same instance id; a second live process under the same id would take the first one's leases.
//! So the id must be stable across restarts and unique among live processes:
//!
//! | backend | default id | a restart |
//! | --- | --- | --- |
//! | SQLite file | `<host>/<bot>/<connection>`, or `…/<n>` when `n` processes already run that bot on that file | reclaims at once |
//! | file, memory (one process by construction) | `<host>/<bot>/<connection>` (the journals' own default) | reclaims at once |
//! | Postgres, Redis (several hosts) | the journals' default, with a per-run suffix | waits for the leases to expire |
//!
//! Uniqueness on a SQLite file comes from an exclusive lock (`flock`) on a small file beside it,
//! one per slot, held while the bot lives: the kernel releases it when the process dies, so the
//! next run finds slot 0 free again. When no lock can be taken (a read-only directory) the
//! journals' default applies. This module does not decide lease semantics; `leases` does.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use botmesh_durability::DurableKv;

use crate::config::BotConfig;

/// How many processes of one bot on one SQLite file get a stable id; any further one gets a
/// per-run id.
const SLOTS: u32 = 16;

/// A default instance id and the lock that keeps it unique while the bot lives.
pub(crate) struct DefaultId {
    pub(crate) id: String,
    /// Held while the bot lives: dropping it releases the slot.
    pub(crate) lock: File,
}

/// The default id for `bot` on `kv`, or `None` to leave the choice to the journals.
pub(crate) fn default_id(bot: &BotConfig, kv: &dyn DurableKv) -> Option<DefaultId> {
    let path = sqlite_path(kv)?;
    let base =
        botmesh_durability::leases::InstanceId::default_for(&bot.bot_id, &bot.connection_id, false);
    let tag = fnv1a(format!("{}\n{base}", path.display()).as_bytes());
    for slot in 0..SLOTS {
        let lock_path = lock_path(&path, tag, slot);
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(path = %lock_path.display(), error = %e, "no instance lock: a per-run instance id");
                return None;
            }
        };
        if file.try_lock().is_ok() {
            let id = if slot == 0 {
                base
            } else {
                format!("{base}/{slot}")
            };
            return Some(DefaultId { id, lock: file });
        }
    }
    None
}

#[cfg(feature = "sqlite")]
fn sqlite_path(kv: &dyn DurableKv) -> Option<PathBuf> {
    kv.as_any()?
        .downcast_ref::<botmesh_durability::SqliteDurableKv>()
        .map(|kv| kv.store().path().to_owned())
        .filter(|p| p.as_os_str() != ":memory:")
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_path(_kv: &dyn DurableKv) -> Option<PathBuf> {
    None
}

/// `<db>.instance-<tag>.<slot>.lock`, beside the database: whoever shares the file shares
/// its directory.
fn lock_path(db: &Path, tag: u64, slot: u32) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_owned();
    name.push(format!(".instance-{:08x}.{slot}.lock", tag as u32));
    db.with_file_name(name)
}

/// FNV-1a: a hash that is the same in every run and every build.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_files_sit_beside_the_database() {
        let p = lock_path(Path::new("data/shop.db"), 0xdead_beef, 2);
        assert_eq!(p, PathBuf::from("data/shop.db.instance-deadbeef.2.lock"));
        assert_eq!(fnv1a(b"a"), fnv1a(b"a"));
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
