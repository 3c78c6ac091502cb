//! The events journals beyond the conformance suite (which `backends.rs` runs on the
//! events-backed durability of both journals):
//!
//! | case | expected |
//! | --- | --- |
//! | append, list, claim, complete, fail, replay | the event's life as the `events::record` table says; a claim of a channel takes only its events, a claim without one only events without one |
//! | a claim after the lease ran out | a higher token; the old holder's `complete` and `heartbeat` are `Fenced` and change nothing |
//! | a second `FileEventJournal` open in this process | `AlreadyOpen` until the first is closed |
//! | a file a live `FileEventJournal` holds | the shared journal refuses it at open, and every operation once that journal took it later |
//! | a damaged log line followed by more lines (both journals) | `AppendLogCorrupt` (file, line, byte offset), the file left untouched |
//! | a torn last log line (both journals) | cut, the rest replayed |
//! | the shared journal's append log | compacted every `compact_every` lines: the snapshot holds the events, the log only its header |
//! | a crash between a compaction's snapshot and the log's cut | the log lines the snapshot holds are skipped, later appends follow them |
//! | `close()` of the shared journal | the operations already called finish, later ones are refused |
//!
//! Several processes sharing one file are in `events_processes.rs`.
#![cfg(all(feature = "testing", feature = "file"))]
#![allow(clippy::unwrap_used)]

use crate::support::{self, log_of};
use std::path::Path;
use std::time::Duration;

use botmesh_durability::clock::ManualClock;
use botmesh_durability::events::{
    ClaimRequest, EventJournalError, EventQuery, EventStatus, FileEventJournal, NewEvent,
    SharedFileError, SharedFileEventJournal, SharedFileOptions,
};
use botmesh_durability::file::FileError;
use botmesh_durability::{FileOptions, kv::KvError};
use serde_json::json;

/// The single-process journal at `path`, with the default options.
async fn file_journal(path: &Path) -> FileEventJournal {
    FileEventJournal::open(path, FileOptions::new())
        .await
        .unwrap()
}

async fn shared(path: &Path, clock: &ManualClock) -> SharedFileEventJournal {
    SharedFileEventJournal::open(path, SharedFileOptions::new().fsync(false))
        .await
        .unwrap()
        .with_clock(clock.clone())
}

#[tokio::test]
async fn an_event_lives_from_append_to_done_and_back_by_replay() {
    let (_dir, path) = support::fresh("events.json");
    let clock = ManualClock::new(1_000_000);
    let journal = shared(&path, &clock).await;
    let paid = journal
        .append(NewEvent::new("order.paid", json!({"order": 7})).id("paid-7"))
        .await
        .unwrap();
    assert_eq!(paid.status, EventStatus::Pending);
    let again = journal
        .append(NewEvent::new("order.paid", json!({"order": 8})).id("paid-7"))
        .await
        .unwrap();
    assert_eq!(again.payload, json!({"order": 7}), "an id appends once");
    clock.advance(Duration::from_millis(1));
    journal
        .append(NewEvent::new("mail.sent", json!(1)).channel("mail"))
        .await
        .unwrap();
    journal
        .append(NewEvent::new("late", json!(2)).delay(Duration::from_secs(60)))
        .await
        .unwrap();

    let claimed = journal.claim(&ClaimRequest::new("w1")).await.unwrap();
    let ids: Vec<_> = claimed.iter().map(|c| c.record.id.as_str()).collect();
    assert_eq!(
        ids,
        ["paid-7"],
        "no channel: only events without one, only due ones"
    );
    let token = claimed[0].token;
    let mail = journal
        .claim(&ClaimRequest::new("w1").channel("mail"))
        .await
        .unwrap();
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].record.event_type, "mail.sent");

    let failed = journal
        .fail(
            "paid-7",
            token,
            "card declined",
            Some(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(failed.status, EventStatus::Pending);
    assert_eq!(failed.last_error.as_deref(), Some("card declined"));
    assert!(
        journal
            .claim(&ClaimRequest::new("w1"))
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(Duration::from_secs(60));
    let claimed = journal.claim(&ClaimRequest::new("w2")).await.unwrap();
    assert_eq!(claimed.len(), 2, "the retry and the delayed event are due");
    for c in &claimed {
        assert!(c.token >= 1);
        journal.complete(&c.record.id, c.token).await.unwrap();
    }
    let done = journal
        .list(&EventQuery::all().status(EventStatus::Done))
        .await
        .unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(journal.get("paid-7").await.unwrap().unwrap().attempts, 2);

    let replayed = journal.replay("paid-7").await.unwrap();
    assert_eq!(replayed.status, EventStatus::Pending);
    assert!(matches!(
        journal.replay("paid-7").await,
        Err(EventJournalError::NotReplayable { .. })
    ));
    assert!(matches!(
        journal.replay("nope").await,
        Err(EventJournalError::NotFound { .. })
    ));
    let listed = journal.list(&EventQuery::all()).await.unwrap();
    assert_eq!(listed.len(), 3, "every event, in append time order");
    assert_eq!(listed[0].id, "paid-7");
}

#[tokio::test]
async fn a_stale_holder_is_fenced_after_another_claim() {
    let (_dir, path) = support::fresh("events.json");
    let clock = ManualClock::new(5_000);
    let journal = shared(&path, &clock).await;
    journal
        .append(NewEvent::new("job", json!(null)).id("job-1"))
        .await
        .unwrap();
    let lease = ClaimRequest::new("a").lease(Duration::from_secs(10));
    let first = journal.claim(&lease).await.unwrap().remove(0);
    assert!(journal.claim(&lease).await.unwrap().is_empty(), "held");
    clock.advance(Duration::from_secs(11));
    let second = journal
        .claim(&ClaimRequest::new("b"))
        .await
        .unwrap()
        .remove(0);
    assert!(second.token > first.token);
    for refused in [
        journal.complete("job-1", first.token).await,
        journal
            .heartbeat("job-1", first.token, Duration::from_secs(5))
            .await,
    ] {
        match refused {
            Err(EventJournalError::Fenced { token, current, .. }) => {
                assert_eq!((token, current), (first.token, second.token));
            }
            other => panic!("expected Fenced, got {other:?}"),
        }
    }
    let done = journal.complete("job-1", second.token).await.unwrap();
    assert_eq!(done.status, EventStatus::Done);
}

#[tokio::test]
async fn a_file_journal_is_opened_once_per_process() {
    let (_dir, path) = support::fresh("events.json");
    let journal = file_journal(&path).await;
    journal
        .append(NewEvent::new("kept", json!(1)).id("k"))
        .await
        .unwrap();
    support::assert_already_open(FileEventJournal::open(&path, FileOptions::new()).await);
    journal.close().await.unwrap();
    let reopened = file_journal(&path).await;
    assert!(reopened.get("k").await.unwrap().is_some());
    reopened.close().await.unwrap();
}

#[tokio::test]
async fn the_shared_journal_refuses_a_file_a_locked_file_journal_holds() {
    let (_dir, path) = support::fresh("events.json");
    let file = file_journal(&path).await;
    let err = SharedFileEventJournal::open(&path, SharedFileOptions::new())
        .await
        .unwrap_err();
    match &err {
        SharedFileError::HeldByFileJournal { pid, file, .. } => {
            assert_eq!(*pid, std::process::id());
            assert_eq!(file, &path);
        }
        other => panic!("expected HeldByFileJournal, got {other}"),
    }
    assert_eq!(err.code(), "HELD_BY_FILE_JOURNAL");
    file.close().await.unwrap();

    // Opened first, then the file journal takes the file: every shared operation refuses.
    let journal = SharedFileEventJournal::open(&path, SharedFileOptions::new())
        .await
        .unwrap();
    let file = file_journal(&path).await;
    let refused = journal.append(NewEvent::new("lost?", json!(1))).await;
    match refused {
        Err(EventJournalError::Storage {
            source: KvError::Unavailable { source, .. },
            ..
        }) => assert!(source.to_string().contains("FileEventJournal"), "{source}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    file.close().await.unwrap();
    journal
        .append(NewEvent::new("now", json!(1)))
        .await
        .unwrap();
}

/// Appends the events `e0` to `e3`.
async fn append_four<B: botmesh_durability::DurableKv>(
    journal: &botmesh_durability::events::EventJournal<B>,
) {
    for i in 0..4 {
        let event = NewEvent::new("e", json!(i)).id(format!("e{i}"));
        journal.append(event).await.unwrap();
    }
}

/// Four events appended through `open`, leaving a log of four lines behind (no compaction).
async fn leave_a_log(path: &Path, shared_journal: bool) {
    if shared_journal {
        let journal = SharedFileEventJournal::open(path, SharedFileOptions::new().append_log(true))
            .await
            .unwrap();
        append_four(&journal).await;
        journal.close().await;
    } else {
        let journal = FileEventJournal::open(path, FileOptions::new().append_log(true))
            .await
            .unwrap();
        append_four(&journal).await;
        // A crash: the log is not folded in.
        journal.storage().simulate_crash().await;
    }
}

/// A fresh journal file with a log of four lines left behind ([`leave_a_log`]): the
/// directory, the journal's path and the log's.
async fn with_a_log(
    shared_journal: bool,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let (dir, path) = support::fresh("events.json");
    leave_a_log(&path, shared_journal).await;
    let log = log_of(&path);
    (dir, path, log)
}

/// Where each line of `bytes` starts.
fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .filter(|&i| i < bytes.len()),
    );
    starts
}

fn corrupt_error(shared: Result<SharedFileEventJournal, SharedFileError>) -> FileError {
    match shared {
        Err(SharedFileError::File(e)) => e,
        Err(other) => panic!("expected a file error, got {other}"),
        Ok(_) => panic!("a corrupt log was opened"),
    }
}

#[tokio::test]
async fn a_bad_line_in_the_middle_is_refused_and_left_untouched() {
    for shared_journal in [true, false] {
        let (_dir, path, log) = with_a_log(shared_journal).await;
        let mut bytes = std::fs::read(&log).unwrap();
        let starts = line_starts(&bytes);
        assert_eq!(starts.len(), 5, "a header and four lines");
        let offset = starts[2];
        bytes[offset + 20] ^= 0x01;
        std::fs::write(&log, &bytes).unwrap();
        let snapshot = std::fs::read(&path).unwrap();
        let err = if shared_journal {
            corrupt_error(
                SharedFileEventJournal::open(&path, SharedFileOptions::new().append_log(true))
                    .await,
            )
        } else {
            FileEventJournal::open(&path, FileOptions::new().append_log(true))
                .await
                .unwrap_err()
        };
        let FileError::AppendLogCorrupt {
            file,
            line,
            byte_offset,
            ..
        } = &err
        else {
            panic!("expected AppendLogCorrupt, got {err}");
        };
        assert_eq!((file, *line, *byte_offset), (&log, 3, offset as u64));
        assert_eq!(err.code(), "APPEND_LOG_CORRUPT");
        assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log is untouched");
        assert_eq!(std::fs::read(&path).unwrap(), snapshot, "the snapshot too");
    }
}

#[tokio::test]
async fn a_torn_last_line_is_cut_and_the_rest_replayed() {
    for shared_journal in [true, false] {
        let (_dir, path, log) = with_a_log(shared_journal).await;
        let bytes = std::fs::read(&log).unwrap();
        std::fs::write(&log, &bytes[..bytes.len() - 7]).unwrap();
        let ids: Vec<String> = if shared_journal {
            let journal =
                SharedFileEventJournal::open(&path, SharedFileOptions::new().append_log(true))
                    .await
                    .unwrap();
            let listed = journal.list(&EventQuery::all()).await.unwrap();
            journal.close().await;
            listed.into_iter().map(|e| e.id).collect()
        } else {
            let journal = FileEventJournal::open(&path, FileOptions::new().append_log(true))
                .await
                .unwrap();
            let listed = journal.list(&EventQuery::all()).await.unwrap();
            journal.close().await.unwrap();
            listed.into_iter().map(|e| e.id).collect()
        };
        assert_eq!(
            ids,
            ["e0", "e1", "e2"],
            "the torn append is gone, the rest replayed"
        );
    }
}

#[tokio::test]
async fn the_shared_append_log_is_compacted() {
    let (_dir, path) = support::fresh("events.json");
    let options = SharedFileOptions::new().fsync(false).compact_every(3);
    let journal = SharedFileEventJournal::open(&path, options).await.unwrap();
    for i in 0..7 {
        journal
            .append(NewEvent::new("e", json!(i)).id(format!("e{i:02}")))
            .await
            .unwrap();
    }
    let log = std::fs::read(log_of(&path)).unwrap();
    assert_eq!(
        line_starts(&log).len(),
        2,
        "a header and the one line since the last compaction"
    );
    let snapshot = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
    assert!(
        snapshot.contains("\"e/e05\"") && !snapshot.contains("\"e/e06\""),
        "{snapshot}"
    );
    journal.close().await;
    let reopened = SharedFileEventJournal::open(&path, SharedFileOptions::new())
        .await
        .unwrap();
    assert_eq!(reopened.list(&EventQuery::all()).await.unwrap().len(), 7);
    assert!(
        !log_of(&path).exists() || {
            reopened
                .append(NewEvent::new("fold", json!(0)))
                .await
                .unwrap();
            !log_of(&path).exists()
        },
        "in snapshot mode the next write folds the leftover log in"
    );
}

#[tokio::test]
async fn close_lets_called_operations_finish_and_refuses_later_ones() {
    let (_dir, path) = support::fresh("events.json");
    let journal = SharedFileEventJournal::open(&path, SharedFileOptions::new().fsync(false))
        .await
        .unwrap();
    let (a, b, closed) = tokio::join!(
        journal.append(NewEvent::new("a", json!(1))),
        journal.append(NewEvent::new("b", json!(2))),
        journal.close(),
    );
    a.unwrap();
    b.unwrap();
    let () = closed;
    match journal.append(NewEvent::new("c", json!(3))).await {
        Err(EventJournalError::Storage {
            source: KvError::Closed,
            ..
        }) => {}
        other => panic!("expected a refusal after close, got {other:?}"),
    }
    let reopened = SharedFileEventJournal::open(&path, SharedFileOptions::new())
        .await
        .unwrap();
    assert_eq!(reopened.list(&EventQuery::all()).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_crash_between_compaction_and_the_logs_cut_is_harmless() {
    let (_dir, path) = support::fresh("events.json");
    let options = SharedFileOptions::new().fsync(false).compact_every(3);
    let journal = SharedFileEventJournal::open(&path, options.clone())
        .await
        .unwrap();
    for i in 0..2 {
        let event = NewEvent::new("e", json!(i)).id(format!("e{i}"));
        journal.append(event).await.unwrap();
    }
    let before_compaction = std::fs::read(log_of(&path)).unwrap();
    journal
        .append(NewEvent::new("e", json!(2)).id("e2"))
        .await
        .unwrap();
    // The snapshot holds all three; the log is put back as if its cut never happened.
    std::fs::write(log_of(&path), &before_compaction).unwrap();
    let listed = journal.list(&EventQuery::all()).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        ["e0", "e1", "e2"],
        "the lines in the snapshot are skipped"
    );
    journal
        .append(NewEvent::new("e", json!(3)).id("e3"))
        .await
        .unwrap();
    journal.close().await;
    let reopened = SharedFileEventJournal::open(&path, options).await.unwrap();
    assert_eq!(reopened.list(&EventQuery::all()).await.unwrap().len(), 4);
}
