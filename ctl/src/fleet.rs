//! `bosunctl fleet rollout`: an agent update or a controller rollout to the hosts a label and
//! capability selector matches, in waves (decision 0086). The hub resolves the selector
//! (`GET /v1/admin/hosts?label=…&capability=…`); this command checks its answer, decides
//! which hosts get jobs ([`crate::fleet_plan`]), prints that, and then signs one job for each
//! host (each guest, for a controller rollout) with the operator's key and runs the waves
//! ([`crate::fleet_wave`]). The hub never signs and never widens the set: every job names its
//! host and was signed here for it, and only for a host the operator approved
//! ([`crate::fleet_approve`], decision 0093): named with `--hosts`, within `--max-hosts`, or
//! confirmed on a terminal within the canary's size.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use bosun_proto::admin::{HostDetail, HostSummary, JobRecord};
use clap::Subcommand;
use uuid::Uuid;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::fleet_approve::{Approval, Ask};
use crate::fleet_plan::{FleetKind, Plan, Seen, SkipReason, Skipped};
use crate::global::GlobalArgs;

/// The most hosts `--max-hosts` may allow.
pub const MAX_HOSTS: u32 = 500;

/// The most `--label` terms, and the most `--capability` terms, a selector holds (the hub's
/// bound on each).
pub const MAX_TERMS: usize = 8;

/// `bosunctl fleet ...`
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Sign and run an `agent-update` or `controller-update` on every host a selector
    /// matches, in waves: a canary wave first, then the rest in batches, each wave waiting
    /// for its jobs and health gates; the first failure stops the rollout. Shows each wave's
    /// hosts (name, id, the labels the hub claims) before signing, and signs only for hosts
    /// the operator approved: listed with `--hosts`, within `--max-hosts`, or, with neither,
    /// at most the canary's size and confirmed by typing `yes` on a terminal (without one,
    /// nothing is signed); a hub that names more hosts gets nothing signed (exit 4). Prints the
    /// hosts done, failed and skipped (offline, no helper, already at target, a job pending,
    /// not returned by the hub, not reached), each with why; exit 14 when it stopped.
    Rollout(RolloutArgs),
}

/// `bosunctl fleet rollout`.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    /// `agent-update` (with `--param version=…` and `--param sha256=…`, optionally
    /// `--param override_window=true`) or `controller-update` (with `--param digest=sha256:…`).
    #[arg(long, value_enum)]
    pub kind: FleetKind,
    /// Only hosts with this label, `key=value` (repeat: all must match).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Only hosts that report this capability word (repeat: all must match).
    #[arg(long = "capability", value_name = "WORD")]
    pub capabilities: Vec<String>,
    /// A job parameter, `key=value`, signed into every job.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// The operator's private key (or its `sk-` handle file): each job is signed with
    /// `ssh-keygen -Y sign -n bosun-job@v1`.
    #[arg(long, short = 'f', required_unless_present = "dry_run")]
    pub key: Option<PathBuf>,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
    /// Hosts in the first wave (1 to 10).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub canary: u32,
    /// Hosts in each wave after the canary (1 to 50).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub batch: u32,
    /// The hosts the rollout may sign for, by id (comma-separated or repeated, at most 500):
    /// a hub that names another one for the selector gets nothing signed; a listed host the
    /// hub does not name is reported and skipped. No confirmation is asked.
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub hosts: Vec<Uuid>,
    /// The most hosts the rollout may sign for (1 to 500): a hub that says the selector
    /// matches more gets nothing signed. No confirmation is asked. Without it (and without
    /// `--hosts`) the bound is the canary's size and the hosts shown must be confirmed on a
    /// terminal.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HOSTS)))]
    pub max_hosts: Option<u32>,
    /// How long one wave may take, its health gates included (`90s`, `30m`; 10 s to 24 h);
    /// a job not done by then fails the wave (a queued one is cancelled).
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    pub wait: String,
    /// How long the whole rollout may take (10 s to 7 d); hosts whose wave would start later
    /// are skipped.
    #[arg(long, value_name = "DURATION", default_value = "6h")]
    pub deadline: String,
    /// Hours each job stays valid from its signing (1 to 168).
    #[arg(long, default_value_t = 24,
          value_parser = clap::value_parser!(i64).range(1..=bosun_proto::job::MAX_VALIDITY_HOURS))]
    pub valid_hours: i64,
    /// Print the hosts and waves, sign and send nothing (the bound still applies; nothing is
    /// asked).
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs a `fleet` command.
pub async fn run(
    client: &HubClient,
    global: &GlobalArgs,
    command: &FleetCommand,
) -> Result<(), CtlError> {
    match command {
        FleetCommand::Rollout(args) => rollout(client, global.json(), args).await,
    }
}

async fn rollout(client: &HubClient, json: bool, args: &RolloutArgs) -> Result<(), CtlError> {
    let settings = crate::fleet_wave::Settings::new(
        args.kind,
        &args.params,
        args.key.clone(),
        args.ssh_keygen.clone(),
        (&args.wait, &args.deadline),
        args.valid_hours,
    )?;
    let ask = Ask::new(&args.hosts, args.max_hosts, args.canary)?;
    if args.kind == FleetKind::AgentUpdate
        && let Some(sha256) = settings.param("sha256")
    {
        check_artifact(client, sha256).await?;
    }
    let want = settings.want.clone();
    let (seen, missing) = resolve(client, args, &ask).await?;
    let mut plan = crate::fleet_plan::plan(args.kind, &want, &seen);
    plan.skipped
        .extend(missing.into_iter().map(|host_id| Skipped {
            host_id,
            hostname: "-".to_owned(),
            reason: SkipReason::NotReturned,
        }));
    let waves = crate::fleet_plan::waves(&plan.targets, args.canary as usize, args.batch as usize);
    // The plan goes to stdout, or to stderr when stdout is the JSON report.
    for line in plan_lines(args.kind, &want, &plan, &waves) {
        if json {
            crate::errln!("{line}");
        } else {
            crate::outln!("{line}")?;
        }
    }
    if args.dry_run {
        let report = crate::fleet_report::Report::planned(&plan, &waves);
        return report.print(json);
    }
    if ask.needs_confirmation() && !plan.targets.is_empty() {
        let jobs = plan.targets.iter().map(|t| t.jobs.len()).sum();
        let stdin = std::io::stdin();
        let terminal = stdin.is_terminal();
        crate::fleet_approve::confirm(plan.targets.len(), jobs, terminal, stdin.lock())?;
    }
    let approval = Approval::new(plan.targets.iter().map(|t| t.host_id));
    if approval.len() > ask.max() {
        // `resolve` bounded the hub's answer and the targets are a part of it.
        return Err(CtlError::NotApproved {
            reason: format!(
                "{} hosts to sign for, more than the {} approved",
                approval.len(),
                ask.max()
            ),
        });
    }
    let report = crate::fleet_wave::run_waves(client, &settings, &approval, &plan, &waves).await?;
    report.print(json)?;
    report.verdict()
}

/// The hosts the hub says the selector matches, each with its detail and jobs, and the hosts
/// `--hosts` lists that the hub did not name; refused when the selector is empty, when the
/// hub's answer is not what the operator approved ([`Ask::check`]), and when the hub names a
/// host whose labels do not match.
async fn resolve(
    client: &HubClient,
    args: &RolloutArgs,
    ask: &Ask,
) -> Result<(Vec<Seen>, Vec<Uuid>), CtlError> {
    if args.labels.is_empty() && args.capabilities.is_empty() {
        return Err(CtlError::BadArgument {
            what: "selector",
            reason: "name at least one --label or --capability: a rollout never targets the whole fleet by default".to_owned(),
        });
    }
    for (flag, terms) in [
        ("--label", args.labels.len()),
        ("--capability", args.capabilities.len()),
    ] {
        if terms > MAX_TERMS {
            return Err(CtlError::BadArgument {
                what: "selector",
                reason: format!("{terms} {flag} terms; at most {MAX_TERMS}"),
            });
        }
    }
    let query = crate::host_labels::list_query(&args.labels, &args.capabilities)?;
    let hosts: Vec<HostSummary> = decode(
        "host list",
        client.get(&format!("/v1/admin/hosts{query}")).await?,
    )?;
    if hosts.is_empty() {
        return Err(CtlError::BadArgument {
            what: "selector",
            reason: "no host matches it (`bosunctl hosts list` with the same --label and --capability shows the fleet)".to_owned(),
        });
    }
    let missing = match ask.check(&hosts) {
        Ok(missing) => missing,
        Err(err) => {
            // What the hub claimed, for the operator to see (at most a few screens).
            crate::errln!(
                "the hub says these {} hosts match the selector:",
                hosts.len()
            );
            for host in hosts.iter().take(MAX_SHOWN) {
                crate::errln!("  {}", claimed(&host.hostname, host.host_id, &host.labels));
            }
            if hosts.len() > MAX_SHOWN {
                crate::errln!("  … and {} more", hosts.len() - MAX_SHOWN);
            }
            return Err(err);
        }
    };
    let wanted = crate::host_labels::change(&args.labels, &[]).ok();
    let mut seen = Vec::with_capacity(hosts.len());
    for host in hosts {
        let id = host.host_id;
        let detail: HostDetail = decode(
            "host detail",
            client.get(&format!("/v1/admin/hosts/{id}")).await?,
        )?;
        if detail.summary.host_id != id {
            // The approval was checked on the ids the hub listed: a detail for another host
            // would slip that host past it.
            return Err(CtlError::NotApproved {
                reason: format!(
                    "the hub answered host {id}'s detail with host {}",
                    detail.summary.host_id
                ),
            });
        }
        if let Some(wanted) = &wanted {
            let labels = &detail.summary.labels;
            if let Some((key, _)) = wanted.set.iter().find(|(k, v)| labels.get(*k) != Some(*v)) {
                return Err(CtlError::BadArgument {
                    what: "selector",
                    reason: format!(
                        "the hub named host {} ({id}) for it, but that host has no label {key} with the value asked for; nothing was signed",
                        detail.summary.hostname
                    ),
                });
            }
        }
        let jobs: Vec<JobRecord> = decode(
            "job list",
            client.get(&format!("/v1/admin/hosts/{id}/jobs")).await?,
        )?;
        seen.push(Seen { detail, jobs });
    }
    Ok((seen, missing))
}

/// An agent update's binary must be at the hub before anything is planned or signed: every
/// agent fetches it there by the digest its job names. Refused ([`CtlError::MissingArtifact`])
/// when the hub's newest artifacts do not hold it.
async fn check_artifact(client: &HubClient, sha256: &str) -> Result<(), CtlError> {
    let value = client
        .get(&format!("/v1/admin/artifacts?limit={ARTIFACTS_SEARCHED}"))
        .await?;
    let held: Vec<bosun_proto::admin::ArtifactInfo> = decode("artifact list", value)?;
    if held.iter().any(|a| a.sha256.eq_ignore_ascii_case(sha256)) {
        return Ok(());
    }
    Err(CtlError::MissingArtifact {
        sha256: sha256.to_owned(),
    })
}

/// How many of the hub's newest artifacts a rollout looks its binary up in (the hub answers
/// at most this many).
const ARTIFACTS_SEARCHED: u32 = 10_000;

/// The most claimed hosts a refusal lists.
const MAX_SHOWN: usize = 50;

/// A host as the plan shows it: its name, its id and the labels the hub claims it carries.
fn claimed(
    hostname: &str,
    id: Uuid,
    labels: &std::collections::BTreeMap<String, String>,
) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let labels = if labels.is_empty() {
        "no labels".to_owned()
    } else {
        labels.join(",")
    };
    format!("{hostname} ({id}) [{labels}]")
}

/// The plan, before anything is signed: the waves, each host with the labels the hub claims,
/// and the hosts left out.
fn plan_lines(
    kind: FleetKind,
    want: &str,
    plan: &Plan,
    waves: &[Vec<crate::fleet_plan::Target>],
) -> Vec<String> {
    let hosts = plan.targets.len() + plan.skipped.len();
    let mut lines = vec![format!(
        "{} to {} {want}: {hosts} hosts match, {} to update in {} waves, {} skipped",
        kind.job_kind().as_str(),
        kind.target_param(),
        plan.targets.len(),
        waves.len(),
        plan.skipped.len()
    )];
    for (n, wave) in waves.iter().enumerate() {
        let label = if n == 0 { "canary" } else { "wave" };
        lines.push(format!("  {label} {}:", n + 1));
        for t in wave {
            let jobs = match t.jobs.len() {
                1 => String::new(),
                n => format!(", {n} jobs"),
            };
            lines.push(format!(
                "    {}{jobs}",
                claimed(&t.hostname, t.host_id, &t.labels)
            ));
        }
    }
    for skipped in &plan.skipped {
        lines.push(format!(
            "  skipped {} ({}): {}",
            skipped.hostname, skipped.host_id, skipped.reason
        ));
    }
    lines.push(String::new());
    lines
}
