//! What operators do with open alerts, for both stores: acknowledgements (`alert_acks`, one per
//! open condition, holding for the opening it was made on) and silences (`alert_silences`,
//! bounded in time and in number per host). An alert raised while a silence of its host, kind
//! and subject is in force is stored with the silence's id (`alerts.silenced_by`), which keeps
//! it off the webhook ([`crate::alerts::AlertSink`]). Every acknowledgement, silence and early
//! end is an event.

use std::collections::HashMap;

use bosun_proto::admin::{Alert, AlertKind, OpenAlert};
use bosun_proto::alert_triage::{AckAlert, AlertAck, CreateSilence, Silence};
use uuid::Uuid;

use super::codec::{alert_kind, signed, ts, ts_opt, unsigned, uuid};
use super::tx::{Row, Tx};
use super::{StoreError, StoreResult};
use crate::deadman::PlannedAlert;

/// Most silences in force per host: more are refused (`TooManySilences`).
pub const MAX_SILENCES_PER_HOST: usize = 64;

/// Most silences one listing returns.
const MAX_LISTED: i64 = 10_000;

/// How long an ended silence is kept (alerts name it in `silenced_by`): 30 days.
const KEEP_ENDED_MS: i64 = 30 * 24 * 3_600_000;

/// Records an alert and returns it with its id, and the silence in force it falls under.
pub(super) fn insert_alert(
    tx: Tx<'_, '_>,
    now_ms: i64,
    alert: &PlannedAlert,
) -> StoreResult<Alert> {
    let silenced_by = matching_silence(
        tx,
        alert.host_id,
        alert.kind,
        alert.subject.as_deref(),
        now_ms,
    )?;
    let id: i64 = tx.query_row(
        "insert alert",
        "INSERT INTO alerts (at_ms, kind, host_id, hostname, message, silenced_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        rusqlite::params![
            now_ms,
            alert.kind.as_str(),
            alert.host_id.map(|h| h.to_string()),
            alert.hostname,
            alert.message,
            silenced_by
        ],
        |r| r.get(0),
    )?;
    recorded(alert, id, now_ms, silenced_by)
}

/// `alert` as recorded: with its id, when, and the silence it fell under.
fn recorded(
    alert: &PlannedAlert,
    id: i64,
    now_ms: i64,
    silenced_by: Option<i64>,
) -> StoreResult<Alert> {
    Ok(Alert {
        id: unsigned(id),
        at: ts(now_ms)?,
        kind: alert.kind,
        host_id: alert.host_id,
        hostname: alert.hostname.clone(),
        message: alert.message.clone(),
        silenced_by: silenced_by.map(unsigned),
    })
}

/// Most alerts one statement of [`insert_alerts`] records.
const ALERT_CHUNK: usize = 256;

/// Records many alerts, as [`insert_alert`] records one, with two statements per
/// [`ALERT_CHUNK`] host alerts instead of two per alert (the silences in force on the chunk's
/// hosts, then the rows): a sweep that pages a third of a large fleet at once was otherwise
/// tens of thousands of round trips to PostgreSQL in one transaction. Returned in `alerts`'
/// order. An alert of no host, or of a host already seen, is recorded on its own.
pub(super) fn insert_alerts(
    tx: Tx<'_, '_>,
    now_ms: i64,
    alerts: &[&PlannedAlert],
) -> StoreResult<Vec<Alert>> {
    let mut done: Vec<Option<Alert>> = vec![None; alerts.len()];
    let mut seen = std::collections::HashSet::new();
    let mut bulk = Vec::new();
    for (at, alert) in alerts.iter().enumerate() {
        match alert.host_id {
            Some(host) if seen.insert(host) => bulk.push((at, host, *alert)),
            _ => done[at] = Some(insert_alert(tx, now_ms, alert)?),
        }
    }
    let mut rest = bulk.as_slice();
    while !rest.is_empty() {
        let len = super::tx::chunk_len(rest.len(), ALERT_CHUNK);
        let (chunk, after) = rest.split_at(len);
        rest = after;
        let hosts: Vec<Uuid> = chunk.iter().map(|(_, host, _)| *host).collect();
        let silences = silences_in_force(tx, &hosts, now_ms)?;
        let rows: Vec<(String, &str, Option<i64>)> = chunk
            .iter()
            .map(|(_, host, alert)| {
                let silenced_by = silences
                    .get(host)
                    .and_then(|held| first_matching(held, alert.kind, alert.subject.as_deref()));
                (host.to_string(), alert.kind.as_str(), silenced_by)
            })
            .collect();
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(len * 6);
        for ((_, _, alert), (host, kind, silenced_by)) in chunk.iter().zip(&rows) {
            values.extend([
                &now_ms as &dyn rusqlite::ToSql,
                kind,
                host,
                &alert.hostname,
                &alert.message,
                silenced_by,
            ]);
        }
        let sql = format!(
            "INSERT INTO alerts (at_ms, kind, host_id, hostname, message, silenced_by)
             VALUES {} RETURNING id, host_id",
            super::tx::values_rows(len, &["BIGINT", "TEXT", "TEXT", "TEXT", "TEXT", "BIGINT"])
        );
        let ids: HashMap<String, i64> = tx
            .query_map("insert alert", &sql, &values, |r| {
                Ok((r.get(1)?, r.get(0)?))
            })?
            .into_iter()
            .collect();
        for ((at, _, alert), (host, _, silenced_by)) in chunk.iter().zip(rows) {
            let id = ids.get(&host).copied().ok_or_else(|| StoreError::Corrupt {
                what: "alert",
                reason: format!("no id came back for the alert of host {host}"),
            })?;
            done[*at] = Some(recorded(alert, id, now_ms, silenced_by)?);
        }
    }
    Ok(done.into_iter().flatten().collect())
}

/// A silence in force as an alert is matched to it: its id, and the kind and subject it is
/// limited to, if any.
type HeldSilence = (i64, Option<String>, Option<String>);

/// The silences in force at `now_ms` on each of `hosts`.
fn silences_in_force(
    tx: Tx<'_, '_>,
    hosts: &[Uuid],
    now_ms: i64,
) -> StoreResult<HashMap<Uuid, Vec<HeldSilence>>> {
    let ids: Vec<String> = hosts.iter().map(Uuid::to_string).collect();
    let mut values: Vec<&dyn rusqlite::ToSql> = vec![&now_ms];
    values.extend(ids.iter().map(|id| id as &dyn rusqlite::ToSql));
    let list = (2..=ids.len() + 1)
        .map(|n| format!("?{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT host_id, id, kind, subject FROM alert_silences
         WHERE host_id IN ({list}) AND removed_ms IS NULL AND +until_ms > ?1"
    );
    let rows: Vec<(String, i64, Option<String>, Option<String>)> =
        tx.query_map("match alert silence", &sql, &values, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
    let mut by_host: HashMap<Uuid, Vec<_>> = HashMap::new();
    for (host, id, kind, subject) in rows {
        by_host
            .entry(uuid(&host)?)
            .or_default()
            .push((id, kind, subject));
    }
    Ok(by_host)
}

/// The oldest of `silences` an alert of `kind` about `subject` falls under.
fn first_matching(silences: &[HeldSilence], kind: AlertKind, subject: Option<&str>) -> Option<i64> {
    silences
        .iter()
        .filter(|(_, silenced_kind, silenced_subject)| {
            silenced_kind.as_deref().is_none_or(|k| k == kind.as_str())
                && silenced_subject
                    .as_deref()
                    .is_none_or(|s| Some(s) == subject)
        })
        .map(|(id, ..)| *id)
        .min()
}

/// The silence in force at `now_ms` that an alert of `kind` about `subject` on `host_id`
/// falls under, if any (the oldest, when several do). Hub-wide alerts are never silenced.
pub(super) fn matching_silence(
    tx: Tx<'_, '_>,
    host_id: Option<Uuid>,
    kind: AlertKind,
    subject: Option<&str>,
    now_ms: i64,
) -> StoreResult<Option<i64>> {
    let Some(host_id) = host_id else {
        return Ok(None);
    };
    let silences: Vec<HeldSilence> = tx.query_map(
        "match alert silence",
        MATCHING_SILENCE_SQL,
        &[&host_id.to_string(), &now_ms],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    Ok(first_matching(&silences, kind, subject))
}

/// The silences in force at `?2` on host `?1` (at most [`MAX_SILENCES_PER_HOST`]), matched
/// to the alert in Rust. Written so SQLite compiles it once: a bound parameter in a range
/// on an indexed column (`until_ms`, kept from the index by the unary `+`) or beside an
/// `ORDER BY` has it compile the statement again for every alert.
pub(super) const MATCHING_SILENCE_SQL: &str = "SELECT id, kind, subject FROM alert_silences
     WHERE host_id = ?1 AND removed_ms IS NULL AND +until_ms > ?2";

/// Acknowledges the open alert `ack` names; returns it as now listed.
pub(super) fn ack(
    tx: Tx<'_, '_>,
    ack: &AckAlert,
    now_ms: i64,
    open: Vec<OpenAlert>,
) -> StoreResult<OpenAlert> {
    let mut alert = typed_back(ack, open)?;
    let ack = &AckAlert {
        subject: alert.subject.clone(),
        ..ack.clone()
    };
    let since_ms = alert.since.as_millisecond();
    tx.execute(
        "acknowledge alert",
        "INSERT INTO alert_acks (host_id, kind, subject, since_ms, acked_ms, note)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (host_id, kind, subject) DO UPDATE SET
                 since_ms = excluded.since_ms, acked_ms = excluded.acked_ms, note = excluded.note",
        &[
            &ack.host_id.to_string(),
            &ack.kind.as_str(),
            &ack.subject,
            &since_ms,
            &now_ms,
            &ack.note,
        ],
    )?;
    tx.event(
        now_ms,
        Some(ack.host_id),
        "alert_acknowledged",
        &serde_json::json!({
            "kind": ack.kind.as_str(),
            "subject": ack.subject,
            "since": alert.since,
            "note": ack.note,
        }),
    )?;
    alert.acknowledged = Some(AlertAck {
        at: ts(now_ms)?,
        note: ack.note.clone(),
    });
    Ok(alert)
}

/// The open alert of the host and kind `ack` names whose subject is `ack.subject`, or failing
/// that, the one whose subject starts with it (at least [`bosun_proto::ids::MIN_TYPED`]
/// characters, ASCII case ignored: a guest id prefix as the views print it); a prefix of
/// several subjects is refused listing them (at most [`bosun_proto::ids::MAX_CANDIDATES`]).
fn typed_back(ack: &AckAlert, open: Vec<OpenAlert>) -> StoreResult<OpenAlert> {
    let mut of_kind: Vec<OpenAlert> = open
        .into_iter()
        .filter(|a| a.host_id == ack.host_id && a.kind == ack.kind)
        .collect();
    if let Some(at) = of_kind.iter().position(|a| a.subject == ack.subject) {
        return Ok(of_kind.swap_remove(at));
    }
    let typed = ack.subject.to_ascii_lowercase();
    if typed.len() >= bosun_proto::ids::MIN_TYPED {
        of_kind.retain(|a| a.subject.to_ascii_lowercase().starts_with(&typed));
    } else {
        of_kind.clear();
    }
    of_kind.sort_by(|a, b| a.subject.cmp(&b.subject));
    match of_kind.len() {
        0 => Err(StoreError::UnknownAlert {
            host_id: ack.host_id,
            kind: ack.kind.as_str(),
            subject: ack.subject.clone(),
        }),
        1 => Ok(of_kind.remove(0)),
        found => Err(StoreError::AmbiguousAlert {
            host_id: ack.host_id,
            kind: ack.kind.as_str(),
            subject: ack.subject.clone(),
            candidates: of_kind
                .iter()
                .take(bosun_proto::ids::MAX_CANDIDATES)
                .map(|a| a.subject.clone())
                .collect(),
            more: found > bosun_proto::ids::MAX_CANDIDATES,
        }),
    }
}

/// Fills in each open alert's acknowledgement (made on its current opening) and the silence in
/// force at `now_ms` that covers it.
pub(super) fn annotate(
    tx: Tx<'_, '_>,
    host: Option<&str>,
    open: &mut [OpenAlert],
    now_ms: i64,
) -> StoreResult<()> {
    if open.is_empty() {
        return Ok(());
    }
    let acks = tx.query_map(
        "read alert acknowledgements",
        "SELECT host_id, kind, subject, since_ms, acked_ms, note FROM alert_acks
             WHERE CAST(?1 AS TEXT) IS NULL OR host_id = ?1",
        &[&host],
        |r| {
            Ok((
                (
                    r.get::<String>(0)?,
                    r.get::<String>(1)?,
                    r.get::<String>(2)?,
                ),
                (r.get::<i64>(3)?, r.get::<i64>(4)?, r.get::<String>(5)?),
            ))
        },
    )?;
    let acks: HashMap<_, _> = acks.into_iter().collect();
    let silences = in_force(tx, host, now_ms)?;
    for alert in open.iter_mut() {
        let host_id = alert.host_id.to_string();
        let key = (
            host_id,
            alert.kind.as_str().to_owned(),
            alert.subject.clone(),
        );
        if let Some((since_ms, acked_ms, note)) = acks.get(&key)
            && *since_ms == alert.since.as_millisecond()
        {
            alert.acknowledged = Some(AlertAck {
                at: ts(*acked_ms)?,
                note: note.clone(),
            });
        }
        alert.silenced_by = silences
            .iter()
            .find(|s| {
                s.host_id == alert.host_id
                    && s.kind.is_none_or(|k| k == alert.kind)
                    && s.subject.as_deref().is_none_or(|s| s == alert.subject)
            })
            .map(|s| s.id);
    }
    Ok(())
}

/// Creates a silence.
pub(super) fn create_silence(
    tx: Tx<'_, '_>,
    request: &CreateSilence,
    now_ms: i64,
) -> StoreResult<Silence> {
    tx.require_host(request.host_id)?;
    let host = request.host_id.to_string();
    if in_force(tx, Some(&host), now_ms)?.len() >= MAX_SILENCES_PER_HOST {
        return Err(StoreError::TooManySilences {
            host_id: request.host_id,
            limit: MAX_SILENCES_PER_HOST,
        });
    }
    tx.execute(
        "forget ended silences",
        "DELETE FROM alert_silences WHERE COALESCE(removed_ms, until_ms) < ?1",
        &[&now_ms.saturating_sub(KEEP_ENDED_MS)],
    )?;
    let until_ms = now_ms.saturating_add(i64::from(request.duration_seconds) * 1000);
    let kind = request.kind.map(AlertKind::as_str);
    let id: i64 = tx.query_row(
        "create silence",
        "INSERT INTO alert_silences (host_id, kind, subject, created_ms, until_ms, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        &[
            &host,
            &kind,
            &request.subject,
            &now_ms,
            &until_ms,
            &request.reason,
        ],
        |r| r.get(0),
    )?;
    let silence = read(tx, id)?.ok_or(StoreError::UnknownSilence { id: unsigned(id) })?;
    tx.event(
        now_ms,
        Some(request.host_id),
        "alert_silenced",
        &serde_json::json!({
            "silence_id": silence.id,
            "kind": kind,
            "subject": request.subject,
            "until": silence.until,
            "reason": request.reason,
        }),
    )?;
    Ok(silence)
}

/// Ends a silence in force early.
pub(super) fn remove_silence(tx: Tx<'_, '_>, id: u64, now_ms: i64) -> StoreResult<Silence> {
    let unknown = || StoreError::UnknownSilence { id };
    let mut silence = read(tx, signed(id))?.ok_or_else(unknown)?;
    if silence.removed_at.is_some() || silence.until.as_millisecond() <= now_ms {
        return Err(unknown());
    }
    tx.execute(
        "remove silence",
        "UPDATE alert_silences SET removed_ms = ?2 WHERE id = ?1",
        &[&signed(id), &now_ms],
    )?;
    tx.event(
        now_ms,
        Some(silence.host_id),
        "alert_unsilenced",
        &serde_json::json!({
            "silence_id": id,
            "kind": silence.kind.map(AlertKind::as_str),
            "subject": silence.subject,
            "reason": silence.reason,
        }),
    )?;
    silence.removed_at = Some(ts(now_ms)?);
    Ok(silence)
}

/// The silences in force at `now_ms` (of `host`), oldest first.
pub(super) fn in_force(
    tx: Tx<'_, '_>,
    host: Option<&str>,
    now_ms: i64,
) -> StoreResult<Vec<Silence>> {
    tx.query_map(
        "list silences",
        &format!(
            "{SELECT_SILENCE} WHERE s.removed_ms IS NULL AND s.until_ms > ?1
                 AND (CAST(?2 AS TEXT) IS NULL OR s.host_id = ?2)
             ORDER BY s.id LIMIT ?3"
        ),
        &[&now_ms, &host, &MAX_LISTED],
        silence_row,
    )?
    .into_iter()
    .collect()
}

/// The newest `limit` silences in force at `now_ms` on any host (at most [`MAX_LISTED`]),
/// oldest first.
pub(super) fn newest_in_force(
    tx: Tx<'_, '_>,
    now_ms: i64,
    limit: u32,
) -> StoreResult<Vec<Silence>> {
    let limit = i64::from(limit).min(MAX_LISTED);
    tx.query_map(
        "list silences",
        &format!(
            "SELECT * FROM (
                 {SELECT_SILENCE} WHERE s.removed_ms IS NULL AND s.until_ms > ?1
                 ORDER BY s.id DESC LIMIT ?2
             ) AS newest ORDER BY id"
        ),
        &[&now_ms, &limit],
        silence_row,
    )?
    .into_iter()
    .collect()
}

const SELECT_SILENCE: &str = "SELECT s.id, s.host_id, h.hostname, s.kind, s.subject, s.created_ms,
        s.until_ms, s.reason, s.removed_ms
    FROM alert_silences s JOIN hosts h ON h.host_id = s.host_id";

fn read(tx: Tx<'_, '_>, id: i64) -> StoreResult<Option<Silence>> {
    tx.query_opt(
        "read silence",
        &format!("{SELECT_SILENCE} WHERE s.id = ?1"),
        &[&id],
        silence_row,
    )?
    .transpose()
}

/// A silence's row; the outer result is the backend's, the inner one the decoding's.
fn silence_row(r: &Row<'_, '_>) -> rusqlite::Result<StoreResult<Silence>> {
    let id: i64 = r.get(0)?;
    let host_id: String = r.get(1)?;
    let hostname: String = r.get(2)?;
    let kind: Option<String> = r.get(3)?;
    let subject: Option<String> = r.get(4)?;
    let created_ms: i64 = r.get(5)?;
    let until_ms: i64 = r.get(6)?;
    let reason: String = r.get(7)?;
    let removed_ms: Option<i64> = r.get(8)?;
    Ok((|| {
        Ok(Silence {
            id: unsigned(id),
            host_id: uuid(&host_id)?,
            hostname,
            kind: kind.as_deref().map(alert_kind).transpose()?,
            subject,
            created_at: ts(created_ms)?,
            until: ts(until_ms)?,
            reason,
            removed_at: ts_opt(removed_ms)?,
        })
    })())
}
