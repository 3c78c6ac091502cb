//! The server backends of the runtime's multi-replica tests: a Postgres or Redis KV (or an
//! opener of a store with its KV, per replica) under a fresh prefix, from the URL in `BOTMESH_TEST_POSTGRES_URL` or `BOTMESH_TEST_REDIS_URL`.
//! Without it the test is skipped and says so, except under `CI=true`, where the server must
//! be there.

// Not every opener has a suite that uses it.
#![allow(dead_code)]

use std::sync::Arc;

use botmesh::durability::DurableKv;

/// The server's URL from `var`; `None` (printed as SKIPPED) without it.
fn server(var: &str) -> Option<String> {
    let url = std::env::var(var).ok().filter(|u| !u.is_empty());
    if url.is_none() {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI needs {var}");
        #[allow(clippy::print_stderr)] // the skip must be visible in `cargo test` output
        {
            eprintln!("SKIPPED: {var} is not set");
        }
    }
    url
}

/// A Postgres KV whose tables start with `<name>_<random>_`.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_kv(name: &str) -> Option<Arc<dyn DurableKv>> {
    use botmesh::durability::backends::postgres::PostgresConfig;
    let url = server("BOTMESH_TEST_POSTGRES_URL")?;
    let config = PostgresConfig::new().table_prefix(format!("{name}_{:08x}_", fastrand::u32(..)));
    let kv = botmesh::durability::PostgresKv::new_with(&url, config).expect("postgres kv");
    Some(Arc::new(kv))
}

/// A Redis KV whose keys start with `<name>-<random>:`.
#[cfg(feature = "redis")]
pub(crate) async fn redis_kv(name: &str) -> Option<Arc<dyn DurableKv>> {
    use botmesh::durability::backends::redis::RedisConfig;
    let url = server("BOTMESH_TEST_REDIS_URL")?;
    let config = RedisConfig::new().prefix(format!("{name}-{:08x}:", fastrand::u32(..)));
    let kv = botmesh::durability::RedisKv::open_with(&url, config)
        .await
        .expect("redis kv");
    Some(Arc::new(kv))
}

/// What a replica opens: the shared store and journals.
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) type Shared = (Arc<dyn botmesh::durability::Store>, Arc<dyn DurableKv>);

/// An opener (called once per replica, in the replica's runtime) of a Postgres store and its
/// journals' KV on the same database, whose tables start with `<name>_<random>_`.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_shared(
    name: &str,
) -> Option<impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Shared> + Send>> + Clone>
{
    use botmesh::durability::PostgresStore;
    use botmesh::durability::backends::postgres::PostgresConfig;
    let url = server("BOTMESH_TEST_POSTGRES_URL")?;
    let prefix = format!("{name}_{:08x}_", fastrand::u32(..));
    Some(move || {
        let (url, prefix) = (url.clone(), prefix.clone());
        Box::pin(async move {
            let store =
                PostgresStore::connect_with(&url, PostgresConfig::new().table_prefix(prefix))
                    .await
                    .expect("postgres store");
            let kv: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
            (Arc::new(store) as Arc<dyn botmesh::durability::Store>, kv)
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = Shared> + Send>>
    })
}

/// An opener (called once per replica, in the replica's runtime) of a Redis store and KV whose
/// keys start with `<name>-<random>:`.
#[cfg(feature = "redis")]
pub(crate) fn redis_shared(
    name: &str,
) -> Option<impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Shared> + Send>> + Clone>
{
    use botmesh::durability::backends::redis::RedisConfig;
    use botmesh::durability::{RedisKv, RedisStore};
    let url = server("BOTMESH_TEST_REDIS_URL")?;
    let config = RedisConfig::new().prefix(format!("{name}-{:08x}:", fastrand::u32(..)));
    Some(move || {
        let (url, config) = (url.clone(), config.clone());
        Box::pin(async move {
            let kv: Arc<dyn DurableKv> = Arc::new(
                RedisKv::open_with(&url, config.clone())
                    .await
                    .expect("redis kv"),
            );
            let store = RedisStore::open_with(&url, config)
                .await
                .expect("redis store");
            (Arc::new(store) as Arc<dyn botmesh::durability::Store>, kv)
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = Shared> + Send>>
    })
}
