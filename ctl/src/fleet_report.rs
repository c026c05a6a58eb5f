//! What a fleet rollout did (or would do), host by host: each host's wave, jobs and outcome,
//! printed as a table or JSON, and the verdict that fails the command when a wave stopped it
//! ([`crate::fleet_wave`] fills it in).

use serde::Serialize;
use uuid::Uuid;

use crate::error::CtlError;
use crate::fleet_plan::{Plan, SkipReason, Target};
use crate::table;

/// How a host ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Its jobs (and gate) succeeded.
    Done,
    /// A job failed or was refused, its gate rolled it back, or it did not end in time.
    Failed,
    /// It got no job.
    Skipped,
    /// `--dry-run`: it would get jobs.
    Planned,
}

/// One host in the report.
#[derive(Debug, Clone, Serialize)]
pub struct HostLine {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Its wave (1 is the canary), when it had one.
    pub wave: Option<usize>,
    /// How many jobs it gets: the plan's count (one a host, or one a guest whose controller
    /// changes), the same number the plan printed before the table.
    pub job_count: usize,
    /// The jobs sent to it (none under `--dry-run`).
    pub jobs: Vec<Uuid>,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
}

/// What a rollout did, host by host: by wave, then the skipped hosts.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether a wave failed and the rollout stopped there.
    pub stopped: bool,
    /// The hosts.
    pub hosts: Vec<HostLine>,
}

impl Report {
    /// A `--dry-run`'s report: the waves planned and the hosts skipped.
    pub fn planned(plan: &Plan, waves: &[Vec<Target>]) -> Self {
        let mut hosts: Vec<HostLine> = waves
            .iter()
            .enumerate()
            .flat_map(|(n, wave)| {
                wave.iter().map(move |t| HostLine {
                    host_id: t.host_id,
                    hostname: t.hostname.clone(),
                    outcome: Outcome::Planned,
                    wave: Some(n + 1),
                    job_count: t.jobs.len(),
                    jobs: Vec::new(),
                    reason: None,
                })
            })
            .collect();
        hosts.extend(
            plan.skipped
                .iter()
                .map(|s| skipped(s.host_id, &s.hostname, &s.reason)),
        );
        Self {
            stopped: false,
            hosts,
        }
    }

    /// Prints it: a table, or JSON.
    pub fn print(&self, json: bool) -> Result<(), CtlError> {
        if json {
            let value = serde_json::to_value(self).map_err(|source| CtlError::Decode {
                what: "rollout report".to_owned(),
                source,
            })?;
            return table::print_json(&value);
        }
        let rows: Vec<Vec<String>> = self
            .hosts
            .iter()
            .map(|h| {
                vec![
                    h.hostname.clone(),
                    h.host_id.to_string(),
                    h.wave.map_or_else(|| "-".to_owned(), |w| w.to_string()),
                    serde_json::to_value(h.outcome)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    h.job_count.to_string(),
                    h.reason.clone().unwrap_or_else(|| "-".to_owned()),
                ]
            })
            .collect();
        table::print(
            &["HOSTNAME", "HOST ID", "WAVE", "OUTCOME", "JOBS", "WHY"],
            &rows,
        )
    }

    /// Success, or [`CtlError::RolloutStopped`] naming the failed hosts.
    pub fn verdict(&self) -> Result<(), CtlError> {
        if !self.stopped {
            return Ok(());
        }
        let failed: Vec<String> = self
            .hosts
            .iter()
            .filter(|h| h.outcome == Outcome::Failed)
            .map(|h| format!("{}: {}", h.hostname, h.reason.as_deref().unwrap_or("-")))
            .collect();
        let skipped = self
            .hosts
            .iter()
            .filter(|h| {
                h.reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("not reached"))
            })
            .count();
        Err(CtlError::RolloutStopped {
            failed: failed.join("; "),
            skipped,
        })
    }
}

pub(crate) fn skipped(host_id: Uuid, hostname: &str, reason: &SkipReason) -> HostLine {
    HostLine {
        host_id,
        hostname: hostname.to_owned(),
        outcome: Outcome::Skipped,
        wave: None,
        job_count: 0,
        jobs: Vec::new(),
        reason: Some(reason.to_string()),
    }
}
