//! Opening the store a URL names, read-write, with the journals of one bot's scope.
//!
//! | URL | store |
//! | --- | --- |
//! | `sqlite:PATH`, `sqlite://PATH` or a plain path | the SQLite file (which must exist: the CLI never creates one) |
//! | `postgres://…`, `postgresql://…` | a PostgreSQL database (`--prefix` is the table prefix) |
//! | `redis://…`, `rediss://…` | a Redis server (`--prefix` is the key prefix) |
//!
//! Every failure is a [`CliError`] that names the URL (its password masked) and why: an
//! unknown scheme, a missing file, a server that refused the connection.

use std::path::PathBuf;
use std::sync::Arc;

use botmesh_durability::{DurabilityConfig, KvDurability, Scope, Store};

use crate::operating::cli::CliError;

/// The store behind a URL and the journals of the scope the CLI acts on.
pub(crate) struct Target {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) journals: KvDurability,
}

/// Which backend a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
    Redis(String),
}

/// Reads the scheme of `url`.
pub(crate) fn parse(url: &str) -> Result<Backend, CliError> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        return Ok(Backend::Sqlite(PathBuf::from(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Backend::Postgres(url.to_owned()));
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        return Ok(Backend::Redis(url.to_owned()));
    }
    match url.split_once("://") {
        Some((scheme, _)) => Err(CliError::UnknownScheme {
            url: masked(url),
            scheme: scheme.to_owned(),
        }),
        None => Ok(Backend::Sqlite(PathBuf::from(url))),
    }
}

/// `url` with the password of its user info replaced by `***`.
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// Opens the store of `url` and the journals of `scope` in it.
pub(crate) async fn open(
    url: &str,
    prefix: Option<&str>,
    scope: Scope,
) -> Result<Target, CliError> {
    let store: Arc<dyn Store> = match parse(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(path) => open_sqlite(path).await?,
        #[cfg(feature = "postgres")]
        Backend::Postgres(url) => open_postgres(&url, prefix).await?,
        #[cfg(feature = "redis")]
        Backend::Redis(url) => open_redis(&url, prefix).await?,
        #[cfg(not(feature = "sqlite"))]
        Backend::Sqlite(_) => return Err(not_built("SQLite", "sqlite")),
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres(_) => return Err(not_built("PostgreSQL", "postgres")),
        #[cfg(not(feature = "redis"))]
        Backend::Redis(_) => return Err(not_built("Redis", "redis")),
    };
    let kv = store
        .journal_backend()
        .ok_or_else(|| CliError::NoJournals { url: masked(url) })?;
    kv.open().await.map_err(|e| CliError::Connect {
        url: masked(url),
        reason: e.to_string(),
    })?;
    let journals = KvDurability::builder(kv, scope)
        .config(DurabilityConfig::default())
        .build()?;
    Ok(Target { store, journals })
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(path: PathBuf) -> Result<Arc<dyn Store>, CliError> {
    if !path.is_file() {
        return Err(CliError::FileNotFound { path });
    }
    let store = botmesh_durability::SqliteStore::connect(&path)
        .await
        .map_err(|e| CliError::Connect {
            url: format!("sqlite:{}", path.display()),
            reason: e.to_string(),
        })?;
    Ok(Arc::new(store))
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str, prefix: Option<&str>) -> Result<Arc<dyn Store>, CliError> {
    let config = botmesh_durability::backends::postgres::PostgresConfig::new()
        .connect_timeout(std::time::Duration::from_secs(5));
    let config = prefix.into_iter().fold(config, |c, p| c.table_prefix(p));
    connected(
        url,
        botmesh_durability::PostgresStore::connect_with(url, config).await,
    )
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str, prefix: Option<&str>) -> Result<Arc<dyn Store>, CliError> {
    let config = botmesh_durability::backends::redis::RedisConfig::new();
    let config = prefix.into_iter().fold(config, |c, p| c.prefix(p));
    connected(
        url,
        botmesh_durability::RedisStore::open_with(url, config).await,
    )
}

/// The store a server backend opened, or [`CliError::Connect`] naming `url` and why.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn connected<S: Store + 'static, E: std::error::Error>(
    url: &str,
    opened: Result<S, E>,
) -> Result<Arc<dyn Store>, CliError> {
    match opened {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(CliError::Connect {
            url: masked(url),
            reason: error_chain(&e),
        }),
    }
}

/// The error of a backend this binary was built without.
#[cfg(not(all(feature = "sqlite", feature = "postgres", feature = "redis")))]
fn not_built(backend: &'static str, feature: &'static str) -> CliError {
    CliError::NotBuilt { backend, feature }
}

/// An error and its sources on one line (`connecting: Connection refused (os error 111)`).
#[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_name_their_backend() {
        assert_eq!(
            parse("sqlite:/tmp/b.db").ok(),
            Some(Backend::Sqlite("/tmp/b.db".into()))
        );
        assert_eq!(
            parse("sqlite:///tmp/b.db").ok(),
            Some(Backend::Sqlite("/tmp/b.db".into()))
        );
        assert_eq!(parse("bot.db").ok(), Some(Backend::Sqlite("bot.db".into())));
        assert!(matches!(parse("postgres://h/db"), Ok(Backend::Postgres(_))));
        assert!(matches!(parse("redis://h:6379/"), Ok(Backend::Redis(_))));
        let err = parse("mysql://root:hunter2@h/db")
            .err()
            .map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("unknown store URL scheme `mysql`"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(masked("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(masked("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(masked("bot.db"), "bot.db");
    }
}
