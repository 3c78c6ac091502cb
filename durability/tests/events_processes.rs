//! A `SharedFileEventJournal` shared by real processes (this test binary run again as one
//! named test, see `support::spawn_child`):
//!
//! | case | expected |
//! | --- | --- |
//! | three processes claiming the same 60 events | every event claimed and completed exactly once |
//! | a claim in another process after the lease ran out | a higher token there; this process's `complete` is `Fenced` and changes nothing |
//! | a process SIGKILLed while it holds `<file>.mutex` | the next operation breaks the mutex at once (with a stale-lock time of an hour) |
//! | a holder that is alive and heartbeating | waited for, well past the stale-lock time |
//! | the same holder stopped (SIGSTOP: its heartbeat stops too) | its mutex broken once the stale-lock time passed |
#![cfg(all(feature = "testing", feature = "file", unix))]
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use botmesh_durability::events::{
    ClaimRequest, EventJournalError, EventQuery, EventStatus, NewEvent, SharedFileEventJournal,
    SharedFileOptions,
};
use serde_json::json;

const CLAIMER_ENV: &str = "BOTMESH_EVENTS_CLAIMER_PATH";
const HOLDER_ENV: &str = "BOTMESH_EVENTS_HOLDER_PATH";
const MARK: &str = "BOTMESH-EVENTS-CHILD:";

/// The shared journal at `path`, with the default options.
async fn open(path: &Path) -> SharedFileEventJournal {
    SharedFileEventJournal::open(path, SharedFileOptions::new())
        .await
        .unwrap()
}

fn mutex_of(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.mutex", path.display()))
}

/// The claimer child: claims events of channel `work` one at a time and completes each until
/// none is left; reports `{"claimed": {id: token}}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_claims_until_none_is_left() {
    let Some(path) = std::env::var_os(CLAIMER_ENV) else {
        return;
    };
    let journal = SharedFileEventJournal::open(PathBuf::from(path), SharedFileOptions::new())
        .await
        .unwrap();
    let request = ClaimRequest::new(format!("pid-{}", std::process::id()))
        .channel("work")
        .limit(1);
    let mut claimed = BTreeMap::new();
    loop {
        let batch = journal.claim(&request).await.unwrap();
        let Some(event) = batch.into_iter().next() else {
            break;
        };
        journal
            .complete(&event.record.id, event.token)
            .await
            .unwrap();
        claimed.insert(event.record.id, event.token);
    }
    journal.close().await;
    println!("{MARK}{}", json!({ "claimed": claimed }));
}

/// The holder child: takes the journal's mutex (its heartbeat every 50 ms) and holds it
/// until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_holds_the_mutex() {
    let Some(path) = std::env::var_os(HOLDER_ENV) else {
        return;
    };
    let options = SharedFileOptions::new().heartbeat(Duration::from_millis(50));
    let journal = SharedFileEventJournal::open(PathBuf::from(path), options)
        .await
        .unwrap();
    let _held = journal.storage().hold_mutex().await.unwrap();
    println!("{MARK}held");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

fn claimed_ids(child: Child) -> BTreeMap<String, u64> {
    let report = support::child_report(child, MARK);
    serde_json::from_value(report["claimed"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_claim_each_event_exactly_once() {
    let (_dir, path) = support::fresh("events.json");
    let journal = open(&path).await;
    for i in 0..60 {
        let event = NewEvent::new("job", json!(i))
            .id(format!("job-{i:02}"))
            .channel("work");
        journal.append(event).await.unwrap();
    }
    let children: Vec<Child> = (0..3)
        .map(|_| {
            support::spawn_child(
                "events_processes::child_claims_until_none_is_left",
                CLAIMER_ENV,
                &path,
            )
        })
        .collect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_child = Vec::new();
    for child in children {
        let claimed = claimed_ids(child);
        per_child.push(claimed.len());
        for (id, token) in claimed {
            assert_eq!(token, 1, "{id}: claimed once, so its first token");
            *seen.entry(id).or_default() += 1;
        }
    }
    println!("events claimed per process: {per_child:?}");
    assert_eq!(seen.len(), 60, "every event was claimed");
    assert!(seen.values().all(|&n| n == 1), "no event twice: {seen:?}");
    let done = journal
        .list(&EventQuery::all().status(EventStatus::Done))
        .await
        .unwrap();
    assert_eq!(done.len(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_another_process_fences_the_old_holder() {
    let (_dir, path) = support::fresh("events.json");
    let journal = open(&path).await;
    journal
        .append(NewEvent::new("job", json!(1)).id("job").channel("work"))
        .await
        .unwrap();
    // A lease that has run out at once: the next claim anywhere takes the event.
    let mine = journal
        .claim(
            &ClaimRequest::new("here")
                .channel("work")
                .lease(Duration::ZERO),
        )
        .await
        .unwrap()
        .remove(0);
    let child = support::spawn_child(
        "events_processes::child_claims_until_none_is_left",
        CLAIMER_ENV,
        &path,
    );
    let theirs = claimed_ids(child);
    assert_eq!(theirs.get("job"), Some(&(mine.token + 1)));
    match journal.complete("job", mine.token).await {
        Err(EventJournalError::Fenced {
            token,
            current,
            status,
            ..
        }) => {
            assert_eq!((token, current), (mine.token, mine.token + 1));
            assert_eq!(status, EventStatus::Done, "completed by the other process");
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
}

/// Spawns a holder and waits until it holds the mutex.
fn holder(path: &Path) -> Child {
    let mut child =
        support::spawn_child("events_processes::child_holds_the_mutex", HOLDER_ENV, path);
    assert!(
        support::child_printed(&mut child, &format!("{MARK}held")),
        "the child did not take the mutex"
    );
    assert!(mutex_of(path).exists());
    child
}

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} failed");
}

/// A guard against a hang: a broken mutex logic would block forever.
const GUARD: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_mutex_is_broken_at_once() {
    let (_dir, path) = support::fresh("events.json");
    open(&path).await.close().await;
    let mut child = holder(&path);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        mutex_of(&path).exists(),
        "a SIGKILL leaves the mutex behind"
    );
    let options = SharedFileOptions::new().stale_lock(Duration::from_secs(3600));
    let journal = SharedFileEventJournal::open(&path, options).await.unwrap();
    let appended = tokio::time::timeout(GUARD, journal.append(NewEvent::new("after", json!(1))))
        .await
        .expect("the dead holder's mutex is broken at once");
    appended.unwrap();
    assert!(!mutex_of(&path).exists(), "released after the write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_mutex_is_broken_after_stale_lock() {
    let (_dir, path) = support::fresh("events.json");
    // 20 heartbeats of the holder: a loaded machine does not delay one that long.
    let stale = Duration::from_secs(1);
    let options = SharedFileOptions::new().stale_lock(stale);
    let journal = SharedFileEventJournal::open(&path, options).await.unwrap();
    let mut child = holder(&path);

    let waiting = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.append(NewEvent::new("waited", json!(1))).await })
    };
    // Two stale-lock times of a live, heartbeating holder: the writer still waits. Real time,
    // on purpose: the holder is another process, heartbeating on the wall clock.
    tokio::time::sleep(stale * 2).await;
    assert!(!waiting.is_finished(), "a live holder's mutex was broken");

    signal(&child, "-STOP");
    let stopped = Instant::now();
    let appended = tokio::time::timeout(GUARD, waiting)
        .await
        .expect("the stalled holder's mutex is broken");
    let waited = stopped.elapsed();
    appended.unwrap().unwrap();
    // Its last heartbeat was at most 50 ms before the stop.
    assert!(
        waited >= stale - Duration::from_millis(100),
        "broken after {waited:?}, before the stale-lock time"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let listed = journal.list(&EventQuery::all()).await.unwrap();
    assert_eq!(listed.len(), 1);
}
