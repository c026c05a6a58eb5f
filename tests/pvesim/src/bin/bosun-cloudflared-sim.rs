//! `bosun-cloudflared-sim --config FILE --dir DIR [--replicas N] [--control ADDR]`: a
//! stand-in for the replicas of one cloudflared tunnel (`bosun_pvesim::cloudflared`), for a
//! machine where cloudflared is not installable: each replica reads `FILE` (cloudflared's
//! configuration format: `tunnel`, `credentials-file`, `ingress`) at its start, serves `/ready`
//! and `/metrics` on its own loopback port, and restarts when the `systemctl` it writes in
//! `DIR` is run with `restart bosun-tunnel@PORT.service` (the packaged unit, whose instance is
//! its metrics port). A control API on `ADDR` shows the replicas and makes one fail
//! (`bosun_pvesim::cloudflared::control_router`).
//!
//! Once it listens it writes `DIR/stand-in.json`: `{"control": URL, "systemctl": PATH,
//! "replicas": [{"unit", "metrics"}]}`. Stops on SIGTERM or SIGINT.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bosun_pvesim::cloudflared::{StandIn, control_router};
use clap::Parser;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "bosun-cloudflared-sim",
    about = "A stand-in for cloudflared's replicas of one tunnel, for Bosun's tests and demo"
)]
struct Args {
    /// The tunnel's configuration file (what the agent writes), read at each replica's start.
    #[arg(long)]
    config: PathBuf,
    /// Where the `systemctl` stand-in, its control file and `stand-in.json` are written.
    #[arg(long)]
    dir: PathBuf,
    /// How many replicas of the tunnel run (1 to 4).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    replicas: u8,
    /// Where the control API listens (loopback; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    control: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    anyhow::ensure!(
        args.control.ip().is_loopback(),
        "--control must be a loopback address, not {}",
        args.control
    );
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let stand_in = StandIn::start_packaged(&args.dir, &args.config, usize::from(args.replicas))
        .await
        .context("starting the replicas")?;
    let stand_in = Arc::new(stand_in);
    let listener = tokio::net::TcpListener::bind(args.control)
        .await
        .with_context(|| format!("binding {}", args.control))?;
    let control = format!("http://{}", listener.local_addr()?);
    let app = control_router(Arc::clone(&stand_in));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let view = stand_in.view();
    let described = json!({
        "control": control,
        "systemctl": view.systemctl,
        "replicas": view.replicas.iter().map(|r| json!({ "unit": r.unit, "metrics": r.metrics })).collect::<Vec<_>>(),
    });
    // Both handlers before the ready file: whoever reads it may stop the process at once.
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let path = args.dir.join("stand-in.json");
    let tmp = args.dir.join("stand-in.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&described)?)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("writing {}", path.display()))?;
    for replica in &view.replicas {
        tracing::info!(unit = %replica.unit, metrics = %replica.metrics, connections = replica.connections, "tunnel stand-in replica started");
    }
    tracing::info!(control = %control, described = %path.display(), "bosun-cloudflared-sim ready");
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
        r = server => anyhow::bail!("the control API stopped: {r:?}"),
    }
    // The replicas' servers and the control loop end with the process.
    tracing::info!("shutting down");
    Ok(())
}
