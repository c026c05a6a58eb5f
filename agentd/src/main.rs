//! `bosun-agentd`: parses arguments, sets up tracing, loads the config and
//! runs the agent until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use bosun_agentd::config::{AgentConfig, DEFAULT_PATH};
use bosun_agentd::{RunOptions, run_with};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The Bosun host agent.
#[derive(Debug, Parser)]
#[command(name = "bosun-agentd", version)]
struct Args {
    /// The config file.
    #[arg(long, global = true, default_value = DEFAULT_PATH, env = "BOSUN_AGENT_CONFIG")]
    config: PathBuf,
    /// Without a command, the agent runs.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replace the local API certificate and re-issue every guest's bootstrap (new pin, new
    /// token). Refuses while the agent runs: stop bosun-agentd first, start it afterwards.
    RotateLocalApiCert,
}

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
    if under_systemd && let Ok(journald) = tracing_journald::layer() {
        tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .init();
        return;
    }
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_target(false))
        .init();
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match AgentConfig::load(&args.config) {
        Ok(config) => config,
        Err(e) => {
            let e = anyhow::Error::new(e);
            tracing::error!(error = format!("{e:#}"), "invalid configuration");
            eprintln!("bosun-agentd: {e:#}");
            // EX_CONFIG. The unit's RestartPreventExitStatus=78 keeps systemd from
            // restarting an agent whose config only an operator can fix.
            return ExitCode::from(78);
        }
    };
    if let Some(Command::RotateLocalApiCert) = args.command {
        return rotate(&config);
    }
    let runtime = match runtime() {
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

/// The runtime every command runs on. One thread runs every task: the agent's work is
/// waiting on the hub and on Proxmox, SQLite runs on the journal's own thread, and no task
/// blocks; a single-threaded runtime keeps idle memory down (no worker threads, one malloc
/// arena fewer). Fails with EX_SOFTWARE (70).
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("bosun-agentd: starting the runtime: {e}");
            ExitCode::from(70)
        })
}

/// Runs the rotation and prints one line per guest; exit 0 when every running guest got its
/// new bootstrap, 1 when a push failed (those guests get theirs once the agent runs again),
/// 75 (EX_TEMPFAIL) when the agent is running.
fn rotate(config: &AgentConfig) -> ExitCode {
    use bosun_agentd::credentials::rotate::{GuestRotation, RotateError, rotate_local_api_cert};
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(rotate_local_api_cert(config)) {
        Ok(report) => {
            println!("new local api fingerprint: {}", report.fingerprint);
            for (guest_id, vmid, outcome) in &report.guests {
                match outcome {
                    GuestRotation::Reissued => println!("{guest_id} vmid {vmid}: re-issued"),
                    GuestRotation::Deferred { reason } => println!(
                        "{guest_id} vmid {vmid}: deferred ({reason}); the agent pushes a new bootstrap once it runs"
                    ),
                    GuestRotation::Failed { error } => println!(
                        "{guest_id} vmid {vmid}: FAILED ({error}); the agent retries once it runs"
                    ),
                }
            }
            if report.has_failures() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            let code = match e {
                RotateError::DaemonRunning { .. } => 75,
                _ => 1,
            };
            eprintln!("bosun-agentd: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}

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
