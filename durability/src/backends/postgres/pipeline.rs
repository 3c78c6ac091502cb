//! [`Pipelined`]: a transaction whose statements go to the server together with its `BEGIN`
//! and its `COMMIT`.
//!
//! A transaction of n statements run one by one costs n + 2 round trips (`BEGIN`, each
//! statement, `COMMIT`), and a round trip, not the statement, is what a short write costs the
//! server and the client (a wake-up and a read on each side). Here `BEGIN`, every statement
//! and `COMMIT` are sent at once and the server runs them in order (tokio-postgres pipelines
//! requests that are polled together): one round trip whatever the number of statements, and
//! the server's backend never sits idle inside the transaction waiting for the client to read
//! the answers and say `COMMIT` (on a busy client that wait was as long as the commit itself).
//! The semantics are those of the statements run one by one: each sees the writes of the ones
//! before it, and a failed statement aborts the transaction, so the ones after it fail too,
//! the `COMMIT` rolls back, and nothing is committed. A statement whose outcome must decide
//! whether the transaction commits has to say so by failing (the journal's apply function
//! raises on a conflict: see `kv::apply_function`).
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

/// A failure of a [`Pipelined`] transaction: of the statement at `index` (`None`: of `BEGIN`,
/// of `COMMIT`, or of a statement's preparation before anything was sent). Nothing was
/// committed, except after a failed `COMMIT`, which may or may not have committed, as any
/// commit whose answer is lost.
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
    /// `BEGIN` was sent and `COMMIT` did not answer.
    open: bool,
}

impl Pipelined {
    /// Runs `statements` in one transaction on `client` and commits (one round trip); a
    /// failure names the statement's table and key.
    pub(crate) async fn run(
        client: Client,
        statements: &[Statement<'_>],
    ) -> Result<(), PostgresError> {
        let first = statements.first().map_or(("", ""), |s| (s.table, s.key));
        Self::commit(client, statements)
            .await
            .map(drop)
            .map_err(|f| f.named(statements, first))
    }

    /// Runs `statements` in one transaction on `client`, sent together with its `BEGIN` and
    /// its `COMMIT`; answers each statement's rows, in order, once committed. When a statement
    /// fails, nothing is committed and the first failed statement is answered.
    pub(crate) async fn commit(
        client: Client,
        statements: &[Statement<'_>],
    ) -> Result<Vec<Vec<Row>>, Failed> {
        let mut tx = Pipelined {
            client: Some(client),
            open: false,
        };
        tx.send(statements).await
    }

    fn client(&self) -> &Client {
        match &self.client {
            Some(client) => client,
            // Taken only by `drop`.
            None => unreachable!("a pipelined transaction's client is taken only when dropped"),
        }
    }

    async fn send(&mut self, statements: &[Statement<'_>]) -> Result<Vec<Vec<Row>>, Failed> {
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
        // After a failed statement the transaction is aborted: the server answers this
        // `COMMIT` with a rollback, not an error.
        let commit = client.batch_execute("COMMIT");
        let (begun, answers, committed) = in_order(begin, queries.collect(), commit).await;
        // Answered either way: a failed COMMIT ends the transaction too (or its connection).
        self.open = false;
        let mut rows = Vec::with_capacity(answers.len());
        let mut failed = None;
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(r) => rows.push(r),
                // The first failure is the cause; the later ones only say "aborted".
                Err(source) if failed.is_none() => {
                    failed = Some(Failed {
                        index: Some(index),
                        source,
                    });
                }
                Err(_) => {}
            }
        }
        let unframed = |source| Failed {
            index: None,
            source,
        };
        // A failed statement says nothing was committed, whatever `COMMIT` answered after it.
        match (begun, failed, committed) {
            (Err(source), _, _) => Err(unframed(source)),
            (Ok(()), Some(failed), _) => Err(failed),
            (Ok(()), None, Err(source)) => Err(unframed(source)),
            (Ok(()), None, Ok(())) => Ok(rows),
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

/// Polls `first`, then each of `rest`, then `last`, in this order at every wake-up until all
/// are done, so that each request is sent (on its first poll) in order; answers each one's
/// outcome.
async fn in_order<A, B, C>(
    first: A,
    rest: Vec<B>,
    last: C,
) -> (A::Output, Vec<B::Output>, C::Output)
where
    A: Future,
    B: Future,
    C: Future,
{
    let (mut first, mut last) = (std::pin::pin!(first), std::pin::pin!(last));
    let mut rest: Vec<Pin<Box<B>>> = rest.into_iter().map(Box::pin).collect();
    let (mut first_out, mut last_out) = (None, None);
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
        if last_out.is_none() {
            match last.as_mut().poll(cx) {
                Poll::Ready(out) => last_out = Some(out),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(first_out.take().zip(last_out.take()))
        }
    })
    .await
    .map_or_else(
        || unreachable!("ready only once every future answered"),
        |(first, last)| (first, rest_out.into_iter().flatten().collect(), last),
    )
}
