//! Storage, backup, restore-test and escrow watch: the newest good backup per guest per target and
//! the newest passing restore test per guest per tier the hub has heard of (`last_good`,
//! `last_passed`, never moved backwards), when the hub began expecting each guest's restore
//! tests (`restore_test_clock`), and the alerts [`crate::report_alerts`] plans from the merged
//! report and the desired state, opened and resolved in `watch_alerts` with their history in
//! `events`; each opening and each recovery is also recorded in `alerts`. Written once for both
//! stores.

use std::collections::BTreeSet;

use bosun_proto::desired::DesiredState;
use bosun_proto::report::StateReport;
use rusqlite::params;
use uuid::Uuid;

use super::alert_triage::insert_alert;
use super::codec::{ts, uuid};
use super::stored_report::stored_report;
use super::tx::{Row, Tx};
use super::{StoreError, StoreResult, WatchChange};
use crate::deadman::PlannedAlert;
use crate::report_alerts::restore_results;
use crate::report_alerts::{
    self, HubRecords, LastGood, LastPassed, OpenWatch, RestoreTestClock, WatchKind,
};

/// The good backups the hub remembers for a host.
pub(super) fn last_good(tx: Tx<'_, '_>, host: &str) -> StoreResult<Vec<LastGood>> {
    let rows = host_rows(
        tx,
        "SELECT guest_id, target, tier, at_ms FROM last_good WHERE host_id = ?1",
        host,
        "read last good backups",
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<Option<i64>>(2)?,
                r.get::<i64>(3)?,
            ))
        },
    )?;
    rows.into_iter()
        .map(|(guest_id, target, tier, at_ms)| {
            Ok(LastGood {
                guest_id: uuid(&guest_id)?,
                target,
                tier: tier.and_then(|t| u32::try_from(t).ok()),
                at: ts(at_ms)?,
            })
        })
        .collect()
}

/// Every row `query` (the host id its `?1`) gives, each read by `row`.
fn host_rows<T>(
    tx: Tx<'_, '_>,
    query: &str,
    host: &str,
    what: &'static str,
    row: impl FnMut(&Row<'_, '_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    tx.query_map(what, query, params![host], row)
}

/// Remembers the good backups `report` shows; an older one never replaces a newer one.
fn remember_last_good(tx: Tx<'_, '_>, host: &str, report: &StateReport) -> StoreResult<()> {
    for good in report_alerts::reported_last_good(report) {
        tx.execute("remember last good backup", "INSERT INTO last_good (host_id, guest_id, target, tier, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (host_id, guest_id, target) DO UPDATE
             SET at_ms = excluded.at_ms, tier = COALESCE(excluded.tier, last_good.tier)
             WHERE excluded.at_ms > last_good.at_ms", params![
                host,
                good.guest_id.to_string(),
                good.target,
                good.tier,
                good.at.as_millisecond()
            ])?;
    }
    Ok(())
}

/// The host's desired state, if one was set.
fn desired_state(tx: Tx<'_, '_>, host: &str) -> StoreResult<Option<DesiredState>> {
    let document: Option<String> = tx.query_opt(
        "read desired state",
        "SELECT document FROM desired WHERE host_id = ?1",
        params![host],
        |r| r.get(0),
    )?;
    document
        .as_deref()
        .map(super::codec::parse("desired state"))
        .transpose()
}

/// The passing restore tests the hub remembers for a host.
pub(super) fn last_passed(tx: Tx<'_, '_>, host: &str) -> StoreResult<Vec<LastPassed>> {
    let rows = host_rows(
        tx,
        "SELECT guest_id, tier, at_ms FROM last_passed WHERE host_id = ?1",
        host,
        "read last passing restore tests",
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<i64>(2)?)),
    )?;
    rows.into_iter()
        .map(|(guest_id, tier, at_ms)| {
            Ok(LastPassed {
                guest_id: uuid(&guest_id)?,
                tier: (!tier.is_empty()).then_some(tier),
                at: ts(at_ms)?,
            })
        })
        .collect()
}

/// Remembers the passing restore tests `report` shows; an older one never replaces a newer
/// one.
fn remember_last_passed(tx: Tx<'_, '_>, host: &str, report: &StateReport) -> StoreResult<()> {
    for passed in report_alerts::reported_last_passed(report) {
        tx.execute(
            "remember last passing restore test",
            "INSERT INTO last_passed (host_id, guest_id, tier, at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (host_id, guest_id, tier) DO UPDATE SET at_ms = excluded.at_ms
             WHERE excluded.at_ms > last_passed.at_ms",
            params![
                host,
                passed.guest_id.to_string(),
                passed.tier.unwrap_or_default(),
                passed.at.as_millisecond()
            ],
        )?;
    }
    Ok(())
}

/// Starts the restore-test clock of every guest in `watched` that has none at `now_ms`, stops
/// the clocks of the host's other guests, and returns the running ones.
fn restore_test_clocks(
    tx: Tx<'_, '_>,
    host: &str,
    watched: &BTreeSet<Uuid>,
    now_ms: i64,
) -> StoreResult<Vec<RestoreTestClock>> {
    let mut clocks = Vec::with_capacity(watched.len());
    let mut stopped = Vec::new();
    let rows = host_rows(
        tx,
        "SELECT guest_id, since_ms FROM restore_test_clock WHERE host_id = ?1",
        host,
        "read restore-test clocks",
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
    )?;
    for (guest_id, since_ms) in rows {
        let guest_id = uuid(&guest_id)?;
        if watched.contains(&guest_id) {
            clocks.push(RestoreTestClock {
                guest_id,
                since: ts(since_ms)?,
            });
        } else {
            stopped.push(guest_id);
        }
    }
    for guest_id in stopped {
        tx.execute(
            "stop restore-test clock",
            "DELETE FROM restore_test_clock WHERE host_id = ?1 AND guest_id = ?2",
            params![host, guest_id.to_string()],
        )?;
    }
    for &guest_id in watched {
        if clocks.iter().any(|c| c.guest_id == guest_id) {
            continue;
        }
        tx.execute(
            "start restore-test clock",
            "INSERT INTO restore_test_clock (host_id, guest_id, since_ms) VALUES (?1, ?2, ?3)",
            params![host, guest_id.to_string(), now_ms],
        )?;
        clocks.push(RestoreTestClock {
            guest_id,
            since: ts(now_ms)?,
        });
    }
    Ok(clocks)
}

fn open_watches(tx: Tx<'_, '_>, host: &str) -> StoreResult<Vec<OpenWatch>> {
    let rows = host_rows(
        tx,
        "SELECT kind, subject, opened_ms FROM watch_alerts WHERE host_id = ?1",
        host,
        "read open watch alerts",
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<i64>(2)?)),
    )?;
    rows.into_iter()
        .map(|(kind, subject, opened_ms)| {
            Ok(OpenWatch {
                kind: WatchKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
                    what: "watch alert kind",
                    reason: format!("unknown kind `{kind}`"),
                })?,
                subject,
                opened_at: ts(opened_ms)?,
            })
        })
        .collect()
}

/// Judges one host's stored report, desired state and escrow at `now_ms`: remembers its good
/// backups and passing restore tests, runs its guests' restore-test clocks, opens and resolves
/// its storage, backup, restore-test and escrow alerts (recording an alert for each opening and each
/// recovery), and returns what changed.
pub(super) fn judge(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    hostname: &str,
    now_ms: i64,
) -> StoreResult<Vec<WatchChange>> {
    let report = stored_report(tx, &host_id.to_string())?;
    judge_report(tx, host_id, hostname, now_ms, report.as_ref())
}

/// [`judge`] with the stored report already at hand (`None`: the host has none).
pub(super) fn judge_report(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    hostname: &str,
    now_ms: i64,
    report: Option<&StateReport>,
) -> StoreResult<Vec<WatchChange>> {
    let host = host_id.to_string();
    let Some(report) = report else {
        // Nothing to judge until a report arrives (the poll that brings it judges it).
        set_judge_due(tx, &host, None)?;
        return Ok(Vec::new());
    };
    remember_last_good(tx, &host, report)?;
    remember_last_passed(tx, &host, report)?;
    let desired = desired_state(tx, &host)?;
    let watched = restore_results::watched(desired.as_ref(), report);
    let clocks = restore_test_clocks(tx, &host, &watched, now_ms)?;
    let last_good = last_good(tx, &host)?;
    let last_passed = last_passed(tx, &host)?;
    let escrow_fingerprint = super::escrow::stored_fingerprint(tx, &host)?;
    let records = HubRecords {
        desired: desired.as_ref(),
        last_good: &last_good,
        last_passed: &last_passed,
        clocks: &clocks,
        escrow_fingerprint: escrow_fingerprint.as_deref(),
    };
    let now = ts(now_ms)?;
    let plan = report_alerts::plan(hostname, &open_watches(tx, &host)?, report, &records, now);
    let next = report_alerts::next_change(report, &records, now);
    set_judge_due(tx, &host, Some(due_ms(now_ms, next)))?;
    let mut changes = Vec::with_capacity(plan.raise.len() + plan.resolve.len());
    for condition in plan.raise {
        tx.execute("open watch alert", "INSERT INTO watch_alerts (host_id, kind, subject, opened_ms, message) VALUES (?1, ?2, ?3, ?4, ?5)", params![
                host,
                condition.kind.as_str(),
                condition.subject,
                now_ms,
                condition.message
            ])?;
        tx.event(
            now_ms,
            Some(host_id),
            condition.kind.as_str(),
            &serde_json::json!({
                "subject": condition.subject,
                "message": condition.message,
                "detail": condition.detail,
            }),
        )?;
        let alert = insert_alert(
            tx,
            now_ms,
            &PlannedAlert {
                kind: condition.kind.alert_kind(),
                host_id: Some(host_id),
                hostname: Some(hostname.to_owned()),
                message: condition.message.clone(),
                subject: Some(condition.subject.clone()),
            },
        )?;
        changes.push(WatchChange {
            host_id,
            hostname: hostname.to_owned(),
            kind: condition.kind,
            event: condition.kind.as_str(),
            subject: condition.subject,
            opened: true,
            message: condition.message,
            alert: Some(alert),
        });
    }
    for resolution in plan.resolve {
        tx.execute(
            "resolve watch alert",
            "DELETE FROM watch_alerts WHERE host_id = ?1 AND kind = ?2 AND subject = ?3",
            params![host, resolution.open.kind.as_str(), resolution.open.subject],
        )?;
        tx.event(
            now_ms,
            Some(host_id),
            resolution.event_kind(),
            &serde_json::json!({
                "subject": resolution.open.subject,
                "resolves": resolution.open.kind.as_str(),
                "open_since": resolution.open.opened_at,
                "message": resolution.message,
            }),
        )?;
        let alert = resolution
            .alert_kind()
            .map(|kind| {
                insert_alert(
                    tx,
                    now_ms,
                    &PlannedAlert {
                        kind,
                        host_id: Some(host_id),
                        hostname: Some(hostname.to_owned()),
                        message: resolution.message.clone(),
                        subject: Some(resolution.open.subject.clone()),
                    },
                )
            })
            .transpose()?;
        changes.push(WatchChange {
            host_id,
            hostname: hostname.to_owned(),
            kind: resolution.open.kind,
            event: resolution.event_kind(),
            subject: resolution.open.subject.clone(),
            opened: false,
            message: resolution.message,
            alert,
        });
    }
    Ok(changes)
}

/// Longest a host with a report goes unjudged: the backup sweep judges it again at the latest
/// this long after its last judgment, even when nothing it reports turns overdue before.
/// (A tier's cadence is taken when the host is judged; a schedule whose gaps vary, say hourly
/// on weekdays only, may turn a guest overdue earlier than foreseen, and then no later than
/// this.)
pub const MAX_JUDGE_GAP_MS: i64 = 3_600_000;

/// When the backup sweep judges a host judged at `now_ms` again: just after `next`, the
/// instant after which its conditions change with time alone, and within
/// [`MAX_JUDGE_GAP_MS`].
fn due_ms(now_ms: i64, next: Option<jiff::Timestamp>) -> i64 {
    let latest = now_ms.saturating_add(MAX_JUDGE_GAP_MS);
    next.map_or(latest, |at| {
        at.as_millisecond().saturating_add(1).min(latest)
    })
}

/// Records when the backup sweep judges the host next (`None`: not until it reports).
fn set_judge_due(tx: Tx<'_, '_>, host: &str, due_ms: Option<i64>) -> StoreResult<()> {
    tx.execute(
        "schedule the next judgment",
        "UPDATE hosts SET judge_due_ms = ?1 WHERE host_id = ?2",
        params![due_ms, host],
    )?;
    Ok(())
}

/// Has the backup sweep judge the host at its next pass, as something it weighs changed (its
/// desired state).
pub(super) fn judge_soon(tx: Tx<'_, '_>, host: &str, now_ms: i64) -> StoreResult<()> {
    set_judge_due(tx, host, Some(now_ms))
}

/// The hosts due for judgment at `?1` (`judge_due_ms`, an index), at most `?2`, the longest
/// due first, each with whether it is judged (active, with a report).
pub(super) const SWEEP_SQL: &str = "
    SELECT host_id, hostname, status = 'active' AND report_seq IS NOT NULL
    FROM hosts WHERE judge_due_ms <= ?1 ORDER BY judge_due_ms LIMIT ?2";

/// Hosts read at a time by a sweep slice.
const SWEEP_BATCH: i64 = 64;

/// Judges the hosts due at `now_ms` (the sweeper's pass: backups and restore tests turn
/// overdue while a host reports nothing new; each judgment says when the host is due again),
/// until `budget` has passed (at least one host is visited). Returns what changed and whether
/// hosts are left due. Each store runs it in slices, one transaction each, so polls are never
/// held up for long.
pub(super) fn sweep_slice(
    tx: Tx<'_, '_>,
    now_ms: i64,
    budget: std::time::Duration,
) -> StoreResult<(Vec<WatchChange>, bool)> {
    let started = std::time::Instant::now();
    let mut changes = Vec::new();
    loop {
        let batch: Vec<(String, String, bool)> = tx.query_map(
            "sweep backups",
            SWEEP_SQL,
            params![now_ms, SWEEP_BATCH],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        if batch.is_empty() {
            return Ok((changes, false));
        }
        for (host_id, hostname, judged) in batch {
            if judged && still_active(tx, uuid(&host_id)?)? {
                changes.extend(judge(tx, uuid(&host_id)?, &hostname, now_ms)?);
            } else {
                // Judged again once it is active and reports.
                set_judge_due(tx, &host_id, None)?;
            }
            if started.elapsed() >= budget {
                return Ok((changes, true));
            }
        }
    }
}

/// Whether a host the sweep listed may be judged. On PostgreSQL its row is locked first, as a
/// poll's is, and its status read again: another replica may have revoked it since the list
/// was read. SQLite's one writer has no one to race.
fn still_active(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<bool> {
    match tx {
        Tx::Sqlite(_) => Ok(true),
        Tx::Postgres(_) => match tx.require_host(host_id) {
            Ok(status) => Ok(status == bosun_proto::admin::HostStatus::Active),
            // Gone since the list was read: the next sweep sees it as it is.
            Err(StoreError::UnknownHost { .. }) => Ok(false),
            Err(other) => Err(other),
        },
    }
}

/// `report` with each backup's `last_ok_at` raised to the good backup the hub remembers for
/// that guest and target, and each restore test's `last_passed_at` to the passing test it
/// remembers for that guest and tier (the agent may have lost its own record, or never sent
/// one).
pub(super) fn with_remembered(
    tx: Tx<'_, '_>,
    host: &str,
    report: &mut StateReport,
) -> StoreResult<()> {
    let passed = last_passed(tx, host)?;
    for test in report
        .restore_tests
        .iter_mut()
        .chain(report.last_restore_test.iter_mut())
    {
        let known = passed
            .iter()
            .filter(|p| p.guest_id == test.guest_id && p.tier == test.tier)
            .map(|p| p.at)
            .max();
        test.last_passed_at = test.last_passed_at.max(known);
    }
    let remembered = last_good(tx, host)?;
    for backup in &mut report.last_backups {
        let known = remembered
            .iter()
            .filter(|g| g.guest_id == backup.guest_id && g.target == backup.target)
            .map(|g| g.at)
            .max();
        backup.last_ok_at = backup.last_ok_at.max(known);
    }
    Ok(())
}
