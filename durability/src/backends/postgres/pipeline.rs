//! [`Pipelined`]: a transaction whose statements go to the server together.
//!
//! A transaction of n statements run one by one costs n + 2 round trips (`BEGIN`, each
//! statement, `COMMIT`), and a round trip, not the statement, is what a short write costs the
//! server and the client (a wake-up and a read on each side). Here `BEGIN` and every statement
//! are sent at once and the server runs them in order (tokio-postgres pipelines requests that
//! are polled together), then `COMMIT` or `ROLLBACK` follows once the answers are read: two
//! round trips whatever the number of statements. The semantics are those of the statements
//! run one by one: each sees the writes of the ones before it, and a failed statement aborts
//! the transaction, so the ones after it fail too and nothing is committed.
//!
//! A transaction dropped before its end (its future cancelled) takes its connection out of
//! the pool: closing it is what rolls the transaction back on the server, and no later user
//! of the pool gets a connection inside someone else's transaction.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row};

use super::{PostgresError, query_err};

/// One statement of a [`Pipelined`] transaction, with what a failure of it names.
pub(crate) struct Statement<'a> {
    /// The SQL (prepared once per connection).
    pub(crate) sql: &'a str,
    /// Its parameters.
    pub(crate) params: Vec<&'a (dyn ToSql + Sync)>,
    /// The table it writes.
    pub(crate) table: &'a str,
    /// The key (or chat) it concerns.
    pub(crate) key: &'a str,
}

/// A failure inside a [`Pipelined`] transaction: of the statement at `index` (`None`: of
/// `BEGIN`, `COMMIT` or a statement's preparation before anything was sent).
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) index: Option<usize>,
    pub(crate) source: Error,
}

impl Failed {
    /// The error, naming the failed statement's table and key (`other`'s when it was not a
    /// statement).
    pub(crate) fn named(self, statements: &[Statement<'_>], other: (&str, &str)) -> PostgresError {
        let (table, key) = match self.index.and_then(|i| statements.get(i)) {
            Some(s) => (s.table, s.key),
            None => other,
        };
        query_err(table, key, self.source)
    }
}

/// A transaction on one pooled connection; see the [module documentation](self).
pub(crate) struct Pipelined {
    client: Option<Client>,
    /// `BEGIN` was sent and neither `COMMIT` nor `ROLLBACK` answered.
    open: bool,
}

impl Pipelined {
    /// A transaction on `client` (nothing is sent yet).
    pub(crate) fn on(client: Client) -> Self {
        Pipelined {
            client: Some(client),
            open: false,
        }
    }

    /// Runs `statements` in one transaction on `client` and commits (two round trips); a
    /// failure names the statement's table and key.
    pub(crate) async fn run(
        client: Client,
        statements: &[Statement<'_>],
    ) -> Result<(), PostgresError> {
        let first = statements.first().map_or(("", ""), |s| (s.table, s.key));
        let mut tx = Pipelined::on(client);
        tx.begin(statements)
            .await
            .map_err(|f| f.named(statements, first))?;
        tx.commit().await.map_err(|f| f.named(statements, first))
    }

    fn client(&self) -> &Client {
        match &self.client {
            Some(client) => client,
            // Taken only by `drop`.
            None => unreachable!("a pipelined transaction's client is taken only when dropped"),
        }
    }

    /// Sends `BEGIN` and `statements` together; answers each statement's rows, in order. On
    /// a failure the transaction is rolled back before the error is returned.
    pub(crate) async fn begin(
        &mut self,
        statements: &[Statement<'_>],
    ) -> Result<Vec<Vec<Row>>, Failed> {
        let client = self.client();
        // Prepared before anything is sent (a cached statement costs nothing), so that every
        // request below goes out on its first poll, in order.
        let mut prepared = Vec::with_capacity(statements.len());
        for (index, s) in statements.iter().enumerate() {
            let statement = client
                .prepare_cached(s.sql)
                .await
                .map_err(|source| Failed {
                    index: Some(index),
                    source,
                })?;
            prepared.push(statement);
        }
        self.open = true;
        let client = self.client();
        let begin = client.batch_execute("BEGIN");
        let queries = prepared
            .iter()
            .zip(statements)
            .map(|(statement, s)| client.query(statement, &s.params));
        let (begun, answers) = in_order(begin, queries.collect()).await;
        let mut failed = begun.err().map(|source| Failed {
            index: None,
            source,
        });
        let mut rows = Vec::with_capacity(answers.len());
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(r) => rows.push(r),
                Err(source) => {
                    // The first failure is the cause; the later ones only say "aborted".
                    failed.get_or_insert(Failed {
                        index: Some(index),
                        source,
                    });
                }
            }
        }
        match failed {
            None => Ok(rows),
            Some(failed) => {
                self.rollback().await;
                Err(failed)
            }
        }
    }

    /// Commits.
    pub(crate) async fn commit(mut self) -> Result<(), Failed> {
        let done = self.client().batch_execute("COMMIT").await;
        // Answered either way: a failed COMMIT ends the transaction too (or its connection).
        self.open = false;
        done.map_err(|source| Failed {
            index: None,
            source,
        })
    }

    /// Rolls back; a failed rollback leaves the connection to be dropped with the transaction.
    pub(crate) async fn rollback(&mut self) {
        match self.client().batch_execute("ROLLBACK").await {
            Ok(()) => self.open = false,
            Err(error) => tracing::debug!(
                target: "botmesh_durability::postgres",
                %error,
                "rollback failed; the connection is closed instead"
            ),
        }
    }
}

impl Drop for Pipelined {
    fn drop(&mut self) {
        if self.open
            && let Some(client) = self.client.take()
        {
            // Out of the pool and closed: the server rolls the transaction back.
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// Polls `first`, then each of `rest`, in this order at every wake-up until all are done, so
/// that each request is sent (on its first poll) in order; answers `first`'s and each of
/// `rest`'s outcome.
async fn in_order<A, B>(first: A, rest: Vec<B>) -> (A::Output, Vec<B::Output>)
where
    A: Future,
    B: Future,
{
    let mut first = std::pin::pin!(first);
    let mut rest: Vec<Pin<Box<B>>> = rest.into_iter().map(Box::pin).collect();
    let mut first_out = None;
    let mut rest_out: Vec<Option<B::Output>> = rest.iter().map(|_| None).collect();
    poll_fn(|cx| {
        if first_out.is_none()
            && let Poll::Ready(out) = first.as_mut().poll(cx)
        {
            first_out = Some(out);
        }
        let mut pending = first_out.is_none();
        for (future, out) in rest.iter_mut().zip(rest_out.iter_mut()) {
            if out.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(answer) => *out = Some(answer),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(first_out.take())
        }
    })
    .await
    .map_or_else(
        || unreachable!("ready only once every future answered"),
        |first| (first, rest_out.into_iter().flatten().collect()),
    )
}
