//! What `bosunctl fleet rollout` would do (decision 0086), decided from what the hub says of
//! each matching host before anything is signed: which hosts get jobs (and, for a controller
//! rollout, for which guests), which are skipped and why, and the waves the targets run in.
//! Nothing here talks to the hub; [`crate::fleet`] fetches, [`crate::fleet_wave`] runs.

use std::collections::BTreeMap;

use bosun_proto::admin::{HostDetail, HostStatus, JobRecord, JobState, Liveness};
use bosun_proto::job::{JobKind, JobTarget};
use bosun_proto::report::GuestStatus;
use serde::Serialize;
use uuid::Uuid;

/// The job kinds a fleet rollout issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetKind {
    /// A new agent binary (`agent-update`, params `version` and `sha256`): one job a host;
    /// the host's health gate decides after the job staged it.
    AgentUpdate,
    /// A new controller image (`controller-update`, param `digest`): one job for each
    /// running guest of the host whose controller does not run it yet; the job waits for
    /// the controller's healthy report.
    ControllerUpdate,
}

impl FleetKind {
    /// The job kind.
    pub fn job_kind(self) -> JobKind {
        match self {
            Self::AgentUpdate => JobKind::AgentUpdate,
            Self::ControllerUpdate => JobKind::ControllerUpdate,
        }
    }

    /// The parameter naming what the hosts end up running.
    pub fn target_param(self) -> &'static str {
        match self {
            Self::AgentUpdate => "version",
            Self::ControllerUpdate => bosun_proto::controller::DIGEST_PARAM,
        }
    }
}

/// Why a matching host gets no job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// Not approved, or revoked.
    NotActive {
        /// The host's status.
        status: String,
    },
    /// The hub does not hear from it: a job would wait in the queue.
    Offline {
        /// Its liveness.
        liveness: String,
    },
    /// It says it has no helper, which stages an agent update.
    NoHelper,
    /// It already runs what the rollout installs.
    AlreadyAtTarget {
        /// What it runs.
        running: String,
    },
    /// A controller rollout, and the host reports no running guest with a Bosun identity and
    /// a controller (one that reports a digest, or whose digest the agent records).
    NoGuests,
    /// A job of the same kind is queued or running there.
    Pending {
        /// That job.
        job_id: Uuid,
    },
    /// An earlier wave failed; the rollout stopped before this host.
    NotReached {
        /// The host that failed first.
        after: String,
    },
    /// The rollout's `--deadline` passed before this host's wave.
    DeadlinePassed,
    /// `--hosts` lists it, but the hub does not name it for the selector (it may lack the
    /// label, or the hub may hide it): nothing is signed for it.
    NotReturned,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotActive { status } => write!(f, "not active (status {status})"),
            Self::Offline { liveness } => write!(f, "offline (liveness {liveness})"),
            Self::NoHelper => f.write_str(
                "no helper (capability `helper` missing): an agent update cannot be staged",
            ),
            Self::AlreadyAtTarget { running } => write!(f, "already at target ({running})"),
            Self::NoGuests => {
                f.write_str("no running guest with a Bosun identity and a controller")
            }
            Self::Pending { job_id } => {
                write!(f, "pending: job {job_id} of this kind is not finished")
            }
            Self::NotReached { after } => {
                write!(f, "not reached: the rollout stopped after {after} failed")
            }
            Self::DeadlinePassed => f.write_str("not reached: the rollout's deadline passed"),
            Self::NotReturned => {
                f.write_str("listed with --hosts, but the hub does not name it for the selector")
            }
        }
    }
}

/// A host the rollout sends jobs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// The labels the hub says it carries (shown before anything is signed).
    pub labels: BTreeMap<String, String>,
    /// One target a job: the host alone, or each guest whose controller changes.
    pub jobs: Vec<JobTarget>,
}

/// A matching host left out, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// Why.
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// The hosts a rollout sends jobs to, in the order it reaches them (by hostname), and the
/// ones it skips.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Targets, by hostname.
    pub targets: Vec<Target>,
    /// Skipped hosts, by hostname.
    pub skipped: Vec<Skipped>,
}

/// What the hub says of one matching host.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its detail.
    pub detail: HostDetail,
    /// Its jobs, newest first.
    pub jobs: Vec<JobRecord>,
}

/// Decides, for each host, whether it gets jobs and which; `want` is the value of
/// [`FleetKind::target_param`] the rollout installs.
pub fn plan(kind: FleetKind, want: &str, hosts: &[Seen]) -> Plan {
    let mut sorted: Vec<&Seen> = hosts.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.detail.summary.hostname, a.detail.summary.host_id)
            .cmp(&(&b.detail.summary.hostname, b.detail.summary.host_id))
    });
    let mut plan = Plan::default();
    for seen in sorted {
        let summary = &seen.detail.summary;
        match host_jobs(kind, want, seen) {
            Ok(jobs) => plan.targets.push(Target {
                host_id: summary.host_id,
                hostname: summary.hostname.clone(),
                labels: summary.labels.clone(),
                jobs,
            }),
            Err(reason) => plan.skipped.push(Skipped {
                host_id: summary.host_id,
                hostname: summary.hostname.clone(),
                reason,
            }),
        }
    }
    plan
}

/// The jobs one host gets, or why it gets none.
fn host_jobs(kind: FleetKind, want: &str, seen: &Seen) -> Result<Vec<JobTarget>, SkipReason> {
    let summary = &seen.detail.summary;
    if summary.status != HostStatus::Active {
        return Err(SkipReason::NotActive {
            status: summary.status.as_str().to_owned(),
        });
    }
    if summary.liveness != Liveness::Ok {
        return Err(SkipReason::Offline {
            liveness: summary.liveness.as_str().to_owned(),
        });
    }
    let job_kind = kind.job_kind().as_str();
    if let Some(job) = seen
        .jobs
        .iter()
        .find(|j| j.kind == job_kind && matches!(j.state, JobState::Queued | JobState::Acked))
    {
        return Err(SkipReason::Pending { job_id: job.job_id });
    }
    let host = summary.host_id;
    match kind {
        FleetKind::AgentUpdate => {
            if summary.agent_version.as_deref() == Some(want) {
                return Err(SkipReason::AlreadyAtTarget {
                    running: format!("agent {want}"),
                });
            }
            if !seen.detail.capabilities.as_ref().is_some_and(|c| c.helper) {
                return Err(SkipReason::NoHelper);
            }
            Ok(vec![JobTarget {
                host_id: host,
                guest_id: None,
                vmid: None,
            }])
        }
        FleetKind::ControllerUpdate => controller_jobs(host, want, &seen.detail),
    }
}

/// A controller rollout's jobs on one host: each running guest with a Bosun identity and a
/// controller (it reports a digest, or the agent records the one it should run) whose
/// controller does not report `want` already. A guest running no controller gets no job: there
/// is nothing in it to update, and nothing would report the new one healthy.
fn controller_jobs(
    host: Uuid,
    want: &str,
    detail: &HostDetail,
) -> Result<Vec<JobTarget>, SkipReason> {
    let guests: Vec<_> = detail
        .last_report
        .iter()
        .flat_map(|r| r.guests.iter())
        .filter(|g| g.guest_id.is_some() && g.status == GuestStatus::Running)
        .filter(|g| g.controller_digest.is_some() || g.controller_expected.is_some())
        .collect();
    if guests.is_empty() {
        return Err(SkipReason::NoGuests);
    }
    let jobs: Vec<JobTarget> = guests
        .iter()
        .filter(|g| g.controller_digest.as_deref() != Some(want))
        .map(|g| JobTarget {
            host_id: host,
            guest_id: g.guest_id,
            vmid: Some(g.vmid),
        })
        .collect();
    if jobs.is_empty() {
        return Err(SkipReason::AlreadyAtTarget {
            running: format!("every guest's controller runs {want}"),
        });
    }
    Ok(jobs)
}

/// The targets in waves: the first `canary` hosts, then the rest `batch` at a time.
pub fn waves(targets: &[Target], canary: usize, batch: usize) -> Vec<Vec<Target>> {
    let canary = canary.max(1).min(targets.len());
    let (first, rest) = targets.split_at(canary);
    let mut waves = Vec::new();
    if !first.is_empty() {
        waves.push(first.to_vec());
    }
    waves.extend(rest.chunks(batch.max(1)).map(<[Target]>::to_vec));
    waves
}

#[cfg(test)]
#[path = "fleet_plan_tests.rs"]
mod tests;
