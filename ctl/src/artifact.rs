//! `bosunctl artifact upload|list`: files agents fetch from the hub, such as a new
//! `bosun-agentd` for a signed `agent-update` job. The hub stores the bytes under their
//! SHA-256 and vouches for nothing: the job the operator signs names the digest (printed
//! here), and the agent stages only bytes that hash to it.

use std::path::PathBuf;

use bosun_proto::admin::ArtifactInfo;
use bosun_proto::update::MAX_ARTIFACT_BYTES;
use clap::Subcommand;
use reqwest::Method;
use sha2::{Digest as _, Sha256};

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// Artifact commands.
#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Upload a file (at most 256 MiB); prints its SHA-256 for the signed job.
    Upload(UploadArgs),
    /// List the artifacts the hub holds, newest first.
    List {
        /// Newest N (the hub answers at most 10000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
        limit: u32,
    },
}

/// `bosunctl artifact upload`.
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// The file, e.g. a `bosun-agentd` binary.
    pub file: PathBuf,
}

/// Runs an artifact command.
pub async fn run(
    client: &HubClient,
    json: bool,
    command: &ArtifactCommand,
) -> Result<(), CtlError> {
    match command {
        ArtifactCommand::Upload(args) => upload(client, json, args).await,
        ArtifactCommand::List { limit } => {
            let value = client
                .get(&format!("/v1/admin/artifacts?limit={limit}"))
                .await?;
            let value = crate::client::newest(value, *limit);
            if json {
                return table::print_json(&value);
            }
            let list: Vec<ArtifactInfo> = decode("artifact list", value)?;
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|a| {
                    vec![
                        a.sha256.clone(),
                        a.size.to_string(),
                        table::when(Some(a.stored_at)),
                    ]
                })
                .collect();
            table::print(&["SHA256", "BYTES", "STORED"], &rows)
        }
    }
}

async fn upload(client: &HubClient, json: bool, args: &UploadArgs) -> Result<(), CtlError> {
    let read_err = |source| CtlError::ReadInput {
        path: args.file.clone(),
        source,
    };
    let size = std::fs::metadata(&args.file).map_err(read_err)?.len();
    if size > MAX_ARTIFACT_BYTES {
        return Err(CtlError::BadArgument {
            what: "FILE",
            reason: format!("{size} bytes; the hub takes at most {MAX_ARTIFACT_BYTES}"),
        });
    }
    let bytes = std::fs::read(&args.file).map_err(read_err)?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let value = client
        .call_typed(
            Method::PUT,
            &format!("/v1/admin/artifacts/{sha256}"),
            Some(bytes),
            "application/octet-stream",
            &[],
        )
        .await?;
    if json {
        return table::print_json(&value);
    }
    let info: ArtifactInfo = decode("artifact", value)?;
    crate::outln!("{} {}", info.sha256, info.size)
}
