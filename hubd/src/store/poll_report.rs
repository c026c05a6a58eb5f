//! What a poll's report does to the host's stored reports, decided apart from either store's
//! SQL so both stores follow one rule and write the host row once per poll.
//!
//! A full report replaces the stored one. A delta is merged into the stored report when its
//! base is exactly that report, or into the one before it when its base is that one (the
//! agent builds on the last report it saw acknowledged, one behind when it abandoned a held
//! poll). Anything else is not applied and the agent is asked for a full report.
//!
//! Whether the alerts are judged again follows what changed: a full report always; a delta
//! when it changes what they look at. Host health and the tunnel move on nearly every poll of
//! a live host (each sample's usage), so for them only what opens or resolves an alert counts
//! ([`report_alerts::health::verdict`]).

use bosun_proto::admin::{AlertKind, HostStatus};
use bosun_proto::delta::ReportDelta;
use bosun_proto::report::{AuditEntry, StateReport};
use uuid::Uuid;

use super::alert_triage::insert_alert;
use super::host_key_rotation::HostKeyFacts;
use super::sqlite::{host_status, signed, unsigned};
use super::tx::Tx;
use super::{PollRecord, PollRecorded, PollView, ReportUpdate, StoreError, StoreResult};
use crate::deadman::{AlertState, PlannedAlert};
use crate::report_alerts::{self, audit};
use crate::secret::SecretHash;

/// The columns of the host row a poll reads, in this order in both stores' statement
/// ([`HOST_ROW_COLUMNS`]).
pub(super) type RawHostRow = (
    String,
    Option<i64>,
    String,
    i64,
    String,
    Vec<u8>,
    bool,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    u32,
    Option<i64>,
    HostKeyFacts,
);

/// The columns of [`RawHostRow`], as both stores' statement selects them.
pub(super) const HOST_ROW_COLUMNS: &str = "hostname, overdue_since_ms, alert_state, \
    applied_generation, status, key_hash, full_report_wanted, report, report_seq, prev_seq, \
    audit_seq, poll_interval_s, stopped_ms, next_key_hash, key_issued_ms, key_rotate_ms";

/// What the host row says to a poll's answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostFacts {
    pub poll_interval_s: u32,
    /// The highest audit sequence stored.
    pub audit_acked_seq: Option<u64>,
    /// The stored report's number.
    pub report_seq: Option<u64>,
    /// Where the host's key is in its rotation.
    pub host_key: HostKeyFacts,
}

/// What waits for a host (`pending::pending`).
#[derive(Debug)]
pub(super) struct Pending {
    /// The current desired generation (0: none).
    pub generation: u64,
    /// Its document, unless the agent knows that generation.
    pub desired_json: Option<String>,
    /// Queued jobs: exact signed bytes and armored signature.
    pub jobs: Vec<(Vec<u8>, String)>,
    /// The operator's correlation id of the generation.
    pub correlation_id: Option<String>,
}

impl Pending {
    /// The poll's answer with what the host row says.
    pub fn view(self, facts: HostFacts) -> PollView {
        PollView {
            generation: self.generation,
            desired_json: self.desired_json,
            jobs: self.jobs,
            poll_interval_s: facts.poll_interval_s,
            audit_acked_seq: facts.audit_acked_seq,
            report_seq: facts.report_seq,
            correlation_id: self.correlation_id,
            host_key: facts.host_key,
        }
    }
}

/// The host row as a poll needs it.
#[derive(Debug)]
pub(super) struct HostRow {
    pub hostname: String,
    /// Since when the host is overdue, if it is.
    pub overdue_since: Option<i64>,
    /// Whether its overdue alert was sent (`deadman::AlertState`).
    pub alert_state: String,
    /// The generation it reported applied before this poll.
    pub old_applied: u64,
    /// Its stored reports.
    pub stored: Stored,
    /// The hub wants a full report (the host's keys) after an escrow blob it could not verify.
    pub keys_wanted: bool,
    /// The highest audit sequence stored before the poll.
    pub audit_seq: Option<u64>,
    /// The host's poll interval.
    pub poll_interval_s: u32,
    /// When its last poll before this one announced a planned stop, if it did.
    pub stopped_since: Option<i64>,
    /// Where its key is in its rotation.
    pub host_key: HostKeyFacts,
}

impl HostRow {
    /// The row of the polling host, once the poll's key matches the stored one and the host
    /// is active. (The handler checked the key against a cache; a restore-mode enrollment may
    /// have given the host a new one since.)
    pub fn checked(raw: RawHostRow, poll: &PollRecord) -> StoreResult<Self> {
        let (hostname, overdue_since, alert_state, old_applied, status, key_hash, keys_wanted) =
            (raw.0, raw.1, raw.2, raw.3, raw.4, raw.5, raw.6);
        if !SecretHash::from_slice(&key_hash).is_some_and(|stored| stored.matches(&poll.key_hash)) {
            return Err(StoreError::WrongHostKey {
                host_id: poll.host_id,
            });
        }
        let status = host_status(&status)?;
        if status != HostStatus::Active {
            return Err(StoreError::HostNotActive {
                host_id: poll.host_id,
                status,
            });
        }
        Ok(Self {
            hostname,
            overdue_since,
            alert_state,
            old_applied: unsigned(old_applied),
            stored: Stored {
                report: raw.7,
                seq: raw.8.map(unsigned),
                prev_seq: raw.9.map(unsigned),
            },
            keys_wanted,
            audit_seq: raw.10.map(unsigned),
            poll_interval_s: raw.11,
            stopped_since: raw.12,
            host_key: raw.13,
        })
    }
}

/// The report columns of a host row, as read before the poll.
#[derive(Debug, Default)]
pub(super) struct Stored {
    /// The stored report's text.
    pub report: Option<String>,
    /// Its number.
    pub seq: Option<u64>,
    /// The number of the report before it, if kept.
    pub prev_seq: Option<u64>,
}

/// How the host row's report columns change; [`Write::mode`] and [`Write::values`] are what
/// both stores' poll statement takes.
#[derive(Debug)]
pub(super) enum Write {
    /// Left as they are: the report was not applied.
    Keep,
    /// A full report: the previous report is dropped.
    Replace { json: String, seq: u64 },
    /// The stored report becomes the previous one; `json` is the new report (`None`: the
    /// same text, a heartbeat that only numbers it anew).
    Advance { json: Option<String>, seq: u64 },
    /// Merged into the previous report, which stays the previous one.
    OnPrevious { json: String, seq: u64 },
}

/// `mode` values of the poll statement (see [`Write::mode`]).
pub(super) const MODE_KEEP: i64 = 0;
/// The previous report is cleared.
pub(super) const MODE_REPLACE: i64 = 1;
/// The stored report moves to the previous one.
pub(super) const MODE_ADVANCE: i64 = 2;
/// Only the stored report changes.
pub(super) const MODE_ON_PREVIOUS: i64 = 3;

impl Write {
    /// The statement's mode.
    pub fn mode(&self) -> i64 {
        match self {
            Self::Keep => MODE_KEEP,
            Self::Replace { .. } => MODE_REPLACE,
            Self::Advance { .. } => MODE_ADVANCE,
            Self::OnPrevious { .. } => MODE_ON_PREVIOUS,
        }
    }

    /// The new report's text (`None`: keep the stored text) and number (`None`: keep it).
    pub fn values(&self) -> (Option<&str>, Option<u64>) {
        match self {
            Self::Keep => (None, None),
            Self::Replace { json, seq } | Self::OnPrevious { json, seq } => {
                (Some(json.as_str()), Some(*seq))
            }
            Self::Advance { json, seq } => (json.as_deref(), Some(*seq)),
        }
    }
}

/// What a poll's report does.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The row change.
    pub write: Write,
    /// Whether the report was applied (else the agent is asked for a full one).
    pub applied: bool,
    /// Whether the alerts that follow the report (guests, storage, backups, restore tests,
    /// escrow, health) must be judged again.
    pub judged: bool,
    /// The report the host row holds afterwards, when it was parsed on the way.
    merged: Option<StateReport>,
    /// Its text, when not parsed yet.
    merged_text: Option<String>,
}

impl Outcome {
    /// The report the host row holds after this poll (for judging audit entries against it).
    pub fn merged(&mut self) -> StoreResult<Option<&StateReport>> {
        if self.merged.is_none()
            && let Some(text) = self.merged_text.take()
        {
            self.merged = Some(parse(&text)?);
        }
        Ok(self.merged.as_ref())
    }
}

/// Decides what `update` does to the host's stored reports. `previous` reads the text of the
/// report before the stored one; it is called only for a delta built on it.
pub(super) fn decide(
    host: &str,
    stored: Stored,
    previous: impl FnOnce() -> StoreResult<Option<String>>,
    update: &ReportUpdate,
) -> StoreResult<Outcome> {
    match update {
        ReportUpdate::Full { seq, json } => {
            // An unreadable stored report is replaced like any other.
            let after = parse(json)?;
            Ok(Outcome {
                write: Write::Replace {
                    json: json.clone(),
                    seq: *seq,
                },
                applied: true,
                judged: true,
                merged: Some(after),
                merged_text: None,
            })
        }
        ReportUpdate::Delta(delta) => decide_delta(host, stored, previous, delta),
    }
}

fn decide_delta(
    host: &str,
    stored: Stored,
    previous: impl FnOnce() -> StoreResult<Option<String>>,
    delta: &ReportDelta,
) -> StoreResult<Outcome> {
    let refused = |merged_text| Outcome {
        write: Write::Keep,
        applied: false,
        judged: false,
        merged: None,
        merged_text,
    };
    if stored.seq.is_some_and(|s| delta.seq <= s) {
        tracing::debug!(host_id = host, seq = delta.seq, stored_seq = ?stored.seq, "report delta older than the stored report; ignored");
        return Ok(refused(stored.report));
    }
    // Seq 0 is an unnumbered report: never a base.
    let on = |seq: Option<u64>| delta.base_seq != 0 && seq == Some(delta.base_seq);
    if on(stored.seq) && stored.report.is_some() {
        if delta.changes_nothing() {
            return Ok(Outcome {
                write: Write::Advance {
                    json: None,
                    seq: delta.seq,
                },
                applied: true,
                judged: false,
                merged: None,
                merged_text: stored.report,
            });
        }
        let Some(base) = readable(host, stored.report.as_deref()) else {
            return Ok(refused(stored.report));
        };
        return merge(base, delta, |json, seq| Write::Advance {
            json: Some(json),
            seq,
        });
    }
    if on(stored.prev_seq) {
        // Built on the report before the stored one: merged into that, kept as previous.
        let Some(base) = readable(host, previous()?.as_deref()) else {
            return Ok(refused(stored.report));
        };
        return merge(base, delta, |json, seq| Write::OnPrevious { json, seq });
    }
    tracing::info!(
        host_id = host,
        base_seq = delta.base_seq,
        stored_seq = ?stored.seq,
        "report delta has no base here; asking for a full report"
    );
    Ok(refused(stored.report))
}

/// `delta` merged into `base`, written as `write` makes of the merged text and number.
fn merge(
    base: StateReport,
    delta: &ReportDelta,
    write: impl FnOnce(String, u64) -> Write,
) -> StoreResult<Outcome> {
    let mut merged = base.clone();
    merged.apply(delta);
    let judged = report_alerts::delta_is_judged(delta, &base, &merged);
    Ok(Outcome {
        write: write(serialize(&merged)?, delta.seq),
        applied: true,
        judged,
        merged: Some(merged),
        merged_text: None,
    })
}

/// The base report, parsed; `None` (and a warning) when it is missing or unreadable.
fn readable(host: &str, text: Option<&str>) -> Option<StateReport> {
    let report = text.and_then(|text| serde_json::from_str::<StateReport>(text).ok());
    if report.is_none() {
        tracing::warn!(
            host_id = host,
            "stored report unreadable; asking for a full report"
        );
    }
    report
}

/// A stored or arriving report's text, parsed.
pub(super) fn parse(text: &str) -> StoreResult<StateReport> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what: "stored report",
        reason: e.to_string(),
    })
}

fn serialize(report: &StateReport) -> StoreResult<String> {
    serde_json::to_string(report).map_err(|e| StoreError::Corrupt {
        what: "state report",
        reason: e.to_string(),
    })
}

/// What a poll records after its host row is written: the operation records, the applied
/// generation, acknowledged jobs, audit entries (judged against `merged`, the report the row
/// now holds), a planned stop announced or ended, and the host's recovery
/// when it was overdue. Alerts go into `recorded`.
pub(super) fn record_bookkeeping(
    tx: Tx<'_, '_>,
    poll: &PollRecord,
    row: &HostRow,
    merged: Option<&StateReport>,
    recorded: &mut PollRecorded,
) -> StoreResult<()> {
    let host = poll.host_id.to_string();
    let hostname = &row.hostname;
    let planned = |kind, message| PlannedAlert {
        kind,
        host_id: Some(poll.host_id),
        hostname: Some(hostname.clone()),
        message,
        subject: None,
    };
    super::desired::store_operations(tx, poll.host_id, &poll.operations)?;
    if poll.applied_generation != row.old_applied {
        // The document the host now runs stays; what neither it nor recent history needs goes.
        super::desired::prune(tx, &host)?;
    }
    if poll.applied_generation > row.old_applied {
        tx.event(
            poll.now_ms,
            Some(poll.host_id),
            "desired_applied",
            &serde_json::json!({ "generation": poll.applied_generation }),
        )?;
    }
    for job_id in &poll.acked_jobs {
        if ack_job(tx, &host, *job_id, poll.now_ms)? {
            tx.event(
                poll.now_ms,
                Some(poll.host_id),
                "job_acked",
                &serde_json::json!({ "job_id": job_id }),
            )?;
        }
    }
    for entry in &poll.audit {
        if !keep_audit(tx, &host, entry)? {
            continue;
        }
        let Some(finding) = audit::judge(hostname, merged, &entry.action, &entry.detail) else {
            continue;
        };
        if let Some((kind, detail)) = &finding.event {
            tx.event(poll.now_ms, Some(poll.host_id), kind, detail)?;
        }
        if let Some((kind, message)) = finding.alert {
            let alert = insert_alert(tx, poll.now_ms, &planned(kind, message))?;
            recorded.guest_alerts.push(alert);
        }
    }
    if poll.stopping {
        tx.event(
            poll.now_ms,
            Some(poll.host_id),
            "stopping",
            &serde_json::json!({ "planned": true }),
        )?;
    } else if let Some(since) = row.stopped_since {
        tx.event(
            poll.now_ms,
            Some(poll.host_id),
            "started",
            &serde_json::json!({ "stopped_ms": poll.now_ms - since }),
        )?;
    }
    if let Some(since) = row.overdue_since {
        recorded.recovered = true;
        tx.event(
            poll.now_ms,
            Some(poll.host_id),
            "recovered",
            &serde_json::json!({ "silent_ms": poll.now_ms - since }),
        )?;
        if AlertState::parse(&row.alert_state) == Some(AlertState::Sent) {
            let alert = super::sqlite::host_alert(AlertKind::HostRecovered, poll.host_id, hostname);
            recorded.alert = Some(insert_alert(tx, poll.now_ms, &alert)?);
        }
    }
    Ok(())
}

/// Marks a job the host acknowledged; whether it was still queued.
fn ack_job(tx: Tx<'_, '_>, host: &str, job_id: Uuid, now_ms: i64) -> StoreResult<bool> {
    tx.execute(
        "ack job",
        "UPDATE jobs SET state = 'acked', acked_ms = ?1
         WHERE job_id = ?2 AND host_id = ?3 AND state = 'queued'",
        rusqlite::params![now_ms, job_id.to_string(), host],
    )
    .map(|changed| changed > 0)
}

/// Keeps an audit entry; whether it is new.
fn keep_audit(tx: Tx<'_, '_>, host: &str, entry: &AuditEntry) -> StoreResult<bool> {
    tx.execute(
        "store audit entry",
        "INSERT INTO audit (host_id, seq, at_ms, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO NOTHING",
        rusqlite::params![
            host,
            signed(entry.seq),
            entry.at.as_millisecond(),
            entry.action,
            entry.detail.to_string()
        ],
    )
    .map(|inserted| inserted > 0)
}
