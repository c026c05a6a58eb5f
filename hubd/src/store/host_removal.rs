//! Removing a revoked host, for both stores (decision 0040): every row the hub keeps about it
//! goes in one transaction (its desired state and history, jobs, idempotency keys, escrow blob,
//! the audit trail its agent reported and the archive of a replaced box's trail, its figures'
//! history, the memory of good backups and passing restore tests, open alerts,
//! acknowledgements, silences, stored operations, unused restore-mode tokens naming it, and the
//! host row). The event log and the alert history stay under their retention bounds; a `host_removed` event names the host.

use bosun_proto::admin::HostStatus;
use uuid::Uuid;

use super::tx::Tx;
use super::{StoreError, StoreResult};

/// The tables holding rows about one host, children before the `hosts` row they reference,
/// each with the statement deleting the host's rows (`?1`: the host id).
const HOST_ROWS: &[(&str, &str)] = &[
    ("desired", "DELETE FROM desired WHERE host_id = ?1"),
    (
        "host_capabilities",
        "DELETE FROM host_capabilities WHERE host_id = ?1",
    ),
    (
        "host_capability_tags",
        "DELETE FROM host_capability_tags WHERE host_id = ?1",
    ),
    ("host_labels", "DELETE FROM host_labels WHERE host_id = ?1"),
    (
        "host_reports",
        "DELETE FROM host_reports WHERE host_id = ?1",
    ),
    (
        "desired_history",
        "DELETE FROM desired_history WHERE host_id = ?1",
    ),
    ("idempotency", "DELETE FROM idempotency WHERE host_id = ?1"),
    ("jobs", "DELETE FROM jobs WHERE host_id = ?1"),
    ("escrow", "DELETE FROM escrow WHERE host_id = ?1"),
    ("audit", "DELETE FROM audit WHERE host_id = ?1"),
    (
        "replaced_audit",
        "DELETE FROM replaced_audit WHERE host_id = ?1",
    ),
    ("last_good", "DELETE FROM last_good WHERE host_id = ?1"),
    (
        "host_history",
        "DELETE FROM host_history WHERE host_id = ?1",
    ),
    (
        "watch_alerts",
        "DELETE FROM watch_alerts WHERE host_id = ?1",
    ),
    ("last_passed", "DELETE FROM last_passed WHERE host_id = ?1"),
    (
        "restore_test_clock",
        "DELETE FROM restore_test_clock WHERE host_id = ?1",
    ),
    (
        "host_operations",
        "DELETE FROM host_operations WHERE host_id = ?1",
    ),
    ("alert_acks", "DELETE FROM alert_acks WHERE host_id = ?1"),
    (
        "alert_silences",
        "DELETE FROM alert_silences WHERE host_id = ?1",
    ),
    (
        "enroll_tokens",
        "DELETE FROM enroll_tokens WHERE restore_host = ?1 AND used_ms IS NULL",
    ),
];

/// What a removal took away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedHost {
    /// The host's id.
    pub host_id: Uuid,
    /// Its name when it was removed.
    pub hostname: String,
    /// Rows deleted per table (the host row not counted).
    pub rows: Vec<(&'static str, u64)>,
}

/// Removes the revoked host `host_id` and every row about it; [`StoreError::UnknownHost`] when
/// the hub does not know it, [`StoreError::HostNotRemovable`] when it is active or pending,
/// [`StoreError::EscrowHeld`] when the hub holds its escrow blob and `forget_escrow` is not
/// set: the blob is the one copy of the customer's wrapped key outside the box, so forgetting
/// it is said out loud.
pub(super) fn remove_host(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    forget_escrow: bool,
    now_ms: i64,
) -> StoreResult<RemovedHost> {
    let status = tx.require_host(host_id)?;
    if status != HostStatus::Revoked {
        return Err(StoreError::HostNotRemovable { host_id, status });
    }
    let id = host_id.to_string();
    let escrow: i64 = tx.query_row(
        "remove host",
        "SELECT COUNT(*) FROM escrow WHERE host_id = ?1",
        &[&id],
        |r| r.get(0),
    )?;
    if escrow > 0 && !forget_escrow {
        return Err(StoreError::EscrowHeld { host_id });
    }
    let hostname: String = tx.query_row(
        "remove host",
        "SELECT hostname FROM hosts WHERE host_id = ?1",
        &[&id],
        |r| r.get(0),
    )?;
    let mut rows = Vec::with_capacity(HOST_ROWS.len());
    for (table, sql) in HOST_ROWS {
        let deleted = tx.execute("remove host", sql, &[&id])?;
        rows.push((*table, u64::try_from(deleted).unwrap_or(u64::MAX)));
    }
    tx.execute(
        "remove host",
        "DELETE FROM hosts WHERE host_id = ?1",
        &[&id],
    )?;
    let deleted: serde_json::Map<String, serde_json::Value> = rows
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(table, n)| ((*table).to_owned(), (*n).into()))
        .collect();
    tx.event(
        now_ms,
        Some(host_id),
        "host_removed",
        &serde_json::json!({ "hostname": hostname, "deleted": deleted }),
    )?;
    Ok(RemovedHost {
        host_id,
        hostname,
        rows,
    })
}
