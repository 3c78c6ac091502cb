//! Group reads: [`ReadGroup`] answers the point reads that concurrent chats make at the same
//! moment (a flow's checkpoint head before each message, a value) with one statement over an
//! array of keys, the way [`group`](super::group) commits their writes together.
//!
//! A point read costs the server and the client a round trip, a statement's parse-bind-execute
//! and a pooled connection, whatever it returns; under load those add up to more than the
//! writes, which already go in groups. Here a read is queued; while fewer than `leaders` groups
//! are in flight, the reader takes every read queued (up to [`MAX_GROUP`]) and runs them as one
//! statement (`WHERE key = ANY($1)`), then answers each. A lone read goes at once; the group
//! grows with the load.
//!
//! A read sees every write committed before it was queued (its group's statement starts after
//! that). When the task leading a group stops waiting (its future is dropped), the reads of its
//! group are queued again by their callers, so none is lost.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, oneshot};

use crate::store::StoreError;

/// The most reads one statement holds.
pub(super) const MAX_GROUP: usize = 256;

/// A group's failure (or one row's), answered to each read it concerns.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct GroupFailed(Arc<StoreError>);

/// A row of a group decoded, or why it could not be: a row that does not decode fails the
/// read of its own key only.
pub(super) type Decoded<T> = Result<T, Arc<StoreError>>;

/// The future of a group's statement: the rows found, by key, each decoded.
pub(super) type BoxedRead<'a, K, V> =
    Pin<Box<dyn Future<Output = Result<HashMap<K, Decoded<V>>, StoreError>> + Send + 'a>>;

/// A read's answer, its row decoded.
pub(super) fn decoded<T>(
    operation: &'static str,
    read: Result<Option<Decoded<T>>, StoreError>,
) -> Result<Option<T>, StoreError> {
    match read? {
        None => Ok(None),
        Some(Ok(value)) => Ok(Some(value)),
        Some(Err(e)) => Err(StoreError::Query {
            operation,
            source: Box::new(GroupFailed(e)),
        }),
    }
}

/// A read waiting for its group.
struct Pending<K, V> {
    key: K,
    answer: oneshot::Sender<Result<Option<V>, Arc<StoreError>>>,
}

/// The point reads of one kind (one statement); see the [module documentation](self).
pub(super) struct ReadGroup<K, V> {
    operation: &'static str,
    queue: Mutex<Vec<Pending<K, V>>>,
    leaders: Semaphore,
}

impl<K, V> std::fmt::Debug for ReadGroup<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGroup")
            .field("operation", &self.operation)
            .finish_non_exhaustive()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> ReadGroup<K, V> {
    /// Reads of `operation` (for errors), with at most `leaders` groups in flight.
    pub(super) fn new(operation: &'static str, leaders: usize) -> Self {
        ReadGroup {
            operation,
            queue: Mutex::new(Vec::new()),
            leaders: Semaphore::new(leaders.max(1)),
        }
    }

    /// Reads `key` with the reads queued at the same moment: `run` reads a group's keys (each
    /// once) and returns the values found.
    pub(super) async fn read<F, Fut>(&self, key: &K, run: F) -> Result<Option<V>, StoreError>
    where
        F: Fn(Vec<K>) -> Fut,
        Fut: Future<Output = Result<HashMap<K, V>, StoreError>>,
    {
        loop {
            let (answer, mut answered) = oneshot::channel();
            self.lock().push(Pending {
                key: key.clone(),
                answer,
            });
            let outcome = tokio::select! {
                biased;
                outcome = &mut answered => outcome,
                permit = self.leaders.acquire() => {
                    // The semaphore is never closed.
                    let _permit = permit.ok();
                    let group = self.take();
                    if !group.is_empty() {
                        self.run_group(group, &run).await;
                    }
                    // This read was in the group just run, or in another leader's.
                    drop(_permit);
                    answered.await
                }
            };
            match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(failed)) => {
                    return Err(StoreError::Query {
                        operation: self.operation,
                        source: Box::new(GroupFailed(failed)),
                    });
                }
                // The leader of its group stopped waiting: queued again.
                Err(_) => continue,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending<K, V>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to [`MAX_GROUP`] reads, oldest first.
    fn take(&self) -> Vec<Pending<K, V>> {
        let mut queue = self.lock();
        let n = queue.len().min(MAX_GROUP);
        queue.drain(..n).collect()
    }

    async fn run_group<F, Fut>(&self, group: Vec<Pending<K, V>>, run: &F)
    where
        F: Fn(Vec<K>) -> Fut,
        Fut: Future<Output = Result<HashMap<K, V>, StoreError>>,
    {
        let mut keys: Vec<K> = Vec::with_capacity(group.len());
        for p in &group {
            if !keys.contains(&p.key) {
                keys.push(p.key.clone());
            }
        }
        match run(keys).await {
            Ok(found) => {
                for p in group {
                    let _ = p.answer.send(Ok(found.get(&p.key).cloned()));
                }
            }
            Err(e) => {
                let failed = Arc::new(e);
                for p in group {
                    let _ = p.answer.send(Err(Arc::clone(&failed)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::sync::{mpsc, watch};

    /// How many reads wait in `group`'s queue.
    fn queued<K, V>(group: &ReadGroup<K, V>) -> usize {
        group.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Lets the other tasks of the test's (one-thread) runtime run until `group` queues `n`
    /// reads.
    async fn until_queued<K, V>(group: &ReadGroup<K, V>, n: usize) {
        while queued(group) < n {
            tokio::task::yield_now().await;
        }
    }

    /// 200 reads of keys 0..200 made while a lone read's statement runs: they wait for it, then
    /// go in one statement, and each gets its own value.
    #[tokio::test]
    async fn concurrent_reads_share_statements_and_get_their_own_values() {
        const READS: u32 = 200;
        let group = Arc::new(ReadGroup::<u32, String>::new("test", 1));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        // Closed until every read is queued.
        let (open, gate) = watch::channel(false);
        let reads: Vec<_> = (0..READS)
            .map(|i| {
                let (group, sizes, gate) = (Arc::clone(&group), Arc::clone(&sizes), gate.clone());
                tokio::spawn(async move {
                    group
                        .read(&i, |keys| {
                            let (sizes, mut gate) = (Arc::clone(&sizes), gate.clone());
                            async move {
                                sizes
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(keys.len());
                                let _ = gate.wait_for(|open| *open).await;
                                // Odd keys are not found.
                                Ok(keys
                                    .into_iter()
                                    .filter(|k| k % 2 == 0)
                                    .map(|k| (k, format!("v{k}")))
                                    .collect())
                            }
                        })
                        .await
                })
            })
            .collect();
        // The first read leads a group of its own; the others queue behind it.
        until_queued(&group, READS as usize - 1).await;
        open.send_replace(true);
        for (i, read) in reads.into_iter().enumerate() {
            let expected = (i % 2 == 0).then(|| format!("v{i}"));
            assert_eq!(read.await.unwrap().unwrap(), expected, "key {i}");
        }
        let sizes = sizes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(sizes, [1, READS as usize - 1], "keys per statement");
    }

    /// A group's failure is every read's, naming the operation; the next read goes on.
    #[tokio::test]
    async fn a_failed_group_fails_its_reads_and_the_next_goes_on() {
        let group = ReadGroup::<u32, u32>::new("checkpoint_head", 2);
        let failed = group
            .read(&1, |_| async {
                Err(StoreError::Query {
                    operation: "checkpoint_head",
                    source: "connection reset".into(),
                })
            })
            .await
            .unwrap_err();
        assert!(failed.to_string().contains("checkpoint_head"), "{failed}");
        assert!(failed.to_string().contains("connection reset"), "{failed}");
        let ok = group
            .read(&1, |keys| async move {
                Ok(keys.into_iter().map(|k| (k, 7)).collect())
            })
            .await
            .unwrap();
        assert_eq!(ok, Some(7));
    }

    /// A leader dropped while its group runs: the reads of its group are queued again, and the
    /// reads queued behind it are answered.
    #[tokio::test]
    async fn reads_of_a_dropped_leaders_group_are_read_again() {
        let group = Arc::new(ReadGroup::<u32, u32>::new("test", 1));
        // Each statement, as (the reader that ran it, its keys).
        let (log, mut statements) = mpsc::unbounded_channel::<(u32, Vec<u32>)>();
        // The statements of reads 0 and 1 wait for these; the others answer at once.
        let (open_first, first_gate) = watch::channel(false);
        let (_never, stuck) = watch::channel(false);
        let read = |key: u32, gate: Option<watch::Receiver<bool>>| {
            let (group, log) = (Arc::clone(&group), log.clone());
            tokio::spawn(async move {
                group
                    .read(&key, |keys| {
                        let (log, gate) = (log.clone(), gate.clone());
                        async move {
                            let _ = log.send((key, keys.clone()));
                            if let Some(mut gate) = gate {
                                let _ = gate.wait_for(|open| *open).await;
                            }
                            Ok(keys.into_iter().map(|k| (k, k * 10)).collect())
                        }
                    })
                    .await
            })
        };
        // Read 0 leads a group while reads 1 and 2 queue; read 1 leads the next group, reads 1
        // and 2, and its statement never ends.
        let first = read(0, Some(first_gate));
        assert_eq!(statements.recv().await, Some((0, vec![0])));
        let leader = read(1, Some(stuck));
        until_queued(&group, 1).await;
        let in_group = read(2, None);
        until_queued(&group, 2).await;
        open_first.send_replace(true);
        assert_eq!(first.await.unwrap().unwrap(), Some(0));
        assert_eq!(statements.recv().await, Some((1, vec![1, 2])));
        // Read 3 queues behind the stuck group; then its leader is dropped.
        let behind = read(3, None);
        until_queued(&group, 1).await;
        leader.abort();
        let answered = async {
            (
                in_group.await.unwrap().unwrap(),
                behind.await.unwrap().unwrap(),
            )
        };
        let answers = tokio::time::timeout(std::time::Duration::from_secs(5), answered)
            .await
            .expect("the reads are answered");
        assert_eq!(answers, (Some(20), Some(30)));
        // Read 2 was read again, in a statement of its own or with read 3.
        drop(log);
        let mut again = Vec::new();
        while let Some((_, keys)) = statements.recv().await {
            again.extend(keys);
        }
        again.sort_unstable();
        assert_eq!(again, [2, 3], "the keys read after the leader was dropped");
    }
}
