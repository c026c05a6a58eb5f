//! The customer-visible side of the audit log: what a guest's controller may read about its
//! own guest (`GET /v1/audit` on the local API).
//!
//! - Every operation done to a guest (created, restored, resized, started or stopped, backed
//!   up, snapshotted, rolled back, restore-tested, decommissioned, its controller rolled out)
//!   writes an `operation.finished` row when it ends, in the same transaction that ends it, so
//!   the chained log holds it even if the agent dies the next moment.
//! - A guest reads the rows of its own guest id, and the host-wide rows every guest of the
//!   host may see: a break-glass door opened or closed on its host (the operator's key and
//!   signer stay out of its view; the reason and the deadline are shown), and each host-level
//!   command run through it (its kind and exit status only).
//! - A break-glass command that touched one of the agent's guests (`guest-config VMID`, run
//!   with its consent or refused without it) is that guest's own row, shown to it in full and to
//!   no other guest; so are its consent's grants and revokes (decision 0080).
//! - Pages run newest first; `before` is the `seq` of the oldest row of the previous page.

use rusqlite::{Transaction, params};
use serde_json::{Value, json};

use super::audit::{AuditEntry, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::{OpId, OpStatus};
use super::store::Store;
use super::store::from_ms;
use crate::ops::op_kind::OpKind;

/// The row an operation done to a guest writes when it ends.
pub const OPERATION_FINISHED: &str = "operation.finished";

/// Most rows one page holds.
pub const MAX_PAGE: u32 = 100;

/// A page of one guest's own rows: `?1` before, `?2` its guest id, `?3` the limit.
pub(super) const GUEST_ROWS: &str = "WHERE guest_id = ?2 AND seq < ?1 ORDER BY seq DESC LIMIT ?3";

/// A page of the host-wide rows: `?1` before, `?2` to `?4` their events ([`HOST_WIDE`]), `?5`
/// the limit. (`+guest_id` keeps SQLite off the guest index, where every row of no guest
/// shares `NULL`.)
pub(super) const HOST_WIDE_ROWS: &str = "WHERE event IN (?2, ?3, ?4) AND +guest_id IS NULL \
     AND seq < ?1 ORDER BY seq DESC LIMIT ?5";

/// Most characters of an operation's error a guest is shown.
const MAX_ERROR_CHARS: usize = 300;

/// Host-wide rows every guest of the host sees, with the facts it is shown.
const HOST_WIDE: [(&str, &[&str]); 3] = [
    (
        super::break_glass::OPENED_ACTION,
        &["account", "reason", "expires_at"],
    ),
    (
        super::break_glass::CLOSED_ACTION,
        &["account", "reason", "expires_at", "closed_by"],
    ),
    (
        super::break_glass::COMMAND_ACTION,
        &["account", "kind", "status"],
    ),
];

/// Whether an operation of `kind` is something done to the guest its customer should be able
/// to read about (and not Bosun's own upkeep: bootstraps, network guards, sweeps, self-updates).
pub fn customer_visible(kind: OpKind) -> bool {
    match kind {
        OpKind::Provision
        | OpKind::ProvisionVm
        | OpKind::SetSpec
        | OpKind::GrowRootfs
        | OpKind::Start
        | OpKind::Stop
        | OpKind::RestoreJob
        | OpKind::DecommissionJob
        | OpKind::ForceBackupJob
        | OpKind::StorageDetachJob
        | OpKind::StorageWipeJob
        | OpKind::RestoreBulkJob
        | OpKind::Backup
        | OpKind::Snapshot
        | OpKind::Rollback
        | OpKind::RestoreTest
        | OpKind::Recover
        | OpKind::RecoverVm
        | OpKind::ControllerUpdateJob
        | OpKind::AdoptJob => true,
        OpKind::DeliverBootstrap
        | OpKind::ReissueBootstrap
        | OpKind::GuardNetwork
        | OpKind::BreakGlassJob
        | OpKind::AgentUpdateJob
        | OpKind::LateLandingSweep
        | OpKind::GoldenVerify => false,
    }
}

/// Writes the `operation.finished` row of `op_id` inside the transaction that ends it, when
/// it is a customer-visible operation of a guest.
pub(super) fn record_finished(
    tx: &Transaction<'_>,
    op_id: OpId,
    status: OpStatus,
    error: Option<&str>,
    now_ms: i64,
) -> Result<(), JournalError> {
    let row: (
        String,
        Option<String>,
        Option<i64>,
        Option<String>,
        Option<String>,
    ) = tx
        .query_row(
            "SELECT kind, guest_id, vmid, job_id, request_id FROM operations WHERE op_id = ?1",
            params![op_id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .map_err(|source| JournalError::Query {
            operation: "read a finished operation",
            source,
        })?;
    let (kind, guest_id, vmid, job_id, request_id) = row;
    let visible = OpKind::parse(&kind).is_some_and(customer_visible);
    let Some(guest_id) = guest_id.filter(|_| visible) else {
        return Ok(());
    };
    let mut detail = json!({ "kind": kind, "status": status.as_str() });
    if let Some(error) = error {
        detail["error"] = error
            .chars()
            .take(MAX_ERROR_CHARS)
            .collect::<String>()
            .into();
    }
    let event = AuditEvent {
        event: OPERATION_FINISHED.to_owned(),
        op_id: Some(op_id),
        job_id,
        guest_id: Some(guest_id),
        vmid: vmid.and_then(|v| u32::try_from(v).ok()),
        request_id,
        detail,
    };
    super::audit::append(tx, from_ms(now_ms, "operations", "ended_ms")?, &event)?;
    Ok(())
}

/// One row of a guest's view.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestAuditRow {
    /// Its position in the host's chain.
    pub seq: u64,
    /// When it was written.
    pub at: jiff::Timestamp,
    /// The event name.
    pub event: String,
    /// Whether it concerns the whole host rather than this guest.
    pub host_wide: bool,
    /// The facts the guest is shown.
    pub detail: Value,
}

impl Store {
    /// The newest rows `guest_id` may read, older than `before` (all when `None`), at most
    /// `limit` (clamped to 1..=[`MAX_PAGE`]), newest first.
    pub fn guest_audit(
        &self,
        guest_id: &str,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<GuestAuditRow>, JournalError> {
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let limit = limit.clamp(1, MAX_PAGE);
        let [(opened, _), (closed, _), (command, _)] = HOST_WIDE;
        // Two reads, each walking its own index newest first and stopping at `limit`
        // (`audit_log_by_guest`, `audit_log_by_event`), merged: one `OR` would walk the whole
        // log, every guest's rows, to fill a page of one guest's.
        let mut entries = self.audit_rows_where(GUEST_ROWS, params![before, guest_id, limit])?;
        entries.extend(self.audit_rows_where(
            HOST_WIDE_ROWS,
            params![before, opened, closed, command, limit],
        )?);
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.seq));
        entries.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(entries.into_iter().map(view).collect())
    }
}

/// What a guest is shown of `entry`.
fn view(entry: AuditEntry) -> GuestAuditRow {
    let shown = HOST_WIDE
        .iter()
        .find(|(name, _)| *name == entry.event.event && entry.event.guest_id.is_none());
    let detail = match shown {
        Some((_, fields)) => Value::Object(
            fields
                .iter()
                .filter_map(|f| Some(((*f).to_owned(), entry.event.detail.get(*f)?.clone())))
                .collect(),
        ),
        // The document promises an object: a row written without facts shows none.
        None => match entry.event.detail {
            Value::Object(facts) => Value::Object(facts),
            Value::Null => Value::Object(serde_json::Map::new()),
            other => json!({ "value": other }),
        },
    };
    GuestAuditRow {
        seq: entry.seq,
        at: entry.at,
        event: entry.event.event,
        host_wide: shown.is_some(),
        detail,
    }
}

journal_calls! {
    /// See [`Store::guest_audit`].
    fn guest_audit(guest_id: String, before: Option<u64>, limit: u32) -> Vec<GuestAuditRow>
        = |s| s.guest_audit(&guest_id, before, limit);
}
