//! `bosunctl job submit FILE.json FILE.json.sig`, `bosunctl job list --host ID` and
//! `bosunctl job show --host ID JOB` (`crate::job_show`).

use std::path::{Path, PathBuf};

use bosun_proto::admin::{HostDetail, JobAccepted, JobRecord};
use bosun_proto::job::SignedJob;
use clap::Subcommand;
use reqwest::Method;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::{job_check, table};

/// `bosunctl job ...`
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Queue a job signed with `ssh-keygen -Y sign -n bosun-job@v1`; the exact file bytes are
    /// sent, the host comes from the job's `target.host_id`.
    ///
    /// Before sending, the job is checked as the hub and the agent will check it, and refused
    /// (exit 4) when it would be: a signature that does not verify over the file's bytes (or,
    /// with an `allowed_signers` file configured, a signer the hosts do not accept), an
    /// expired job, or a target the hub does not know (an unknown or revoked host, a guest
    /// the host neither should run nor reports, a vmid other than the one reported).
    Submit {
        /// The job document (`bosun.job/v1`).
        document: PathBuf,
        /// Its armored SSH signature (`FILE.json.sig`).
        signature: PathBuf,
        /// The operator's OpenSSH `allowed_signers` file to check the signer against (default:
        /// the one `hub init --allowed-signers` saved).
        #[arg(long, value_name = "FILE", env = "BOSUN_ALLOWED_SIGNERS")]
        allowed_signers: Option<PathBuf>,
        /// Queue the job even when these checks refuse it (e.g. for a guest the host has not
        /// reported yet); the hub and the agent still check it.
        #[arg(long)]
        skip_checks: bool,
    },
    /// Write or sign a job document (offline; see `crate::job_sign`).
    #[command(flatten)]
    Authoring(crate::job_sign::JobAuthoringCommand),
    /// Jobs of a host with their results, newest first.
    List {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// Newest N (the hub answers at most 10000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
        limit: u32,
    },
    /// One job of a host: its state, priority and result (when it began, how long it ran,
    /// whether it timed out, whether signing it again may help and why, the tail of its steps).
    Show {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// The job: its id, or a prefix of it unique among the host's jobs.
        job_id: String,
    },
    /// Take a queued job off the queue: the next polls no longer carry it. A job the agent
    /// acknowledged or finished is refused (exit 6); one the agent received in a poll answer
    /// just before may still run, and `job list` then shows its result.
    Cancel {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// The job: its id, or a prefix of it unique among the host's jobs (as `job list`
        /// shows it).
        job_id: String,
    },
}

/// Runs a `job` command.
pub async fn run(
    client: &HubClient,
    global: &GlobalArgs,
    command: &JobCommand,
) -> Result<(), CtlError> {
    let json = global.json();
    match command {
        JobCommand::Submit {
            document,
            signature,
            allowed_signers,
            skip_checks,
        } => {
            let signers = allowed_signers
                .clone()
                .or_else(|| client.settings().allowed_signers.clone());
            let checks = if *skip_checks {
                Checks::Skip
            } else {
                Checks::Run {
                    allowed_signers: signers.as_deref(),
                }
            };
            submit(client, json, document, signature, checks).await
        }
        JobCommand::Authoring(command) => crate::job_sign::run(command, global).await,
        JobCommand::Cancel { host, job_id } => {
            let host = crate::resolve::host_id(client, host).await?;
            let segment = job_segment(job_id)?;
            let value = client
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/admin/hosts/{host}/jobs/{segment}/cancel"),
                    None,
                    &[],
                )
                .await
                .map_err(|err| match crate::resolve::as_id(job_id) {
                    Some(_) => err,
                    None => crate::resolve::from_hub(crate::resolve::NameKind::Job, job_id, err),
                })?;
            if json {
                return table::print_json(&value);
            }
            let cancelled: bosun_proto::admin::JobCancelled = decode("cancelled job", value)?;
            crate::outln!(
                "job {} cancelled: the hub no longer hands it to host {host}",
                cancelled.job_id
            )
        }
        JobCommand::Show { host, job_id } => show(client, host, job_id, json).await,
        JobCommand::List { host, limit } => {
            let host = crate::resolve::host_id(client, host).await?;
            let value = client
                .get(&format!("/v1/admin/hosts/{host}/jobs?limit={limit}"))
                .await?;
            // A hub older than `limit` answers every job: the newest N are kept here too.
            let value = crate::client::newest(value, *limit);
            if json {
                return table::print_json(&value);
            }
            let jobs: Vec<JobRecord> = decode("job list", value)?;
            let len = bosun_proto::ids::unique_len(jobs.iter().map(|j| &j.job_id));
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|job| {
                    vec![
                        bosun_proto::ids::shown(&job.job_id, len),
                        job.kind.clone(),
                        job.state.as_str().to_owned(),
                        table::when(Some(job.submitted_at)),
                        job.priority.to_string(),
                        finished(job),
                        crate::job_show::duration(job.result.as_ref().and_then(|r| r.duration_ms)),
                        crate::job_show::retriable(job.result.as_ref()),
                        job.result
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |r| r.detail.clone()),
                    ]
                })
                .collect();
            table::print(
                &[
                    "JOB ID",
                    "KIND",
                    "STATE",
                    "SUBMITTED",
                    "PRIO",
                    "FINISHED",
                    "TOOK",
                    "RETRY",
                    "DETAIL",
                ],
                &rows,
            )
        }
    }
}

/// When a job finished: its time of day (`09:45:33Z`) when that is the day it was submitted,
/// else the whole timestamp; `-` while it has no result.
fn finished(job: &JobRecord) -> String {
    let Some(at) = job.result.as_ref().map(|r| r.finished_at) else {
        return "-".to_owned();
    };
    let day = |t: jiff::Timestamp| t.strftime("%Y-%m-%d").to_string();
    if day(at) == day(job.submitted_at) {
        at.strftime("%H:%M:%SZ").to_string()
    } else {
        table::when(Some(at))
    }
}

/// `job show`: one job of `host`, typed as its id or a prefix unique among the host's jobs.
async fn show(client: &HubClient, host: &str, job_id: &str, json: bool) -> Result<(), CtlError> {
    let host = crate::resolve::host_id(client, host).await?;
    let jobs: Vec<JobRecord> = decode(
        "job list",
        client.get(&format!("/v1/admin/hosts/{host}/jobs")).await?,
    )?;
    let candidates: Vec<crate::resolve::Candidate> = jobs
        .iter()
        .map(|j| crate::resolve::Candidate {
            id: j.job_id,
            name: j.kind.clone(),
        })
        .collect();
    let job_id = crate::resolve::by_prefix(crate::resolve::NameKind::Job, job_id, &candidates)?;
    let job = jobs
        .into_iter()
        .find(|j| j.job_id == job_id)
        .ok_or_else(|| CtlError::BadArgument {
            what: "JOB",
            reason: format!("host {host} has no job {job_id}"),
        })?;
    if json {
        let value = serde_json::to_value(&job).map_err(|source| CtlError::Decode {
            what: "job".to_owned(),
            source,
        })?;
        return table::print_json(&value);
    }
    crate::job_show::print(&job)
}

/// The job `text` names as a path segment: its id, or a prefix of it the hub resolves (the
/// hub answers an ambiguous prefix with its candidates, exit 4; an unknown one, exit 8).
fn job_segment(text: &str) -> Result<String, CtlError> {
    if let Some(id) = crate::resolve::as_id(text) {
        return Ok(id.to_string());
    }
    bosun_proto::ids::as_prefix(text)
        .map(|typed| bosun_proto::ids::hyphenated(&typed))
        .ok_or_else(|| CtlError::BadName {
            kind: crate::resolve::NameKind::Job,
            reason: format!(
                "{:?} is neither a job id nor an id prefix (at least {} hex digits)",
                text.chars().take(64).collect::<String>(),
                bosun_proto::ids::MIN_TYPED
            ),
        })
}

/// What `job submit` checks before it sends a job (`crate::job_check`).
#[derive(Debug, Clone, Copy)]
enum Checks<'a> {
    /// Signature, expiry and target; the signer against `allowed_signers` when one is
    /// configured.
    Run {
        /// The operator's `allowed_signers` file, if configured.
        allowed_signers: Option<&'a Path>,
    },
    /// `--skip-checks`: the hub and the agent check it alone.
    Skip,
}

async fn submit(
    client: &HubClient,
    json: bool,
    document: &PathBuf,
    signature: &PathBuf,
    checks: Checks<'_>,
) -> Result<(), CtlError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| CtlError::ReadInput {
            path: path.clone(),
            source,
        })
    };
    let bytes = read(document)?;
    let armored = String::from_utf8(read(signature)?).map_err(|e| CtlError::BadArgument {
        what: "signature file",
        reason: format!("{} is not text: {e}", signature.display()),
    })?;
    let envelope = SignedJob::new(&bytes, &armored);
    envelope
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: if source.field() == "signature" {
                signature.clone()
            } else {
                document.clone()
            },
            document: "signed bosun.job/v1",
            source,
        })?;
    let job = envelope
        .parse_document()
        .map_err(|source| CtlError::InvalidInput {
            path: document.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    let host = job.target.host_id;
    let checked = match checks {
        Checks::Run { allowed_signers } => {
            let now = jiff::Timestamp::now();
            let signers = allowed_signers.map(job_check::load_signers).transpose()?;
            let signer = job_check::check_signature(&bytes, &armored, signers.as_ref(), now)?;
            job_check::check_validity(&job, now)?;
            let detail: HostDetail = decode(
                "host detail",
                client.get(&format!("/v1/admin/hosts/{host}")).await?,
            )?;
            job_check::check_target(&job, &detail)?;
            Some((signer, detail.summary.hostname))
        }
        Checks::Skip => None,
    };
    let body = serde_json::to_vec(&envelope).map_err(|source| CtlError::Decode {
        what: "signed job".to_owned(),
        source,
    })?;
    let value = client
        .call(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(body),
            &[],
        )
        .await?;
    if json {
        return table::print_json(&value);
    }
    let accepted: JobAccepted = decode("job answer", value)?;
    let note = if accepted.created {
        "queued"
    } else {
        "already queued"
    };
    let checked = match checked {
        Some((signer, hostname)) => format!(" ({hostname}), {}", signer.describe()),
        None => ", not checked before submitting (--skip-checks)".to_owned(),
    };
    crate::outln!(
        "job {} ({}) {note} for host {host}{checked}; state {}",
        accepted.job_id,
        job.kind.as_str(),
        accepted.state.as_str(),
    )
}
