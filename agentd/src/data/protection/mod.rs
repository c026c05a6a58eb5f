//! One guest's protection as its customer reads it (`GET /v1/protection`, DESIGN §7): from the
//! agent's own journal, judged against the cadence the operator signed, so a hub that hides a
//! failure from the operator cannot hide it from the guest.
//!
//! ```text
//!  journal: last backup per (guest, storage) ─┐
//!           last verification per (guest, tier)├─► assess ─► GuestProtection (bosun-proto)
//!           last restore test per (guest, storage)│   ▲
//!           the guest's provenance (arrival)  ─┘   │ the desired state held to the signed plan
//!                                                  │ (its tiers), the plan's cadences
//! ```
//!
//! | item | one per | interval | promised by |
//! |---|---|---|---|
//! | `backup` | tier (0, then the further tiers) | the tier's schedule's longest gap | the plan's schedule for the tier; without a plan, desired state's |
//! | `verification` | PBS tier | `verify_hours` | the plan's `verify_hours`; without it, desired state's policy while on |
//! | `restore_test` | guest | `restore_test_days` | the plan's `restore_test_days`; without it, desired state's policy while on |
//!
//! Overdue is [`bosun_proto::protection::judge`], the rule the hub alerts by: more than twice
//! the interval without a success, counted from the newest success or, with none, from when
//! the item was first expected — a verification's first attempt, else the guest's arrival on
//! this host (its provenance). A protection nothing promises is not listed. The unsigned hub
//! may only make a cadence more frequent (DESIGN §5); the customer is judged against the
//! operator's promise where there is one, not the hub's.

use std::time::Duration;

use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{DesiredState, StorageType};
use bosun_proto::protection::{
    self, GuestProtection, MAX_INTERVAL_S, MAX_TARGET_BYTES, PromisedBy, ProtectionItem,
    ProtectionKind, ProtectionResult,
};
use bosun_proto::verify::VerifyOutcome;
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use crate::ops::journal::{LastBackup, LastRestoreTest, LastVerification, TestOutcome};

/// What [`assess`] judges one guest by.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The guest.
    pub guest_id: Uuid,
    /// Its vmid.
    pub vmid: u32,
    /// The agent's time.
    pub now: Timestamp,
    /// The desired state the agent acts on (held to the plan), if one arrived.
    pub state: Option<&'a DesiredState>,
    /// The signed data plan in force, if any.
    pub plan: Option<&'a DataPlan>,
    /// The Proxmox storage tier 0 writes to when no target names it (`agent.toml`).
    pub default_storage: &'a str,
    /// How long one hour of a verification interval lasts (an hour; tests shorten it).
    pub verify_hour: Duration,
    /// When the guest arrived on this host (created, restored or adopted), if known.
    pub arrived_at: Option<Timestamp>,
    /// The newest backup per (guest, storage), every guest's.
    pub backups: &'a [LastBackup],
    /// The newest verification per (guest, tier), every guest's.
    pub verifications: &'a [LastVerification],
    /// The newest restore test per (guest, storage), every guest's.
    pub restore_tests: &'a [LastRestoreTest],
}

/// The guest's protection at `facts.now`.
pub fn assess(facts: &Facts<'_>) -> GuestProtection {
    let mut items = Vec::new();
    if let Some(state) = facts.state {
        backups(facts, state, &mut items);
        verifications(facts, state, &mut items);
        restore_test(facts, state, &mut items);
    }
    items.truncate(protection::MAX_ITEMS);
    GuestProtection {
        guest_id: facts.guest_id,
        vmid: facts.vmid,
        at: facts.now,
        plan_serial: facts.plan.map(|p| p.serial),
        overdue: items.iter().any(|i| i.overdue),
        items,
    }
}

/// A backup tier as judged: its target and schedule, and who set the schedule.
struct Tier {
    index: u32,
    /// The target's `durable_id`; `None`: the configured storage.
    target: Option<String>,
    schedule: Option<String>,
    promised_by: PromisedBy,
}

/// The tiers the agent backs the guest up on, each with the cadence promised for it.
fn tiers(facts: &Facts<'_>, state: &DesiredState) -> Vec<Tier> {
    let policy = &state.backup_policy;
    let plan = facts.plan.map(|p| &p.backup);
    let mut tiers = vec![Tier {
        index: 0,
        target: policy.target.clone(),
        schedule: Some(plan.map_or(&policy.schedule, |p| &p.schedule).clone()),
        promised_by: promised(facts.plan.is_some()),
    }];
    for (i, id) in policy.further_tiers.iter().enumerate() {
        let planned = facts
            .plan
            .and_then(|p| p.targets.iter().find(|t| &t.durable_id == id));
        let hubs = state.storage.iter().find(|t| &t.durable_id == id);
        let schedule = planned
            .and_then(|t| t.policy.schedule.clone())
            .or_else(|| hubs.and_then(|t| t.policy.schedule.clone()));
        tiers.push(Tier {
            index: u32::try_from(i + 1).unwrap_or(u32::MAX),
            target: Some(id.clone()),
            promised_by: promised(planned.is_some_and(|t| t.policy.schedule.is_some())),
            schedule,
        });
    }
    tiers
}

fn promised(signed: bool) -> PromisedBy {
    if signed {
        PromisedBy::SignedPlan
    } else {
        PromisedBy::DesiredState
    }
}

/// One item from what is known of it.
struct Seen {
    kind: ProtectionKind,
    tier: Option<u32>,
    target: String,
    promised_by: PromisedBy,
    interval: SignedDuration,
    last: Option<(Timestamp, ProtectionResult, Option<String>)>,
    last_ok_at: Option<Timestamp>,
    expected_since: Option<Timestamp>,
}

impl Seen {
    fn item(self, now: Timestamp) -> ProtectionItem {
        let judged = protection::judge(self.last_ok_at, self.expected_since, self.interval, now);
        let (last_at, last_result, detail) = match self.last {
            Some((at, result, detail)) => (Some(at), Some(result), detail),
            None => (None, None, None),
        };
        ProtectionItem {
            kind: self.kind,
            tier: self.tier,
            target: bounded_target(&self.target),
            promised_by: self.promised_by,
            interval_s: u64::try_from(self.interval.as_secs())
                .unwrap_or(1)
                .clamp(1, MAX_INTERVAL_S),
            last_at,
            last_result,
            detail: detail.as_deref().and_then(protection::bounded_detail),
            last_ok_at: self.last_ok_at,
            counted_from: judged.counted_from,
            overdue_at: judged.overdue_at,
            overdue: judged.overdue,
        }
    }
}

/// A target's name as the item carries it: printable, at most [`MAX_TARGET_BYTES`].
fn bounded_target(target: &str) -> String {
    let mut out = String::new();
    for c in target.chars().map(|c| if c.is_control() { ' ' } else { c }) {
        if out.len() + c.len_utf8() > MAX_TARGET_BYTES {
            break;
        }
        out.push(c);
    }
    if out.trim().is_empty() {
        "-".to_owned()
    } else {
        out
    }
}

fn backups(facts: &Facts<'_>, state: &DesiredState, out: &mut Vec<ProtectionItem>) {
    let guest = facts.guest_id.to_string();
    for tier in tiers(facts, state) {
        let Some(interval) = tier
            .schedule
            .as_deref()
            .and_then(|s| protection::cadence(s, facts.now))
        else {
            continue;
        };
        let rows: Vec<&LastBackup> = facts
            .backups
            .iter()
            .filter(|b| b.guest_id == guest && b.tier == Some(tier.index))
            .filter(|b| b.target == tier.target)
            .collect();
        let newest = rows.iter().max_by_key(|b| b.finished_at);
        let last_ok_at = rows
            .iter()
            .filter_map(|b| b.last_ok_at.max(b.ok.then_some(b.finished_at)))
            .max();
        out.push(
            Seen {
                kind: ProtectionKind::Backup,
                tier: Some(tier.index),
                target: tier
                    .target
                    .clone()
                    .unwrap_or_else(|| facts.default_storage.to_owned()),
                promised_by: tier.promised_by,
                interval,
                last: newest.map(|b| {
                    let result = if b.ok {
                        ProtectionResult::Ok
                    } else {
                        ProtectionResult::Failed
                    };
                    (b.finished_at, result, b.error.clone())
                }),
                last_ok_at,
                expected_since: facts.arrived_at,
            }
            .item(facts.now),
        );
    }
}

fn verifications(facts: &Facts<'_>, state: &DesiredState, out: &mut Vec<ProtectionItem>) {
    let (hours, promised_by) = match facts.plan.and_then(|p| p.backup.verify_hours) {
        Some(hours) => (hours, PromisedBy::SignedPlan),
        None if state.verify_policy.enabled => {
            (state.verify_policy.interval_hours, PromisedBy::DesiredState)
        }
        None => return,
    };
    let interval = SignedDuration::try_from(facts.verify_hour.saturating_mul(hours))
        .unwrap_or(SignedDuration::MAX);
    let guest = facts.guest_id.to_string();
    for tier in tiers(facts, state) {
        let Some(id) = tier.target else { continue };
        let pbs = state
            .storage
            .iter()
            .any(|t| t.durable_id == id && t.kind == StorageType::Pbs);
        if !pbs {
            continue;
        }
        let row = facts
            .verifications
            .iter()
            .find(|v| v.verification.guest_id == guest && v.verification.tier == id);
        out.push(
            Seen {
                kind: ProtectionKind::Verification,
                tier: Some(tier.index),
                target: id,
                promised_by,
                interval,
                last: row.map(|v| {
                    let result = match v.verification.outcome {
                        VerifyOutcome::Ok => ProtectionResult::Ok,
                        VerifyOutcome::Failed => ProtectionResult::Failed,
                        VerifyOutcome::Error | VerifyOutcome::Unknown => ProtectionResult::Error,
                    };
                    let detail =
                        (result != ProtectionResult::Ok).then(|| v.verification.detail.clone());
                    (v.finished_at, result, detail)
                }),
                last_ok_at: row.and_then(|v| v.last_ok_at),
                expected_since: row.map(|v| v.first_at).or(facts.arrived_at),
            }
            .item(facts.now),
        );
    }
}

fn restore_test(facts: &Facts<'_>, state: &DesiredState, out: &mut Vec<ProtectionItem>) {
    let (days, promised_by) = match facts.plan.and_then(|p| p.backup.restore_test_days) {
        Some(days) => (days, PromisedBy::SignedPlan),
        None if state.restore_test_policy.enabled => (
            state.restore_test_policy.interval_days,
            PromisedBy::DesiredState,
        ),
        None => return,
    };
    let guest = facts.guest_id.to_string();
    let rows: Vec<&LastRestoreTest> = facts
        .restore_tests
        .iter()
        .filter(|t| t.result.guest_id == guest)
        .collect();
    let newest = rows.iter().max_by_key(|t| t.finished_at);
    let last_ok_at = rows
        .iter()
        .filter_map(|t| {
            let own = (t.result.outcome == TestOutcome::Passed).then_some(t.finished_at);
            t.last_passed_at.max(own)
        })
        .max();
    out.push(
        Seen {
            kind: ProtectionKind::RestoreTest,
            tier: None,
            target: newest.map_or_else(|| "-".to_owned(), |t| t.result.storage.clone()),
            promised_by,
            interval: SignedDuration::from_hours(i64::from(days).saturating_mul(24)),
            last: newest.map(|t| {
                let result = match t.result.outcome {
                    TestOutcome::Passed => ProtectionResult::Ok,
                    TestOutcome::NotChecked => ProtectionResult::NotChecked,
                    TestOutcome::Failed | TestOutcome::Interrupted => ProtectionResult::Failed,
                };
                (t.finished_at, result, t.result.detail.clone())
            }),
            last_ok_at,
            expected_since: facts.arrived_at,
        }
        .item(facts.now),
    );
}

#[cfg(test)]
mod tests;
