//! The server backends of the runtime's multi-replica tests: a Postgres or Redis KV under a
//! fresh prefix, from the URL in `BOTMESH_TEST_POSTGRES_URL` or `BOTMESH_TEST_REDIS_URL`.
//! Without it the test is skipped and says so, except under `CI=true`, where the server must
//! be there.

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
