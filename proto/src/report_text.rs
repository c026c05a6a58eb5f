//! The text of a report, made safe to show (DESIGN §4, "Text that comes from a host or the
//! hub is data"; docs/decisions/0050-remote-text-is-inert.md).
//!
//! Two kinds of text arrive in a report, and the hub treats them differently:
//!
//! - **Names** (a guest's hostname, a target's `durable_id`, a storage id, an archive, a
//!   tier's schedule, versions, an audit action): the agent takes them from Proxmox or from
//!   desired state, where no control character can stand. One in a name is a host that does
//!   not follow the protocol: the report is refused (422 `invalid_field`, the field named) by
//!   [`check_report_names`] and [`check_delta_names`], which `validate()` calls.
//! - **Free-form words** (a restore check's output in `detail`, a backup's `error`, a
//!   target's legacy `detail`, why a tier is `held`, an audit entry's `detail`, an
//!   operation's `error` and step `detail`): they may carry words of Proxmox, of a server or
//!   of a guest. Refusing the whole heartbeat over one such line would blind the operator to a
//!   host that is otherwise fine, so the hub keeps them with every control character written
//!   as visible text ([`crate::inert::escape`]): `make_inert` on [`StateReport`],
//!   [`ReportDelta`] and [`PollRequest`], called before anything is stored.

use crate::delta::ReportDelta;
use crate::inert::{escape_in_place, escape_json_in_place, has_control};
use crate::poll::PollRequest;
use crate::report::{
    AuditEntry, BackupReport, BulkVolumeReport, GuestReport, PlanReport, RestoreTestReport,
    StateReport, TargetReport, TierReport, Versions,
};
use crate::validate::ValidationError;

/// Refuses a name holding a control character.
fn name(field: impl Fn() -> String, value: &str) -> Result<(), ValidationError> {
    if has_control(value) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: "contains control characters".into(),
        });
    }
    Ok(())
}

/// [`name`] for an optional name.
fn maybe(field: impl Fn() -> String, value: Option<&String>) -> Result<(), ValidationError> {
    value.map_or(Ok(()), |v| name(field, v))
}

fn versions(prefix: &str, v: &Versions) -> Result<(), ValidationError> {
    maybe(
        || format!("{prefix}versions.controller"),
        v.controller.as_ref(),
    )?;
    maybe(|| format!("{prefix}versions.pve"), v.pve.as_ref())
}

fn guests(guests: &[GuestReport]) -> Result<(), ValidationError> {
    for (i, g) in guests.iter().enumerate() {
        name(|| format!("guests[{i}].hostname"), &g.hostname)?;
    }
    Ok(())
}

fn storage(targets: &[TargetReport]) -> Result<(), ValidationError> {
    for (i, t) in targets.iter().enumerate() {
        name(|| format!("storage[{i}].durable_id"), &t.durable_id)?;
        maybe(|| format!("storage[{i}].storage_id"), t.storage_id.as_ref())?;
    }
    Ok(())
}

fn backups(backups: &[BackupReport]) -> Result<(), ValidationError> {
    for (i, b) in backups.iter().enumerate() {
        name(|| format!("last_backups[{i}].target"), &b.target)?;
        maybe(|| format!("last_backups[{i}].archive"), b.archive.as_ref())?;
    }
    Ok(())
}

fn restore_test(field: &str, t: &RestoreTestReport) -> Result<(), ValidationError> {
    maybe(|| format!("{field}.tier"), t.tier.as_ref())?;
    maybe(|| format!("{field}.archive"), t.archive.as_ref())
}

fn restore_tests(tests: &[RestoreTestReport]) -> Result<(), ValidationError> {
    for (i, t) in tests.iter().enumerate() {
        restore_test(&format!("restore_tests[{i}]"), t)?;
    }
    Ok(())
}

fn tiers(tiers: &[TierReport]) -> Result<(), ValidationError> {
    for (i, t) in tiers.iter().enumerate() {
        name(|| format!("tiers[{i}].target"), &t.target)?;
        name(|| format!("tiers[{i}].storage_id"), &t.storage_id)?;
        name(|| format!("tiers[{i}].schedule"), &t.schedule)?;
        maybe(
            || format!("tiers[{i}].extra_schedule"),
            t.extra_schedule.as_ref(),
        )?;
    }
    Ok(())
}

fn bulk(volumes: &[BulkVolumeReport]) -> Result<(), ValidationError> {
    for (i, v) in volumes.iter().enumerate() {
        name(|| format!("bulk_volumes[{i}].name"), &v.name)?;
        name(|| format!("bulk_volumes[{i}].path"), &v.path)?;
        maybe(|| format!("bulk_volumes[{i}].target"), v.target.as_ref())?;
        maybe(
            || format!("bulk_volumes[{i}].storage_id"),
            v.storage_id.as_ref(),
        )?;
    }
    Ok(())
}

fn plan(plan: &PlanReport) -> Result<(), ValidationError> {
    name(|| "data_plan.signer".into(), &plan.signer)?;
    for (i, t) in plan.targets.iter().enumerate() {
        name(|| format!("data_plan.targets[{i}]"), t)?;
    }
    Ok(())
}

fn audit(entries: &[AuditEntry]) -> Result<(), ValidationError> {
    for (i, e) in entries.iter().enumerate() {
        name(|| format!("audit[{i}].action"), &e.action)?;
    }
    Ok(())
}

/// Refuses a report whose names hold a control character.
pub(crate) fn check_report_names(r: &StateReport) -> Result<(), ValidationError> {
    versions("", &r.versions)?;
    guests(&r.guests)?;
    storage(&r.storage)?;
    backups(&r.last_backups)?;
    if let Some(test) = &r.last_restore_test {
        restore_test("last_restore_test", test)?;
    }
    restore_tests(&r.restore_tests)?;
    tiers(&r.tiers)?;
    bulk(&r.bulk_volumes)?;
    if let Some(p) = &r.data_plan {
        plan(p)?;
    }
    audit(&r.audit)
}

/// Refuses a delta whose names hold a control character.
pub(crate) fn check_delta_names(d: &ReportDelta) -> Result<(), ValidationError> {
    if let Some(v) = &d.versions {
        versions("", v)?;
    }
    guests(&d.guests)?;
    if let Some(s) = &d.storage {
        storage(s)?;
    }
    backups(&d.last_backups)?;
    if let Some(test) = &d.last_restore_test {
        restore_test("last_restore_test", test)?;
    }
    if let Some(tests) = &d.restore_tests {
        restore_tests(tests)?;
    }
    if let Some(t) = &d.tiers {
        tiers(t)?;
    }
    if let Some(v) = &d.bulk_volumes {
        bulk(v)?;
    }
    if let Some(p) = &d.data_plan {
        plan(p)?;
    }
    audit(&d.audit)
}

fn inert_storage(targets: &mut [TargetReport]) {
    for t in targets {
        if let Some(detail) = &mut t.detail {
            escape_in_place(detail);
        }
    }
}

fn inert_backups(backups: &mut [BackupReport]) {
    for b in backups {
        if let Some(error) = &mut b.error {
            escape_in_place(error);
        }
    }
}

fn inert_tests<'a>(tests: impl IntoIterator<Item = &'a mut RestoreTestReport>) {
    for t in tests {
        escape_in_place(&mut t.detail);
    }
}

fn inert_tiers(tiers: &mut [TierReport]) {
    for t in tiers {
        if let Some(held) = &mut t.held {
            escape_in_place(held);
        }
    }
}

fn inert_audit(entries: &mut [AuditEntry]) {
    for e in entries {
        escape_json_in_place(&mut e.detail);
    }
}

impl StateReport {
    /// Writes every control character of the report's free-form words as visible text (see
    /// the module's doc); its names are checked by `validate()` instead.
    pub fn make_inert(&mut self) {
        inert_storage(&mut self.storage);
        inert_backups(&mut self.last_backups);
        inert_tests(
            self.last_restore_test
                .iter_mut()
                .chain(&mut self.restore_tests),
        );
        inert_tiers(&mut self.tiers);
        inert_audit(&mut self.audit);
        crate::refused::make_inert(&mut self.refused);
    }
}

impl ReportDelta {
    /// [`StateReport::make_inert`] for the parts a delta carries.
    pub fn make_inert(&mut self) {
        if let Some(storage) = &mut self.storage {
            inert_storage(storage);
        }
        inert_backups(&mut self.last_backups);
        inert_tests(
            self.last_restore_test
                .iter_mut()
                .chain(self.restore_tests.iter_mut().flatten()),
        );
        if let Some(tiers) = &mut self.tiers {
            inert_tiers(tiers);
        }
        inert_audit(&mut self.audit);
        if let Some(refused) = &mut self.refused {
            crate::refused::make_inert(refused);
        }
    }
}

impl PollRequest {
    /// Makes the poll's report or delta inert, and the free-form words of its operations (an
    /// operation's and a step's `error`, a step's `detail`).
    pub fn make_inert(&mut self) {
        if let Some(report) = &mut self.report {
            report.make_inert();
        }
        if let Some(delta) = &mut self.delta {
            delta.make_inert();
        }
        for op in &mut self.operations {
            if let Some(error) = &mut op.error {
                escape_in_place(error);
            }
            for step in &mut op.steps {
                if let Some(error) = &mut step.error {
                    escape_in_place(error);
                }
                escape_json_in_place(&mut step.detail);
            }
        }
    }
}

#[cfg(test)]
#[path = "report_text_tests.rs"]
mod tests;
