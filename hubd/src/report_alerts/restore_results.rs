//! `restore_test_failed` and `restore_test_overdue`, from the last restore test per (guest,
//! tier) a host reports (`restore_tests`, or only `last_restore_test` from an agent that sends
//! no list).
//!
//! A result passed when its `outcome` is `passed` and failed when it is `failed` or
//! `interrupted`; without an outcome (an older agent), or with one this hub does not know,
//! its `passed` flag says. A `not_checked` result (booted, but the guest installs no restore
//! check, or its agent has no helper to run it) is neither: it raises no
//! `restore_test_failed` and resolves none, and it is no pass, so a guest whose tests are
//! only ever not checked becomes `restore_test_overdue` — its data was never verified.
//!
//! - `restore_test_failed` opens once per failing result: its subject is
//!   `guest_id@tier@finished_at`, so the same result repeated in every poll keeps its one
//!   alert, while a newer failure on the tier closes it (`restore_test_failed_cleared`) and
//!   opens its own. A pass on the tier resolves it as `restore_test_recovered`.
//! - `restore_test_overdue` (subject: the guest id) holds while the host's desired state
//!   enables restore tests, the guest is in desired state or reported with an id, and it has
//!   had no passing test for more than twice `interval_days`. The time is counted from the
//!   newest pass on any of its tiers that the report or the hub's memory ([`LastPassed`])
//!   knows, but never from before the guest's [`RestoreTestClock`] started: the first time the
//!   hub judged the guest under an enabled policy. So a guest that never passed is counted
//!   from then, and a guest added, or a policy switched on, has twice the interval for its
//!   first test. The clock starts afresh after the policy was off or the guest was gone from
//!   both desired state and the report. A pass within the limit resolves it as
//!   `restore_test_recovered`.

use std::collections::BTreeSet;

use bosun_proto::desired::{DesiredState, RestoreTestPolicy};
use bosun_proto::report::{RestoreTestOutcome, RestoreTestReport, StateReport};
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::{Condition, HubRecords, OpenWatch, WatchKind, bounded, guest_name, wire};

/// Most characters of the agent's text (tier, archive, detail) an alert repeats.
const MAX_TEXT: usize = 255;

/// The newest passing restore test of one guest on one tier the hub knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastPassed {
    /// The guest.
    pub guest_id: Uuid,
    /// The tier's storage, when the agent named it.
    pub tier: Option<String>,
    /// When the test finished.
    pub at: Timestamp,
}

/// When the hub began expecting restore tests of a guest (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreTestClock {
    /// The guest.
    pub guest_id: Uuid,
    /// The first judgment of the guest under an enabled policy.
    pub since: Timestamp,
}

/// The restore-test results `report` carries.
pub fn results(report: &StateReport) -> &[RestoreTestReport] {
    if report.restore_tests.is_empty() {
        report.last_restore_test.as_slice()
    } else {
        &report.restore_tests
    }
}

/// Whether a result is a pass.
pub fn passed(test: &RestoreTestReport) -> bool {
    match test.outcome {
        Some(RestoreTestOutcome::Passed) => true,
        Some(
            RestoreTestOutcome::Failed
            | RestoreTestOutcome::Interrupted
            | RestoreTestOutcome::NotChecked,
        ) => false,
        None | Some(RestoreTestOutcome::Unknown) => test.passed,
    }
}

/// Whether a result is a failure: not a pass, and not `not_checked`.
pub fn failing(test: &RestoreTestReport) -> bool {
    test.outcome != Some(RestoreTestOutcome::NotChecked) && !passed(test)
}

/// The passing tests `report` shows: each result's `last_passed_at`, or its own finish when
/// it passed.
pub fn reported_last_passed(report: &StateReport) -> Vec<LastPassed> {
    results(report)
        .iter()
        .filter_map(|t| {
            let own = passed(t).then_some(t.finished_at);
            Some(LastPassed {
                guest_id: t.guest_id,
                tier: t.tier.as_deref().map(|tier| bounded(tier, MAX_TEXT)),
                at: own.max(t.last_passed_at)?,
            })
        })
        .collect()
}

/// The guests whose restore tests the hub expects: none unless the desired state enables
/// restore tests; then every guest it names and every guest the report shows with an id.
pub fn watched(desired: Option<&DesiredState>, report: &StateReport) -> BTreeSet<Uuid> {
    if policy(desired).is_none() {
        return BTreeSet::new();
    }
    desired
        .iter()
        .flat_map(|d| &d.guests)
        .map(|g| g.guest_id)
        .chain(report.guests.iter().filter_map(|g| g.guest_id))
        .collect()
}

/// The subject of a `restore_test_failed` alert: the guest, the tier and the result's finish.
pub fn failed_subject(test: &RestoreTestReport) -> String {
    format!("{}@{}@{}", test.guest_id, tier_key(test), test.finished_at)
}

/// The `restore_test_failed` conditions: one per failing result.
pub(super) fn failed(hostname: &str, report: &StateReport) -> Vec<Condition> {
    results(report)
        .iter()
        .filter(|t| failing(t))
        .map(|t| {
            let verb = match t.outcome {
                Some(RestoreTestOutcome::Interrupted) => "was interrupted",
                _ => "failed",
            };
            let detail = if t.detail.trim().is_empty() {
                "no detail given".to_owned()
            } else {
                bounded(&t.detail, MAX_TEXT)
            };
            let archive = t.archive.as_deref().map(|a| bounded(a, MAX_TEXT));
            Condition {
                kind: WatchKind::RestoreTestFailed,
                subject: failed_subject(t),
                message: format!(
                    "restore test of guest {} on host {hostname} {verb} at {}: {detail} (tier {}, archive {})",
                    guest_name(report, t.guest_id),
                    t.finished_at,
                    tier_key(t),
                    archive.as_deref().unwrap_or("unknown"),
                ),
                detail: serde_json::json!({
                    "guest_id": t.guest_id,
                    "tier": t.tier.as_deref().map(|tier| bounded(tier, MAX_TEXT)),
                    "archive": archive,
                    "outcome": t.outcome.as_ref().map(wire),
                    "finished_at": t.finished_at,
                    "duration_seconds": t.duration_seconds,
                    "detail": bounded(&t.detail, MAX_TEXT),
                    "last_passed_at": t.last_passed_at,
                }),
            }
        })
        .collect()
}

/// One watched guest as the overdue rule weighs it: its newest pass (if any) and the time
/// its overdue limit counts from.
struct Watched {
    guest_id: Uuid,
    pass: Option<LastPassed>,
    since: Option<Timestamp>,
    base: Timestamp,
}

/// The guests the overdue rule watches, each with what its limit counts from (a guest with
/// neither a pass nor a running clock is not counted yet).
fn watched_bases(report: &StateReport, records: &HubRecords<'_>) -> Vec<Watched> {
    watched(records.desired, report)
        .into_iter()
        .filter_map(|guest_id| {
            let pass = newest_pass(report, records.last_passed, guest_id);
            let since = records
                .clocks
                .iter()
                .find(|c| c.guest_id == guest_id)
                .map(|c| c.since);
            let base = pass.as_ref().map(|p| p.at).max(since)?;
            Some(Watched {
                guest_id,
                pass,
                since,
                base,
            })
        })
        .collect()
}

/// The `restore_test_overdue` conditions at `now`.
pub(super) fn overdue(
    hostname: &str,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Vec<Condition> {
    let Some(policy) = policy(records.desired) else {
        return Vec::new();
    };
    let limit = limit(policy);
    let mut out = Vec::new();
    for Watched {
        guest_id,
        pass,
        since,
        base,
    } in watched_bases(report, records)
    {
        if now.duration_since(base) <= limit {
            continue;
        }
        let name = guest_name(report, guest_id);
        let every = days(policy.interval_days);
        let message = match &pass {
            Some(p) if Some(p.at) >= since => format!(
                "no passing restore test of guest {name} on host {hostname} since {} (tier {}): the policy asks for one every {every}",
                p.at,
                p.tier.as_deref().unwrap_or("-"),
            ),
            _ => format!(
                "no passing restore test of guest {name} on host {hostname} since the hub began expecting one at {base}: the policy asks for one every {every}"
            ),
        };
        out.push(Condition {
            kind: WatchKind::RestoreTestOverdue,
            subject: guest_id.to_string(),
            message,
            detail: serde_json::json!({
                "guest_id": guest_id,
                "last_passed_at": pass.as_ref().map(|p| p.at),
                "tier": pass.as_ref().and_then(|p| p.tier.clone()),
                "expected_since": since,
                "interval_days": policy.interval_days,
            }),
        });
    }
    out
}

/// The earliest instant, not before `now`, after which a watched guest turns
/// `restore_test_overdue` while nothing new is reported, if one will.
pub(super) fn next_overdue(
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Option<Timestamp> {
    let limit = limit(policy(records.desired)?);
    watched_bases(report, records)
        .into_iter()
        .filter(|w| now.duration_since(w.base) <= limit)
        .map(|w| w.base.checked_add(limit).unwrap_or(Timestamp::MAX))
        .min()
}

/// Whether an open restore-test alert recovered (else it stopped applying for another
/// reason), and the message saying which.
pub(super) fn resolution(
    hostname: &str,
    open: &OpenWatch,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> (bool, String) {
    if open.kind == WatchKind::RestoreTestFailed {
        return failed_resolution(hostname, open, report);
    }
    let guest_id = Uuid::parse_str(&open.subject).ok();
    let name = guest_id.map_or_else(|| open.subject.clone(), |id| guest_name(report, id));
    let watching = guest_id.is_some_and(|id| watched(records.desired, report).contains(&id));
    let pass = guest_id.and_then(|id| newest_pass(report, records.last_passed, id));
    match (policy(records.desired), pass) {
        (Some(policy), Some(pass)) if watching && now.duration_since(pass.at) <= limit(policy) => (
            true,
            format!(
                "restore test of guest {name} on host {hostname} passed at {} (tier {}): no longer overdue (restore_test_overdue resolved)",
                pass.at,
                pass.tier.as_deref().unwrap_or("-"),
            ),
        ),
        (Some(policy), _) if watching => (
            false,
            format!(
                "restore_test_overdue of guest {name} on host {hostname} no longer applies: the policy now asks for a test every {}",
                days(policy.interval_days)
            ),
        ),
        _ => (
            false,
            format!(
                "restore_test_overdue of guest {name} on host {hostname} no longer applies: restore tests are off or the guest is gone"
            ),
        ),
    }
}

fn failed_resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let (guest, rest) = open.subject.split_once('@').unwrap_or((&open.subject, ""));
    let tier = rest.rsplit_once('@').map_or(rest, |(tier, _)| tier);
    let guest_id = Uuid::parse_str(guest).ok();
    let name = guest_id.map_or_else(|| guest.to_owned(), |id| guest_name(report, id));
    let current = results(report)
        .iter()
        .find(|t| Some(t.guest_id) == guest_id && tier_key(t) == tier);
    match current {
        Some(t) if passed(t) => (
            true,
            format!(
                "restore test of guest {name} on host {hostname} passed at {} (tier {tier}): restore_test_failed resolved",
                t.finished_at
            ),
        ),
        Some(t) => (
            false,
            format!(
                "restore_test_failed of guest {name} (tier {tier}) on host {hostname} is superseded by the result of {}",
                t.finished_at
            ),
        ),
        None => (
            false,
            format!(
                "restore_test_failed of guest {name} (tier {tier}) on host {hostname} no longer applies: the guest or its tier is gone from the report"
            ),
        ),
    }
}

/// The host's restore-test policy, when it is enabled.
fn policy(desired: Option<&DesiredState>) -> Option<&RestoreTestPolicy> {
    desired
        .map(|d| &d.restore_test_policy)
        .filter(|p| p.enabled)
}

/// Twice the policy's interval ([`bosun_proto::protection::overdue_limit`], the rule the agent
/// tells the guest by).
fn limit(policy: &RestoreTestPolicy) -> SignedDuration {
    bosun_proto::protection::overdue_limit(SignedDuration::from_hours(
        i64::from(policy.interval_days).saturating_mul(24),
    ))
}

/// `1 day`, `7 days`.
fn days(count: u32) -> String {
    if count == 1 {
        "1 day".to_owned()
    } else {
        format!("{count} days")
    }
}

/// The newest pass of a guest on any tier, from the report and the hub's memory.
fn newest_pass(
    report: &StateReport,
    remembered: &[LastPassed],
    guest_id: Uuid,
) -> Option<LastPassed> {
    reported_last_passed(report)
        .into_iter()
        .chain(remembered.iter().cloned())
        .filter(|p| p.guest_id == guest_id)
        .max_by_key(|p| p.at)
}

/// A result's tier as its alerts name it (`-` when the agent named none).
fn tier_key(test: &RestoreTestReport) -> String {
    bounded(test.tier.as_deref().unwrap_or("-"), MAX_TEXT)
}
