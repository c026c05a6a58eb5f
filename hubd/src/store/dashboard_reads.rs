//! The dashboard's reads ([`super::dashboard`]), for both stores.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use bosun_proto::admin::{Alert, AlertKind};
use bosun_proto::alert_triage::AckAlert;
use rusqlite::params;

use super::alert_triage;
use super::codec::{alert_kind, ts, unsigned, uuid};
use super::dashboard::{DashboardFacts, DashboardQuery, MAX_ALERTS, OpenAlert};
use super::stored_report;
use super::tx::Tx;
use super::{StoreError, StoreResult};
use crate::report_alerts::WatchKind;

/// Reads everything [`DashboardFacts`] holds; run inside one read transaction.
pub(super) fn facts(tx: Tx<'_, '_>, query: DashboardQuery) -> StoreResult<DashboardFacts> {
    let host = query.host_id.map(|h| h.to_string());
    let open_alerts = open_alerts(tx, host.as_deref(), query.now_ms)?;
    let key_rotation = if super::hub_keys::announced(tx)?.pins.len() > 1 {
        Some(super::hub_keys::rotation(tx)?)
    } else {
        None
    };
    Ok(DashboardFacts {
        hub_silence_suspected: suspicion_open(tx)?,
        open_alerts,
        recent_alerts: recent_alerts(tx, host.as_deref(), query.alert_limit.min(MAX_ALERTS))?,
        key_rotation,
    })
}

/// The open alerts (of `host`), oldest first, with their acknowledgements and silences.
fn open_alerts(tx: Tx<'_, '_>, host: Option<&str>, now_ms: i64) -> StoreResult<Vec<OpenAlert>> {
    let mut open = overdue_hosts(tx, host)?;
    open.extend(open_watches(tx, host)?);
    name_guest_subjects(tx, &mut open)?;
    open.sort_by(|a, b| a.since.cmp(&b.since).then(a.hostname.cmp(&b.hostname)));
    alert_triage::annotate(tx, host, &mut open, now_ms)?;
    Ok(open)
}

/// Gives each open alert whose subject is a guest's id (alone, before `@target`, or before
/// `/volume`) that guest's hostname from its host's last report, reading each such host's
/// report once. The hostname is the agent's text: the views escape it like every other remote
/// string.
fn name_guest_subjects(tx: Tx<'_, '_>, open: &mut [OpenAlert]) -> StoreResult<()> {
    let mut names: HashMap<uuid::Uuid, HashMap<uuid::Uuid, String>> = HashMap::new();
    for alert in open.iter_mut() {
        let (head, rest) = match alert.subject.find(['@', '/']) {
            Some(at) => (&alert.subject[..at], Some(&alert.subject[at..])),
            None => (alert.subject.as_str(), None),
        };
        let Ok(guest) = uuid::Uuid::try_parse(head) else {
            continue;
        };
        if guest == alert.host_id {
            continue;
        }
        let guests = match names.entry(alert.host_id) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(slot) => slot.insert(guest_names(tx, alert.host_id)?),
        };
        alert.subject_name = guests.get(&guest).map(|name| match rest {
            Some(rest) => format!("{name}{rest}"),
            None => name.clone(),
        });
    }
    Ok(())
}

/// The guests' hostnames of the host's last report (its base: guests are never live-only).
fn guest_names(tx: Tx<'_, '_>, host: uuid::Uuid) -> StoreResult<HashMap<uuid::Uuid, String>> {
    /// Only what naming needs of a stored report.
    #[derive(serde::Deserialize)]
    struct Guests {
        #[serde(default)]
        guests: Vec<Guest>,
    }
    #[derive(serde::Deserialize)]
    struct Guest {
        guest_id: Option<uuid::Uuid>,
        #[serde(default)]
        hostname: String,
    }
    let Some(text) = stored_report::base(tx, &host.to_string(), stored_report::Base::Current)?
    else {
        return Ok(HashMap::new());
    };
    let report: Guests = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        what: "stored report",
        reason: e.to_string(),
    })?;
    Ok(report
        .guests
        .into_iter()
        .filter(|g| !g.hostname.is_empty())
        .filter_map(|g| Some((g.guest_id?, g.hostname)))
        .collect())
}

/// Acknowledges the open alert `ack` names ([`alert_triage::ack`]).
pub(super) fn ack(tx: Tx<'_, '_>, ack: &AckAlert, now_ms: i64) -> StoreResult<OpenAlert> {
    let host = ack.host_id.to_string();
    let open = open_alerts(tx, Some(&host), now_ms)?;
    alert_triage::ack(tx, ack, now_ms, open)
}

fn suspicion_open(tx: Tx<'_, '_>) -> StoreResult<bool> {
    let value: Option<Vec<u8>> = tx.query_opt(
        "read hub silence",
        "SELECT value FROM meta WHERE key = 'suspicion_open'",
        &[],
        |r| r.get(0),
    )?;
    Ok(value.is_some_and(|v| v == b"1"))
}

/// Active hosts the dead-man's switch marked overdue.
fn overdue_hosts(tx: Tx<'_, '_>, host: Option<&str>) -> StoreResult<Vec<OpenAlert>> {
    let rows = tx.query_map(
        "read overdue hosts",
        "SELECT host_id, hostname, overdue_since_ms, last_seen_ms, poll_interval_s FROM hosts
             WHERE status = 'active' AND overdue_since_ms IS NOT NULL
               AND (CAST(?1 AS TEXT) IS NULL OR host_id = ?1)",
        params![host],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<i64>(2)?,
                r.get::<Option<i64>>(3)?,
                r.get::<u32>(4)?,
            ))
        },
    )?;
    rows.into_iter()
        .map(|(id, hostname, since_ms, last_seen_ms, interval)| {
            let silent = last_seen_ms.map_or_else(
                || "never polled".to_owned(),
                |seen| format!("silent for {}s", since_ms.saturating_sub(seen) / 1000),
            );
            Ok(OpenAlert {
                subject_name: None,
                host_id: uuid(&id)?,
                message: format!(
                    "host {hostname} is overdue: {silent} when it was marked (poll interval {interval}s)"
                ),
                subject: id,
                hostname,
                kind: AlertKind::HostOverdue,
                since: ts(since_ms)?,
                acknowledged: None,
                silenced_by: None,
            })
        })
        .collect()
}

/// Open storage, backup, restore-test and escrow alerts.
fn open_watches(tx: Tx<'_, '_>, host: Option<&str>) -> StoreResult<Vec<OpenAlert>> {
    let rows = tx.query_map(
        "read open alerts",
        "SELECT w.host_id, h.hostname, w.kind, w.subject, w.opened_ms, w.message
             FROM watch_alerts w JOIN hosts h ON h.host_id = w.host_id
             WHERE CAST(?1 AS TEXT) IS NULL OR w.host_id = ?1",
        params![host],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<String>(3)?,
                r.get::<i64>(4)?,
                r.get::<String>(5)?,
            ))
        },
    )?;
    rows.into_iter()
        .map(|(id, hostname, kind, subject, opened_ms, message)| {
            let kind = WatchKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
                what: "watch alert kind",
                reason: format!("unknown kind `{kind}`"),
            })?;
            Ok(OpenAlert {
                subject_name: None,
                host_id: uuid(&id)?,
                hostname,
                kind: kind.alert_kind(),
                subject,
                since: ts(opened_ms)?,
                message,
                acknowledged: None,
                silenced_by: None,
            })
        })
        .collect()
}

/// The newest `limit` alerts (of `host`), newest last.
pub(super) fn recent_alerts(
    tx: Tx<'_, '_>,
    host: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<Alert>> {
    let rows = tx.query_map("read recent alerts", "SELECT id, at_ms, kind, host_id, hostname, message, silenced_by FROM
             (SELECT * FROM alerts WHERE CAST(?1 AS TEXT) IS NULL OR host_id = ?1 ORDER BY id DESC LIMIT ?2)
             AS newest ORDER BY id", params![host, limit], |r| {
                Ok((
                    r.get::<i64>(0)?,
                    r.get::<i64>(1)?,
                    r.get::<String>(2)?,
                    r.get::<Option<String>>(3)?,
                    r.get::<Option<String>>(4)?,
                    r.get::<String>(5)?,
                    r.get::<Option<i64>>(6)?,
                ))
            })?;
    rows.into_iter()
        .map(
            |(id, at_ms, kind, host_id, hostname, message, silenced_by)| {
                Ok(Alert {
                    id: unsigned(id),
                    at: ts(at_ms)?,
                    kind: alert_kind(&kind)?,
                    host_id: host_id.as_deref().map(uuid).transpose()?,
                    hostname,
                    message,
                    silenced_by: silenced_by.map(unsigned),
                })
            },
        )
        .collect()
}
