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
        Command::Cert(command) => cert(command),
        Command::Backup(args) => {
            use bosun_hubd::store::StoreLocation;
            if matches!(args.hub.store, Some(StoreLocation::Postgres(_))) {
                return Err(bosun_hubd::hub_backup::HubBackupError::NotSqlite.into());
            }
            let data = args.hub.data_dir()?;
            let report = bosun_hubd::hub_backup::backup(&data, &args.out, || {
                jiff::Timestamp::now().as_millisecond()
            })?;
            println!("archive:      {}", report.path.display());
            println!("taken at:     {}", timestamp(report.taken_ms));
            println!("schema:       {}", report.schema_version);
            println!("hosts:        {}", report.hosts);
            println!("artifacts:    {}", report.artifacts);
            println!("size:         {} bytes", report.bytes);
            println!(
                "It holds the hub's TLS key and credential hashes: keep it as safe as the hub."
            );
            Ok(())
        }
        Command::Restore(args) => restore(args),
        Command::Serve(args) => {
            let config = args.hub_config()?;
            // The pins of the key the hub serves: once a rotation recorded the hub's keys,
            // the store's active one, not the data directory's files.
            let serving = |hub: &bosun_hubd::Hub| {
                println!("fingerprint:  {}", hub.fingerprint());
                println!("key pin:      {}", hub.key_pin());
            };
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
                bosun_hubd::run(config, serving, shutdown).await
            })?;
            Ok(())
        }
    }
}

/// `bosun-hubd restore …`.
fn restore(args: bosun_hubd::cli::RestoreArgs) -> anyhow::Result<()> {
    use bosun_hubd::store::{RestoredHub, StoreLocation};
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let Some(archive) = args.from else {
        let Some(location @ StoreLocation::Postgres(_)) = args.hub.store.clone() else {
            anyhow::bail!(
                "--after-pg-restore records a PostgreSQL hub's restore: name its database with --store"
            );
        };
        let data = args.hub.data_dir()?;
        let store = location
            .open(&data)
            .with_context(|| format!("opening {}", location.describe(&data)))?;
        store.mark_restored(&RestoredHub {
            now_ms,
            backup_taken_ms: None,
            source: "a PostgreSQL dump (pg_restore)".to_owned(),
        })?;
        println!(
            "recorded:     the hub was restored at {}",
            timestamp(now_ms)
        );
        println!("Desired states are taken for each host once it has polled again.");
        return Ok(());
    };
    if matches!(args.hub.store, Some(StoreLocation::Postgres(_))) {
        return Err(bosun_hubd::hub_backup::HubBackupError::NotSqlite.into());
    }
    let data = args.hub.data_dir()?;
    let report = bosun_hubd::hub_backup::restore(&archive, &data, now_ms)?;
    println!("restored:     {}", data.display());
    println!(
        "taken at:     {} (by bosun-hubd {})",
        timestamp(report.taken_ms),
        report.made_by
    );
    println!("schema:       {}", report.schema_version);
    println!("hosts:        {}", report.hosts);
    println!("artifacts:    {}", report.artifacts);
    if let Some(aside) = &report.moved_aside {
        println!("moved aside:  {} (an earlier hub's files)", aside.display());
    }
    println!(
        "Start the hub. Each host's desired state can be set again once it has polled; hosts the backup does not know must be enrolled again."
    );
    Ok(())
}

/// A Unix-ms time for people.
fn timestamp(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}

/// `bosun-hubd cert …`.
fn cert(command: bosun_hubd::cli::CertCommand) -> anyhow::Result<()> {
    use bosun_hubd::cert::{self, NewKey};
    use bosun_hubd::cli::{CertCommand, RotateStep};
    use bosun_hubd::store::hub_keys::KeyState;
    match command {
        CertCommand::Status(args) => {
            let (rotation, files) = cert::status(&args.hub_config()?)?;
            if rotation.keys.is_empty() {
                println!("served key:   {files} (from the hub's files; no rotation recorded)");
                return Ok(());
            }
            println!("live hosts:   {}", rotation.live_hosts);
            for key in &rotation.keys {
                let state = key.state.as_str();
                if key.state == KeyState::Retired {
                    println!("{state:<9} {}", key.pin);
                } else {
                    println!(
                        "{state:<9} {}  held by {} of {} live hosts",
                        key.pin, key.holders, rotation.live_hosts
                    );
                }
            }
            if !rotation.without_active.is_empty() {
                println!(
                    "hosts without the active key (enroll them again): {}",
                    rotation.without_active.join(", ")
                );
            }
            Ok(())
        }
        CertCommand::Rotate(RotateStep::Stage(args)) => {
            let config = args.hub.hub_config()?;
            let new = match (&args.new_cert, &args.new_key) {
                (Some(cert), Some(key)) => NewKey::Files { cert, key },
                _ => NewKey::SelfSigned(args.names),
            };
            let pin = cert::stage(&config, new)?;
            println!("staged:       {pin}");
            if let Some(path) = &args.document {
                pins_document(&config, None, path)?;
            }
            println!(
                "Agents learn it once the operator's signed pin set naming it is published (cert rotate document / publish); activate it once `bosun-hubd cert status` shows every live host holds it."
            );
            Ok(())
        }
        CertCommand::Rotate(RotateStep::Activate(args)) => {
            let pin = cert::activate(&args.hub.hub_config()?, args.force)?;
            println!("active:       {pin}");
            println!(
                "Every hub serving this store serves it within seconds; retire the old key once every live host has polled."
            );
            Ok(())
        }
        CertCommand::Rotate(RotateStep::Document(args)) => {
            pins_document(&args.hub.hub_config()?, args.host, &args.out)
        }
        CertCommand::Rotate(RotateStep::Publish(args)) => {
            let config = args.hub.hub_config()?;
            let signature_path = args.signature.clone().unwrap_or_else(|| {
                let mut path = args.document.clone().into_os_string();
                path.push(".sig");
                path.into()
            });
            let document = read_bounded(&args.document)?;
            let signature = String::from_utf8(read_bounded(&signature_path)?)
                .context("the signature is not text")?;
            let serial = cert::publish(&config, &document, &signature)?;
            println!("published:    serial {serial}");
            println!(
                "Every hub serving this store carries it in its poll answers; agents whose allowed_signers trust its signer take it."
            );
            Ok(())
        }
        CertCommand::Rotate(RotateStep::Retire(args)) => {
            let config = args.hub.hub_config()?;
            let rotation = cert::retire(&config)?;
            if let Some(path) = &args.document {
                pins_document(&config, None, path)?;
            }
            println!("retired; the old key is announced no more and its private key is gone");
            if !rotation.without_active.is_empty() {
                println!(
                    "hosts without the active key (enroll them again): {}",
                    rotation.without_active.join(", ")
                );
            }
            Ok(())
        }
    }
}

/// Writes the unsigned pin set to `path` and says what to do with it.
fn pins_document(
    config: &bosun_hubd::HubConfig,
    host: Option<uuid::Uuid>,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let doc = bosun_hubd::cert::write_pins_document(config, host, path)?;
    println!(
        "pin set:      {} (serial {}, unsigned)",
        path.display(),
        doc.serial
    );
    for pin in &doc.pins {
        println!("  trusts      {pin}");
    }
    println!(
        "Sign it: ssh-keygen -Y sign -f OPERATOR_KEY -n bosun-policy@v1 {path}; then: bosun-hubd cert rotate publish --document {path}",
        path = path.display()
    );
    Ok(())
}

/// A document or signature file, at most 64 KiB.
fn read_bounded(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(64 * 1024 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        bytes.len() <= 64 * 1024,
        "{} is larger than 64 KiB",
        path.display()
    );
    Ok(bytes)
}
