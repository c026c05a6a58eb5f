//! `bosun-demo`: Bosun on one machine, narrated, the way a new operator meets it (`make demo`,
//! `make demo-host-loss`). `main.rs` parses [`DemoArgs`] and calls [`run`].
//!
//! A crate of its own, not a `bosunctl` command: it starts the daemons and drives them with
//! `bosunctl` (the binary, and its library's hub client for reading back), and no operator's
//! workstation needs it.
//!
//! Every program is the real binary from the same build, started as a child process with its
//! log under `--out`; every step is checked, timed and written to `transcript.txt`; every child
//! is stopped before the demo returns. A failure names the step that failed.
//!
//! Two scenarios: `full` (the default, `scenario.rs`) walks one host through Bosun's features;
//! `host-loss` (`host_loss.rs`) loses a whole host and brings it back on a new box with the
//! customer's recovery code.

mod addresses;
mod adopt;
mod audit_log;
mod backup_tiers;
mod boot_order;
mod break_glass;
mod children;
mod consent;
mod controller;
mod controller_update;
mod customer_app;
pub mod escrow;
mod fair_share;
pub mod fleet_page;
mod guest_steps;
mod hardware;
mod helper;
mod host_health;
mod host_loss;
mod hostile;
mod key_rotation;
mod labels;
mod narrate;
mod new_box;
mod old_box;
mod operator_view;
mod pve_access;
mod pve_walk;
mod recovery;
mod restore_check;
mod scenario;
mod self_update;
mod settle;
mod sim;
mod stack;
mod tunnel;
pub mod unit;
mod verify;
mod vm_guest;
mod vm_lifecycle;
mod zero_knowledge;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use adopt::AdoptOutcome;
pub use backup_tiers::{TierArchives, TiersOutcome};
pub use boot_order::OrderOutcome;
pub use break_glass::BreakGlassOutcome;
pub use children::RunAs;
pub use consent::ConsentOutcome;
pub use controller::ControllerOutcome;
pub use fair_share::ShareOutcome;
pub use guest_steps::GuestClientOutcome;
pub use host_health::HostHealthOutcome;
pub use host_loss::{HostLossOutcome, LostGuest, RestoredGuest};
pub use narrate::{Narrator, StepRecord};
pub use restore_check::RestoreCheckOutcome;
pub use scenario::Outcome;
pub use self_update::SelfUpdateOutcome;
pub use tunnel::TunnelOutcome;
pub use verify::VerifyStepOutcome;
pub use zero_knowledge::ScanResult;

use children::{Children, sibling_binary};

/// `bosun-demo` options.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bosun-demo",
    version,
    about = "Run Bosun on this machine against a simulated Proxmox node, narrated"
)]
pub struct DemoArgs {
    /// Where logs and artifacts go (created; an older run's files are replaced).
    #[arg(long, default_value = "demo-out")]
    pub out: PathBuf,
    /// Task speed of the simulated Proxmox node: 1.0 is real time, 0.05 is twenty times faster.
    #[arg(long, default_value_t = 0.05)]
    pub time_scale: f64,
    /// Where the Bosun programs are (default: next to this `bosun-demo`).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Only walk the Proxmox layer with the agent's client (no hub, no agent).
    #[arg(long, conflicts_with = "scenario")]
    pub proxmox_only: bool,
    /// What the demo walks through.
    #[arg(long, value_enum, default_value_t = Scenario::Full)]
    pub scenario: Scenario,
    /// Once every step passed, leave the hub, the agents, the helpers and the simulated nodes
    /// running (the dashboard's link works) until Ctrl-C or SIGTERM, then stop them.
    #[arg(long)]
    pub keep_running: bool,
}

/// The demo's scenarios.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// One host through Bosun's features: enrollment, provisioning, the guest's local API,
    /// refused hostile changes, signed jobs, backup tiers, restore tests, guest-loss DR.
    #[default]
    Full,
    /// A whole host lost: the escrow made with the customer, the box dies, a new box takes
    /// over the host and brings the guests back from PBS with the customer's recovery code.
    HostLoss,
}

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A step failed.
    #[error("step {number} ({title}) failed")]
    Step {
        /// The step's number.
        number: usize,
        /// The step's title.
        title: String,
        /// What went wrong.
        #[source]
        source: Box<DemoError>,
    },
    /// An artifact could not be written or read.
    #[error("demo artifact {path}")]
    Artifact {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program of the build is missing.
    #[error("{path} is missing: run `make demo` (or `cargo build --workspace --bins`) first")]
    MissingBinary {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A program could not be started.
    #[error("starting {program}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A child exited while the demo still needed it.
    #[error("{name} exited early ({status}); see its log in the demo folder")]
    ChildExited {
        /// The child.
        name: String,
        /// Its exit status.
        status: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
    },
    /// A Proxmox call failed.
    #[error("proxmox: {what}")]
    Pve {
        /// The call.
        what: &'static str,
        /// Why.
        #[source]
        source: bosun_pve::PveError,
    },
    /// An HTTP call of the demo itself failed.
    #[error("{what}")]
    Http {
        /// The call.
        what: &'static str,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// An operator command failed.
    #[error("{program} {args:?} exited with {status}: {stderr}")]
    Command {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The hub answered `bosunctl`'s client (the library) with an error.
    #[error("hub")]
    Hub(#[source] Box<bosunctl::error::CtlError>),
    /// A value read back is not what the step expects.
    #[error("check failed: {0}")]
    Check(String),
}

/// Runs the demo. The children are stopped on every path out.
pub async fn run(args: &DemoArgs) -> Result<(), DemoError> {
    run_with_outcome(args, &mut Outcome::default()).await
}

/// Runs the demo and fills `outcome` with what it established (the integration test asserts
/// on it). Every child is stopped before this returns; their process ids are in `pids.txt`.
/// With `--keep-running` they are stopped on Ctrl-C or SIGTERM.
pub async fn run_with_outcome(args: &DemoArgs, outcome: &mut Outcome) -> Result<(), DemoError> {
    run_until(args, outcome, stop_signal()).await
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// [`run_with_outcome`], with `--keep-running` waiting for `stop` instead of a signal.
pub async fn run_until(
    args: &DemoArgs,
    outcome: &mut Outcome,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), DemoError> {
    if !(args.time_scale.is_finite() && args.time_scale > 0.0 && args.time_scale <= 10.0) {
        return Err(DemoError::Check(format!(
            "--time-scale {} must be a number in (0, 10]",
            args.time_scale
        )));
    }
    let out = prepare_out(&args.out)?;
    let mut narrator = Narrator::create(&out.join("transcript.txt"))?;
    let mut children = Children::default();
    let bins = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => sibling_binary("bosun-demo")?
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default(),
    };
    let n = &mut narrator;
    // The full walk's agent ends up under the unit stand-in (its self-update), not among
    // `children`: the stand-in is kept here, so `--keep-running` keeps the agent polling too.
    let (mut result, unit, kept) = match (args.proxmox_only, args.scenario) {
        (true, _) => (
            pve_walk::run(n, &mut children, &bins, &out, args.time_scale).await,
            None,
            None,
        ),
        (false, Scenario::Full) => {
            match scenario::run(n, &mut children, &bins, &out, args.time_scale, outcome).await {
                Ok((unit, kept)) => (Ok(()), Some(unit), Some(kept)),
                Err(err) => (Err(err), None, None),
            }
        }
        (false, Scenario::HostLoss) => {
            let walked = outcome.host_loss.get_or_insert_default();
            (
                host_loss::run(n, &mut children, &bins, &out, args.time_scale, walked).await,
                None,
                None,
            )
        }
    };
    // The walk's own time, without the time `--keep-running` then waits.
    let walked = narrator.elapsed();
    // A kept host is settled first: it should not page on for what the walk broke on purpose.
    if let (true, Ok(()), Some(kept)) = (args.keep_running, &result, &kept) {
        result = settle::settle(&mut narrator, &mut children, (&bins, &out), kept).await;
    }
    if args.keep_running && result.is_ok() {
        narrator.say("");
        let agent = if unit.is_some() {
            "the hub, the agent (under the unit stand-in, polling on), the helper and the simulated node"
        } else {
            "the demo's programs"
        };
        narrator.say(format!(
            "{agent} keep running (the hub's URL and admin token: {}); Ctrl-C stops them",
            out.join("operator/ctl.json").display()
        ));
        stop.await;
    }
    // The agent stops first (a planned stop, as systemd would stop it), then the rest.
    let unit_pid = unit.as_ref().and_then(|u| {
        u.status()
            .lines()
            .find_map(|l| l.strip_prefix("MainPID="))
            .and_then(|pid| pid.parse::<u32>().ok())
            .filter(|pid| *pid != 0)
    });
    drop(unit);
    children.stop_all(Duration::from_secs(5)).await;
    let prefixes = outcome.helper_prefix.iter().chain(
        outcome
            .host_loss
            .iter()
            .flat_map(|h| h.helper_prefixes.iter()),
    );
    for prefix in prefixes {
        let mut archives = prefix.clone().into_os_string();
        archives.push("-archives");
        for dir in [prefix.clone(), PathBuf::from(archives)] {
            if let Err(err) = std::fs::remove_dir_all(&dir) {
                narrator.say(format!("note: removing {}: {err}", dir.display()));
            }
        }
    }
    let pids: Vec<String> = children
        .started()
        .iter()
        .chain(unit_pid.iter())
        .map(u32::to_string)
        .collect();
    if let Err(err) = stack::write(&out.join("pids.txt"), &(pids.join("\n") + "\n")) {
        narrator.say(format!("note: {}", bosun_errchain::error_chain(&err)));
    }
    summary(&mut narrator, &out, &result, walked);
    result
}

/// Creates `out` afresh (a previous run's files removed) and gives its absolute path.
fn prepare_out(out: &std::path::Path) -> Result<PathBuf, DemoError> {
    let artifact = |source| DemoError::Artifact {
        path: out.to_owned(),
        source,
    };
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(artifact)?;
    }
    std::fs::create_dir_all(out.join("logs")).map_err(artifact)?;
    std::path::absolute(out).map_err(artifact)
}

fn summary(
    narrator: &mut Narrator,
    out: &std::path::Path,
    result: &Result<(), DemoError>,
    total: Duration,
) {
    narrator.say("");
    let steps: Vec<StepRecord> = narrator.steps().to_vec();
    match result {
        Ok(()) => narrator.say(format!(
            "demo passed: {} steps in {}",
            steps.len(),
            narrate::seconds(total)
        )),
        Err(err) => narrator.say(format!("demo FAILED: {}", bosun_errchain::error_chain(err))),
    }
    for (i, step) in steps.iter().enumerate() {
        narrator.say(format!(
            "  {:>2}. {:<92} {:>8}",
            i + 1,
            step.title,
            narrate::seconds(step.took)
        ));
        if let Some(verdict) = &step.verdict {
            narrator.say(format!("      → {verdict}"));
        }
    }
    narrator.say(format!("logs and artifacts: {}", out.display()));
}

impl From<bosunctl::error::CtlError> for DemoError {
    fn from(err: bosunctl::error::CtlError) -> Self {
        Self::Hub(Box::new(err))
    }
}
