//! `verify_failed` and `verify_overdue`, from the newest verification per (guest, tier) a
//! host reports (`verifications`, decision 0079).
//!
//! - `verify_failed` (subject `guest_id@tier`) holds while the newest verification that judged
//!   the guest's backup group on the tier (`ok` or `failed`, [`VerifyReport::judged_failed`])
//!   failed: the PBS server found a chunk missing or damaged. Verifications that could not run
//!   since (`error`) leave it open, since they judged nothing; a newer `ok` one resolves it as
//!   `verify_recovered`; the tier or guest gone from the report clears it.
//! - `verify_overdue` (subject `guest_id@tier`) holds while the host's verification is on and
//!   the group has had no `ok` verification for more than twice the interval, counted from its
//!   newest `ok` one or, with none, from the first verification the agent recorded. The policy
//!   is the host's desired state held to its signed data plan's `verify_hours`, as the agent
//!   holds it: a hub that turns verification off in desired state does not silence the alert
//!   while the plan asks for it. An `ok` verification resolves it as `verify_recovered`.

use bosun_proto::desired::DesiredState;
use bosun_proto::protection;
use bosun_proto::report::StateReport;
use bosun_proto::verify::{VerifyOutcome, VerifyPolicy, VerifyReport, effective_policy};
use jiff::{SignedDuration, Timestamp};

use super::{Condition, HubRecords, OpenWatch, WatchKind, bounded, guest_name, human};

/// Most characters of the agent's text (tier, detail) an alert repeats.
const MAX_TEXT: usize = 255;

/// The subject of both kinds: the guest and the tier.
pub fn subject(v: &VerifyReport) -> String {
    format!("{}@{}", v.guest_id, bounded(&v.tier, MAX_TEXT))
}

/// The host's verification policy as its agent follows it: desired state's, held to the
/// signed plan's `verify_hours`; `None` while off.
pub fn policy(desired: Option<&DesiredState>) -> Option<VerifyPolicy> {
    let desired = desired?;
    let plan_hours = desired
        .data_plan
        .as_ref()
        .and_then(|doc| doc.data_plan().ok())
        .and_then(|plan| plan.backup.verify_hours);
    let policy = effective_policy(plan_hours, desired.verify_policy);
    policy.enabled.then_some(policy)
}

/// The `verify_failed` conditions: one per (guest, tier) whose newest verification failed.
pub(super) fn failed(hostname: &str, report: &StateReport) -> Vec<Condition> {
    report
        .verifications
        .iter()
        .filter(|v| v.judged_failed())
        .map(|v| {
            let detail = bounded(&v.detail, MAX_TEXT);
            Condition {
                kind: WatchKind::VerifyFailed,
                subject: subject(v),
                message: format!(
                    "Verification of guest {}'s backups on host {hostname} failed at {} (tier {}): {}",
                    guest_name(report, v.guest_id),
                    v.finished_at,
                    bounded(&v.tier, MAX_TEXT),
                    if detail.trim().is_empty() { "no detail given" } else { detail.as_str() },
                ),
                detail: serde_json::json!({
                    "guest_id": v.guest_id,
                    "tier": bounded(&v.tier, MAX_TEXT),
                    "finished_at": v.finished_at,
                    "detail": detail,
                }),
            }
        })
        .collect()
}

/// The policy's interval.
fn interval(policy: VerifyPolicy) -> SignedDuration {
    SignedDuration::from_hours(i64::from(policy.interval_hours))
}

/// When a verification turns overdue ([`bosun_proto::protection::overdue_at`], the rule the
/// agent tells the guest by): twice the interval after its last `ok` (or its first).
fn overdue_at(v: &VerifyReport, policy: VerifyPolicy) -> Option<Timestamp> {
    Some(protection::overdue_at(
        v.last_ok_at.unwrap_or(v.first_at),
        interval(policy),
    ))
}

/// The `verify_overdue` conditions at `now`.
pub(super) fn overdue(
    hostname: &str,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Vec<Condition> {
    let Some(policy) = policy(records.desired) else {
        return Vec::new();
    };
    let limit = protection::overdue_limit(interval(policy));
    report
        .verifications
        .iter()
        .filter(|v| overdue_at(v, policy).is_some_and(|at| now > at))
        .map(|v| Condition {
            kind: WatchKind::VerifyOverdue,
            subject: subject(v),
            message: format!(
                "guest {}'s backups on host {hostname} (tier {}) have had no passing verification for more than {}: last passed {}",
                guest_name(report, v.guest_id),
                bounded(&v.tier, MAX_TEXT),
                human(limit),
                v.last_ok_at.map_or_else(|| "never".to_owned(), |at| at.to_string()),
            ),
            detail: serde_json::json!({
                "guest_id": v.guest_id,
                "tier": bounded(&v.tier, MAX_TEXT),
                "last_ok_at": v.last_ok_at,
                "interval_hours": policy.interval_hours,
            }),
        })
        .collect()
}

/// The earliest instant after `now` when a reported verification turns overdue.
pub(super) fn next_overdue(
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Option<Timestamp> {
    let policy = policy(records.desired)?;
    report
        .verifications
        .iter()
        .filter_map(|v| overdue_at(v, policy))
        .filter(|at| *at >= now)
        .min()
}

/// Whether the group verified `ok` since the alert opened (the newest verification, or an
/// `ok` one after it when the newest could not run).
fn passes_again(open: &OpenWatch, v: &VerifyReport) -> bool {
    v.outcome == VerifyOutcome::Ok
        || (!v.judged_failed() && v.last_ok_at.is_some_and(|ok| ok >= open.opened_at))
}

/// How an open `verify_failed` or `verify_overdue` closes.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let newest = report
        .verifications
        .iter()
        .find(|v| subject(v) == open.subject);
    match newest {
        Some(v) if passes_again(open, v) => (
            true,
            format!(
                "Verification of guest {}'s backups on host {hostname} passes again (tier {})",
                guest_name(report, v.guest_id),
                bounded(&v.tier, MAX_TEXT)
            ),
        ),
        Some(_) => (
            false,
            format!(
                "{} on host {hostname}: verification is no longer {}",
                open.subject,
                if open.kind == WatchKind::VerifyOverdue {
                    "overdue"
                } else {
                    "failing"
                }
            ),
        ),
        None => (
            false,
            format!(
                "{} is no longer reported by host {hostname}: no longer verified there",
                open.subject
            ),
        ),
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
