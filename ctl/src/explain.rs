//! `bosunctl explain OP_ID`: an operation's journal steps, read from the
//! agent's state directory on this host (no hub involved).

use std::path::PathBuf;

use bosun_agentd::clock::SystemClock;
use bosun_agentd::journal::{OpId, Store};
use bosun_proto::error_chain;

use crate::error::CtlError;

/// `bosunctl explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The operation id (from logs, audit entries or `job list`).
    pub op_id: String,
    /// The agent's state directory.
    #[arg(long, default_value = "/var/lib/bosun")]
    pub state_dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `explain`.
pub fn run(args: &ExplainArgs) -> Result<(), CtlError> {
    let op_id: OpId = args.op_id.parse().map_err(|e| CtlError::BadArgument {
        what: "OP_ID",
        reason: format!("{:?} is not an operation id: {e}", args.op_id),
    })?;
    let path = args.state_dir.join("journal.sqlite");
    if !path.exists() {
        return Err(CtlError::ReadInput {
            path,
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let store = Store::open(&path, SystemClock::shared()).map_err(|e| CtlError::BadArgument {
        what: "journal",
        reason: error_chain(&e),
    })?;
    let operation = store
        .operation(op_id)
        .map_err(|e| CtlError::BadArgument {
            what: "journal",
            reason: error_chain(&e),
        })?
        .ok_or_else(|| CtlError::BadArgument {
            what: "OP_ID",
            reason: format!("operation {op_id} is not in {}", path.display()),
        })?;
    let steps = store.steps(op_id).map_err(|e| CtlError::BadArgument {
        what: "journal",
        reason: error_chain(&e),
    })?;
    if args.json {
        let value = serde_json::json!({
            "op_id": operation.op_id.to_string(),
            "kind": operation.kind,
            "guest_id": operation.guest_id,
            "vmid": operation.vmid,
            "job_id": operation.job_id,
            "request_id": operation.request_id,
            "status": operation.status.as_str(),
            "error": operation.error,
            "started_at": operation.started_at.to_string(),
            "ended_at": operation.ended_at.map(|t| t.to_string()),
            "steps": steps.iter().map(|s| serde_json::json!({
                "seq": s.seq, "name": s.name, "state": s.state.as_str(), "detail": s.detail,
                "upid": s.upid, "warnings": s.warnings, "error": s.error,
                "intent_at": s.intent_at.to_string(),
                "ended_at": s.ended_at.map(|t| t.to_string()),
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "operation {} ({}) {}{}",
        operation.op_id,
        operation.kind,
        operation.status.as_str(),
        operation
            .error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    );
    let facts = [
        ("guest", operation.guest_id.clone()),
        ("vmid", operation.vmid.map(|v| v.to_string())),
        ("job", operation.job_id.clone()),
        ("request", operation.request_id.clone()),
    ];
    for (name, value) in facts {
        if let Some(value) = value {
            println!("  {name}: {value}");
        }
    }
    println!(
        "  started {}, ended {}",
        operation.started_at,
        operation
            .ended_at
            .map_or_else(|| "-".to_owned(), |t| t.to_string())
    );
    for s in &steps {
        println!(
            "  {:>2}. {:<20} {:<6} {}{}{}",
            s.seq,
            s.name,
            s.state.as_str(),
            s.detail,
            s.upid
                .as_deref()
                .map(|u| format!(" upid={u}"))
                .unwrap_or_default(),
            s.error
                .as_deref()
                .map(|e| format!(" error={e}"))
                .unwrap_or_default(),
        );
    }
    Ok(())
}
