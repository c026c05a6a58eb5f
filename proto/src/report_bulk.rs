//! What a host reports of its bulk volumes' own backups (decision 0090), checked before the hub
//! keeps or repeats any of it: the hub names a volume's signed target, its newest archive and
//! its newest failure in alerts, in `bosunctl status` and on the dashboard.
//!
//! A volume's name is desired state's (1 to 32 of `[a-z0-9-]`, the second half of an alert's
//! subject `guest_id/volume`), the target ids are names the agent takes from the signed plan, an archive's name is the
//! helper's own (`bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`), its digest is SHA-256 in
//! lowercase hex, and a failure is short printable text (the agent bounds it as it bounds a
//! verification's `detail`). A report breaking any of these is not from an agent that
//! follows the protocol: it is refused with the field named, like a control character in a
//! name ([`crate::report_text`]).

use crate::desired::{BulkBackup, MAX_BULK_VOLUMES, MAX_GUESTS};
use crate::helper::BULK_ARCHIVE_PREFIX;
use crate::report::{BulkArchiveReport, BulkVolumeReport};
use crate::validate::{self, ValidationError};
use crate::verify::MAX_DETAIL_CHARS;

/// Most bulk volumes one report carries: every volume of the most guests desired state names.
pub const MAX_REPORTED_BULK_VOLUMES: usize = MAX_GUESTS * MAX_BULK_VOLUMES;

/// Most bytes of a target's `durable_id` in a report, as desired state bounds it.
const MAX_TARGET_BYTES: usize = 256;

/// Most bytes of an archive's file name (a file name's limit on Linux).
const MAX_ARCHIVE_NAME_BYTES: usize = 255;

/// Checks a report's (or a delta's) bulk volumes: their count, and what each says of its own
/// backup.
pub(crate) fn validate_volumes(volumes: &[BulkVolumeReport]) -> Result<(), ValidationError> {
    validate::count("bulk_volumes", volumes.len(), MAX_REPORTED_BULK_VOLUMES)?;
    for (i, v) in volumes.iter().enumerate() {
        let at = |f: &str| format!("bulk_volumes[{i}].{f}");
        // Desired state's rule for a volume's name: the agent reports the names it was given.
        crate::desired::check_volume_name(&v.name, &|| at("name"))?;
        if let Some(target) = &v.signed_target {
            validate::text(|| at("signed_target"), target, MAX_TARGET_BYTES)?;
        }
        if let BulkBackup::None { acknowledged_by } = &v.backup
            && acknowledged_by.chars().any(crate::inert::is_control)
        {
            return Err(ValidationError::Invalid {
                field: at("backup.acknowledged_by"),
                reason: "contains control characters".into(),
            });
        }
        if let Some(archive) = &v.last_archive {
            check_archive(&v.name, archive, &|f| at(&format!("last_archive.{f}")))?;
        }
        if let Some(error) = &v.last_error {
            check_error(error, &|| at("last_error"))?;
        }
    }
    Ok(())
}

/// An archive names its target, a file name of the helper's shape and a SHA-256.
fn check_archive(
    volume: &str,
    archive: &BulkArchiveReport,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ValidationError> {
    validate::text(|| at("target"), &archive.target, MAX_TARGET_BYTES)?;
    if archive.name.len() > MAX_ARCHIVE_NAME_BYTES {
        return Err(ValidationError::TooLong {
            field: at("name"),
            len: archive.name.len(),
            max: MAX_ARCHIVE_NAME_BYTES,
        });
    }
    if !is_archive_name(volume, &archive.name) {
        return Err(ValidationError::Invalid {
            field: at("name"),
            reason: format!(
                "expected the helper's file name {BULK_ARCHIVE_PREFIX}{volume}-<YYYY_MM_DD-HH_MM_SS>.tar"
            ),
        });
    }
    let hex = archive.sha256.len() == 64
        && archive
            .sha256
            .bytes()
            .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if !hex {
        return Err(ValidationError::Invalid {
            field: at("sha256"),
            reason: "expected 64 lowercase hex digits".into(),
        });
    }
    Ok(())
}

/// Whether `name` is `bulk-<volume>-<time>.tar` with a time of digits, `_` and `-`: a plain
/// file name (no `/`, no control character, never `.` or `..`).
fn is_archive_name(volume: &str, name: &str) -> bool {
    let time = name
        .strip_prefix(BULK_ARCHIVE_PREFIX)
        .and_then(|rest| rest.strip_prefix(volume))
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|rest| rest.strip_suffix(".tar"));
    time.is_some_and(|t| {
        !t.is_empty()
            && t.bytes()
                .all(|c| c.is_ascii_digit() || c == b'_' || c == b'-')
    })
}

/// A failure is at most [`MAX_DETAIL_CHARS`] printable characters.
fn check_error(error: &str, field: &dyn Fn() -> String) -> Result<(), ValidationError> {
    let chars = error.chars().count();
    if chars > MAX_DETAIL_CHARS {
        return Err(ValidationError::TooLong {
            field: field(),
            len: chars,
            max: MAX_DETAIL_CHARS,
        });
    }
    if error.chars().any(crate::inert::is_control) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: "contains control characters".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "report_bulk_tests.rs"]
mod tests;
