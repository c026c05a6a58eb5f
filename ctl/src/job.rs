//! `bosunctl job submit FILE.json FILE.json.sig` and `bosunctl job list --host ID`.

use std::path::PathBuf;

use bosun_proto::admin::{JobAccepted, JobRecord};
use bosun_proto::job::SignedJob;
use clap::Subcommand;
use reqwest::Method;

use crate::cli::GlobalArgs;
use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl job ...`
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Queue a job signed with `ssh-keygen -Y sign -n bosun-job@v1`; the exact file bytes are
    /// sent, the host comes from the job's `target.host_id`.
    Submit {
        /// The job document (`bosun.job/v1`).
        document: PathBuf,
        /// Its armored SSH signature (`FILE.json.sig`).
        signature: PathBuf,
    },
    /// Write or sign a job document (offline; see `crate::job_sign`).
    #[command(flatten)]
    Authoring(crate::job_sign::JobAuthoringCommand),
    /// Jobs of a host with their results.
    List {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
    },
}

/// Runs a `job` command.
pub async fn run(
    client: &HubClient,
    global: &GlobalArgs,
    command: &JobCommand,
) -> Result<(), CtlError> {
    let json = global.json();
    match command {
        JobCommand::Submit {
            document,
            signature,
        } => submit(client, json, document, signature).await,
        JobCommand::Authoring(command) => crate::job_sign::run(command, global).await,
        JobCommand::List { host } => {
            let host = crate::resolve::host_id(client, host).await?;
            let value = client.get(&format!("/v1/admin/hosts/{host}/jobs")).await?;
            if json {
                return table::print_json(&value);
            }
            let jobs: Vec<JobRecord> = decode("job list", value)?;
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|job| {
                    vec![
                        job.job_id.to_string(),
                        job.kind.clone(),
                        job.state.as_str().to_owned(),
                        table::when(Some(job.submitted_at)),
                        table::when(job.result.as_ref().map(|r| r.finished_at)),
                        job.result
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |r| r.detail.clone()),
                    ]
                })
                .collect();
            table::print(
                &["JOB ID", "KIND", "STATE", "SUBMITTED", "FINISHED", "DETAIL"],
                &rows,
            )
        }
    }
}

async fn submit(
    client: &HubClient,
    json: bool,
    document: &PathBuf,
    signature: &PathBuf,
) -> Result<(), CtlError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| CtlError::ReadInput {
            path: path.clone(),
            source,
        })
    };
    let bytes = read(document)?;
    let armored = String::from_utf8(read(signature)?).map_err(|e| CtlError::BadArgument {
        what: "signature file",
        reason: format!("{} is not text: {e}", signature.display()),
    })?;
    let envelope = SignedJob::new(&bytes, &armored);
    envelope
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: if source.field() == "signature" {
                signature.clone()
            } else {
                document.clone()
            },
            document: "signed bosun.job/v1",
            source,
        })?;
    let job = envelope
        .parse_document()
        .map_err(|source| CtlError::InvalidInput {
            path: document.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    let body = serde_json::to_vec(&envelope).map_err(|source| CtlError::Decode {
        what: "signed job".to_owned(),
        source,
    })?;
    let host = job.target.host_id;
    let value = client
        .call(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(body),
            &[],
        )
        .await?;
    if json {
        return table::print_json(&value);
    }
    let accepted: JobAccepted = decode("job answer", value)?;
    let note = if accepted.created {
        "queued"
    } else {
        "already queued"
    };
    crate::outln!(
        "job {} ({}) {note} for host {host}, state {}",
        accepted.job_id,
        job.kind.as_str(),
        accepted.state.as_str()
    )
}
