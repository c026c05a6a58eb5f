//! `bosun-guest`: the crash-safe quiesce loop and the controller's side of rollouts against
//! the agent's local API; `run` is both in one process (the controller image's entry point).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use bosun_guest::{
    App, ControllerConfig, ControllerLoop, LocalApiClient, ProtectionWatch, QuiesceConfig,
    QuiesceOutcome, Quiescer, Service, load_bootstrap,
};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "bosun-guest",
    version,
    about = "Bosun in-guest reference client"
)]
struct Args {
    /// The bootstrap the agent wrote (the golden image's controller unit names it in
    /// `BOSUN_BOOTSTRAP`).
    #[arg(long, env = "BOSUN_BOOTSTRAP", default_value = bosun_guest::bootstrap::DEFAULT_PATH)]
    bootstrap: PathBuf,
    /// JSON list of apps: `[{"name": …, "stop": [argv…], "start": [argv…], "data": [path…]}]`.
    #[arg(long, env = "BOSUN_GUEST_APPS")]
    apps: Option<PathBuf>,
    /// The customer's apps file in the guest, same format, read again at every quiesce pass;
    /// missing lists no apps, invalid is logged and the backup goes on without its apps.
    #[arg(long, env = "BOSUN_CUSTOMER_APPS")]
    customer_apps: Option<PathBuf>,
    /// The quiesce marker (persistent storage).
    #[arg(long, default_value = "/var/lib/bosun-guest/quiesce.marker")]
    marker: PathBuf,
    /// The longest the apps stay stopped, in seconds (1 to 86400).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=MAX_INTERVAL_S))]
    max_quiesce_s: u64,
    /// Status poll interval, in milliseconds (10 to 60000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    poll_ms: u64,
    /// The restore check written while the apps are stopped (when an app names `data`).
    #[arg(long, default_value = bosun_guest::restore_check::RESTORE_CHECK_PATH)]
    restore_check: PathBuf,
    /// The checksums of the apps' data the restore check verifies.
    #[arg(long, default_value = bosun_guest::restore_check::DEFAULT_CHECKSUMS)]
    checksums: PathBuf,
    #[command(subcommand)]
    command: Command,
}

/// The longest pause between two quiesce passes, and the longest quiesce: a day (none
/// shorter than a second, so a mistyped `0` cannot spin on the local API).
const MAX_INTERVAL_S: u64 = 86_400;

#[derive(Debug, Subcommand)]
enum Command {
    /// Restart whatever an interrupted pass left stopped.
    Recover,
    /// One pass: recover, and back up quiesced if a backup is due.
    Once,
    /// Passes forever, every `interval_s` seconds.
    Watch {
        /// Seconds between passes (1 to 86400).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_INTERVAL_S))]
        interval_s: u64,
    },
    /// Run the controller's side of rollouts: switch to the digest the agent names, report
    /// health every interval it asks for.
    Controller {
        /// The switch command as a JSON argv; the digest is appended as its last argument.
        #[arg(long)]
        activate: String,
        #[command(flatten)]
        rollouts: RolloutArgs,
        /// One pass, then exit.
        #[arg(long)]
        once: bool,
    },
    /// The controller: the quiesce watch and the controller's side of rollouts in one process
    /// until SIGTERM or Ctrl-C (the controller image's entry point and the packaged unit's).
    Run {
        /// Seconds between quiesce passes (1 to 86400).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_INTERVAL_S))]
        interval_s: u64,
        /// The switch command as a JSON argv (the digest appended); none: this controller
        /// cannot switch itself: it runs the digest the host's helper placed beside the
        /// bootstrap (`controller.digest`), else adopts the one its record names at its first
        /// start.
        #[arg(long)]
        activate: Option<String>,
        #[command(flatten)]
        rollouts: RolloutArgs,
        /// Seconds between two looks at the guest's protection (60 to 86400); a warning is
        /// logged while anything is overdue.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(60..=MAX_INTERVAL_S))]
        protection_interval_s: u64,
        /// Keep the last protection answer in this file (JSON, written whole), for whatever
        /// watches the guest.
        #[arg(long)]
        protection_file: Option<PathBuf>,
        /// Write the SSH keys the bootstrap carries (the operator's signed plan's keys for
        /// this guest's root) to this file at start, replacing it whole.
        #[arg(long, env = "BOSUN_AUTHORIZED_KEYS")]
        authorized_keys: Option<PathBuf>,
    },
    /// Print this guest's protection as the host agent judges it from its own journal against
    /// the operator's signed plan: the last backup per tier, verification per PBS tier and
    /// restore test, how each ended and what is overdue. Exits 3 while anything is overdue.
    Status {
        /// Print the agent's answer as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Print the shell completion script (the package installs it).
    #[command(hide = true)]
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write the man pages into a directory (the package installs them).
    #[command(hide = true)]
    Man(bosun_clidoc::ManArgs),
}

/// The controller loop's options shared by `controller` and `run`.
#[derive(Debug, clap::Args)]
struct RolloutArgs {
    /// The health check as a JSON argv (exit 0: healthy); none: healthy once activated.
    #[arg(long)]
    health: Option<String>,
    /// Where the digest running is kept (on the guest's root filesystem).
    #[arg(long, default_value = "/var/lib/bosun-guest/controller.digest")]
    state: PathBuf,
    /// The longest either command may take, in seconds.
    #[arg(long, default_value_t = 300)]
    command_timeout_s: u64,
}

impl RolloutArgs {
    /// The loop's configuration, with `activate` (a JSON argv) when given; without one the
    /// digest the host's helper placed is read beside `bootstrap`.
    fn config(&self, activate: Option<&str>, bootstrap: &Path) -> anyhow::Result<ControllerConfig> {
        let argv = |text: &str, what: &str| -> anyhow::Result<Vec<String>> {
            let argv: Vec<String> = serde_json::from_str(text)
                .with_context(|| format!("--{what} must be a JSON array of strings"))?;
            anyhow::ensure!(!argv.is_empty(), "--{what} names no program");
            Ok(argv)
        };
        Ok(ControllerConfig {
            activate: activate
                .map(|a| argv(a, "activate"))
                .transpose()?
                .unwrap_or_default(),
            health: self
                .health
                .as_deref()
                .map(|h| argv(h, "health"))
                .transpose()?,
            state_file: self.state.clone(),
            placed_file: activate
                .is_none()
                .then(|| bootstrap.with_file_name(bosun_guest::controller::PLACED_FILE_NAME)),
            command_timeout: Duration::from_secs(self.command_timeout_s),
        })
    }
}

/// What the man pages say besides the options.
const MAN_EXTRAS: bosun_clidoc::ManExtras<'static> = bosun_clidoc::ManExtras {
    exit_status: &[
        (
            0,
            "done (run, watch and controller: stopped by SIGTERM or Ctrl-C)",
        ),
        (
            1,
            "the bootstrap, the apps file or an option is invalid, or a single pass failed (run, watch and controller retry a failed pass and never exit on one); status: the protection could not be read",
        ),
        (
            2,
            "a usage error: an unknown option or a value out of range",
        ),
        (
            3,
            "status: the guest's protection is overdue (a backup tier, a verification or the restore test went more than twice its interval without a success)",
        ),
    ],
    environment: &[
        ("BOSUN_BOOTSTRAP", "the bootstrap file, as --bootstrap"),
        ("BOSUN_GUEST_APPS", "the apps file, as --apps"),
        (
            "BOSUN_CUSTOMER_APPS",
            "the customer's apps file, as --customer-apps",
        ),
        (
            "BOSUN_AUTHORIZED_KEYS",
            "where run writes the guest's SSH keys, as --authorized-keys",
        ),
        (
            "RUST_LOG",
            "the log filter (default info), logs go to stderr",
        ),
    ],
    files: &[
        (
            bosun_guest::bootstrap::DEFAULT_PATH,
            "the bootstrap the host agent pushes into the guest (hub, local API, pin, token)",
        ),
        (
            "/etc/bosun-guest/apps.json",
            "the apps the packaged unit quiesces (an empty list until edited)",
        ),
        (
            "/var/lib/bosun-guest",
            "the quiesce marker and the controller's digest, kept across restarts",
        ),
    ],
    examples: &[(
        "bosun-guest",
        &[
            (
                "bosun-guest --apps /etc/bosun-guest/apps.json run",
                "back up quiesced whenever the agent says a backup is due and report the controller's health",
            ),
            (
                "bosun-guest recover",
                "restart the apps an interrupted pass left stopped",
            ),
            (
                "bosun-guest status",
                "when this guest was last backed up, verified and restore-tested, and whether any of it is overdue",
            ),
        ],
    )],
};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bosun-guest: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args = Args::parse();
    match &args.command {
        Command::Completions(docs) => return completions(docs),
        Command::Man(docs) => return man_pages(docs),
        _ => {}
    }
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bosun-guest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let apps: Vec<App> = match &args.apps {
        Some(path) => bosun_guest::apps::load(path)?,
        None => Vec::new(),
    };
    if let Some(path) = &args.customer_apps {
        // Checked at start so a mistake shows at once; a pass reads it again.
        if let Err(e) = bosun_guest::apps::load_customer(path)
            .and_then(|customer| bosun_guest::apps::merge(&apps, customer, path))
        {
            tracing::warn!(file = %path.display(), error = %bosun_errchain::error_chain(&e), "the customer's apps file cannot be used yet; backups go on without its apps");
        }
    }
    let bootstrap = load_bootstrap(&args.bootstrap)?;
    if let Command::Run {
        authorized_keys, ..
    } = &args.command
    {
        match authorized_keys {
            // Access never stops protection: a file that cannot be written is logged and the
            // controller goes on quiescing and reporting.
            Some(path) => {
                if let Err(e) =
                    bosun_guest::access::write_authorized_keys(path, &bootstrap.ssh_authorized_keys)
                {
                    tracing::error!(error = %bosun_errchain::error_chain(&e), "the guest's SSH keys could not be written");
                }
            }
            None if !bootstrap.ssh_authorized_keys.is_empty() => {
                tracing::warn!(
                    keys = bootstrap.ssh_authorized_keys.len(),
                    "the bootstrap carries SSH keys but no --authorized-keys file is named; none written"
                );
            }
            None => {}
        }
    }
    let client = LocalApiClient::from_bootstrap(&bootstrap)?;
    let mut config = QuiesceConfig::new(args.marker.clone());
    config.max_quiesce = Duration::from_secs(args.max_quiesce_s);
    config.poll_interval = Duration::from_millis(args.poll_ms);
    config.restore_check.script = args.restore_check.clone();
    config.restore_check.checksums = args.checksums.clone();
    config.customer_apps = args.customer_apps.clone();
    let quiescer = Quiescer::new(client.clone(), apps, config);
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            shutdown.cancel();
        });
    }
    match args.command {
        Command::Completions(_) | Command::Man(_) => {}
        Command::Controller {
            activate,
            rollouts,
            once,
        } => {
            let controller =
                ControllerLoop::new(client, rollouts.config(Some(&activate), &args.bootstrap)?);
            if once {
                let (outcome, _) = controller.run_once().await?;
                println!("{outcome:?}");
            } else {
                controller.run(&shutdown).await;
            }
        }
        Command::Run {
            interval_s,
            activate,
            rollouts,
            protection_interval_s,
            protection_file,
            authorized_keys: _,
        } => {
            let service = Service {
                protection: ProtectionWatch::new(
                    client.clone(),
                    Duration::from_secs(protection_interval_s),
                    protection_file,
                ),
                controller: ControllerLoop::new(
                    client,
                    rollouts.config(activate.as_deref(), &args.bootstrap)?,
                ),
                quiescer,
                watch_interval: Duration::from_secs(interval_s),
            };
            service.run(&shutdown).await;
        }
        Command::Recover => {
            let restarted = quiescer.recover().await?;
            println!("restarted: {restarted:?}");
        }
        Command::Once => report(quiescer.run_once(&shutdown).await?),
        Command::Watch { interval_s } => {
            bosun_guest::service::watch(&quiescer, Duration::from_secs(interval_s), &shutdown)
                .await;
        }
        Command::Status { json } => {
            let protection = client.protection().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&protection)?);
            } else {
                print!("{}", bosun_guest::protection::render(&protection));
            }
            return Ok(ExitCode::from(bosun_guest::protection::exit_status(
                &protection,
            )));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `completions SHELL`: the script on stdout (a reader that went away is not an error).
fn completions(args: &bosun_clidoc::CompletionsArgs) -> ExitCode {
    use clap::CommandFactory as _;
    match bosun_clidoc::write_completions(Args::command(), args.shell, &mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_closed_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bosun-guest: {}", bosun_errchain::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `man --dir DIR`: the pages, one path a line.
fn man_pages(args: &bosun_clidoc::ManArgs) -> ExitCode {
    use clap::CommandFactory as _;
    match bosun_clidoc::write_man_pages(Args::command(), &args.dir, &args.date(), &MAN_EXTRAS) {
        Ok(pages) => {
            for page in pages {
                println!("{}", page.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bosun-guest: {}", bosun_errchain::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn report(outcome: QuiesceOutcome) {
    match outcome {
        QuiesceOutcome::NotDue => println!("no backup due"),
        QuiesceOutcome::Unquiesced {
            reason,
            run_id,
            restarted,
        } => println!("backup run {run_id:?}: apps {restarted:?} restarted ({reason:?})"),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
