//! `bosun-hubd`: `init` creates the data directory, `serve` runs the hub.

use std::process::ExitCode;

use anyhow::Context as _;
use bosun_hubd::cli::{Cli, Command};
use clap::Parser as _;

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
        Command::Completions(docs) => {
            use clap::CommandFactory as _;
            match bosun_clidoc::write_completions(
                Cli::command(),
                docs.shell,
                &mut std::io::stdout(),
            ) {
                Err(err) if !err.is_closed_pipe() => Err(err.into()),
                _ => Ok(()),
            }
        }
        Command::Man(docs) => {
            use clap::CommandFactory as _;
            let extras = bosun_hubd::cli::man_extras();
            let date = docs.date();
            let mut pages =
                bosun_clidoc::write_man_pages(Cli::command(), &docs.dir, &date, &extras)?;
            pages.push(bosun_clidoc::write_config_page(
                &bosun_hubd::config_page::page(),
                &docs.dir,
                &date,
            )?);
            for page in pages {
                println!("{}", page.display());
            }
            Ok(())
        }
        Command::Init(args) => {
            let data = args.data_dir()?;
            let mut names = args.names;
            names.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
            let store = args.store.clone().unwrap_or_default();
            let report = bosun_hubd::init_store(&data, names, args.operator_cert, &store)
                .with_context(|| format!("initializing {}", data.display()))?;
            println!("database:     {}", report.database.display());
            if let Some(fingerprint) = &report.fingerprint {
                println!("fingerprint:  {fingerprint}");
            }
            if let Some(key_pin) = &report.key_pin {
                println!("key pin:      {key_pin}");
            }
            println!("admin token:  {}", report.admin_token.expose());
            println!("The admin token is shown once; the hub keeps only its hash.");
            Ok(())
        }
        Command::Serve(args) => {
            let config = args.hub_config()?;
            let identity = bosun_hubd::tls::load(&config.tls, &config.data_dir)
                .context("loading the TLS certificate")?;
            println!("fingerprint:  {}", identity.fingerprint);
            println!("key pin:      {}", identity.key_pin);
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
