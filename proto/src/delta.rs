//! `bosun.report-delta/v1`: what changed on a host since the last report the hub
//! acknowledged.
//!
//! The agent sends a full [`StateReport`] (with a `seq`) after it starts, after a
//! reconnect and whenever the hub asks (`full_report` in the poll response); otherwise
//! it sends a [`ReportDelta`] whose `base_seq` is the `seq` of the last report the hub
//! acknowledged (`report_seq` in the poll response). The hub applies a delta only on
//! top of exactly that base; any other base (a lost answer, a hub restored from an
//! older backup, a hub that has no report at all) is not applied and the hub asks for a
//! full report instead. Deltas are tolerant, like reports.
//!
//! What a delta carries, relative to its base:
//! - `guests`: every guest added or changed, whole, keyed by `vmid`;
//! - `removed_guests`: the vmids no longer on the host;
//! - `host`, `versions`, `storage`, `tiers`, `bulk_volumes`, `tunnel`, `last_restore_test`,
//!   `restore_tests`, `verifications`, `host_health`, `data_plan`, `refused`, `golden`: present only when
//!   they changed, replacing the base's value whole;
//! - `host_unread`: the host metrics the base carried could not be read this time (the
//!   report's `host` is absent from now on, until a delta carries `host` again);
//! - `last_backups`: entries added or changed, keyed by (guest, target);
//! - `audit`: audit entries past the hub's `audit_acked_seq`, exactly as in a report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::health::HostHealth;
use crate::report::{
    AuditEntry, BackupReport, BulkVolumeReport, GuestReport, HostMetrics, MAX_AUDIT_ENTRIES,
    MAX_RESTORE_TESTS, PlanReport, RestoreTestReport, StateReport, TargetReport, TierReport,
    TunnelHealth, Versions,
};
use crate::validate::{self, ValidationError};

/// The schema name of [`ReportDelta`].
pub use crate::schema_ids::REPORT_DELTA as SCHEMA;

/// Changes since the report numbered `base_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportDelta {
    /// Always [`SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::report_delta))]
    pub schema: String,
    /// This report's sequence number; the hub's state is numbered so once applied.
    pub seq: u64,
    /// The sequence number of the report this delta applies to.
    pub base_seq: u64,
    /// Host capacity and usage, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostMetrics>,
    /// The host metrics could not be read this time: the base's are dropped, not kept as if
    /// they were current.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_unread: bool,
    /// Software versions, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
    /// Guests added or changed, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 1_000))]
    pub guests: Vec<GuestReport>,
    /// Vmids of guests gone from the host (none also in `guests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 1_000))]
    pub removed_guests: Vec<u32>,
    /// The whole storage list, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Vec<TargetReport>>,
    /// Backup entries added or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_backups: Vec<BackupReport>,
    /// The last restore test, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restore_test: Option<RestoreTestReport>,
    /// Tunnel health, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelHealth>,
    /// Audit-log entries since the last sequence number the hub acknowledged, in increasing
    /// sequence order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 1_000))]
    pub audit: Vec<AuditEntry>,
    /// The whole tier list, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<Vec<TierReport>>,
    /// The whole bulk-volume list, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_volumes: Option<Vec<BulkVolumeReport>>,
    /// The whole list of restore tests per (guest, tier), when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8_000))]
    pub restore_tests: Option<Vec<RestoreTestReport>>,
    /// The whole list of verifications per (guest, tier), when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 5_000))]
    pub verifications: Option<Vec<crate::verify::VerifyReport>>,
    /// The host's health, whole, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_health: Option<HostHealth>,
    /// The signed data plan in force, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plan: Option<PlanReport>,
    /// The whole list of refusals, when changed (empty: none any more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 512))]
    pub refused: Option<Vec<crate::refused::Refused>>,
    /// The host's golden base, when changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<crate::golden_report::GoldenReport>,
}

impl ReportDelta {
    /// What changed from `base` (numbered `base_seq`) to `current` (numbered `seq`).
    /// `current.audit` is carried over as is (audit entries are not state).
    pub fn between(base: &StateReport, base_seq: u64, current: &StateReport, seq: u64) -> Self {
        let old: BTreeMap<u32, &GuestReport> = base.guests.iter().map(|g| (g.vmid, g)).collect();
        let new: BTreeMap<u32, &GuestReport> = current.guests.iter().map(|g| (g.vmid, g)).collect();
        let guests = new
            .iter()
            .filter(|(vmid, g)| old.get(vmid) != Some(*g))
            .map(|(_, g)| (*g).clone())
            .collect();
        let removed_guests = old
            .keys()
            .filter(|vmid| !new.contains_key(vmid))
            .copied()
            .collect();
        let old_backups: BTreeMap<(Uuid, &str), &BackupReport> = base
            .last_backups
            .iter()
            .map(|b| ((b.guest_id, b.target.as_str()), b))
            .collect();
        let last_backups = current
            .last_backups
            .iter()
            .filter(|b| old_backups.get(&(b.guest_id, b.target.as_str())) != Some(b))
            .cloned()
            .collect();
        let changed = |a: bool| a.then_some(());
        Self {
            schema: SCHEMA.to_owned(),
            seq,
            base_seq,
            host: current.host.filter(|h| base.host.as_ref() != Some(h)),
            host_unread: base.host.is_some() && current.host.is_none(),
            versions: changed(base.versions != current.versions).map(|()| current.versions.clone()),
            guests,
            removed_guests,
            storage: changed(base.storage != current.storage).map(|()| current.storage.clone()),
            last_backups,
            last_restore_test: current
                .last_restore_test
                .clone()
                .filter(|t| base.last_restore_test.as_ref() != Some(t)),
            tunnel: current
                .tunnel
                .clone()
                .filter(|t| base.tunnel.as_ref() != Some(t)),
            audit: current.audit.clone(),
            tiers: changed(base.tiers != current.tiers).map(|()| current.tiers.clone()),
            bulk_volumes: changed(base.bulk_volumes != current.bulk_volumes)
                .map(|()| current.bulk_volumes.clone()),
            restore_tests: changed(base.restore_tests != current.restore_tests)
                .map(|()| current.restore_tests.clone()),
            verifications: changed(base.verifications != current.verifications)
                .map(|()| current.verifications.clone()),
            host_health: current
                .host_health
                .clone()
                .filter(|h| base.host_health.as_ref() != Some(h)),
            data_plan: current
                .data_plan
                .clone()
                .filter(|p| base.data_plan.as_ref() != Some(p)),
            refused: changed(base.refused != current.refused).map(|()| current.refused.clone()),
            golden: current
                .golden
                .clone()
                .filter(|g| base.golden.as_ref() != Some(g)),
        }
    }

    /// Whether the delta changes no state (audit entries aside): a heartbeat only.
    pub fn changes_nothing(&self) -> bool {
        self.host.is_none()
            && !self.host_unread
            && self.versions.is_none()
            && self.guests.is_empty()
            && self.removed_guests.is_empty()
            && self.storage.is_none()
            && self.last_backups.is_empty()
            && self.last_restore_test.is_none()
            && self.tunnel.is_none()
            && self.tiers.is_none()
            && self.bulk_volumes.is_none()
            && self.restore_tests.is_none()
            && self.verifications.is_none()
            && self.host_health.is_none()
            && self.data_plan.is_none()
            && self.refused.is_none()
            && self.golden.is_none()
    }

    /// Checks the fields the hub relies on.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, SCHEMA)?;
        if self.seq <= self.base_seq {
            return Err(ValidationError::Invalid {
                field: "seq".into(),
                reason: format!(
                    "{} must be greater than base_seq {}",
                    self.seq, self.base_seq
                ),
            });
        }
        if let Some(versions) = &self.versions {
            validate::text(|| "versions.agent".into(), &versions.agent, 64)?;
        }
        if let Some(host) = &self.host {
            if self.host_unread {
                return Err(ValidationError::Invalid {
                    field: "host_unread".into(),
                    reason: "a delta carrying host metrics read them".into(),
                });
            }
            crate::report::check_host(host)?;
        }
        validate::count("audit", self.audit.len(), MAX_AUDIT_ENTRIES)?;
        validate::count("guests", self.guests.len(), crate::desired::MAX_GUESTS)?;
        crate::report::check_guests(&self.guests)?;
        if let Some(tests) = &self.restore_tests {
            validate::count("restore_tests", tests.len(), MAX_RESTORE_TESTS)?;
        }
        if let Some(verifications) = &self.verifications {
            crate::verify::validate_reports(verifications)?;
        }
        if let Some(volumes) = &self.bulk_volumes {
            crate::report_bulk::validate_volumes(volumes)?;
        }
        if let Some(health) = &self.host_health {
            health.validate()?;
        }
        if let Some(tunnel) = &self.tunnel {
            tunnel.validate()?;
        }
        if let Some(golden) = &self.golden {
            golden.validate()?;
        }
        validate::count(
            "removed_guests",
            self.removed_guests.len(),
            crate::desired::MAX_GUESTS,
        )?;
        crate::report::check_audit_order(&self.audit)?;
        crate::report_text::check_delta_names(self)?;
        if let Some(refused) = &self.refused {
            crate::refused::check("refused", refused)?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for vmid in self
            .guests
            .iter()
            .map(|g| g.vmid)
            .chain(self.removed_guests.iter().copied())
        {
            if !seen.insert(vmid) {
                return Err(ValidationError::Duplicate {
                    field: "guests".into(),
                    value: vmid.to_string(),
                });
            }
        }
        Ok(())
    }
}

impl StateReport {
    /// Applies `delta` to this report (the caller checked that `delta.base_seq` is this
    /// report's `seq`); the result is numbered `delta.seq`. Guests stay sorted by vmid.
    /// Audit entries are not state: the result carries none.
    pub fn apply(&mut self, delta: &ReportDelta) {
        self.seq = delta.seq;
        if delta.host_unread {
            self.host = None;
        }
        if let Some(host) = delta.host {
            self.host = Some(host);
        }
        if let Some(versions) = &delta.versions {
            self.versions = versions.clone();
        }
        let mut guests: BTreeMap<u32, GuestReport> = std::mem::take(&mut self.guests)
            .into_iter()
            .map(|g| (g.vmid, g))
            .collect();
        for vmid in &delta.removed_guests {
            guests.remove(vmid);
        }
        for guest in &delta.guests {
            guests.insert(guest.vmid, guest.clone());
        }
        self.guests = guests.into_values().collect();
        if let Some(storage) = &delta.storage {
            self.storage = storage.clone();
        }
        if let Some(tiers) = &delta.tiers {
            self.tiers = tiers.clone();
        }
        if let Some(volumes) = &delta.bulk_volumes {
            self.bulk_volumes = volumes.clone();
        }
        if let Some(verifications) = &delta.verifications {
            self.verifications = verifications.clone();
        }
        if let Some(tests) = &delta.restore_tests {
            self.restore_tests = tests.clone();
        }
        for backup in &delta.last_backups {
            match self
                .last_backups
                .iter_mut()
                .find(|b| b.guest_id == backup.guest_id && b.target == backup.target)
            {
                Some(slot) => *slot = backup.clone(),
                None => self.last_backups.push(backup.clone()),
            }
        }
        if let Some(test) = &delta.last_restore_test {
            self.last_restore_test = Some(test.clone());
        }
        if let Some(tunnel) = &delta.tunnel {
            self.tunnel = Some(tunnel.clone());
        }
        if let Some(health) = &delta.host_health {
            self.host_health = Some(health.clone());
        }
        if let Some(plan) = &delta.data_plan {
            self.data_plan = Some(plan.clone());
        }
        if let Some(refused) = &delta.refused {
            self.refused = refused.clone();
        }
        if let Some(golden) = &delta.golden {
            self.golden = Some(golden.clone());
        }
        self.audit.clear();
    }
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;
