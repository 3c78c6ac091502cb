//! Helpers the backend test files share: a file in a new temporary folder, a fresh SQLite
//! store in one, many concurrent compare-and-sets, and child processes (the test binary run
//! again as one named test, which prints a report after a mark).
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use botmesh_durability::kv::{DurableKv, Entry, Scope};

/// A new temporary folder and the path of `file` in it (the folder must outlive the file).
pub(crate) fn fresh(file: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    (dir, path)
}

/// The path `file` under a regular file (`plain-file`: a folder that cannot be), in a new
/// temporary folder.
pub(crate) fn under_a_regular_file(file: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let regular = dir.path().join("plain-file");
    std::fs::write(&regular, "not a folder").unwrap();
    (dir, regular.join(file))
}

/// The append log beside the file at `path`.
pub(crate) fn log_of(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.log", path.display()))
}

/// A SQLite store on `file` inside a new temporary folder (which must outlive the store).
#[cfg(feature = "sqlite")]
pub(crate) async fn sqlite_store(
    file: &str,
) -> (botmesh_durability::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = botmesh_durability::SqliteStore::connect(dir.path().join(file))
        .await
        .unwrap();
    (store, dir)
}

/// Creates the keys `k0`..`k{n-1}` of `scope`, each with `entry`, from `n` concurrent
/// tasks; checks every create succeeded.
pub(crate) async fn create_concurrently<K>(kv: &K, scope: &Scope, n: usize, entry: Entry)
where
    K: DurableKv + Clone + 'static,
{
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (kv, scope, entry) = (kv.clone(), scope.clone(), entry.clone());
            tokio::spawn(async move { kv.cas(&scope, &format!("k{i}"), None, entry).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().unwrap().is_ok());
    }
}

/// Runs this test binary again as a child process running only `test` (its path in the
/// binary, `file::name`), with the variable `var` set to `path` (what tells that test to play
/// the child); its stdin, stdout and stderr are piped.
/// The path [`spawn_child`] handed this process in `var`; `None` when the test runs on its own.
pub(crate) fn child_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from)
}

pub(crate) fn spawn_child(test: &str, var: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` to end; checks it succeeded and returns the JSON report it printed
/// after `mark`.
pub(crate) fn child_report(child: Child, mark: &str) -> serde_json::Value {
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|line| Some(&line[line.find(mark)? + mark.len()..]))
        .unwrap_or_else(|| panic!("child printed no report: {stdout}"));
    serde_json::from_str(line).unwrap()
}

/// Reads `child`'s stdout until a line holds `line`; whether one did before the output ended.
pub(crate) fn child_printed(child: &mut Child, line: &str) -> bool {
    let stdout = child.stdout.take().unwrap();
    BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains(line))
}

/// Checks that opening a file this process already holds was refused as `AlreadyOpen`.
#[cfg(feature = "file")]
pub(crate) fn assert_already_open<T>(opened: Result<T, botmesh_durability::file::FileError>) {
    match opened {
        Err(botmesh_durability::file::FileError::AlreadyOpen { .. }) => {}
        Err(other) => panic!("expected AlreadyOpen, got {other}"),
        Ok(_) => panic!("a file this process holds was opened again"),
    }
}
