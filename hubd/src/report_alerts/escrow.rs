//! `escrow_missing`: a host backs up to PBS, so its backups are encrypted with its key K, but
//! the hub holds no escrow blob of the key the host reports. Without one, a lost box takes
//! the only copy of K with it and its backups cannot be opened.
//!
//! The escrow is verified when the stored blob's `key_fingerprint` equals the report's
//! `pbs_key_fingerprint` (the agent uploads only after unwrapping its own copy and comparing).
//! The alert resolves as `escrow_verified` when such a blob is stored (the `PUT` judges the
//! host at once) or the report starts showing the key a stored blob wraps, and is cleared
//! (`escrow_missing_cleared`, an event only) when the host stops using PBS.

use bosun_proto::desired::{StorageRole, StorageType};
use bosun_proto::report::{StateReport, TargetReport, TargetStatus};

use super::{Condition, HubRecords, OpenWatch, WatchKind};

/// The one subject of a host's `escrow_missing` alert: the host has one key K.
pub const SUBJECT: &str = "pbs_key";

/// Whether a stored blob wrapping `stored` escrows the key the host reports as `reported`.
pub fn verified(stored: Option<&str>, reported: Option<&str>) -> bool {
    match (stored, reported) {
        (Some(stored), Some(reported)) => {
            !stored.is_empty() && stored.trim().eq_ignore_ascii_case(reported.trim())
        }
        _ => false,
    }
}

/// Whether `id` is a storage id the agent gives a PBS target: `bosun-pbs-` and 8 hex digits.
fn is_agent_pbs_storage(id: &str) -> bool {
    id.strip_prefix("bosun-pbs-")
        .is_some_and(|digits| digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether a reported target is a PBS datastore still in use (not retired).
fn is_pbs_target(target: &TargetReport) -> bool {
    let pbs = target.kind == Some(StorageType::Pbs)
        || target.role == Some(StorageRole::PbsOffsite)
        || target
            .storage_id
            .as_deref()
            .is_some_and(is_agent_pbs_storage);
    pbs && target.status != TargetStatus::Decommissioned
}

/// What the report shows writing to or held on PBS: each PBS target (`target <durable_id>`)
/// and each tier writing to PBS (`tier <n> (<target>)`). Empty: the host does not use PBS.
pub fn pbs_in_use(report: &StateReport) -> Vec<String> {
    let targets: Vec<&TargetReport> = report.storage.iter().filter(|t| is_pbs_target(t)).collect();
    let mut uses: Vec<String> = report
        .tiers
        .iter()
        .filter(|tier| {
            is_agent_pbs_storage(&tier.storage_id)
                || targets.iter().any(|t| {
                    t.durable_id == tier.target
                        || t.storage_id.as_deref() == Some(tier.storage_id.as_str())
                })
        })
        .map(|tier| format!("tier {} ({})", tier.tier, tier.target))
        .collect();
    uses.extend(targets.iter().map(|t| format!("target {}", t.durable_id)));
    uses
}

/// The `escrow_missing` condition, when it holds.
pub(super) fn missing(
    hostname: &str,
    report: &StateReport,
    records: &HubRecords<'_>,
) -> Option<Condition> {
    let uses = pbs_in_use(report);
    let reported = report.pbs_key_fingerprint.as_deref();
    if uses.is_empty() || verified(records.escrow_fingerprint, reported) {
        return None;
    }
    let why = match (records.escrow_fingerprint, reported) {
        (None, _) => "the hub holds no escrow blob".to_owned(),
        (Some(_), None) => {
            "the host reports no PBS key fingerprint to check the stored blob against".to_owned()
        }
        (Some(stored), Some(reported)) => {
            format!("the stored blob wraps key {stored}, not the host's key {reported}")
        }
    };
    Some(Condition {
        kind: WatchKind::EscrowMissing,
        subject: SUBJECT.to_owned(),
        message: format!(
            "host {hostname} backs up to PBS ({}) but its PBS key is not escrowed: {why}; if the box is lost, its encrypted backups cannot be restored",
            uses.join(", ")
        ),
        detail: serde_json::json!({
            "pbs": uses,
            "reported_fingerprint": reported,
            "escrow_fingerprint": records.escrow_fingerprint,
        }),
    })
}

/// Whether an open `escrow_missing` resolved because the escrow is verified now (else the
/// host stopped using PBS), and the message saying which.
pub(super) fn resolution(
    hostname: &str,
    _open: &OpenWatch,
    report: &StateReport,
    records: &HubRecords<'_>,
) -> (bool, String) {
    let reported = report.pbs_key_fingerprint.as_deref();
    if verified(records.escrow_fingerprint, reported) {
        (
            true,
            format!(
                "the PBS key of host {hostname} is escrowed: the stored blob wraps key {}",
                reported.unwrap_or_default()
            ),
        )
    } else {
        (
            false,
            format!(
                "host {hostname} no longer backs up to PBS; its missing escrow is no longer alerted"
            ),
        )
    }
}

#[cfg(test)]
#[path = "escrow_tests.rs"]
mod tests;
