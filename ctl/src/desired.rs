//! `bosunctl desired get|diff|set`: a host's desired state as the hub holds it, how it differs
//! from what the host last applied and what it reports now ([`crate::desired_diff`]), and a new
//! generation, optionally followed until the host applied it ([`crate::desired_wait`]).
//!
//! Hosts are named by id or hostname ([`crate::resolve`]). `set` sends a correlation id
//! (`--correlation-id`, or a fresh UUID printed on stderr) that the hub stores with the
//! generation and the agent records on the operations it causes: `bosunctl explain --host H
//! --correlation-id C` finds them.

use std::path::PathBuf;
use std::time::Duration;

use bosun_proto::admin::DesiredAccepted;
use bosun_proto::desired::DesiredState;
use bosun_proto::desired_status::{DesiredStatus, DesiredView};
use clap::Subcommand;
use reqwest::Method;
use uuid::Uuid;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::{outln, resolve, table};

/// Longest `--timeout` of `set --wait`: a day.
const MAX_WAIT_SECONDS: u64 = 24 * 3600;

/// `bosunctl desired ...`
#[derive(Debug, Subcommand)]
pub enum DesiredCommand {
    /// Print a host's current desired state: a summary, or with `--output json` the hub's
    /// answer (document, generation, correlation id).
    Get {
        #[command(flatten)]
        host: resolve::HostArg,
        /// Print only the `bosun.desired/v1` document, as `desired set` takes it.
        #[arg(long)]
        document: bool,
        /// The document the host last applied instead of the current one.
        #[arg(long)]
        applied: bool,
    },
    /// Desired vs last-applied vs current (what the host reports), per guest and field.
    Diff {
        #[command(flatten)]
        host: resolve::HostArg,
    },
    /// Validate a `bosun.desired/v1` file and store it as the host's new generation.
    Set {
        /// The host (id or hostname).
        #[arg(long)]
        host: String,
        /// The desired-state JSON file.
        file: PathBuf,
        /// Makes a retry safe: the same key with the same document is applied once.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The id the hub, the agent's journal and its reports carry for this change (default:
        /// a fresh UUID, printed on stderr).
        #[arg(long)]
        correlation_id: Option<String>,
        /// Follow each guest until the host applied the generation (exit 11 if it does not).
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits, in seconds.
        #[arg(long, default_value_t = 600, requires = "wait")]
        timeout: u64,
    },
}

/// Runs a `desired` command.
pub async fn run(client: &HubClient, json: bool, command: &DesiredCommand) -> Result<(), CtlError> {
    match command {
        DesiredCommand::Get {
            host,
            document,
            applied,
        } => {
            let host = resolve::host_id(client, host.name()).await?;
            get(client, json, host, *document, *applied).await
        }
        DesiredCommand::Diff { host } => {
            let host = resolve::host_id(client, host.name()).await?;
            let status = status(client, host).await?;
            crate::desired_diff::print(&status, json)
        }
        DesiredCommand::Set {
            host,
            file,
            idempotency_key,
            correlation_id,
            wait,
            timeout,
        } => {
            let host = resolve::host_id(client, host).await?;
            let accepted = set(
                client,
                host,
                file,
                idempotency_key.as_deref(),
                correlation_id.as_deref(),
                json,
            )
            .await?;
            if *wait {
                if *timeout == 0 || *timeout > MAX_WAIT_SECONDS {
                    return Err(CtlError::BadArgument {
                        what: "--timeout",
                        reason: format!("{timeout} is not in 1..={MAX_WAIT_SECONDS} seconds"),
                    });
                }
                let status = crate::desired_wait::wait(
                    client,
                    host,
                    accepted.generation,
                    Duration::from_secs(*timeout),
                    json,
                )
                .await?;
                if json {
                    return table::print_json(&to_value(&status)?);
                }
                return Ok(());
            }
            if json {
                return table::print_json(&to_value(&accepted)?);
            }
            Ok(())
        }
    }
}

/// `GET …/desired/status`.
pub async fn status(client: &HubClient, host: Uuid) -> Result<DesiredStatus, CtlError> {
    decode(
        "desired-state status",
        client
            .get(&format!("/v1/admin/hosts/{host}/desired/status"))
            .await?,
    )
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, CtlError> {
    serde_json::to_value(value).map_err(|source| CtlError::Decode {
        what: "output".to_owned(),
        source,
    })
}

async fn get(
    client: &HubClient,
    json: bool,
    host: Uuid,
    document_only: bool,
    applied: bool,
) -> Result<(), CtlError> {
    let revision = if applied {
        status(client, host).await?.applied.ok_or(CtlError::Hub {
            status: 404,
            code: "nothing_applied".to_owned(),
            message: format!(
                "host {host} has applied no generation the hub still keeps the document of"
            ),
            request_id: None,
        })?
    } else {
        let view: DesiredView = decode(
            "desired state",
            client
                .get(&format!("/v1/admin/hosts/{host}/desired"))
                .await?,
        )?;
        view.current
    };
    if document_only {
        return table::print_json(&to_value(&revision.document)?);
    }
    if json {
        return table::print_json(&to_value(&DesiredView {
            host_id: host,
            current: revision,
        })?);
    }
    let doc = &revision.document;
    outln!(
        "host {host}: generation {}{}, stored {}",
        revision.generation,
        if applied { " (last applied)" } else { "" },
        revision.stored_at
    )?;
    if let Some(name) = &revision.set_by {
        outln!("set by:         {name}")?;
    }
    if let Some(id) = &revision.correlation_id {
        outln!("correlation id: {id}")?;
    }
    let rows: Vec<Vec<String>> = doc
        .guests
        .iter()
        .map(|g| {
            vec![
                g.hostname.clone(),
                g.guest_id.to_string(),
                g.vmid.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                format!("{:?}", g.power).to_lowercase(),
                g.resources.cores.to_string(),
                format!("{} MiB", g.resources.memory_mib),
                format!("{} GiB", g.resources.rootfs_gib),
                g.customer.customer_id.clone(),
            ]
        })
        .collect();
    outln!("guests: {}", doc.guests.len())?;
    if !rows.is_empty() {
        table::print(
            &[
                "HOSTNAME", "GUEST", "VMID", "POWER", "CORES", "MEMORY", "ROOTFS", "CUSTOMER",
            ],
            &rows,
        )?;
    }
    outln!(
        "storage targets: {}; backup tiers: {}; golden recipe: {}",
        doc.storage.len(),
        doc.backup_policy.further_tiers.len() + 1,
        if doc.golden_recipe.is_some() {
            "signed"
        } else {
            "none"
        }
    )
}

async fn set(
    client: &HubClient,
    host: Uuid,
    file: &std::path::Path,
    idempotency_key: Option<&str>,
    correlation_id: Option<&str>,
    json: bool,
) -> Result<DesiredAccepted, CtlError> {
    let bytes = std::fs::read(file).map_err(|source| CtlError::ReadInput {
        path: file.to_path_buf(),
        source,
    })?;
    let document = "bosun.desired/v1 document";
    let desired: DesiredState =
        serde_json::from_slice(&bytes).map_err(|source| CtlError::ParseInput {
            path: file.to_path_buf(),
            document,
            source,
        })?;
    desired
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: file.to_path_buf(),
            document,
            source,
        })?;
    let correlation_id = match correlation_id {
        Some(id) => {
            bosun_proto::oplog::check_correlation_id("--correlation-id", id).map_err(|e| {
                CtlError::BadArgument {
                    what: "--correlation-id",
                    reason: e.to_string(),
                }
            })?;
            id.to_owned()
        }
        None => Uuid::now_v7().to_string(),
    };
    crate::errln!("correlation id: {correlation_id}");
    let mut headers: Vec<(&str, String)> = vec![("x-correlation-id", correlation_id)];
    if let Some(key) = idempotency_key {
        headers.push(("idempotency-key", key.to_owned()));
    }
    let value = client
        .call(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(bytes),
            &headers,
        )
        .await?;
    let accepted: DesiredAccepted = decode("desired state answer", value)?;
    let line = if accepted.created {
        format!(
            "host {host}: desired state stored as generation {}",
            accepted.generation
        )
    } else {
        format!(
            "host {host}: already stored as generation {} (idempotent replay)",
            accepted.generation
        )
    };
    // With JSON on stdout, sentences go to stderr.
    if json {
        crate::errln!("{line}");
    } else {
        outln!("{line}")?;
    }
    Ok(accepted)
}
