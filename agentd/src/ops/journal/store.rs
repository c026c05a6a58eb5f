//! [`Store`]: the journal's synchronous core, owned by the journal thread.
//!
//! Every write runs in one `BEGIN IMMEDIATE` transaction that also checks the
//! state it builds on, so a crash leaves either the whole change or none of it.

use std::path::Path;

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::records::{
    NewOperation, OpId, OpStatus, Operation, Step, StepOutcome, StepState, UnfinishedOperation,
};
use super::{JournalError, schema};
use crate::clock::SharedClock;

/// The journal database, used from one thread.
#[derive(Debug)]
pub struct Store {
    pub(super) conn: Connection,
    clock: SharedClock,
}

pub(super) fn to_ms(at: Timestamp) -> i64 {
    at.as_millisecond()
}

pub(super) fn from_ms(
    ms: i64,
    table: &'static str,
    column: &'static str,
) -> Result<Timestamp, JournalError> {
    Timestamp::from_millisecond(ms).map_err(|_| JournalError::Corrupt {
        table,
        column,
        value: ms.to_string(),
    })
}

pub(super) fn opt_from_ms(
    ms: Option<i64>,
    table: &'static str,
    column: &'static str,
) -> Result<Option<Timestamp>, JournalError> {
    ms.map(|ms| from_ms(ms, table, column)).transpose()
}

pub(super) fn opt_u32(
    value: Option<i64>,
    table: &'static str,
    column: &'static str,
) -> Result<Option<u32>, JournalError> {
    value
        .map(|v| {
            u32::try_from(v).map_err(|_| JournalError::Corrupt {
                table,
                column,
                value: v.to_string(),
            })
        })
        .transpose()
}

pub(super) fn parse_op_id(text: String, table: &'static str) -> Result<OpId, JournalError> {
    text.parse().map_err(|_| JournalError::Corrupt {
        table,
        column: "op_id",
        value: text,
    })
}

/// Creates the database file readable by the agent's user only (SQLite gives
/// its `-wal` and `-shm` files the same mode). An existing file is left as is.
fn create_private(path: &Path) -> Result<(), JournalError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(JournalError::Create {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn query_err(operation: &'static str) -> impl Fn(rusqlite::Error) -> JournalError {
    move |source| JournalError::Query { operation, source }
}

impl Store {
    /// Opens (creating if needed) the journal at `path`: WAL, `synchronous=FULL`,
    /// foreign keys on, schema migrated.
    pub fn open(path: &Path, clock: SharedClock) -> Result<Self, JournalError> {
        let open_err = |source| JournalError::Open {
            path: path.to_path_buf(),
            source,
        };
        create_private(path)?;
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::NoWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(open_err)?;
        // The journal's hot pages are few (the open operations, the audit
        // head): a 512 KiB page cache instead of SQLite's 2 MiB default.
        conn.pragma_update(None, "cache_size", -512)
            .map_err(open_err)?;
        schema::migrate(&mut conn)?;
        Ok(Self { conn, clock })
    }

    /// The journal's clock reading.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs `f` in one immediate transaction and commits it.
    pub(super) fn write<T>(
        &mut self,
        operation: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(query_err(operation))?;
        let value = f(&tx)?;
        tx.commit().map_err(query_err(operation))?;
        Ok(value)
    }

    /// Begins an operation (status `running`) and returns its id.
    pub fn begin_operation(&mut self, new: &NewOperation) -> Result<OpId, JournalError> {
        self.begin_correlated_operation(new, None)
    }

    /// Begins an operation caused by the desired-state generation the operator tagged with
    /// `correlation_id`.
    pub fn begin_correlated_operation(
        &mut self,
        new: &NewOperation,
        correlation_id: Option<&str>,
    ) -> Result<OpId, JournalError> {
        let op_id = OpId::new();
        let now = to_ms(self.now());
        self.write("begin operation", |tx| {
            tx.execute(
                "INSERT INTO operations (op_id, kind, guest_id, vmid, job_id, request_id,
                                         correlation_id, status, started_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8)",
                params![
                    op_id.to_string(),
                    new.kind.as_str(),
                    new.guest_id,
                    new.vmid,
                    new.job_id,
                    new.request_id,
                    correlation_id,
                    now
                ],
            )
            .map_err(query_err("begin operation"))?;
            Ok(())
        })?;
        Ok(op_id)
    }

    /// Writes the intent of the next step, before its Proxmox call; returns
    /// the step's number. The previous step must have ended.
    pub fn step_intent(
        &mut self,
        op_id: OpId,
        name: &str,
        detail: &serde_json::Value,
    ) -> Result<u32, JournalError> {
        let now = to_ms(self.now());
        let detail = serde_json::to_string(detail).map_err(|source| JournalError::Encode {
            what: "step detail",
            source,
        })?;
        self.write("write step intent", |tx| {
            require_running(tx, op_id)?;
            let last = last_step_state(tx, op_id)?;
            let seq = match last {
                None => 1,
                Some((seq, state)) if state.is_terminal() => seq.saturating_add(1),
                Some((seq, state)) => {
                    return Err(JournalError::StepStillOpen { op_id, seq, state });
                }
            };
            tx.execute(
                "INSERT INTO op_steps (op_id, seq, name, detail, state, intent_ms)
                 VALUES (?1, ?2, ?3, ?4, 'intent', ?5)",
                params![op_id.to_string(), seq, name, detail, now],
            )
            .map_err(query_err("write step intent"))?;
            Ok(seq)
        })
    }

    /// Records that the step's call was accepted, with the task's UPID when
    /// the call started one.
    pub fn step_sent(
        &mut self,
        op_id: OpId,
        seq: u32,
        upid: Option<&str>,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("record step sent", |tx| {
            require_running(tx, op_id)?;
            let state = step_state(tx, op_id, seq)?;
            if state != StepState::Intent {
                return Err(JournalError::StepTransition {
                    op_id,
                    seq,
                    from: state,
                    to: StepState::Sent,
                });
            }
            tx.execute(
                "UPDATE op_steps SET state = 'sent', upid = ?3, sent_ms = ?4
                 WHERE op_id = ?1 AND seq = ?2",
                params![op_id.to_string(), seq, upid, now],
            )
            .map_err(query_err("record step sent"))?;
            Ok(())
        })
    }

    /// Records how the step ended. A call without a task may go straight from
    /// intent to its outcome.
    pub fn step_finished(
        &mut self,
        op_id: OpId,
        seq: u32,
        outcome: &StepOutcome,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        let (to, warnings, error) = match outcome {
            StepOutcome::Ok { warnings } => (StepState::Ok, Some(*warnings), None),
            StepOutcome::Failed { error } => (StepState::Failed, None, Some(error.as_str())),
        };
        self.write("record step outcome", |tx| {
            require_running(tx, op_id)?;
            let from = step_state(tx, op_id, seq)?;
            if from.is_terminal() {
                return Err(JournalError::StepTransition {
                    op_id,
                    seq,
                    from,
                    to,
                });
            }
            tx.execute(
                "UPDATE op_steps SET state = ?3, warnings = ?4, error = ?5, ended_ms = ?6
                 WHERE op_id = ?1 AND seq = ?2",
                params![op_id.to_string(), seq, to.as_str(), warnings, error, now],
            )
            .map_err(query_err("record step outcome"))?;
            Ok(())
        })
    }

    /// Ends a running operation. Every step must have ended first.
    pub fn finish_operation(
        &mut self,
        op_id: OpId,
        status: OpStatus,
        error: Option<&str>,
    ) -> Result<(), JournalError> {
        if !status.is_terminal() {
            return Err(JournalError::NotTerminal { op_id, status });
        }
        let now = to_ms(self.now());
        self.write("finish operation", |tx| {
            finish_in(tx, op_id, status, error, now)
        })
    }

    /// One operation, if it exists.
    pub fn operation(&self, op_id: OpId) -> Result<Option<Operation>, JournalError> {
        let raw = self
            .conn
            .query_row(
                &format!("{SELECT_OPERATION} WHERE op_id = ?1"),
                [op_id.to_string()],
                raw_operation,
            )
            .optional()
            .map_err(query_err("read operation"))?;
        raw.map(RawOperation::into_operation).transpose()
    }

    /// The newest `limit` operations by start, newest first (the tail the hub is sent).
    pub fn recent_operations(&self, limit: u32) -> Result<Vec<Operation>, JournalError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{SELECT_OPERATION} ORDER BY started_ms DESC, op_id DESC LIMIT ?1"
            ))
            .map_err(query_err("read recent operations"))?;
        let rows = stmt
            .query_map([limit], raw_operation)
            .map_err(query_err("read recent operations"))?;
        let mut ops = Vec::new();
        for row in rows {
            ops.push(
                row.map_err(query_err("read recent operations"))?
                    .into_operation()?,
            );
        }
        Ok(ops)
    }

    /// An operation's steps in order (for `bosunctl explain` and replay).
    pub fn steps(&self, op_id: OpId) -> Result<Vec<Step>, JournalError> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SELECT_STEP} WHERE op_id = ?1 ORDER BY seq"))
            .map_err(query_err("read steps"))?;
        let rows = stmt
            .query_map([op_id.to_string()], raw_step)
            .map_err(query_err("read steps"))?;
        let mut steps = Vec::new();
        for row in rows {
            steps.push(row.map_err(query_err("read steps"))?.into_step()?);
        }
        Ok(steps)
    }

    /// Replay on start: every operation still `running`, oldest first, with
    /// its last step, so the reconciler can resume or roll back.
    pub fn unfinished_operations(&self) -> Result<Vec<UnfinishedOperation>, JournalError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{SELECT_OPERATION} WHERE status = 'running' ORDER BY started_ms, op_id"
            ))
            .map_err(query_err("read unfinished operations"))?;
        let rows = stmt
            .query_map([], raw_operation)
            .map_err(query_err("read unfinished operations"))?;
        let mut ops = Vec::new();
        for row in rows {
            ops.push(
                row.map_err(query_err("read unfinished operations"))?
                    .into_operation()?,
            );
        }
        let mut unfinished = Vec::with_capacity(ops.len());
        for operation in ops {
            let last_step = self
                .conn
                .query_row(
                    &format!("{SELECT_STEP} WHERE op_id = ?1 ORDER BY seq DESC LIMIT 1"),
                    [operation.op_id.to_string()],
                    raw_step,
                )
                .optional()
                .map_err(query_err("read last step"))?
                .map(RawStep::into_step)
                .transpose()?;
            unfinished.push(UnfinishedOperation {
                operation,
                last_step,
            });
        }
        Ok(unfinished)
    }
}

/// Ends a running operation whose last step has ended, inside `tx`.
pub(super) fn finish_in(
    tx: &Transaction<'_>,
    op_id: OpId,
    status: OpStatus,
    error: Option<&str>,
    now_ms: i64,
) -> Result<(), JournalError> {
    require_running(tx, op_id)?;
    if let Some((seq, state)) = last_step_state(tx, op_id)?
        && !state.is_terminal()
    {
        return Err(JournalError::StepStillOpen { op_id, seq, state });
    }
    tx.execute(
        "UPDATE operations SET status = ?2, error = ?3, ended_ms = ?4 WHERE op_id = ?1",
        params![op_id.to_string(), status.as_str(), error, now_ms],
    )
    .map_err(query_err("finish operation"))?;
    super::guest_audit::record_finished(tx, op_id, status, error, now_ms)
}

pub(super) fn require_running(tx: &Transaction<'_>, op_id: OpId) -> Result<(), JournalError> {
    let status: Option<String> = tx
        .query_row(
            "SELECT status FROM operations WHERE op_id = ?1",
            [op_id.to_string()],
            |row| row.get(0),
        )
        .optional()
        .map_err(query_err("read operation status"))?;
    let status = status.ok_or(JournalError::UnknownOperation { op_id })?;
    let status = OpStatus::parse(&status).ok_or_else(|| JournalError::Corrupt {
        table: "operations",
        column: "status",
        value: status.clone(),
    })?;
    if status == OpStatus::Running {
        Ok(())
    } else {
        Err(JournalError::OperationEnded { op_id, status })
    }
}

fn parse_step_state(text: String) -> Result<StepState, JournalError> {
    StepState::parse(&text).ok_or(JournalError::Corrupt {
        table: "op_steps",
        column: "state",
        value: text,
    })
}

fn last_step_state(
    tx: &Transaction<'_>,
    op_id: OpId,
) -> Result<Option<(u32, StepState)>, JournalError> {
    let row: Option<(u32, String)> = tx
        .query_row(
            "SELECT seq, state FROM op_steps WHERE op_id = ?1 ORDER BY seq DESC LIMIT 1",
            [op_id.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(query_err("read last step"))?;
    row.map(|(seq, state)| Ok((seq, parse_step_state(state)?)))
        .transpose()
}

fn step_state(tx: &Transaction<'_>, op_id: OpId, seq: u32) -> Result<StepState, JournalError> {
    let state: Option<String> = tx
        .query_row(
            "SELECT state FROM op_steps WHERE op_id = ?1 AND seq = ?2",
            params![op_id.to_string(), seq],
            |row| row.get(0),
        )
        .optional()
        .map_err(query_err("read step"))?;
    parse_step_state(state.ok_or(JournalError::UnknownStep { op_id, seq })?)
}

const SELECT_OPERATION: &str = "SELECT op_id, kind, guest_id, vmid, job_id, request_id, status,
        error, started_ms, ended_ms, correlation_id FROM operations";

struct RawOperation {
    op_id: String,
    kind: String,
    guest_id: Option<String>,
    vmid: Option<i64>,
    job_id: Option<String>,
    request_id: Option<String>,
    status: String,
    error: Option<String>,
    started_ms: i64,
    ended_ms: Option<i64>,
    correlation_id: Option<String>,
}

fn raw_operation(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawOperation> {
    Ok(RawOperation {
        op_id: row.get(0)?,
        kind: row.get(1)?,
        guest_id: row.get(2)?,
        vmid: row.get(3)?,
        job_id: row.get(4)?,
        request_id: row.get(5)?,
        status: row.get(6)?,
        error: row.get(7)?,
        started_ms: row.get(8)?,
        ended_ms: row.get(9)?,
        correlation_id: row.get(10)?,
    })
}

impl RawOperation {
    fn into_operation(self) -> Result<Operation, JournalError> {
        const T: &str = "operations";
        let status = OpStatus::parse(&self.status).ok_or(JournalError::Corrupt {
            table: T,
            column: "status",
            value: self.status.clone(),
        })?;
        Ok(Operation {
            op_id: parse_op_id(self.op_id, T)?,
            kind: self.kind,
            guest_id: self.guest_id,
            vmid: opt_u32(self.vmid, T, "vmid")?,
            job_id: self.job_id,
            request_id: self.request_id,
            correlation_id: self.correlation_id,
            status,
            error: self.error,
            started_at: from_ms(self.started_ms, T, "started_ms")?,
            ended_at: opt_from_ms(self.ended_ms, T, "ended_ms")?,
        })
    }
}

const SELECT_STEP: &str = "SELECT op_id, seq, name, detail, state, upid, warnings, error,
        intent_ms, sent_ms, ended_ms FROM op_steps";

struct RawStep {
    op_id: String,
    seq: u32,
    name: String,
    detail: String,
    state: String,
    upid: Option<String>,
    warnings: Option<i64>,
    error: Option<String>,
    intent_ms: i64,
    sent_ms: Option<i64>,
    ended_ms: Option<i64>,
}

fn raw_step(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawStep> {
    Ok(RawStep {
        op_id: row.get(0)?,
        seq: row.get(1)?,
        name: row.get(2)?,
        detail: row.get(3)?,
        state: row.get(4)?,
        upid: row.get(5)?,
        warnings: row.get(6)?,
        error: row.get(7)?,
        intent_ms: row.get(8)?,
        sent_ms: row.get(9)?,
        ended_ms: row.get(10)?,
    })
}

impl RawStep {
    fn into_step(self) -> Result<Step, JournalError> {
        const T: &str = "op_steps";
        let detail = serde_json::from_str(&self.detail).map_err(|_| JournalError::Corrupt {
            table: T,
            column: "detail",
            value: self.detail.clone(),
        })?;
        Ok(Step {
            op_id: parse_op_id(self.op_id, T)?,
            seq: self.seq,
            name: self.name,
            detail,
            state: parse_step_state(self.state)?,
            upid: self.upid,
            warnings: opt_u32(self.warnings, T, "warnings")?,
            error: self.error,
            intent_at: from_ms(self.intent_ms, T, "intent_ms")?,
            sent_at: opt_from_ms(self.sent_ms, T, "sent_ms")?,
            ended_at: opt_from_ms(self.ended_ms, T, "ended_ms")?,
        })
    }
}
