//! What the agent's two programs share: `bosun-agentd`, the daemon, and `bosun-agentctl`, the
//! commands an operator runs on the host beside it (the link's status, the escrow, the local
//! API's certificate rotation; docs/decisions/0046-agent-commands-in-bosun-agentctl.md). They
//! log the same way, load the config the same way (EX_CONFIG when it is invalid), run on the
//! same runtime and document themselves with the same two commands (`completions`, `man`).

use std::path::Path;
use std::process::ExitCode;

use bosun_errchain::error_chain;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::AgentConfig;

/// Where a program's text log goes when it does not run under systemd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    /// The daemon's: standard output, which systemd or a log collector reads.
    Stdout,
    /// A command's: standard error, so its standard output stays its answer to the operator
    /// (and to scripts reading its lines).
    Stderr,
}

/// Installs the global subscriber: the journal under systemd, text otherwise (colour codes
/// only on a terminal); the filter from `RUST_LOG`, `info` by default.
pub fn init_logging(to: LogTo) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
    if under_systemd && let Ok(journald) = tracing_journald::layer() {
        tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .init();
        return;
    }
    let text = tracing_subscriber::fmt::layer().with_target(false);
    match to {
        LogTo::Stdout => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
            tracing_subscriber::registry()
                .with(filter)
                .with(text.with_ansi(ansi))
                .init();
        }
        LogTo::Stderr => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::registry()
                .with(filter)
                .with(text.with_writer(std::io::stderr).with_ansi(ansi))
                .init();
        }
    }
}

/// The configuration at `path`, or EX_CONFIG (78) once `program` said why it is invalid. The
/// unit's `RestartPreventExitStatus=78` keeps systemd from restarting an agent whose config
/// only an operator can fix.
pub fn load_config(program: &str, path: &Path) -> Result<AgentConfig, ExitCode> {
    AgentConfig::load(path).map_err(|e| {
        let chain = error_chain(&e);
        tracing::error!(error = chain, "invalid configuration");
        eprintln!("{program}: {chain}");
        ExitCode::from(78)
    })
}

/// Most threads the runtime's blocking pool starts: with the runtime's own thread and the
/// journal's, well within `TasksMax=64` of `bosun-agentd.service` (docs/benchmarks.md, "Agent
/// resource limits").
pub const MAX_BLOCKING_THREADS: usize = 16;

/// The runtime the agent and every command run on, or EX_SOFTWARE (70) once `program` said
/// why it could not start. One thread runs every task: the agent's work is waiting on the hub
/// and on Proxmox, SQLite runs on the journal's own thread, and no task blocks; a
/// single-threaded runtime keeps idle memory down (no worker threads, one malloc arena
/// fewer). The few blocking calls (name lookups, small file writes, an update's digest) share
/// at most [`MAX_BLOCKING_THREADS`] threads, so the agent stays within the unit's `TasksMax`.
pub fn tokio_runtime(program: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .map_err(|e| {
            eprintln!("{program}: starting the runtime: {e}");
            ExitCode::from(70)
        })
}

/// `completions SHELL`: `command`'s script on stdout (a reader that went away is not an
/// error).
pub fn completions(command: clap::Command, args: &bosun_clidoc::CompletionsArgs) -> ExitCode {
    let program = command.get_name().to_owned();
    match bosun_clidoc::write_completions(command, args.shell, &mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_closed_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {}", error_chain(&e));
            ExitCode::from(1)
        }
    }
}

/// `man --dir DIR`: `command`'s pages with `extras`, and `agent.toml.5` when `config_page`
/// (the daemon writes it); one path a line.
pub fn man_pages(
    command: clap::Command,
    args: &bosun_clidoc::ManArgs,
    extras: &bosun_clidoc::ManExtras<'_>,
    config_page: bool,
) -> ExitCode {
    let program = command.get_name().to_owned();
    let date = args.date();
    let pages =
        bosun_clidoc::write_man_pages(command, &args.dir, &date, extras).and_then(|mut pages| {
            if config_page {
                pages.push(bosun_clidoc::write_config_page(
                    &crate::config_page::page(),
                    &args.dir,
                    &date,
                )?);
            }
            Ok(pages)
        });
    match pages {
        Ok(pages) => {
            for page in pages {
                println!("{}", page.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{program}: {}", error_chain(&e));
            ExitCode::from(1)
        }
    }
}
