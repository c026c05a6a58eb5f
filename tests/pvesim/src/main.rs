//! `bosun-pvesim --listen ADDR --data DIR [--config FILE]`: serves a simulated PVE node and
//! writes `DIR/endpoint.json` (mode 0600) with the URL, fingerprint and tokens.

use std::path::PathBuf;

use anyhow::Context as _;
use bosun_pvesim::{PveVersion, SimConfig, Simulator};
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(
    name = "bosun-pvesim",
    about = "A simulated Proxmox VE node for Bosun's tests"
)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:8006 (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8006")]
    listen: String,
    /// Directory for endpoint.json and the certificate.
    #[arg(long)]
    data: PathBuf,
    /// TOML file with a SimConfig (node, time_scale, durations, faults, seed, …).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The PVE release to answer as (overrides the configuration file's `pve_version`).
    #[arg(long, value_enum)]
    pve_version: Option<PveVersion>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<SimConfig>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => SimConfig::default(),
    };
    if let Some(v) = args.pve_version {
        config.pve_version = v;
    }
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("creating {}", args.data.display()))?;
    config.data_dir = Some(args.data.clone());
    let listener = std::net::TcpListener::bind(&args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    let sim = Simulator::start(config, listener)
        .await
        .context("starting the simulator")?;
    // Both handlers before the ready file: whoever reads it may stop the process at once.
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let endpoint_path = args.data.join("endpoint.json");
    let json = serde_json::to_string_pretty(sim.endpoint()).context("encoding endpoint.json")?;
    write_0600(&endpoint_path, &json)
        .with_context(|| format!("writing {}", endpoint_path.display()))?;
    tracing::info!(
        url = %sim.endpoint().url,
        fingerprint = %sim.endpoint().fingerprint,
        endpoint = %endpoint_path.display(),
        "bosun-pvesim ready"
    );
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}

fn write_0600(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(contents.as_bytes())
}
