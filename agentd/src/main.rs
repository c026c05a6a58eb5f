//! `bosun-agentd`: parses arguments, sets up tracing, loads the config and runs the agent
//! until SIGTERM or SIGINT. What an operator runs on the host beside it (the link's status,
//! the escrow, the local API's certificate rotation) is `bosun-agentctl`'s
//! (`agentctl/`), so this program maps only the daemon's code
//! (docs/decisions/0046-agent-commands-in-bosun-agentctl.md).

use std::path::PathBuf;
use std::process::ExitCode;

use bosun_agentd::config::DEFAULT_PATH;
use bosun_agentd::runtime::code_pages;
use bosun_agentd::runtime::program::{self, LogTo};
use bosun_agentd::{RunOptions, run_with};
use clap::{CommandFactory as _, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// The Bosun host agent.
#[derive(Debug, Parser)]
#[command(
    name = "bosun-agentd",
    version,
    after_help = "The commands an operator runs on the host (status, escrow, \
                  rotate-local-api-cert) are bosun-agentctl's."
)]
struct Args {
    /// The config file.
    #[arg(long, default_value = DEFAULT_PATH, env = "BOSUN_AGENT_CONFIG")]
    config: PathBuf,
    /// Without a command, the agent runs.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the shell completion script (the package installs them).
    #[command(hide = true)]
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write the man pages into a directory (the package installs them).
    #[command(hide = true)]
    Man(bosun_clidoc::ManArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Documentation of the command line needs no config.
    match &args.command {
        Some(Command::Completions(docs)) => return program::completions(Args::command(), docs),
        Some(Command::Man(docs)) => {
            return program::man_pages(Args::command(), docs, &MAN_EXTRAS, true);
        }
        None => {}
    }
    program::init_logging(LogTo::Stdout);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match program::load_config("bosun-agentd", &args.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let runtime = match program::tokio_runtime("bosun-agentd") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            signals.cancel();
        });
        // What start-up and each burst of work mapped of this program's code goes back to the
        // kernel once the agent settles (docs/benchmarks.md, "Agent core").
        tokio::spawn(code_pages::give_back_when_settled(shutdown.clone()));
        let options = RunOptions {
            notify_systemd: std::env::var_os("NOTIFY_SOCKET").is_some(),
            ..RunOptions::default()
        };
        run_with(config, shutdown, options).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = anyhow::Error::new(e);
            tracing::error!(error = format!("{e:#}"), "agent stopped");
            eprintln!("bosun-agentd: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// What the man page says besides the options.
const MAN_EXTRAS: bosun_clidoc::ManExtras<'static> = bosun_clidoc::ManExtras {
    exit_status: &[
        (0, "stopped on SIGTERM or SIGINT"),
        (
            1,
            "the agent stopped on an error or a task panicked (systemd restarts it)",
        ),
        (70, "the runtime could not start"),
        (
            78,
            "the configuration is invalid; systemd does not restart the agent (RestartPreventExitStatus=78)",
        ),
    ],
    environment: &[
        ("BOSUN_AGENT_CONFIG", "the config file, as --config"),
        (
            "RUST_LOG",
            "what the agent logs (a tracing filter; default info); under systemd it logs to the journal",
        ),
    ],
    files: &[
        (
            "/etc/bosun/agent.toml",
            "the configuration (the package's example: /usr/share/doc/bosun-agent/examples/agent.toml)",
        ),
        (
            "/var/lib/bosun",
            "the agent's state (0700, user bosun): the journal, its identity and host key, the local API's certificate, the PBS key",
        ),
    ],
    examples: &[(
        "bosun-agentd",
        &[
            (
                "systemctl enable --now bosun-agentd",
                "run the agent under its hardened unit",
            ),
            (
                "sudo -u bosun bosun-agentctl status",
                "the host's id and its link to the hub (bosun-agentctl(1))",
            ),
        ],
    )],
};

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
