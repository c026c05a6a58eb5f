//! The operations and their steps: an operation begins, each step's intent is written
//! before its Proxmox call, its UPID after it and its outcome when it ends; the operation
//! ends `done`, `failed` or `compensated`. Replay on start reads the unfinished ones.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, Transaction, params};
use uuid::Uuid;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::{
    NewOperation, OpId, OpStatus, Operation, Step, StepOutcome, StepState, UnfinishedOperation,
};
use super::store::{Store, from_ms, opt_from_ms, opt_u32, parse_op_id, query_err, to_ms};

impl Store {
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
            .prepare_cached(&format!(
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
            .prepare_cached(&format!("{SELECT_STEP} WHERE op_id = ?1 ORDER BY seq"))
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
            .prepare_cached(&format!(
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
        let mut last_step_of = self
            .conn
            .prepare_cached(&format!(
                "{SELECT_STEP} WHERE op_id = ?1 ORDER BY seq DESC LIMIT 1"
            ))
            .map_err(query_err("read last step"))?;
        for operation in ops {
            let last_step = last_step_of
                .query_row([operation.op_id.to_string()], raw_step)
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

journal_calls! {
    /// See [`Store::begin_operation`].
    fn begin_operation(new: NewOperation) -> OpId = |s| s.begin_operation(&new);
    /// See [`Store::begin_correlated_operation`].
    fn begin_correlated_operation(new: NewOperation, correlation_id: Option<String>) -> OpId
        = |s| s.begin_correlated_operation(&new, correlation_id.as_deref());
    /// See [`Store::step_sent`].
    fn step_sent(op_id: OpId, seq: u32, upid: Option<String>) -> ()
        = |s| s.step_sent(op_id, seq, upid.as_deref());
    /// See [`Store::step_finished`].
    fn step_finished(op_id: OpId, seq: u32, outcome: StepOutcome) -> ()
        = |s| s.step_finished(op_id, seq, &outcome);
    /// See [`Store::finish_operation`].
    fn finish_operation(op_id: OpId, status: OpStatus, error: Option<String>) -> ()
        = |s| s.finish_operation(op_id, status, error.as_deref());
    /// See [`Store::operation`].
    fn operation(op_id: OpId) -> Option<Operation> = |s| s.operation(op_id);
    /// See [`Store::steps`].
    fn steps(op_id: OpId) -> Vec<Step> = |s| s.steps(op_id);
    /// See [`Store::unfinished_operations`].
    fn unfinished_operations() -> Vec<UnfinishedOperation> = |s| s.unfinished_operations();
}

impl JournalHandle {
    /// See [`Store::recent_operations`]; each with its steps.
    pub async fn recent_operations(
        &self,
        limit: u32,
    ) -> Result<Vec<(Operation, Vec<Step>)>, JournalError> {
        self.call(move |s| {
            s.recent_operations(limit)?
                .into_iter()
                .map(|op| {
                    let steps = s.steps(op.op_id)?;
                    Ok((op, steps))
                })
                .collect()
        })
        .await
    }

    /// See [`Store::recent_operations`]; each with its steps, but for the ended operations
    /// among `ended_known`: the caller holds what they were, and an ended operation never
    /// changes again (every write to an operation or its steps requires it running), so their
    /// steps are not read (`None`).
    pub async fn recent_operations_but(
        &self,
        limit: u32,
        ended_known: HashSet<Uuid>,
    ) -> Result<Vec<(Operation, Option<Vec<Step>>)>, JournalError> {
        self.call(move |s| {
            s.recent_operations(limit)?
                .into_iter()
                .map(|op| {
                    if op.status.is_terminal() && ended_known.contains(&op.op_id.as_uuid()) {
                        return Ok((op, None));
                    }
                    let steps = s.steps(op.op_id)?;
                    Ok((op, Some(steps)))
                })
                .collect()
        })
        .await
    }

    /// See [`Store::step_intent`].
    pub async fn step_intent(
        &self,
        op_id: OpId,
        name: impl Into<String>,
        detail: serde_json::Value,
    ) -> Result<u32, JournalError> {
        let name = name.into();
        self.call(move |s| s.step_intent(op_id, &name, &detail))
            .await
    }
}
