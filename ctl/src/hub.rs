//! `bosunctl hub init`: verify the hub (pin + admin token) and save the connection settings.

use clap::Subcommand;

use crate::client::HubClient;
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::{config, table};

/// `bosunctl hub ...`
#[derive(Debug, Subcommand)]
pub enum HubCommand {
    /// Check that the hub answers with the pinned certificate and accepts the admin token,
    /// then save URL, fingerprint and token to the config file (mode 0600).
    Init {
        /// The operator's OpenSSH `allowed_signers` file (the one the hosts' `agent.toml`
        /// names): `job submit` then checks every job's signer against it before queueing.
        #[arg(long, value_name = "FILE")]
        allowed_signers: Option<std::path::PathBuf>,
    },
}

/// Runs a `hub` command.
pub async fn run(global: &GlobalArgs, command: &HubCommand) -> Result<(), CtlError> {
    match command {
        HubCommand::Init { allowed_signers } => init(global, allowed_signers.as_deref()).await,
    }
}

async fn init(
    global: &GlobalArgs,
    allowed_signers: Option<&std::path::Path>,
) -> Result<(), CtlError> {
    let mut settings = config::resolve_for_init(global)?;
    if let Some(file) = allowed_signers {
        crate::job_check::load_signers(file)?;
        let absolute = std::path::absolute(file).map_err(|source| CtlError::ReadInput {
            path: file.to_owned(),
            source,
        })?;
        settings.allowed_signers = Some(absolute);
    }
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
        (
            "allowed signers",
            settings
                .allowed_signers
                .as_ref()
                .map_or_else(|| "-".to_owned(), |p| p.display().to_string()),
        ),
    ])
}
