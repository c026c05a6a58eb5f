//! How the hub keeps a host's report: in two parts, so that the poll of a live host rewrites
//! only what moved.
//!
//! - The **base** (`host_reports.report`): the report as the last full report or judged delta
//!   left it, as JSON. Rewritten only when a full report arrives or a delta changes more than
//!   the live part (guests, storage, backups, restore tests, tiers).
//! - The **live part** (`hosts.live`): [`Live`], the sections that move on nearly every poll
//!   of a live host and that the alerts weigh only through their verdict
//!   ([`health::verdict_of`], which follows each bulk volume's own backup too): the host's figures and health, its versions, its tunnel, its
//!   bulk volumes and its data plan. They replace the base's own copies, which may be stale.
//!   NULL: the base's are current (a report stored before the parts were split).
//!
//! The report before the stored one is kept the same way: its live part in `prev_live`, its
//! base the current one unless `prev_base` says `host_reports.prev_report` (a delta may be
//! built on it: [`super::poll_report`]). Everything that reads a stored report reads it here.

use bosun_proto::delta::ReportDelta;
use bosun_proto::health::HostHealth;
use bosun_proto::report::{
    BulkVolumeReport, HostMetrics, PlanReport, StateReport, TunnelHealth, Versions,
};
use rusqlite::params;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::tx::Tx;
use super::{StoreError, StoreResult};
use crate::report_alerts::health::{self, Verdict};

/// The sections of a report kept apart from its base (see the module docs). A report field
/// is either here or in the base: [`Live::of`] and [`Live::put_into`] name every one of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Live {
    /// Host capacity and usage.
    #[serde(default)]
    host: Option<HostMetrics>,
    /// Software versions.
    versions: Versions,
    /// Tunnel health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tunnel: Option<TunnelHealth>,
    /// Host health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_health: Option<HostHealth>,
    /// Bulk volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bulk_volumes: Vec<BulkVolumeReport>,
    /// The signed data plan in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data_plan: Option<PlanReport>,
}

/// What [`Live::text`] starts with: more than a host's live part usually takes (392 bytes for
/// the store tests' host; `hub-bench`'s hosts' fit too), so it is written without growing.
const LIVE_TEXT_CAPACITY: usize = 1024;

impl Live {
    /// No live part: what [`digest`] puts in its place.
    fn none() -> Self {
        Self {
            host: None,
            versions: Versions::default(),
            tunnel: None,
            host_health: None,
            bulk_volumes: Vec::new(),
            data_plan: None,
        }
    }

    /// The live part of `report`.
    pub fn of(report: &StateReport) -> Self {
        Self {
            host: report.host,
            versions: report.versions.clone(),
            tunnel: report.tunnel.clone(),
            host_health: report.host_health.clone(),
            bulk_volumes: report.bulk_volumes.clone(),
            data_plan: report.data_plan.clone(),
        }
    }

    /// Puts this live part into `report`, in place of its own.
    pub fn put_into(self, report: &mut StateReport) {
        report.host = self.host;
        report.versions = self.versions;
        report.tunnel = self.tunnel;
        report.host_health = self.host_health;
        report.bulk_volumes = self.bulk_volumes;
        report.data_plan = self.data_plan;
    }

    /// This live part with `delta` applied, by the report's own rule
    /// ([`StateReport::apply`]); the delta must change nothing outside the live part
    /// ([`crate::report_alerts::delta_is_live_only`]). The sections are moved into an empty
    /// report and back out, so only the delta's are cloned: a delta poll is merged on the poll
    /// writer's thread, with every other poll behind it.
    pub fn applied(self, delta: &ReportDelta) -> Self {
        let mut report = StateReport::empty(0, "");
        self.put_into(&mut report);
        report.apply(delta);
        Self {
            host: report.host.take(),
            versions: std::mem::take(&mut report.versions),
            tunnel: report.tunnel.take(),
            host_health: report.host_health.take(),
            bulk_volumes: std::mem::take(&mut report.bulk_volumes),
            data_plan: report.data_plan.take(),
        }
    }

    /// What the alerts would follow of this live part with `delta` applied
    /// ([`Self::applied`]`.`[`verdict`](Self::verdict)), read from the two without applying it.
    pub fn verdict_after<'a>(&'a self, delta: &'a ReportDelta) -> Verdict<'a> {
        health::verdict_of(
            delta.host_health.as_ref().or(self.host_health.as_ref()),
            delta.tunnel.as_ref().or(self.tunnel.as_ref()),
            delta.bulk_volumes.as_deref().unwrap_or(&self.bulk_volumes),
        )
    }

    /// What of it the alerts follow.
    pub fn verdict(&self) -> Verdict<'_> {
        health::verdict_of(
            self.host_health.as_ref(),
            self.tunnel.as_ref(),
            &self.bulk_volumes,
        )
    }

    /// Its stored text, written into one buffer of the size a host's live part usually takes
    /// (rather than grown from empty, a copy at each doubling).
    pub fn text(&self) -> StoreResult<String> {
        let mut text = Vec::with_capacity(LIVE_TEXT_CAPACITY);
        serde_json::to_writer(&mut text, self).map_err(|e| StoreError::Corrupt {
            what: "live part of a report",
            reason: e.to_string(),
        })?;
        String::from_utf8(text).map_err(|e| StoreError::Corrupt {
            what: "live part of a report",
            reason: e.to_string(),
        })
    }

    /// A stored live part; `None` when it is unreadable.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// What identifies a report's base content: the first half of the SHA-256 of the report
/// serialized without its live part, number and audit entries. Two reports with the same
/// digest differ at most in what [`Live`] holds.
pub(super) fn digest(report: &StateReport) -> StoreResult<[u8; 16]> {
    let mut base = StateReport {
        seq: 0,
        audit: Vec::new(),
        ..report.clone()
    };
    Live::none().put_into(&mut base);
    let hash = Sha256::digest(serialize(&base)?);
    let mut digest = [0u8; 16];
    digest.copy_from_slice(&hash[..16]);
    Ok(digest)
}

/// Which base a report is built on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Base {
    /// `host_reports.report`.
    #[default]
    Current,
    /// `host_reports.prev_report`.
    Previous,
}

/// The text of one of the host's bases.
pub(super) fn base(tx: Tx<'_, '_>, host: &str, which: Base) -> StoreResult<Option<String>> {
    let sql = match which {
        Base::Current => "SELECT report FROM host_reports WHERE host_id = ?1",
        Base::Previous => "SELECT prev_report FROM host_reports WHERE host_id = ?1",
    };
    Ok(tx
        .query_opt("read stored report", sql, params![host], |r| {
            r.get::<Option<String>>(0)
        })?
        .flatten())
}

/// A report from its base and live part; an unreadable base is an error.
pub(super) fn assemble(base: &str, live: Option<&str>) -> StoreResult<StateReport> {
    let mut report = parse(base)?;
    if let Some(text) = live {
        Live::parse(text)
            .ok_or_else(|| StoreError::Corrupt {
                what: "live part of a report",
                reason: "not a live part".to_owned(),
            })?
            .put_into(&mut report);
    }
    Ok(report)
}

/// The host's stored report, if any, with its number.
pub(super) fn stored_report(tx: Tx<'_, '_>, host: &str) -> StoreResult<Option<StateReport>> {
    let row: Option<(Option<String>, Option<i64>)> = tx.query_opt(
        "read stored report",
        "SELECT live, report_seq FROM hosts WHERE host_id = ?1",
        params![host],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((live, Some(seq))) = row else {
        return Ok(None);
    };
    let Some(text) = base(tx, host, Base::Current)? else {
        return Ok(None);
    };
    let mut report = assemble(&text, live.as_deref())?;
    report.seq = super::codec::unsigned(seq);
    Ok(Some(report))
}

/// A stored or arriving report's text, parsed.
pub(super) fn parse(text: &str) -> StoreResult<StateReport> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what: "stored report",
        reason: e.to_string(),
    })
}

/// A report's text for storing.
pub(super) fn serialize(report: &StateReport) -> StoreResult<String> {
    serde_json::to_string(report).map_err(|e| StoreError::Corrupt {
        what: "state report",
        reason: e.to_string(),
    })
}

/// How a poll changes the host's bases (`host_reports`); the live parts and numbers change
/// in the poll's write of the host row.
#[derive(Debug)]
pub(super) enum BaseWrite<'a> {
    /// A full report: the new base, and no previous one.
    Replace(&'a str),
    /// A judged delta on the stored report: the new base; the stored base becomes the
    /// previous report's.
    OnCurrent(&'a str),
    /// A judged delta on the report before the stored one: the new base; the previous
    /// report keeps its base (the stored one, when it shared it: `prev_shared`).
    OnPrevious {
        /// The new base.
        base: &'a str,
        /// The previous report was built on the stored base.
        prev_shared: bool,
    },
}

/// Writes the host's bases.
pub(super) fn write_base(tx: Tx<'_, '_>, host: &str, write: BaseWrite<'_>) -> StoreResult<()> {
    match write {
        BaseWrite::Replace(base) => tx.execute(
            "store report",
            "INSERT INTO host_reports (host_id, report, prev_report) VALUES (?1, ?2, NULL)
             ON CONFLICT (host_id) DO UPDATE SET report = excluded.report, prev_report = NULL",
            params![host, base],
        ),
        BaseWrite::OnCurrent(base) => tx.execute(
            "store report",
            "UPDATE host_reports SET prev_report = report, report = ?2 WHERE host_id = ?1",
            params![host, base],
        ),
        BaseWrite::OnPrevious { base, prev_shared } => tx.execute(
            "store report",
            "UPDATE host_reports
             SET prev_report = CASE WHEN ?3 = 1 THEN report ELSE prev_report END, report = ?2
             WHERE host_id = ?1",
            params![host, base, i64::from(prev_shared)],
        ),
    }?;
    Ok(())
}
