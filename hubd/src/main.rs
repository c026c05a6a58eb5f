//! `bosun-hubd`: `init` creates the data directory, `serve` runs the hub.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use bosun_hubd::{HubConfig, alerts::WebhookConfig, tls::TlsSource};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "bosun-hubd", version, about = "Bosun hub")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the database, the admin token (printed once) and a self-signed certificate.
    Init {
        /// Data directory.
        #[arg(long, env = "BOSUN_HUB_DATA")]
        data: PathBuf,
        /// Extra DNS names or IPs for the self-signed certificate (repeatable).
        #[arg(long = "name")]
        names: Vec<String>,
        /// Do not create a self-signed certificate (an operator certificate will be used).
        #[arg(long)]
        operator_cert: bool,
    },
    /// Serve the hub.
    Serve {
        /// Data directory.
        #[arg(long, env = "BOSUN_HUB_DATA")]
        data: PathBuf,
        /// Address to listen on.
        #[arg(long, env = "BOSUN_HUB_LISTEN", default_value = "0.0.0.0:7443")]
        listen: SocketAddr,
        /// Operator-provided certificate chain (PEM); needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// Operator-provided private key (PEM); needs --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Poll interval given to new hosts, seconds.
        #[arg(long, default_value_t = 30)]
        poll_interval: u64,
        /// POST alerts to this URL.
        #[arg(long, env = "BOSUN_HUB_WEBHOOK")]
        webhook: Option<String>,
        /// How long an overdue alert is held to tell one silent host from a mass silence,
        /// seconds (also the sweep interval when shorter than its default).
        #[arg(long, default_value_t = 30)]
        silence_window: u64,
    },
}

fn main() -> ExitCode {
    init_tracing();
    bosun_hubd::install_crypto_provider();
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bosun-hubd: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("BOSUN_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    if std::env::var_os("JOURNAL_STREAM").is_some()
        && let Ok(journald) = tracing_journald::layer()
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .init();
        return;
    }
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        // A closed stderr must not turn every log line into a panic.
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .init();
}

fn real_main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Init {
            data,
            mut names,
            operator_cert,
        } => {
            names.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
            let report = bosun_hubd::init(&data, names, operator_cert)
                .with_context(|| format!("initializing {}", data.display()))?;
            println!("database:     {}", report.database.display());
            if let Some(fingerprint) = &report.fingerprint {
                println!("fingerprint:  {fingerprint}");
            }
            println!("admin token:  {}", report.admin_token.expose());
            println!("The admin token is shown once; the hub keeps only its hash.");
            Ok(())
        }
        Command::Serve {
            data,
            listen,
            tls_cert,
            tls_key,
            poll_interval,
            webhook,
            silence_window,
        } => {
            let mut config = HubConfig::new(data, listen);
            if let (Some(cert), Some(key)) = (tls_cert, tls_key) {
                config.tls = TlsSource::Files { cert, key };
            }
            config.poll_interval = Duration::from_secs(poll_interval.max(1));
            config.webhook = webhook.map(WebhookConfig::new);
            let window = Duration::from_secs(silence_window.max(1));
            config.dead_man.silence_window = window;
            config.dead_man.sweep_interval = config.dead_man.sweep_interval.map(|s| s.min(window));
            let identity = bosun_hubd::tls::load(&config.tls, &config.data_dir)
                .context("loading the TLS certificate")?;
            println!("fingerprint:  {}", identity.fingerprint);
            let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            runtime.block_on(async move {
                let shutdown = async {
                    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                        Ok(term) => term,
                        Err(err) => {
                            tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the hub");
                            let _ = tokio::signal::ctrl_c().await;
                            return;
                        }
                    };
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                };
                bosun_hubd::run(config, shutdown).await
            })?;
            Ok(())
        }
    }
}
