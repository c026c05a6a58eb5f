//! What a poll's report does to the host's stored report, decided apart from either store's
//! SQL so both stores follow one rule and write the host row once per poll.
//!
//! A full report replaces the stored one. A delta is merged into the stored report when its
//! base is exactly that report, or into the one before it when its base is that one (the
//! agent builds on the last report it saw acknowledged, one behind when it abandoned a held
//! poll). Anything else is not applied and the agent is asked for a full report.
//!
//! The report is kept in two parts ([`super::stored_report`]). A delta of only the live part
//! (a live host's usual poll: its figures and health moved) is merged into that part alone,
//! without reading the base; any other delta is merged into the whole report, which becomes
//! the new base.
//!
//! Whether the alerts are judged again follows what changed: a full report always; a delta
//! when it changes what they look at. Host health and the tunnel move on nearly every poll of
//! a live host (each sample's usage), so for them only what opens or resolves an alert counts
//! ([`report_alerts::health::verdict`]).

use bosun_proto::admin::AlertKind;
use bosun_proto::delta::ReportDelta;
use bosun_proto::report::StateReport;
use uuid::Uuid;

use super::alert_triage::insert_alert;
use super::host_row::{HostRow, Stored};
use super::stored_report::{self, Base, BaseWrite, Live};
use super::tx::Tx;
use super::{PollRecord, PollRecorded, ReportUpdate, StoreResult};
use crate::deadman::{AlertState, PlannedAlert};
use crate::report_alerts::{self, audit};

/// How the host row's report columns change; [`Write::mode`] and [`Write::values`] are what
/// the poll's statement takes, [`Write::base`] what `host_reports` takes.
#[derive(Debug)]
pub(super) enum Write {
    /// Left as they are: the report was not applied.
    Keep,
    /// A full report: the previous report is dropped.
    Replace {
        base: String,
        live: String,
        seq: u64,
        digest: [u8; 16],
    },
    /// A full report whose base is the stored one: only its live part is written; the
    /// previous report is dropped.
    Refresh { live: String, seq: u64 },
    /// The stored report becomes the previous one; `live` is the new live part (`None`: the
    /// same, a heartbeat that only numbers it anew).
    Advance { live: Option<String>, seq: u64 },
    /// The live part merged into the previous report, which shares the stored base; the
    /// previous report stays.
    OnPreviousLive { live: String, seq: u64 },
    /// Merged whole into the stored report: a new base; the stored report becomes the
    /// previous one.
    Rebase {
        base: String,
        live: String,
        seq: u64,
        digest: [u8; 16],
    },
    /// Merged whole into the previous report: a new base; the previous report stays.
    RebaseOnPrevious {
        base: String,
        live: String,
        seq: u64,
        digest: [u8; 16],
        /// The previous report was built on the stored base.
        prev_shared: bool,
    },
}

/// `mode` values of the poll statement (see [`Write::mode`]).
pub(super) const MODE_KEEP: i64 = 0;
/// The previous report is cleared.
pub(super) const MODE_REPLACE: i64 = 1;
/// The stored report moves to the previous one.
pub(super) const MODE_ADVANCE: i64 = 2;
/// Only the stored report changes.
pub(super) const MODE_CURRENT: i64 = 3;
/// The stored report moves to the previous one, with its own base.
pub(super) const MODE_REBASE: i64 = 4;
/// Only the stored report changes; the previous one keeps its own base.
pub(super) const MODE_REBASE_ON_PREVIOUS: i64 = 5;

impl Write {
    /// The statement's mode.
    pub fn mode(&self) -> i64 {
        match self {
            Self::Keep => MODE_KEEP,
            Self::Replace { .. } | Self::Refresh { .. } => MODE_REPLACE,
            Self::Advance { .. } => MODE_ADVANCE,
            Self::OnPreviousLive { .. } => MODE_CURRENT,
            Self::Rebase { .. } => MODE_REBASE,
            Self::RebaseOnPrevious { .. } => MODE_REBASE_ON_PREVIOUS,
        }
    }

    /// The new live part (`None`: keep the stored one) and number (`None`: keep it).
    pub fn values(&self) -> (Option<&str>, Option<u64>) {
        match self {
            Self::Keep => (None, None),
            Self::Advance { live, seq } => (live.as_deref(), Some(*seq)),
            Self::Replace { live, seq, .. }
            | Self::Refresh { live, seq }
            | Self::OnPreviousLive { live, seq }
            | Self::Rebase { live, seq, .. }
            | Self::RebaseOnPrevious { live, seq, .. } => (Some(live.as_str()), Some(*seq)),
        }
    }

    /// The new base's digest, when the write has a new base.
    pub fn digest(&self) -> Option<&[u8]> {
        match self {
            Self::Replace { digest, .. }
            | Self::Rebase { digest, .. }
            | Self::RebaseOnPrevious { digest, .. } => Some(digest.as_slice()),
            Self::Keep
            | Self::Refresh { .. }
            | Self::Advance { .. }
            | Self::OnPreviousLive { .. } => None,
        }
    }

    /// The new base, when the write has one.
    pub fn base(&self) -> Option<BaseWrite<'_>> {
        match self {
            Self::Keep
            | Self::Refresh { .. }
            | Self::Advance { .. }
            | Self::OnPreviousLive { .. } => None,
            Self::Replace { base, .. } => Some(BaseWrite::Replace(base)),
            Self::Rebase { base, .. } => Some(BaseWrite::OnCurrent(base)),
            Self::RebaseOnPrevious {
                base, prev_shared, ..
            } => Some(BaseWrite::OnPrevious {
                base,
                prev_shared: *prev_shared,
            }),
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
    /// The report the host holds afterwards, when it was assembled on the way (a delta of the
    /// live part alone leaves it unassembled).
    pub merged: Option<StateReport>,
}

impl Outcome {
    fn refused() -> Self {
        Self {
            write: Write::Keep,
            applied: false,
            judged: false,
            merged: None,
        }
    }
}

/// Decides what `update` does to the host's stored reports. `base` reads the text of one of
/// the host's bases; it is called only for a delta that needs the whole report (or, once, for
/// a report stored before its parts were split).
pub(super) fn decide(
    host: &str,
    stored: Stored,
    mut base: impl FnMut(Base) -> StoreResult<Option<String>>,
    update: &ReportUpdate,
) -> StoreResult<Outcome> {
    match update {
        ReportUpdate::Full {
            seq,
            json,
            report,
            digest,
        } => {
            let live = Live::of(report);
            // The base it repeats (a restarted agent's first report, one the hub asked for):
            // judged again only when the live part's verdict moved.
            if stored.seq.is_some() && stored.base_digest.as_deref() == Some(digest.as_slice()) {
                let old = live_part(host, stored.live.as_deref(), || base(Base::Current))?;
                if let Some(old) = old {
                    return Ok(Outcome {
                        judged: old.verdict() != live.verdict(),
                        merged: Some((**report).clone()),
                        ..applied(Write::Refresh {
                            live: live.text()?,
                            seq: *seq,
                        })
                    });
                }
            }
            Ok(Outcome {
                write: Write::Replace {
                    base: json.clone(),
                    live: live.text()?,
                    seq: *seq,
                    digest: *digest,
                },
                applied: true,
                judged: true,
                merged: Some((**report).clone()),
            })
        }
        ReportUpdate::Delta(delta) => decide_delta(host, stored, base, delta),
    }
}

fn decide_delta(
    host: &str,
    stored: Stored,
    mut base: impl FnMut(Base) -> StoreResult<Option<String>>,
    delta: &ReportDelta,
) -> StoreResult<Outcome> {
    if stored.seq.is_some_and(|s| delta.seq <= s) {
        tracing::debug!(host_id = host, seq = delta.seq, stored_seq = ?stored.seq, "report delta older than the stored report; ignored");
        return Ok(Outcome::refused());
    }
    // Seq 0 is an unnumbered report: never a base.
    let on = |seq: Option<u64>| delta.base_seq != 0 && seq == Some(delta.base_seq);
    let live_only = report_alerts::delta_is_live_only(delta);
    if on(stored.seq) {
        if delta.changes_nothing() {
            return Ok(applied(Write::Advance {
                live: None,
                seq: delta.seq,
            }));
        }
        if live_only {
            let Some(old) = live_part(host, stored.live.as_deref(), || base(Base::Current))? else {
                return Ok(Outcome::refused());
            };
            let judged = old.verdict() != old.verdict_after(delta);
            return Ok(Outcome {
                judged,
                ..applied(Write::Advance {
                    live: Some(old.applied(delta).text()?),
                    seq: delta.seq,
                })
            });
        }
        let Some(report) = whole(host, base(Base::Current)?, stored.live.as_deref()) else {
            return Ok(Outcome::refused());
        };
        return merge(report, delta, |base, live, seq, digest| Write::Rebase {
            base,
            live,
            seq,
            digest,
        });
    }
    if on(stored.prev_seq) {
        // Built on the report before the stored one: merged into that, kept as previous.
        let prev_shared = stored.prev_base == Base::Current;
        if live_only && prev_shared {
            let Some(old) = live_part(host, stored.prev_live.as_deref(), || base(Base::Current))?
            else {
                return Ok(Outcome::refused());
            };
            let new = old.applied(delta);
            return Ok(Outcome {
                // Judged whatever it changes: it replaces the stored report, whose verdict
                // opened or resolved the host's alerts, and comparing it with the previous
                // report's says nothing of those.
                judged: true,
                ..applied(Write::OnPreviousLive {
                    live: new.text()?,
                    seq: delta.seq,
                })
            });
        }
        let Some(report) = whole(host, base(stored.prev_base)?, stored.prev_live.as_deref()) else {
            return Ok(Outcome::refused());
        };
        let mut merged = merge(report, delta, |base, live, seq, digest| {
            Write::RebaseOnPrevious {
                base,
                live,
                seq,
                digest,
                prev_shared,
            }
        })?;
        // Judged whatever it changes, as above: it replaces the stored report.
        merged.judged = true;
        return Ok(merged);
    }
    tracing::info!(
        host_id = host,
        base_seq = delta.base_seq,
        stored_seq = ?stored.seq,
        "report delta has no base here; asking for a full report"
    );
    Ok(Outcome::refused())
}

/// An applied write that judges nothing and assembled no report.
fn applied(write: Write) -> Outcome {
    Outcome {
        write,
        applied: true,
        judged: false,
        merged: None,
    }
}

/// A stored report's live part: its own, or (for a report stored before the parts were
/// split) its base's. `None` (and a warning) when unreadable.
fn live_part(
    host: &str,
    live: Option<&str>,
    base: impl FnOnce() -> StoreResult<Option<String>>,
) -> StoreResult<Option<Live>> {
    let part = match live {
        Some(text) => Live::parse(text),
        None => whole(host, base()?, None).map(|report| Live::of(&report)),
    };
    if part.is_none() {
        tracing::warn!(
            host_id = host,
            "stored report unreadable; asking for a full report"
        );
    }
    Ok(part)
}

/// A stored report, whole; `None` (and a warning) when it is missing or unreadable.
fn whole(host: &str, base: Option<String>, live: Option<&str>) -> Option<StateReport> {
    let report = base.and_then(|text| stored_report::assemble(&text, live).ok());
    if report.is_none() {
        tracing::warn!(
            host_id = host,
            "stored report unreadable; asking for a full report"
        );
    }
    report
}

/// `delta` merged into `report`, written as `write` makes of the merged base, live part,
/// number and digest.
fn merge(
    report: StateReport,
    delta: &ReportDelta,
    write: impl FnOnce(String, String, u64, [u8; 16]) -> Write,
) -> StoreResult<Outcome> {
    let mut merged = report.clone();
    merged.apply(delta);
    let judged = report_alerts::delta_is_judged(delta, &report, &merged);
    Ok(Outcome {
        write: write(
            stored_report::serialize(&merged)?,
            Live::of(&merged).text()?,
            delta.seq,
            stored_report::digest(&merged)?,
        ),
        applied: true,
        judged,
        merged: Some(merged),
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
        if !super::audit_keep::keep(tx, &host, row.audit_seq, entry)? {
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
            let alert = super::codec::host_alert(AlertKind::HostRecovered, poll.host_id, hostname);
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
