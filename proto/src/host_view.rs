//! What every view of a host says of it, computed once: whether it is in sync with its desired
//! state ([`SyncView`]), each restore test's verdict ([`RestoreVerdict`]), the targets its
//! signed data plan names ([`plan_targets`]), how a guest is named ([`guest_name`]) and what
//! kind it is ([`guest_kind`]), the
//! host's state in one word ([`state_word`]) and whether it lacks an address pool
//! ([`address_pool_warning`]). `bosunctl status`, `bosunctl hosts show`, their
//! JSON ([`HostView`]) and the hub's dashboard call these functions and nothing else for them,
//! so no two views of one host can disagree.

use serde::Serialize;
use uuid::Uuid;

use crate::admin::{HostDetail, HostStatus, HostSummary, Liveness};
use crate::desired::GuestKind;
use crate::report::{RestoreTestOutcome, RestoreTestReport, StateReport};
use crate::rollup::HealthLevel;
use crate::verify::VerifyOutcome;

/// Whether a host is in sync with its desired state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncState {
    /// The host applied the current generation and refuses none of it.
    InSync,
    /// The host has not applied the current generation yet and refuses none of it.
    Converging,
    /// The host refuses part of the current generation (decision 0065): it does not apply it
    /// until desired state changes.
    NotInSync,
}

impl SyncState {
    /// The word every view shows: `in sync`, `converging`, `NOT IN SYNC`.
    pub fn word(self) -> &'static str {
        match self {
            Self::InSync => "in sync",
            Self::Converging => "converging",
            Self::NotInSync => "NOT IN SYNC",
        }
    }
}

/// A host's sync with its desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncView {
    /// Where it stands.
    pub state: SyncState,
    /// The word every view shows for it ([`SyncState::word`]).
    pub word: &'static str,
    /// The generation the hub holds.
    pub desired_generation: u64,
    /// The generation the host last applied.
    pub applied_generation: u64,
    /// How many parts of desired state the host refuses: what its last report lists, else the
    /// guests' fields its report shows cannot be applied (a root disk asked smaller than the
    /// guest's).
    pub refused: usize,
}

impl SyncView {
    /// The sync of `host`.
    pub fn of(host: &HostDetail) -> Self {
        let s = &host.summary;
        let refused = refused_count(host);
        let state = if refused > 0 {
            SyncState::NotInSync
        } else if s.applied_generation >= s.desired_generation {
            SyncState::InSync
        } else {
            SyncState::Converging
        };
        Self {
            state,
            word: state.word(),
            desired_generation: s.desired_generation,
            applied_generation: s.applied_generation,
            refused,
        }
    }

    /// The sync of a host known only by its summary (a fleet list): the refusals its last
    /// report lists, counted by the hub.
    pub fn of_summary(s: &HostSummary) -> Self {
        let refused = usize::try_from(s.refused).unwrap_or(usize::MAX);
        let state = if refused > 0 {
            SyncState::NotInSync
        } else if s.applied_generation >= s.desired_generation {
            SyncState::InSync
        } else {
            SyncState::Converging
        };
        Self {
            state,
            word: state.word(),
            desired_generation: s.desired_generation,
            applied_generation: s.applied_generation,
            refused,
        }
    }

    /// The sync in one sentence: `in sync: generation 4 applied`, `converging: generation 5
    /// not applied yet (last applied 4)`, `NOT IN SYNC: the host refuses 1 part of desired
    /// state (generation 5 not applied; last applied 4)`.
    pub fn sentence(&self) -> String {
        match self.state {
            SyncState::InSync => format!(
                "{}: generation {} applied",
                self.word, self.desired_generation
            ),
            SyncState::Converging => format!(
                "{}: generation {} not applied yet (last applied {})",
                self.word, self.desired_generation, self.applied_generation
            ),
            SyncState::NotInSync => format!(
                "{}: the host refuses {} part{} of desired state (generation {} not applied; last \
                 applied {})",
                self.word,
                self.refused,
                if self.refused == 1 { "" } else { "s" },
                self.desired_generation,
                self.applied_generation
            ),
        }
    }
}

/// What the host refuses: the report's list, else the guests' unappliable fields.
fn refused_count(host: &HostDetail) -> usize {
    let Some(report) = &host.last_report else {
        return 0;
    };
    if !report.refused.is_empty() {
        return report.refused.len();
    }
    host.desired
        .iter()
        .flat_map(|d| &d.guests)
        .filter_map(|spec| {
            report
                .guests
                .iter()
                .find(|g| g.guest_id == Some(spec.guest_id))
                .map(|seen| crate::desired_status::unappliable(spec, seen).len())
        })
        .sum()
}

/// The verdict of one restore test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreVerdict {
    /// The scratch guest restored, started and passed the guest's own check.
    Passed,
    /// It did not.
    Failed,
    /// The agent stopped in the middle.
    Interrupted,
    /// Booted, but the guest's data was not checked: no pass, no failure either.
    NotChecked,
}

impl RestoreVerdict {
    /// The verdict of `test`: its outcome, or its `passed` flag from an agent that sends no
    /// outcome (or one this version does not know).
    pub fn of(test: &RestoreTestReport) -> Self {
        match test.outcome {
            Some(RestoreTestOutcome::Passed) => Self::Passed,
            Some(RestoreTestOutcome::Failed) => Self::Failed,
            Some(RestoreTestOutcome::Interrupted) => Self::Interrupted,
            Some(RestoreTestOutcome::NotChecked) => Self::NotChecked,
            None | Some(RestoreTestOutcome::Unknown) if test.passed => Self::Passed,
            None | Some(RestoreTestOutcome::Unknown) => Self::Failed,
        }
    }

    /// The word every view shows: `passed`, `FAILED`, `INTERRUPTED`, `booted, NOT CHECKED`
    /// (what needs a look stands out).
    pub fn word(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "FAILED",
            Self::Interrupted => "INTERRUPTED",
            Self::NotChecked => "booted, NOT CHECKED",
        }
    }

    /// Whether it is a pass.
    pub fn passed(self) -> bool {
        self == Self::Passed
    }
}

/// The restore tests a report carries: its list, or the single last one from an agent that
/// sends no list.
pub fn restore_tests(report: &StateReport) -> &[RestoreTestReport] {
    if report.restore_tests.is_empty() {
        report.last_restore_test.as_slice()
    } else {
        &report.restore_tests
    }
}

/// The newest restore test a report carries.
pub fn newest_restore_test(report: &StateReport) -> Option<&RestoreTestReport> {
    restore_tests(report).iter().max_by_key(|t| t.finished_at)
}

/// The targets the host's signed data plan names (their `durable_id`s), as its last report
/// says; from the host's description of itself when it sent no report yet.
pub fn plan_targets(host: &HostDetail) -> Vec<String> {
    match &host.last_report {
        Some(report) => report
            .data_plan
            .as_ref()
            .map(|p| p.targets.clone())
            .unwrap_or_default(),
        None => host
            .capabilities
            .as_ref()
            .map(|c| c.plan_targets.clone())
            .unwrap_or_default(),
    }
}

/// What every view says of a host whose agent has no address pool (`[addresses]` in its
/// `agent.toml`, decision 0101): a warning, not a failure, since such a host still provisions.
/// `None` when it has one, and for an agent that does not say.
pub fn address_pool_warning(host: &HostDetail) -> Option<&'static str> {
    host.capabilities
        .as_ref()
        .filter(|c| c.address_pool == Some(false))
        .map(|_| {
            "no address pool: new guests get DHCP and their firewall no ipfilter; add [addresses] \
             to the host's agent.toml (decision 0101)"
        })
}

/// How every view names guest `guest_id` of `host`: the hostname its last report gives it,
/// else the one desired state gives it, else its id.
pub fn guest_name(host: &HostDetail, guest_id: Uuid) -> String {
    let reported = host
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .filter(|g| g.guest_id == Some(guest_id))
        .map(|g| g.hostname.as_str());
    let desired = host
        .desired
        .iter()
        .flat_map(|d| &d.guests)
        .filter(|g| g.guest_id == guest_id)
        .map(|g| g.hostname.as_str());
    reported
        .chain(desired)
        .find(|name| !name.trim().is_empty())
        .map_or_else(|| guest_id.to_string(), str::to_owned)
}

/// What kind every view says guest `guest_id` of `host` is: the kind its last report observes,
/// else the one desired state asks for (a guest not built yet), else a container.
pub fn guest_kind(host: &HostDetail, guest_id: Uuid) -> GuestKind {
    let reported = host
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .find(|g| g.guest_id == Some(guest_id))
        .map(|g| g.kind);
    let desired = || {
        host.desired
            .iter()
            .flat_map(|d| &d.guests)
            .find(|g| g.guest_id == guest_id)
            .map(|g| g.kind)
    };
    reported.or_else(desired).unwrap_or_default()
}

/// The host's state in one word and the level it stands for: `revoked` and `pending
/// approval` as they are, otherwise the hub's one health roll-up (`ok`, `warning`,
/// `critical`), or the liveness word when liveness is what sets that level (`overdue`,
/// `never polled`, `stopped`, `unknown`). `None` for the level of a revoked host (locked out
/// on purpose) and one pending approval.
pub fn state_word(host: &HostSummary) -> (&'static str, Option<HealthLevel>) {
    match host.status {
        HostStatus::Revoked => return ("revoked", None),
        HostStatus::PendingApproval => return ("pending approval", None),
        HostStatus::Active => {}
    }
    let level = host.health.as_ref().map_or(HealthLevel::Ok, |h| h.level);
    let word = match level {
        HealthLevel::Ok => "ok",
        HealthLevel::Warning => "warning",
        HealthLevel::Critical => "critical",
    };
    let told = match host.liveness {
        Liveness::Overdue => Some(("overdue", HealthLevel::Critical)),
        Liveness::Never => Some(("never polled", HealthLevel::Warning)),
        Liveness::Stopped => Some(("stopped", HealthLevel::Warning)),
        Liveness::Unknown => Some(("unknown", HealthLevel::Warning)),
        Liveness::Ok => None,
    };
    match told {
        Some((told, told_level)) if told_level == level => (told, Some(level)),
        _ => (word, Some(level)),
    }
}

/// One restore test as the views show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreTestView {
    /// The guest tested.
    pub guest_id: Uuid,
    /// Its name ([`guest_name`]).
    pub guest: String,
    /// The tier it was restored from, when the agent names one.
    pub tier: Option<String>,
    /// When it finished.
    pub finished_at: jiff::Timestamp,
    /// Its verdict.
    pub verdict: RestoreVerdict,
    /// The verdict's word ([`RestoreVerdict::word`]).
    pub word: &'static str,
}

/// One verification as the views show it (PBS's verify, or a file tier's re-hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerificationView {
    /// The guest whose backup group was verified.
    pub guest_id: Uuid,
    /// Its name ([`guest_name`]).
    pub guest: String,
    /// The PBS tier.
    pub tier: String,
    /// How it ended.
    pub outcome: VerifyOutcome,
}

/// What every view says of a host, as `bosunctl status --output json` and `hosts show
/// --output json` carry it beside the hub's own fields (`view`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostView {
    /// The host's state in one word ([`state_word`]).
    pub state: &'static str,
    /// Its sync with desired state.
    pub sync: SyncView,
    /// Its restore tests, newest first.
    pub restore_tests: Vec<RestoreTestView>,
    /// The targets its signed data plan names.
    pub plan_targets: Vec<String>,
    /// Its verifications, by guest and tier.
    pub verifications: Vec<VerificationView>,
}

impl HostView {
    /// The view of `host`.
    pub fn of(host: &HostDetail) -> Self {
        let mut restore: Vec<RestoreTestView> = host
            .last_report
            .iter()
            .flat_map(restore_tests)
            .map(|t| {
                let verdict = RestoreVerdict::of(t);
                RestoreTestView {
                    guest_id: t.guest_id,
                    guest: guest_name(host, t.guest_id),
                    tier: t.tier.clone(),
                    finished_at: t.finished_at,
                    verdict,
                    word: verdict.word(),
                }
            })
            .collect();
        restore.sort_by_key(|t| std::cmp::Reverse(t.finished_at));
        let mut verifications: Vec<VerificationView> = host
            .last_report
            .iter()
            .flat_map(|r| &r.verifications)
            .map(|v| VerificationView {
                guest_id: v.guest_id,
                guest: guest_name(host, v.guest_id),
                tier: v.tier.clone(),
                outcome: v.outcome,
            })
            .collect();
        verifications.sort_by(|a, b| (&a.guest, &a.tier).cmp(&(&b.guest, &b.tier)));
        Self {
            state: state_word(&host.summary).0,
            sync: SyncView::of(host),
            restore_tests: restore,
            plan_targets: plan_targets(host),
            verifications,
        }
    }
}

#[cfg(test)]
#[path = "host_view_tests.rs"]
mod tests;
