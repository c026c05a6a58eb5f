//! [`Store`] for [`PgStore`]: each call one transaction through the statements of the
//! `pg_*` modules (the row locks and wake-ups are described in [`super`]).

use std::sync::Arc;

use bosun_proto::admin::Alert;
use rusqlite::params;

use super::super::backend::Backend;
use super::super::operator_tokens::INIT_TOKEN_NAME;
use super::super::retention::{PruneCursor, PruneStep, Pruned, RetentionConfig};
use super::super::tx::Tx;
use super::super::{
    Heartbeat, PollRecord, PollRecorded, PollView, StoreError, StoreResult, WakeUp, WatchChange,
    hosts, sweep, watch,
};
use super::conn::{OptionalExtension as _, PgError, PgTx, sql};
use super::{PRUNE_SLICE, PgStore, SWEEP_SLICE, listen, retryable};
use crate::deadman::DeadManConfig;
use crate::secret::SecretHash;

impl Backend for PgStore {
    fn read_tx<R>(
        &self,
        op: &'static str,
        mut f: impl FnMut(Tx<'_, '_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.read(op, |tx| f(tx.into()))
    }

    fn write_tx<R>(
        &self,
        op: &'static str,
        mut f: impl FnMut(Tx<'_, '_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.write(op, |tx| f(tx.into()))
    }

    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()> {
        self.write("init admin", |tx| {
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT 1::BIGINT FROM meta WHERE key = 'initialized_ms' FOR UPDATE",
                    &[],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql("init admin"))?;
            if exists.is_some() {
                return Err(StoreError::AlreadyInitialized);
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('initialized_ms', $1)",
                params![now_ms.to_string()],
            )
            .map_err(|source| match source {
                // Another replica's `init` won the race.
                PgError::Db(ref e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) =>
                {
                    StoreError::AlreadyInitialized
                }
                source => StoreError::Postgres {
                    op: "init admin",
                    source,
                },
            })?;
            super::super::operator_tokens::insert_first(
                Tx::from(tx),
                INIT_TOKEN_NAME,
                &hash,
                now_ms,
            )?;
            Tx::from(tx).event(
                now_ms,
                None,
                "initialized",
                &serde_json::json!({ "admin_token": INIT_TOKEN_NAME }),
            )
        })
    }

    fn heartbeat<'a>(self: Arc<Self>, poll: &'a PollRecord) -> Option<Heartbeat<'a>> {
        self.heartbeat_on_kept_row(poll)
    }

    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        // In host-id order: each poll locks its host's row as it reads it, so batches of
        // different replicas take their locks in one order and wait for each other instead of
        // deadlocking (two polls of one host keep theirs).
        let mut order: Vec<usize> = (0..polls.len()).collect();
        order.sort_by_key(|&n| polls[n].host_id);
        // A batch that may wait for the disk commits without waiting for the server's WAL
        // flush, which follows within a few hundred milliseconds (the server's
        // `wal_writer_delay`; decision 0045). Said with the BEGIN when every poll as sent may
        // wait, and taken back before the COMMIT when one found it may not.
        let may_wait = polls.iter().all(PollRecord::may_wait);
        let begin: &[&str] = if may_wait {
            &[
                "BEGIN",
                "SELECT set_config('synchronous_commit', 'off', true)",
            ]
        } else {
            &["BEGIN"]
        };
        let settle = |tx: &PgTx<'_>, results: &[StoreResult<hosts::RecordedPoll>]| {
            let durable = results
                .iter()
                .any(|r| r.as_ref().is_ok_and(|done| done.recorded.durable));
            if may_wait && durable {
                tx.defer("SELECT set_config('synchronous_commit', 'on', true)", &[])
                    .map_err(sql("record polls"))?;
            }
            Ok::<(), StoreError>(())
        };
        // First without savepoints (each costs two round trips per poll): a poll refused
        // before anything of it was written is answered with its error; any other failure
        // rolls the batch back and it runs again below.
        let isolate = std::cell::Cell::new(false);
        let fast = self.write_as("record polls", begin, |tx| {
            let mut results = Vec::with_capacity(polls.len());
            for &n in &order {
                match hosts::record_poll(tx.into(), &polls[n]) {
                    Ok(recorded) => results.push(Ok(recorded)),
                    Err(err) if hosts::refused_before_writing(&err) => results.push(Err(err)),
                    Err(err) => {
                        isolate.set(!retryable(&err));
                        return Err(err);
                    }
                }
            }
            settle(tx, &results)?;
            Ok(results)
        });
        if !isolate.get() {
            return fast.map(|results| self.kept_from(&order, &polls, results));
        }
        // Each poll in a savepoint of its own, so the one that failed leaves the others.
        self.write_as("record polls", begin, |tx| {
            let mut results = Vec::with_capacity(polls.len());
            for &n in &order {
                tx.batch("SAVEPOINT poll").map_err(sql("record polls"))?;
                // Its last write is sent before the savepoint is settled, so a failure is
                // its own.
                let recorded = hosts::record_poll(tx.into(), &polls[n])
                    .and_then(|r| tx.flush().map_err(sql("record polls")).map(|()| r));
                let outcome = match recorded {
                    // The server aborted the whole transaction: run the batch again.
                    Err(err) if retryable(&err) => return Err(err),
                    outcome => outcome,
                };
                match &outcome {
                    Ok(_) => tx.batch("RELEASE SAVEPOINT poll"),
                    Err(_) => {
                        tx.discard();
                        tx.batch("ROLLBACK TO SAVEPOINT poll")
                    }
                }
                .map_err(sql("record polls"))?;
                results.push(outcome);
            }
            settle(tx, &results)?;
            Ok(results)
        })
        .map(|results| self.kept_from(&order, &polls, results))
    }

    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo> {
        self.write("put artifact", |tx| {
            super::super::artifacts::put(tx.into(), sha256, data, now_ms).map(|(info, _)| info)
        })
    }

    fn artifact(&self, sha256: &str) -> StoreResult<Option<super::super::ArtifactBytes>> {
        self.read("read artifact", |tx| {
            super::super::artifacts::get_held(tx.into(), sha256)
        })
    }

    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>> {
        // No lock on the table: each host's change is guarded on the poll the plan saw
        // (`sweep::apply_sweep`), so a poll landing meanwhile wins and the others' polls never
        // wait for a sweep.
        let swept = self.as_sweeper("sweep", |tx| {
            let (rows, monitored, suspicion_open) =
                sweep::liveness(tx.into(), now_ms, config.grace_factor)?;
            let plan = crate::deadman::plan_sweep(&rows, monitored, suspicion_open, now_ms, config);
            if plan.changes.is_empty()
                && plan.alerts.is_empty()
                && plan.suspicion_open == suspicion_open
            {
                return Ok(Vec::new());
            }
            sweep::apply_sweep(tx.into(), &plan, now_ms)
        })?;
        Ok(swept.unwrap_or_default())
    }

    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>> {
        // In slices, one transaction each, as the SQLite store sweeps: the rows of the hosts a
        // slice judged stay locked only until it ends.
        let mut changes = Vec::new();
        loop {
            let slice = self.as_sweeper("sweep backups", |tx| {
                watch::sweep_slice(tx.into(), now_ms, SWEEP_SLICE)
            })?;
            match slice {
                Some((judged, more)) => {
                    changes.extend(judged);
                    if !more {
                        break;
                    }
                }
                // Another replica took the lock over: it sweeps from now on.
                None => break,
            }
        }
        Ok(changes)
    }

    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep> {
        let started = std::time::Instant::now();
        let mut pruned = Pruned::default();
        let mut cursor = from;
        loop {
            match self.prune_slice(now_ms, config, &mut cursor, PRUNE_SLICE, &mut pruned)? {
                // Not the sweeper (or no longer): the replica that is prunes.
                None | Some(true) => return Ok(PruneStep { pruned, next: None }),
                Some(false) if started.elapsed() >= budget => {
                    return Ok(PruneStep {
                        pruned,
                        next: Some(cursor),
                    });
                }
                Some(false) => {}
            }
        }
    }

    fn watch_wakeups(&self, wake: WakeUp) {
        let config = self.config.clone();
        self.handle().spawn(listen(config, wake));
    }
}

impl PgStore {
    /// A committed batch's results in the batch's order (`order`: the order they were
    /// recorded in), each host row they wrote kept.
    fn kept_from(
        &self,
        order: &[usize],
        polls: &[PollRecord],
        results: Vec<StoreResult<hosts::RecordedPoll>>,
    ) -> Vec<StoreResult<(PollRecorded, PollView)>> {
        let results = order
            .iter()
            .zip(results)
            .map(|(&n, result)| {
                result.map(|done| {
                    if let Some(written) = &done.written {
                        self.kept.keep(polls[n].host_id, written);
                    }
                    (done.recorded, done.view)
                })
            })
            .collect();
        in_order(order, results)
    }
}

/// Results recorded in `order` (positions in the batch) put back in the batch's order.
fn in_order<T>(order: &[usize], results: Vec<T>) -> Vec<T> {
    let mut slots: Vec<Option<T>> = std::iter::repeat_with(|| None)
        .take(results.len())
        .collect();
    for (&n, result) in order.iter().zip(results) {
        slots[n] = Some(result);
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_recorded_in_host_order_go_back_to_the_batch_order() {
        // The batch [c, a, b] is recorded as a, b, c.
        let order = [1, 2, 0];
        assert_eq!(
            super::in_order(&order, vec!["a", "b", "c"]),
            ["c", "a", "b"]
        );
        assert_eq!(super::in_order::<u8>(&[], Vec::new()), Vec::<u8>::new());
    }
}
