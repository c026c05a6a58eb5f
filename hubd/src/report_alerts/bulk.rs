//! `bulk_unprotected` and `bulk_backup_failed`, from what a host reports of each bulk volume's
//! own backup (`bulk_volumes`, decision 0090). A bulk volume is left out of every vzdump, so
//! its own archive is the only copy of it there is.
//!
//! - `bulk_unprotected` (subject `guest_id/volume`) holds while the volume's desired decision
//!   is `backup: {kind: target}` and the report names no `signed_target`: desired state asks
//!   for a backup the signed data plan never gave it, so nothing archives the volume (or the
//!   report says the agent archives none of it: a VM's disk, `not_archived`). An
//!   acknowledged `none` raises nothing. The plan naming a target resolves it as
//!   `bulk_protected`; the decision turning `none`, or the volume leaving the report, clears
//!   it.
//! - `bulk_backup_failed` (subject `guest_id/volume`) holds while the newest attempt to
//!   archive the volume failed (`last_error`). A newer archive landing resolves it as
//!   `bulk_backup_recovered`; the error gone without an archive or without a signed target
//!   (the plan no longer archives the volume), or the volume leaving the report, clears it.

use bosun_proto::desired::BulkBackup;
use bosun_proto::report::{BulkVolumeReport, StateReport};
use uuid::Uuid;

use super::{Condition, OpenWatch, WatchKind, bounded, guest_name};

/// Most characters of the agent's text (names, targets, the error) an alert repeats.
const MAX_TEXT: usize = 255;

/// The subject of both kinds: the guest and the volume.
pub fn subject(v: &BulkVolumeReport) -> String {
    format!("{}/{}", v.guest_id, bounded(&v.name, MAX_TEXT))
}

/// The target desired state asks the volume to be archived to, while the signed plan names
/// none for it or the agent archives none (a VM's disk, decision 0124).
fn unprotected(v: &BulkVolumeReport) -> Option<&str> {
    match &v.backup {
        BulkBackup::Target { target } if v.signed_target.is_none() || v.not_archived.is_some() => {
            Some(target)
        }
        _ => None,
    }
}

/// What of the bulk volumes the alerts follow: per volume, whether it is unprotected and
/// whether its newest attempt failed. A change elsewhere (a new archive after a good one, its
/// size) cannot open or resolve an alert.
pub fn verdict_of(volumes: &[BulkVolumeReport]) -> Vec<(Uuid, &str, bool, bool)> {
    volumes
        .iter()
        .map(|v| {
            (
                v.guest_id,
                v.name.as_str(),
                unprotected(v).is_some(),
                v.last_error.is_some(),
            )
        })
        .collect()
}

/// `volume media of guest web1 (…)`.
fn volume_text(report: &StateReport, v: &BulkVolumeReport) -> String {
    format!(
        "bulk volume {} of guest {}",
        bounded(&v.name, MAX_TEXT),
        guest_name(report, v.guest_id)
    )
}

/// The `bulk_unprotected` and `bulk_backup_failed` conditions.
pub(super) fn conditions(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for v in &report.bulk_volumes {
        if let Some(target) = unprotected(v) {
            let target = bounded(target, MAX_TEXT);
            out.push(Condition {
                kind: WatchKind::BulkUnprotected,
                subject: subject(v),
                message: match v.not_archived {
                    Some(why) => format!(
                        "{} on host {hostname} is not backed up: desired state asks for its own backup to {target}, but the agent archives none of it ({}: a VM's disk is left out of the VM's backups and Bosun does not archive it)",
                        volume_text(report, v),
                        why.as_str(),
                    ),
                    None => format!(
                        "{} on host {hostname} is not backed up: desired state asks for its own backup to {target}, but the signed data plan names no target for it; sign a plan whose bulk_backups names one (bosunctl policy derive-plan, then sign-plan)",
                        volume_text(report, v),
                    ),
                },
                detail: serde_json::json!({
                    "guest_id": v.guest_id,
                    "volume": bounded(&v.name, MAX_TEXT),
                    "desired_target": target,
                    "not_archived": v.not_archived.map(|why| why.as_str()),
                }),
            });
        }
        if let Some(error) = &v.last_error {
            let error = bounded(error, MAX_TEXT);
            let target = v.signed_target.as_deref().map(|t| bounded(t, MAX_TEXT));
            out.push(Condition {
                kind: WatchKind::BulkBackupFailed,
                subject: subject(v),
                message: format!(
                    "the newest archive of {} on host {hostname} to {} failed: {}; last archive {}",
                    volume_text(report, v),
                    target.as_deref().unwrap_or("its signed target"),
                    if error.trim().is_empty() {
                        "no reason given"
                    } else {
                        error.as_str()
                    },
                    v.last_archive
                        .as_ref()
                        .map_or_else(|| "never".to_owned(), |a| a.at.to_string()),
                ),
                detail: serde_json::json!({
                    "guest_id": v.guest_id,
                    "volume": bounded(&v.name, MAX_TEXT),
                    "signed_target": target,
                    "error": error,
                    "last_archive_at": v.last_archive.as_ref().map(|a| a.at),
                }),
            });
        }
    }
    out
}

/// How an open `bulk_unprotected` or `bulk_backup_failed` closes.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let Some(v) = report
        .bulk_volumes
        .iter()
        .find(|v| subject(v) == open.subject)
    else {
        return (
            false,
            format!(
                "bulk volume {} is no longer reported by host {hostname}",
                open.subject
            ),
        );
    };
    let volume = volume_text(report, v);
    match open.kind {
        WatchKind::BulkUnprotected => match v
            .signed_target
            .as_ref()
            .filter(|_| v.not_archived.is_none())
        {
            Some(target) => (
                true,
                format!(
                    "{volume} on host {hostname} has a signed backup target now: {}",
                    bounded(target, MAX_TEXT)
                ),
            ),
            None => (
                false,
                format!(
                    "{volume} on host {hostname}: desired state no longer asks for its own backup"
                ),
            ),
        },
        _ => match v
            .last_archive
            .as_ref()
            .filter(|_| v.signed_target.is_some())
        {
            Some(archive) => (
                true,
                format!(
                    "{volume} on host {hostname} is archived again: {} at {}",
                    bounded(&archive.name, MAX_TEXT),
                    archive.at
                ),
            ),
            None => (
                false,
                format!(
                    "{volume} on host {hostname}: its newest attempt is no longer failing, and no newer archive of it is reported"
                ),
            ),
        },
    }
}

#[cfg(test)]
#[path = "bulk_tests.rs"]
mod tests;
