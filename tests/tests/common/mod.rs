//! What the test files share: their use of the Postgres and Redis servers. A test that
//! disturbs a server (restarts it, kills its connections) has it alone; every other test on it
//! shares it, so the files of the one test binary never see each other's faults.

#[path = "../../../durability/tests/servers/lock.rs"]
mod lock;

pub(crate) use lock::Hold;
use lock::ServerLock;

static POSTGRES: ServerLock = ServerLock::new();
static REDIS: ServerLock = ServerLock::new();

/// The lock of the server whose URL is in `var`.
fn lock(var: &str) -> &'static ServerLock {
    match var {
        "BOTMESH_TEST_POSTGRES_URL" => &POSTGRES,
        "BOTMESH_TEST_REDIS_URL" => &REDIS,
        other => panic!("no test server is named by {other}"),
    }
}

/// The URL in `var` ([`botmesh_tests::server_url`]: `None` when the suite is skipped), with
/// this test's use of the server, shared with the other tests (waits while one has it alone).
pub(crate) fn server(var: &str) -> Option<(String, Hold)> {
    let url = botmesh_tests::server_url(var)?;
    Some((url, lock(var).shared()))
}

/// The URL in `var`, with the server for this test alone: waits until no other test uses it.
pub(crate) fn server_alone(var: &str) -> Option<(String, Hold)> {
    let url = botmesh_tests::server_url(var)?;
    Some((url, lock(var).alone()))
}
