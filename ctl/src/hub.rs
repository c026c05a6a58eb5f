//! `bosunctl hub init`: verify the hub (pin + admin token) and save the connection settings.

use clap::Subcommand;

use crate::cli::GlobalArgs;
use crate::client::HubClient;
use crate::error::CtlError;
use crate::{config, table};

/// `bosunctl hub ...`
#[derive(Debug, Subcommand)]
pub enum HubCommand {
    /// Check that the hub answers with the pinned certificate and accepts the admin token,
    /// then save URL, fingerprint and token to the config file (mode 0600).
    Init,
}

/// Runs a `hub` command.
pub async fn run(global: &GlobalArgs, command: &HubCommand) -> Result<(), CtlError> {
    match command {
        HubCommand::Init => init(global).await,
    }
}

async fn init(global: &GlobalArgs) -> Result<(), CtlError> {
    let settings = config::resolve_for_init(global)?;
    let path = config::path(global).ok_or(CtlError::MissingSetting {
        setting: "config file location",
        flag: "--config",
        env: "BOSUN_CTL_CONFIG",
    })?;
    let client = HubClient::new(settings.clone())?;
    let hosts = client.get("/v1/admin/hosts").await?;
    let count = hosts.as_array().map_or(0, Vec::len);
    config::save(&path, &settings)?;
    if global.json() {
        return table::print_json(&serde_json::json!({
            "hub_url": settings.url,
            "fingerprint": settings.fingerprint,
            "hosts": count,
            "config": path,
        }));
    }
    table::print_fields(&[
        ("hub", settings.url.clone()),
        ("fingerprint", settings.fingerprint.clone()),
        ("hosts", count.to_string()),
        ("saved to", path.display().to_string()),
    ])
}
