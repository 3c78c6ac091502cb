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
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Reads of keys 0..n made at once: each gets its own value, in fewer statements than reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_reads_share_statements_and_get_their_own_values() {
        let group = Arc::new(ReadGroup::<u32, String>::new("test", 1));
        let statements = Arc::new(AtomicUsize::new(0));
        let reads = (0..200u32).map(|i| {
            let (group, statements) = (Arc::clone(&group), Arc::clone(&statements));
            tokio::spawn(async move {
                group
                    .read(&i, |keys| {
                        let statements = Arc::clone(&statements);
                        async move {
                            statements.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
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
        });
        let reads: Vec<_> = reads.collect();
        for (i, read) in reads.into_iter().enumerate() {
            let expected = (i % 2 == 0).then(|| format!("v{i}"));
            assert_eq!(read.await.unwrap().unwrap(), expected, "key {i}");
        }
        let n = statements.load(Ordering::SeqCst);
        assert!((1..200).contains(&n), "{n} statements for 200 reads");
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

    /// A leader dropped while its group runs: the reads queued behind it are answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_of_a_dropped_leaders_group_are_read_again() {
        let group = Arc::new(ReadGroup::<u32, u32>::new("test", 1));
        let release = Arc::new(tokio::sync::Notify::new());
        let leader = {
            let (group, release) = (Arc::clone(&group), Arc::clone(&release));
            tokio::spawn(async move {
                group
                    .read(&1, |_| {
                        let release = Arc::clone(&release);
                        async move {
                            release.notified().await;
                            Ok(HashMap::new())
                        }
                    })
                    .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // Queued behind the stuck leader's group.
        let follower = {
            let group = Arc::clone(&group);
            tokio::spawn(async move {
                group
                    .read(&2, |keys| async move {
                        Ok(keys.into_iter().map(|k| (k, k * 10)).collect())
                    })
                    .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        leader.abort();
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), follower)
            .await
            .expect("the follower is answered")
            .unwrap()
            .unwrap();
        assert_eq!(answer, Some(20));
    }
}
