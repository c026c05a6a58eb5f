//! Running a fleet rollout's waves (decision 0086): for each host of a wave, a fresh
//! `bosun.job/v1` document for each of its targets, signed here with `ssh-keygen -Y sign` and
//! queued at the hub for that host; then the wave waits (bounded by `--wait` and the
//! rollout's `--deadline`) until each job ended and, for an agent update, until the host's
//! health gate said `committed` or `rolled back` (the `agent_update.*` entry the agent audits
//! with the job's id). A controller update's job already waits for the controller's healthy
//! report, so its result is its gate. The first wave with a failure is the last. No job is
//! signed for a host outside the operator's [`Approval`] (decision 0093), whatever a wave holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::admin::{AuditPage, JobRecord, JobState};
use bosun_proto::job::{JobTarget, SIGNATURE_NAMESPACE, SignedJob};
use reqwest::Method;
use tokio::time::Instant;
use uuid::Uuid;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::fleet_approve::Approval;
use crate::fleet_plan::{FleetKind, Plan, SkipReason, Target};
use crate::fleet_report::{HostLine, Outcome, Report, skipped};

/// How often a wave asks the hub how its jobs are doing.
const POLL: Duration = Duration::from_secs(1);

/// The audit entries the health gate's verdict on an agent update is read from.
const COMMITTED: &str = "agent_update.committed";
const ROLLED_BACK: &str = "agent_update.failed";

/// What every job of the rollout is made of, checked before the hub is asked anything.
#[derive(Debug, Clone)]
pub struct Settings {
    kind: FleetKind,
    params: serde_json::Map<String, serde_json::Value>,
    /// What the hosts end up running (`version` or `digest`).
    pub want: String,
    key: Option<PathBuf>,
    ssh_keygen: PathBuf,
    wait: Duration,
    deadline: Duration,
    valid_hours: i64,
}

impl Settings {
    /// The settings of `bosunctl fleet rollout`'s arguments (`--param`s, `--wait` and
    /// `--deadline` as given); a missing or malformed parameter, or a duration out of bounds,
    /// is refused here.
    pub fn new(
        kind: FleetKind,
        params: &[String],
        key: Option<PathBuf>,
        ssh_keygen: PathBuf,
        (wait, deadline): (&str, &str),
        valid_hours: i64,
    ) -> Result<Self, CtlError> {
        let params = crate::job_sign::params(params)?;
        let name = kind.target_param();
        let want = params
            .get(name)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| CtlError::BadArgument {
                what: "--param",
                reason: format!("`{}` needs --param {name}=…", kind.job_kind().as_str()),
            })?
            .to_owned();
        let bounded = |what: &'static str, text: &str, max: u32| {
            let seconds = crate::duration::parse_within(what, text, 10, max)?;
            Ok::<_, CtlError>(Duration::from_secs(u64::from(seconds)))
        };
        let settings = Self {
            kind,
            params,
            want,
            key,
            ssh_keygen,
            wait: bounded("--wait", wait, 86_400)?,
            deadline: bounded("--deadline", deadline, 7 * 86_400)?,
            valid_hours,
        };
        // The document every host gets, checked once against a stand-in target.
        let sample = JobTarget {
            host_id: Uuid::new_v4(),
            guest_id: (kind == FleetKind::ControllerUpdate).then(Uuid::new_v4),
            vmid: (kind == FleetKind::ControllerUpdate).then_some(100),
        };
        settings
            .document(sample)
            .validate()
            .map_err(|source| CtlError::BadArgument {
                what: "--param",
                reason: format!("the job would be invalid: {source}"),
            })?;
        Ok(settings)
    }

    /// A parameter every job carries, as text (`sha256`, `version`, `digest`).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).and_then(serde_json::Value::as_str)
    }

    fn document(&self, target: JobTarget) -> bosun_proto::job::JobDocument {
        crate::job_sign::document(
            self.kind.job_kind(),
            target,
            self.params.clone(),
            self.valid_hours,
            None,
            0,
        )
    }
}

/// Runs the waves in order; the first one with a failed host is the last. A job is signed
/// only for a host `approval` admits.
pub async fn run_waves(
    client: &HubClient,
    settings: &Settings,
    approval: &Approval,
    plan: &Plan,
    waves: &[Vec<Target>],
) -> Result<Report, CtlError> {
    let scratch = Scratch::new()?;
    let end = Instant::now() + settings.deadline;
    let mut report = Report {
        stopped: false,
        hosts: Vec::new(),
    };
    let mut stop: Option<SkipReason> = None;
    for (n, wave) in waves.iter().enumerate() {
        if stop.is_none() && Instant::now() >= end {
            stop = Some(SkipReason::DeadlinePassed);
        }
        if let Some(reason) = &stop {
            report.hosts.extend(wave.iter().map(|t| HostLine {
                wave: Some(n + 1),
                ..skipped(t.host_id, &t.hostname, reason)
            }));
            continue;
        }
        crate::errln!(
            "{} {}: {}",
            if n == 0 { "canary" } else { "wave" },
            n + 1,
            wave.iter()
                .map(|t| t.hostname.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let until = end.min(Instant::now() + settings.wait);
        let lines = Box::pin(run_wave(
            client, settings, approval, &scratch.0, wave, until,
        ))
        .await;
        for line in lines {
            if line.outcome == Outcome::Failed && stop.is_none() {
                report.stopped = true;
                stop = Some(SkipReason::NotReached {
                    after: format!("{} ({})", line.hostname, line.host_id),
                });
            }
            crate::errln!(
                "  {}: {}",
                line.hostname,
                line.reason.as_deref().unwrap_or("done")
            );
            report.hosts.push(HostLine {
                wave: Some(n + 1),
                ..line
            });
        }
    }
    report.hosts.extend(
        plan.skipped
            .iter()
            .map(|s| skipped(s.host_id, &s.hostname, &s.reason)),
    );
    Ok(report)
}

/// A private directory `ssh-keygen` signs in, removed when the rollout ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, CtlError> {
        let dir =
            std::env::temp_dir().join(format!("bosunctl-rollout-{}", Uuid::new_v4().simple()));
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&dir)
            .map_err(|source| CtlError::WriteOutput {
                path: dir.clone(),
                source,
            })?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where one job of a wave stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Queued or running.
    Running,
    /// An agent update the job staged: the health gate has not said yet.
    Gate,
    /// Done (and, for an agent update, committed).
    Passed,
    /// Why not.
    Failed(String),
}

/// One job of a wave.
#[derive(Debug)]
struct Sent {
    host: usize,
    job_id: Uuid,
    phase: Phase,
    state: Option<JobState>,
}

/// Signs and queues the wave's jobs, then follows them until each ended or `until` passed.
async fn run_wave(
    client: &HubClient,
    settings: &Settings,
    approval: &Approval,
    scratch: &Path,
    wave: &[Target],
    until: Instant,
) -> Vec<HostLine> {
    let mut sent: Vec<Sent> = Vec::new();
    let mut failed: BTreeMap<usize, String> = BTreeMap::new();
    'hosts: for (i, target) in wave.iter().enumerate() {
        if !approved(approval, target) {
            failed.insert(
                i,
                "not signed: the operator did not approve this host".to_owned(),
            );
            continue;
        }
        for job in &target.jobs {
            match send(client, settings, scratch, *job).await {
                Ok(job_id) => sent.push(Sent {
                    host: i,
                    job_id,
                    phase: Phase::Running,
                    state: None,
                }),
                Err(err) => {
                    failed.insert(i, format!("not queued: {}", error_chain(&err)));
                    continue 'hosts;
                }
            }
        }
    }
    follow(client, settings.kind, wave, &mut sent, until).await;
    wave.iter()
        .enumerate()
        .map(|(i, t)| {
            let mine: Vec<&Sent> = sent.iter().filter(|s| s.host == i).collect();
            let reason = failed.get(&i).cloned().or_else(|| {
                mine.iter().find_map(|s| match &s.phase {
                    Phase::Failed(why) => Some(format!("job {}: {why}", s.job_id)),
                    _ => None,
                })
            });
            HostLine {
                host_id: t.host_id,
                hostname: t.hostname.clone(),
                outcome: if reason.is_some() {
                    Outcome::Failed
                } else {
                    Outcome::Done
                },
                wave: None,
                job_count: mine.len(),
                jobs: mine.iter().map(|s| s.job_id).collect(),
                reason,
            }
        })
        .collect()
}

/// Whether every job of `target` is for a host the operator approved.
fn approved(approval: &Approval, target: &Target) -> bool {
    approval.admits(target.host_id) && target.jobs.iter().all(|j| approval.admits(j.host_id))
}

/// Signs one job for `target` and queues it at the hub; gives its id.
async fn send(
    client: &HubClient,
    settings: &Settings,
    scratch: &Path,
    target: JobTarget,
) -> Result<Uuid, CtlError> {
    let host = target.host_id;
    let document = settings.document(target);
    let mut bytes = serde_json::to_vec_pretty(&document).map_err(|source| CtlError::Decode {
        what: "job document".to_owned(),
        source,
    })?;
    bytes.push(b'\n');
    let key = settings.key.as_deref().ok_or(CtlError::BadArgument {
        what: "--key",
        reason: "a rollout signs its jobs: give the operator's key".to_owned(),
    })?;
    let beside = scratch.join(document.job_id.to_string());
    let armored = crate::job_sign::sign_bytes(
        &settings.ssh_keygen,
        SIGNATURE_NAMESPACE,
        key,
        &bytes,
        &beside,
    )?;
    let body = serde_json::to_vec(&SignedJob::new(&bytes, &armored)).map_err(|source| {
        CtlError::Decode {
            what: "signed job".to_owned(),
            source,
        }
    })?;
    client
        .call(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(body),
            &[],
        )
        .await?;
    Ok(document.job_id)
}

/// Asks the hub about the wave's unfinished jobs every [`POLL`] until none is left or
/// `until` passed; a job still unfinished then fails (cancelled if it was still queued).
async fn follow(
    client: &HubClient,
    kind: FleetKind,
    wave: &[Target],
    sent: &mut [Sent],
    until: Instant,
) {
    loop {
        let open: Vec<usize> = sent
            .iter()
            .filter(|s| matches!(s.phase, Phase::Running | Phase::Gate))
            .map(|s| s.host)
            .collect();
        if open.is_empty() {
            return;
        }
        if Instant::now() >= until {
            break;
        }
        for host in dedup(open) {
            let host_id = wave[host].host_id;
            if let Err(err) = look(
                client,
                kind,
                host_id,
                sent.iter_mut().filter(|s| s.host == host),
            )
            .await
            {
                crate::errln!(
                    "  {}: could not ask the hub: {}",
                    wave[host].hostname,
                    error_chain(&err)
                );
            }
        }
        tokio::time::sleep(POLL).await;
    }
    for s in sent.iter_mut() {
        let waiting = match s.phase {
            Phase::Running => "the job did not end",
            Phase::Gate => "the health gate did not decide",
            _ => continue,
        };
        let mut why = format!(
            "{waiting} within --wait (state {})",
            s.state.map_or("unknown", JobState::as_str)
        );
        if s.state == Some(JobState::Queued) {
            let host = wave[s.host].host_id;
            let path = format!("/v1/admin/hosts/{host}/jobs/{}/cancel", s.job_id);
            if client.call(Method::POST, &path, None, &[]).await.is_ok() {
                why.push_str("; cancelled");
            }
        }
        s.phase = Phase::Failed(why);
    }
}

fn dedup(mut hosts: Vec<usize>) -> Vec<usize> {
    hosts.sort_unstable();
    hosts.dedup();
    hosts
}

/// One look at a host's jobs (and, for a staged agent update, its audit trail).
async fn look<'a>(
    client: &HubClient,
    kind: FleetKind,
    host: Uuid,
    mine: impl Iterator<Item = &'a mut Sent>,
) -> Result<(), CtlError> {
    let jobs: Vec<JobRecord> = decode(
        "job list",
        client.get(&format!("/v1/admin/hosts/{host}/jobs")).await?,
    )?;
    let mut audit: Option<AuditPage> = None;
    for s in mine {
        if s.phase == Phase::Running {
            let Some(job) = jobs.iter().find(|j| j.job_id == s.job_id) else {
                continue;
            };
            s.state = Some(job.state);
            let detail = job.result.as_ref().map_or("", |r| r.detail.as_str());
            s.phase = match job.state {
                JobState::Queued | JobState::Acked => Phase::Running,
                JobState::Succeeded if kind == FleetKind::AgentUpdate => Phase::Gate,
                JobState::Succeeded => Phase::Passed,
                other => Phase::Failed(format!("{}: {detail}", other.as_str())),
            };
        }
        if s.phase == Phase::Gate {
            if audit.is_none() {
                audit = Some(decode(
                    "audit page",
                    client
                        .get(&format!("/v1/admin/audit?host={host}&limit=200"))
                        .await?,
                )?);
            }
            if let Some(verdict) = audit.as_ref().and_then(|page| gate_verdict(page, s.job_id)) {
                s.phase = verdict;
            }
        }
    }
    Ok(())
}

/// The health gate's verdict on the agent update of `job`, if the host audited one.
fn gate_verdict(page: &AuditPage, job: Uuid) -> Option<Phase> {
    let job = job.to_string();
    let entry = page.entries.iter().find(|e| {
        (e.action == COMMITTED || e.action == ROLLED_BACK)
            && (e.detail["job_id"].as_str() == Some(job.as_str())
                || e.detail["detail"]["update_id"].as_str() == Some(job.as_str()))
    })?;
    if entry.action == COMMITTED {
        return Some(Phase::Passed);
    }
    let inner = &entry.detail["detail"];
    let text = |key: &str| inner[key].as_str().unwrap_or("-").to_owned();
    Some(Phase::Failed(format!(
        "the health gate rolled it back ({}: {})",
        text("failure"),
        text("detail")
    )))
}

#[cfg(test)]
#[path = "fleet_wave_tests.rs"]
mod tests;
