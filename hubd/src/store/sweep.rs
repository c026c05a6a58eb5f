//! The dead-man sweep's reads and writes: which active hosts are overdue or silent past their
//! grace window ([`liveness`]), and the sweep's plan applied to them ([`apply_sweep`]) under a
//! compare-and-set on each host's last poll.

use rusqlite::params;
use uuid::Uuid;

use super::alert_triage::insert_alerts;
use super::codec::uuid;
use super::tx::{Dialect, Tx, chunk_len};
use super::{StoreError, StoreResult};
use crate::deadman::{AlertState, HostChange, LivenessRow, PlannedAlert, SweepPlan};

/// Active hosts overdue, or silent past their grace window (`?1` now, `?2` the grace factor;
/// a host that announced a planned stop is among them, and the planner gives it its stop bound).
/// It reads every host row, once per sweep on a read connection: an index on when hosts were
/// last seen would have to move in every poll.
pub(super) const LIVENESS_SQL: &str = "
    SELECT host_id, hostname, poll_interval_s, last_seen_ms, overdue_since_ms, alert_state,
           stopped_ms
    FROM hosts WHERE status = 'active' AND last_seen_ms IS NOT NULL
      AND (overdue_since_ms IS NOT NULL OR last_seen_ms < ?1 - ?2 * poll_interval_s * 1000)";

/// How many active hosts have polled at all, as the writes that change it keep it
/// ([`super::monitored`]), so a sweep reads the host rows once.
pub(super) fn monitored_sql(dialect: Dialect) -> &'static str {
    dialect.pick(
        "SELECT value FROM meta WHERE key = 'monitored_hosts'",
        super::monitored::FOLD_SQL,
    )
}

/// Active hosts that are overdue or silent past their grace window at `now_ms`, how many active
/// hosts have polled at all, and whether a connectivity suspicion is open.
pub(super) fn liveness(
    tx: Tx<'_, '_>,
    now_ms: i64,
    grace_factor: u32,
) -> StoreResult<(Vec<LivenessRow>, usize, bool)> {
    type Raw = (
        String,
        String,
        u32,
        Option<i64>,
        Option<i64>,
        String,
        Option<i64>,
    );
    let rows: Vec<Raw> = tx.query_map(
        "read liveness",
        LIVENESS_SQL,
        params![now_ms, grace_factor],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        },
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for (host_id, hostname, poll_interval_s, last_seen_ms, overdue_since_ms, state, stopped) in rows
    {
        out.push(LivenessRow {
            host_id: uuid(&host_id)?,
            hostname,
            poll_interval_s,
            last_seen_ms,
            overdue_since_ms,
            stopped_since_ms: stopped,
            alert_state: AlertState::parse(&state).ok_or(StoreError::Corrupt {
                what: "alert state",
                reason: format!("unknown state `{state}`"),
            })?,
        });
    }
    let monitored: i64 = tx.query_row("read liveness", monitored_sql(tx.dialect()), &[], |r| {
        r.get(0)
    })?;
    let open: Option<Vec<u8>> = tx.query_opt(
        "read liveness",
        "SELECT value FROM meta WHERE key = 'suspicion_open'",
        &[],
        |r| r.get(0),
    )?;
    Ok((
        out,
        usize::try_from(monitored).unwrap_or(0),
        open.is_some_and(|v| v == b"1"),
    ))
}

/// Applies a sweep's plan. Each host's change holds only while its last poll is the one the
/// plan saw (compare-and-set on `last_seen_ms`): a poll that lands between the plan's read and
/// this write wins, and the host is left as the poll wrote it, with neither its `overdue`
/// event nor its overdue alert. Nothing locks the table, so polls of the other hosts go on
/// while a sweep writes; rows are written in host-id order, the order poll batches lock them
/// in, so the two wait for each other instead of deadlocking.
///
/// The changes go [`SWEEP_CHUNK`] hosts to a statement (and their `overdue` events one
/// statement a chunk): when a third of a large fleet goes silent at once, a statement per host
/// was tens of thousands of round trips to PostgreSQL in one transaction, seconds in which the
/// sweep's CPU slowed every other host's poll.
pub(super) fn apply_sweep(
    tx: Tx<'_, '_>,
    plan: &SweepPlan,
    now_ms: i64,
) -> StoreResult<Vec<bosun_proto::admin::Alert>> {
    let mut changes: Vec<&HostChange> = plan.changes.iter().collect();
    changes.sort_by_key(|change| change.host_id);
    let mut polled = std::collections::HashSet::new();
    let mut rest = changes.as_slice();
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(chunk_len(rest.len(), SWEEP_CHUNK));
        rest = after;
        let changed = apply_sweep_chunk(tx, chunk)?;
        polled.extend(
            chunk
                .iter()
                .map(|change| change.host_id)
                .filter(|host| !changed.contains(host)),
        );
        let newly: Vec<&HostChange> = chunk
            .iter()
            .copied()
            .filter(|change| change.newly_overdue && changed.contains(&change.host_id))
            .collect();
        log_overdue(tx, &newly, now_ms)?;
    }
    tx.execute(
        "apply sweep",
        "INSERT INTO meta (key, value) VALUES ('suspicion_open', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![if plan.suspicion_open {
            b"1".as_slice()
        } else {
            b"0".as_slice()
        }],
    )?;
    let alerts: Vec<&PlannedAlert> = plan
        .alerts
        .iter()
        .filter(|alert| alert.host_id.is_none_or(|host| !polled.contains(&host)))
        .collect();
    insert_alerts(tx, now_ms, &alerts)
}

/// Most hosts one statement of a sweep changes.
const SWEEP_CHUNK: usize = 256;

/// One statement for `chunk`: each host's overdue mark and alert state, where its last poll is
/// still the plan's. Returns the hosts it changed.
fn apply_sweep_chunk(
    tx: Tx<'_, '_>,
    chunk: &[&HostChange],
) -> StoreResult<std::collections::HashSet<Uuid>> {
    let sql = format!(
        "UPDATE hosts SET overdue_since_ms = v.column2, alert_state = v.column3
         FROM (VALUES {}) AS v
         WHERE hosts.host_id = v.column1 AND hosts.status = 'active'
           AND hosts.last_seen_ms = v.column4
         RETURNING hosts.host_id",
        super::tx::values_rows(chunk.len(), &["TEXT", "BIGINT", "TEXT", "BIGINT"])
    );
    let rows: Vec<(String, &str)> = chunk
        .iter()
        .map(|c| (c.host_id.to_string(), c.alert_state.as_str()))
        .collect();
    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 4);
    for (change, (id, state)) in chunk.iter().zip(&rows) {
        values.extend([
            id as &dyn rusqlite::ToSql,
            &change.overdue_since_ms,
            state,
            &change.last_seen_ms,
        ]);
    }
    let changed: Vec<String> = tx.query_map("apply sweep", &sql, &values, |r| r.get(0))?;
    changed.iter().map(|id| uuid(id)).collect()
}

/// The `overdue` event of each host in `newly`, in one statement.
fn log_overdue(tx: Tx<'_, '_>, newly: &[&HostChange], now_ms: i64) -> StoreResult<()> {
    let mut rest = newly;
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(chunk_len(rest.len(), SWEEP_CHUNK));
        rest = after;
        let sql = format!(
            "INSERT INTO events (at_ms, host_id, kind, detail) VALUES {}",
            super::tx::values_rows(chunk.len(), &["BIGINT", "TEXT", "TEXT", "TEXT"])
        );
        let rows: Vec<(String, &str)> = chunk
            .iter()
            .map(|change| {
                let detail = if change.after_stop {
                    r#"{"after_planned_stop":true}"#
                } else {
                    "{}"
                };
                (change.host_id.to_string(), detail)
            })
            .collect();
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 4);
        for (id, detail) in &rows {
            values.extend([&now_ms as &dyn rusqlite::ToSql, id, &"overdue", detail]);
        }
        tx.execute_later("apply sweep", &sql, &values)?;
    }
    Ok(())
}
