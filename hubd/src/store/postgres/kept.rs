//! The host rows a replica last wrote, and the heartbeat they make one statement
//! (decision 0129).
//!
//! A poll's write returns the row as it left it, with its version (`xmin`) and when the host
//! was last seen; the replica keeps that. The host's next heartbeat through the same replica
//! is decided from the kept row instead of a `SELECT … FOR UPDATE`, and written in one
//! statement, its own transaction, guarded on the kept version: when any other writer
//! (another replica, the sweep, an operator) changed the row since, the guard matches
//! nothing, nothing is written, and the poll is recorded the usual way. Only what the row
//! alone decides goes this way: a delta that needs no base read, carries nothing but the
//! report and finds the host neither overdue, stopped, new, nor applying a generation.
//!
//! What waits for the host (desired state, queued jobs) is read in the same statement, and
//! kept with the row: every change to it writes the host row (decision 0131), so while the
//! guard holds the next heartbeat's statement is the write alone, and it goes in a batch
//! with other hosts' (decision 0132, `heartbeats`).
//!
//! The statement is sent from the poll's own task, before the poll would be queued for the
//! poll writer, on one session the hub's runtime drives (decision 0130): no thread stands
//! between a heartbeat and the server.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use uuid::Uuid;

use super::super::host_row::{HOST_ROW_WIDTH, HostFacts, HostRow, RawHostRow};
use super::super::hosts::{self, KEPT_COLUMNS_WIDTH};
use super::super::pending::Waiting;
use super::super::poll_report;
use super::super::tx::Row;
use super::super::{Heartbeat, PollRecord, PollRecorded, PollView, StoreError, StoreResult};
use super::conn::{Later, PgError, PgParam, PgRow, convert, sql};
use super::{PgStore, retryable};

/// Most rows one replica keeps (about 1.5 KB each: the live parts of two reports); past it an
/// arbitrary one is forgotten, and its host's next poll is read the usual way.
const MOST_KEPT: usize = 65_536;

/// The host rows this replica last wrote, by host.
#[derive(Debug, Default)]
pub(super) struct KeptRows {
    rows: Mutex<HashMap<Uuid, Kept>>,
    one_flight: AtomicU64,
    fell_back: AtomicU64,
}

/// A host row as this replica's write left it.
#[derive(Debug)]
struct Kept {
    row: RawHostRow,
    /// The row version, as text (`xid` has no binary form the store reads).
    xmin: String,
    last_seen_ms: i64,
    /// What waited for the host as of this version, when a heartbeat read it with the row
    /// and it carried no document (decision 0131).
    waiting: Option<Waiting>,
}

impl Kept {
    /// Reads the first [`KEPT_COLUMNS_WIDTH`] columns of a poll's write.
    fn read(row: &PgRow) -> rusqlite::Result<Self> {
        let row = Row::Postgres(row);
        Ok(Self {
            row: RawHostRow::read(&row)?,
            xmin: row.get(HOST_ROW_WIDTH)?,
            last_seen_ms: row.get(HOST_ROW_WIDTH + 1)?,
            waiting: None,
        })
    }
}

impl KeptRows {
    /// Keeps the row a committed poll of `host` wrote (`written`), or forgets the host's when
    /// that row cannot be read.
    pub(super) fn keep(&self, host: Uuid, written: &Later) {
        let kept = match written.rows() {
            Some(Ok(rows)) if rows.len() == 1 => Kept::read(&rows[0]).map_err(PgError::from),
            Some(Ok(_)) | None => {
                self.rows.lock().remove(&host);
                return;
            }
            Some(Err(err)) => Err(err),
        };
        match kept {
            Ok(kept) => self.put(host, kept),
            Err(err) => {
                tracing::debug!(host_id = %host, error = %err, "host row written but not kept");
                self.rows.lock().remove(&host);
            }
        }
    }

    fn put(&self, host: Uuid, kept: Kept) {
        let mut rows = self.rows.lock();
        if rows.len() >= MOST_KEPT
            && !rows.contains_key(&host)
            && let Some(other) = rows.keys().next().copied()
        {
            rows.remove(&other);
        }
        rows.insert(host, kept);
    }

    fn take(&self, host: Uuid) -> Option<Kept> {
        self.rows.lock().remove(&host)
    }

    /// How many heartbeats went in one flight, and how many found their kept row moved and
    /// were recorded the usual way.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.one_flight.load(Ordering::Relaxed),
            self.fell_back.load(Ordering::Relaxed),
        )
    }
}

/// What a heartbeat does, decided from the kept row alone.
struct Plan {
    row: HostRow,
    write: poll_report::Write,
    stored_seq: Option<u64>,
    full_report_required: bool,
}

/// The plan of `poll` (one that may wait, `PollRecord::may_wait`) on `kept`, when the row
/// alone decides it and the poll writes nothing but the row (what `hosts::record_poll` would write for it, and nothing it would judge).
fn plan(poll: &PollRecord, kept: &Kept) -> Option<Plan> {
    let mut row = HostRow::checked(kept.row.clone(), poll).ok()?;
    if row.never_polled
        || row.stopped_since.is_some()
        || row.overdue_since.is_some()
        || poll.applied_generation != row.old_applied
    {
        return None;
    }
    let stored = std::mem::take(&mut row.stored);
    let stored_seq = stored.seq;
    let host = poll.host_id.to_string();
    // A delta that needs a stored base goes the usual way.
    let needs_read = || StoreError::Batch {
        reason: "the report needs its stored base".to_owned(),
    };
    let outcome = poll_report::decide(&host, stored, |_| Err(needs_read()), &poll.report).ok()?;
    if outcome.judged || outcome.write.base().is_some() {
        return None;
    }
    Some(Plan {
        full_report_required: !outcome.applied || row.keys_wanted,
        row,
        write: outcome.write,
        stored_seq,
    })
}

impl PgStore {
    /// Records `poll` in one statement on the row this replica kept of its host, sent from the
    /// caller's task on the heartbeat session ([`Heartbeats`]); `None` when the poll is no
    /// heartbeat or the row was not kept, and the future's `None` when it must be recorded the
    /// usual way after all (nothing of it was written then, or its session was lost under the
    /// statement, which the usual way's read of the row settles either way).
    pub(super) fn heartbeat_on_kept_row<'a>(
        self: Arc<Self>,
        poll: &'a PollRecord,
    ) -> Option<Heartbeat<'a>> {
        if !poll.may_wait() {
            return None;
        }
        let mut kept = self.kept.take(poll.host_id)?;
        let plan = plan(poll, &kept)?;
        // What waited as of the kept version answers this poll too while the guard holds:
        // every change to it writes the host row (decision 0131).
        let known = kept
            .waiting
            .take()
            .filter(|waiting| waiting.answers(poll.known_generation));
        Some(Box::pin(self.one_flight(poll, kept, plan, known)))
    }

    async fn one_flight(
        self: Arc<Self>,
        poll: &PollRecord,
        kept: Kept,
        plan: Plan,
        known: Option<Waiting>,
    ) -> Option<StoreResult<(PollRecorded, PollView)>> {
        let op = "record polls";
        let params = {
            let mut values = hosts::poll_update_values(poll, &plan.write, false);
            values.push(ToSqlOutput::Borrowed(ValueRef::from(kept.xmin.as_str())));
            values.push(ToSqlOutput::Owned(Value::Integer(kept.last_seen_ms)));
            let params: Vec<&dyn rusqlite::ToSql> = values.iter().map(|v| v as _).collect();
            match convert(&params) {
                Ok(params) => params,
                Err(err) => return Some(Err(sql(op)(err))),
            }
        };
        // One statement, its own transaction: alone when it reads what waits, else in the
        // next batch (decision 0132).
        // `None`: there was no session, or it was lost under the statement. Whether it ran or
        // not, the usual way reads the row as it is (a delta merged already finds its base
        // gone and asks for the full report).
        let written = match known {
            None => self.heartbeats.write(&self.config, &params).await?,
            Some(_) => {
                let values = params.into_iter().map(PgParam::into_value).collect();
                self.heartbeat_batched(poll.host_id.to_string(), values)
                    .await?
            }
        };
        let written = written.and_then(|row| {
            let Some(row) = row else {
                return Ok(None);
            };
            let row = PgRow::decode(&row)?;
            let waiting = match known {
                Some(waiting) => waiting,
                None => Waiting::read(&Row::Postgres(&row), KEPT_COLUMNS_WIDTH)?,
            };
            Ok(Some((Kept::read(&row)?, waiting)))
        });
        match written {
            Ok(Some((mut kept, waiting))) => {
                self.kept.one_flight.fetch_add(1, Ordering::Relaxed);
                kept.waiting = waiting
                    .answers(poll.known_generation)
                    .then(|| waiting.clone());
                self.kept.put(poll.host_id, kept);
                Some(self.answer(poll, plan, waiting).await)
            }
            // Another writer moved the row: nothing was written.
            Ok(None) => {
                self.kept.fell_back.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(err) => {
                let err = sql(op)(err);
                // The server aborted it: the usual way runs it again.
                if retryable(&err) {
                    None
                } else {
                    Some(Err(err))
                }
            }
        }
    }

    /// The answer to a heartbeat written in one statement: the queued jobs, when there are any,
    /// read after it.
    async fn answer(
        self: Arc<Self>,
        poll: &PollRecord,
        plan: Plan,
        waiting: Waiting,
    ) -> StoreResult<(PollRecorded, PollView)> {
        let pending = if waiting.jobs_queued() {
            // The store's reads block their thread.
            let host = poll.host_id.to_string();
            tokio::task::spawn_blocking(move || {
                self.read("read poll view", |tx| {
                    waiting.clone().pending(tx.into(), &host)
                })
            })
            .await
            .map_err(|source| StoreError::Worker { source })??
        } else {
            waiting.without_jobs()
        };
        let (_, report_seq) = plan.write.values();
        let facts = HostFacts {
            poll_interval_s: plan.row.poll_interval_s,
            audit_acked_seq: Some(plan.row.audit_seq.unwrap_or(0)),
            report_seq: report_seq.or(plan.stored_seq),
            host_key: plan.row.host_key,
        };
        let recorded = PollRecorded {
            full_report_required: plan.full_report_required,
            durable: false,
            ..PollRecorded::default()
        };
        Ok((recorded, pending.view(facts)))
    }
}
