//! `bosun-hubd-next`: the hub as its next release would meet a PostgreSQL database, for the
//! rehearsal of a rolling upgrade (`docs/hub-backup.md`, "Upgrading replicas one at a time").
//! The same hub, bringing one migration more than `bosun-hubd` ([`NEXT_MIGRATION`], additive
//! as a migration a rolling upgrade brings must be): `tests/rolling_upgrade.rs` serves it
//! beside `bosun-hubd` over one database while hosts poll both.
//!
//! It takes `bosun-hubd serve`'s options and does nothing else.

use anyhow::Context as _;
use bosun_hubd::cli::{Cli, Command};
use bosun_hubd::store::postgres::schema::{MIGRATIONS, PgSchema};
use clap::Parser as _;

/// What the next release adds: a column and a table, nothing the current one reads.
pub const NEXT_MIGRATION: &str = r"
    ALTER TABLE hosts ADD COLUMN notes_seen BIGINT;
    CREATE TABLE host_notes (
        id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        host_id TEXT NOT NULL,
        note    TEXT NOT NULL
    );
";

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BOSUN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    bosun_hubd::install_crypto_provider();
    let Command::Serve(args) = Cli::parse().command else {
        anyhow::bail!("bosun-hubd-next only serves: use bosun-hubd for everything else");
    };
    let mut config = args.hub_config()?;
    let mut migrations = MIGRATIONS.to_vec();
    migrations.push(NEXT_MIGRATION);
    config.pg_schema = PgSchema(Vec::leak(migrations));
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        bosun_hubd::run(
            config,
            |hub| println!("key pin:      {}", hub.key_pin()),
            shutdown,
        )
        .await
    })?;
    Ok(())
}
