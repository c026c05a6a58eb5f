//! `bosunctl desired set --host ID FILE`.

use std::path::PathBuf;

use bosun_proto::admin::DesiredAccepted;
use bosun_proto::desired::DesiredState;
use clap::Subcommand;
use reqwest::Method;
use uuid::Uuid;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl desired ...`
#[derive(Debug, Subcommand)]
pub enum DesiredCommand {
    /// Validate a `bosun.desired/v1` file and store it as the host's new generation.
    Set {
        /// The host id.
        #[arg(long)]
        host: Uuid,
        /// The desired-state JSON file.
        file: PathBuf,
        /// Makes a retry safe: the same key with the same document is applied once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

/// Runs a `desired` command.
pub async fn run(client: &HubClient, json: bool, command: &DesiredCommand) -> Result<(), CtlError> {
    match command {
        DesiredCommand::Set {
            host,
            file,
            idempotency_key,
        } => {
            let bytes = std::fs::read(file).map_err(|source| CtlError::ReadInput {
                path: file.clone(),
                source,
            })?;
            let document = "bosun.desired/v1 document";
            let desired: DesiredState =
                serde_json::from_slice(&bytes).map_err(|source| CtlError::ParseInput {
                    path: file.clone(),
                    document,
                    source,
                })?;
            desired
                .validate()
                .map_err(|source| CtlError::InvalidInput {
                    path: file.clone(),
                    document,
                    source,
                })?;
            let headers: Vec<(&str, String)> = idempotency_key
                .iter()
                .map(|key| ("idempotency-key", key.clone()))
                .collect();
            let value = client
                .call(
                    Method::PUT,
                    &format!("/v1/admin/hosts/{host}/desired"),
                    Some(bytes),
                    &headers,
                )
                .await?;
            if json {
                return table::print_json(&value);
            }
            let accepted: DesiredAccepted = decode("desired state answer", value)?;
            if accepted.created {
                println!(
                    "host {host}: desired state stored as generation {}",
                    accepted.generation
                );
            } else {
                println!(
                    "host {host}: already stored as generation {} (idempotent replay)",
                    accepted.generation
                );
            }
            Ok(())
        }
    }
}
