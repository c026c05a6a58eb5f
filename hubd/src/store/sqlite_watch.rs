//! Storage and backup watch: the newest good backup per guest per target the hub has heard of
//! (`last_good`, never moved backwards), and the alerts [`crate::report_alerts`] plans from the
//! merged report, opened and resolved in `watch_alerts` with their history in `events`; each
//! opening and each recovery is also recorded in `alerts`.

use bosun_proto::report::StateReport;
use rusqlite::{Connection, params};
use uuid::Uuid;

use super::sqlite::{event, insert_alert, sql, ts, uuid};
use super::{StoreError, StoreResult, WatchChange};
use crate::deadman::PlannedAlert;
use crate::report_alerts::{self, LastGood, OpenWatch, WatchKind};

/// The host's stored (merged) report, if any.
pub(super) fn stored_report(tx: &Connection, host: &str) -> StoreResult<Option<StateReport>> {
    let report: Option<String> = tx
        .prepare_cached("SELECT report FROM hosts WHERE host_id = ?1")
        .and_then(|mut stmt| stmt.query_row(params![host], |r| r.get(0)))
        .map_err(sql("read stored report"))?;
    report
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                what: "stored report",
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// The good backups the hub remembers for a host.
pub(super) fn last_good(tx: &Connection, host: &str) -> StoreResult<Vec<LastGood>> {
    let mut stmt = tx
        .prepare_cached("SELECT guest_id, target, tier, at_ms FROM last_good WHERE host_id = ?1")
        .map_err(sql("read last good backups"))?;
    let rows = stmt
        .query_map(params![host], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .map_err(sql("read last good backups"))?;
    let mut out = Vec::new();
    for row in rows {
        let (guest_id, target, tier, at_ms) = row.map_err(sql("read last good backups"))?;
        out.push(LastGood {
            guest_id: uuid(&guest_id)?,
            target,
            tier: tier.and_then(|t| u32::try_from(t).ok()),
            at: ts(at_ms)?,
        });
    }
    Ok(out)
}

/// Remembers the good backups `report` shows; an older one never replaces a newer one.
fn remember_last_good(tx: &Connection, host: &str, report: &StateReport) -> StoreResult<()> {
    for good in report_alerts::reported_last_good(report) {
        tx.prepare_cached(
            "INSERT INTO last_good (host_id, guest_id, target, tier, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (host_id, guest_id, target) DO UPDATE
             SET at_ms = excluded.at_ms, tier = COALESCE(excluded.tier, last_good.tier)
             WHERE excluded.at_ms > last_good.at_ms",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                host,
                good.guest_id.to_string(),
                good.target,
                good.tier,
                good.at.as_millisecond()
            ])
        })
        .map_err(sql("remember last good backup"))?;
    }
    Ok(())
}

fn open_watches(tx: &Connection, host: &str) -> StoreResult<Vec<OpenWatch>> {
    let mut stmt = tx
        .prepare_cached("SELECT kind, subject, opened_ms FROM watch_alerts WHERE host_id = ?1")
        .map_err(sql("read open watch alerts"))?;
    let rows = stmt
        .query_map(params![host], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(sql("read open watch alerts"))?;
    let mut out = Vec::new();
    for row in rows {
        let (kind, subject, opened_ms) = row.map_err(sql("read open watch alerts"))?;
        out.push(OpenWatch {
            kind: WatchKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
                what: "watch alert kind",
                reason: format!("unknown kind `{kind}`"),
            })?,
            subject,
            opened_at: ts(opened_ms)?,
        });
    }
    Ok(out)
}

/// Judges one host's stored report at `now_ms`: remembers its good backups, opens and
/// resolves its storage and backup alerts (recording an alert for each opening and each
/// recovery), and returns what changed.
pub(super) fn judge(
    tx: &Connection,
    host_id: Uuid,
    hostname: &str,
    now_ms: i64,
) -> StoreResult<Vec<WatchChange>> {
    let host = host_id.to_string();
    let Some(report) = stored_report(tx, &host)? else {
        return Ok(Vec::new());
    };
    remember_last_good(tx, &host, &report)?;
    let plan = report_alerts::plan(
        hostname,
        &open_watches(tx, &host)?,
        &report,
        &last_good(tx, &host)?,
        ts(now_ms)?,
    );
    let mut changes = Vec::with_capacity(plan.raise.len() + plan.resolve.len());
    for condition in plan.raise {
        tx.prepare_cached(
            "INSERT INTO watch_alerts (host_id, kind, subject, opened_ms, message) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                host,
                condition.kind.as_str(),
                condition.subject,
                now_ms,
                condition.message
            ])
        })
        .map_err(sql("open watch alert"))?;
        event(
            tx,
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
        tx.prepare_cached(
            "DELETE FROM watch_alerts WHERE host_id = ?1 AND kind = ?2 AND subject = ?3",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                host,
                resolution.open.kind.as_str(),
                resolution.open.subject
            ])
        })
        .map_err(sql("resolve watch alert"))?;
        event(
            tx,
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

/// Judges every active host with a report at `now_ms` (the sweeper's pass: backups turn
/// overdue while a host reports nothing new).
pub(super) fn sweep(tx: &Connection, now_ms: i64) -> StoreResult<Vec<WatchChange>> {
    let hosts: Vec<(String, String)> = tx
        .prepare_cached(
            "SELECT host_id, hostname FROM hosts WHERE status = 'active' AND report IS NOT NULL",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(sql("sweep backups"))?;
    let mut changes = Vec::new();
    for (host_id, hostname) in hosts {
        changes.extend(judge(tx, uuid(&host_id)?, &hostname, now_ms)?);
    }
    Ok(changes)
}

/// `report` with each backup's `last_ok_at` raised to the good backup the hub remembers for
/// that guest and target (the agent may have lost its own record, or never sent one).
pub(super) fn with_last_good(
    tx: &Connection,
    host: &str,
    report: &mut StateReport,
) -> StoreResult<()> {
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
