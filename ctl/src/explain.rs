//! `bosunctl explain (OP_ID | --correlation-id C)`: operations and their journal steps, read
//! from the agent's state directory on this host, or with `--host H` through the hub (the
//! agent reports the tail of its operation journal; the hub keeps the newest records of each
//! host). `--correlation-id` finds the operations a `desired set` caused.

use std::path::PathBuf;

use bosun_agentd::clock::SystemClock;
use bosun_agentd::links::hub::op_tail;
use bosun_agentd::ops::journal::{OpId, Store};
use bosun_errchain::error_chain;
use bosun_proto::oplog::OperationRecord;

use crate::cli::GlobalArgs;
use crate::client::decode;
use crate::error::CtlError;
use crate::{outln, resolve, table};

/// Operations of one correlation id looked at in a local journal (the newest).
const LOCAL_SCAN: u32 = 10_000;

/// `bosunctl explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The operation id (from logs, audit entries, `job list` or `--correlation-id`).
    #[arg(required_unless_present = "correlation_id")]
    pub op_id: Option<String>,
    /// Every operation carrying this correlation id (printed by `desired set`).
    #[arg(long, conflicts_with = "op_id")]
    pub correlation_id: Option<String>,
    /// Read through the hub: the host (id or hostname) whose reported journal to search.
    #[arg(long)]
    pub host: Option<String>,
    /// The agent's state directory, when reading this host's own journal.
    #[arg(long, default_value = "/var/lib/bosun", conflicts_with = "host")]
    pub state_dir: PathBuf,
}

/// What to look for.
enum Wanted {
    Op(OpId),
    Correlation(String),
}

/// Runs `explain`.
pub async fn run(args: &ExplainArgs, global: &GlobalArgs) -> Result<(), CtlError> {
    let wanted = match (&args.op_id, &args.correlation_id) {
        (Some(raw), _) => Wanted::Op(raw.parse().map_err(|e| CtlError::BadArgument {
            what: "OP_ID",
            reason: format!("{raw:?} is not an operation id: {e}"),
        })?),
        (None, Some(id)) => {
            bosun_proto::oplog::check_correlation_id("--correlation-id", id).map_err(|e| {
                CtlError::BadArgument {
                    what: "--correlation-id",
                    reason: e.to_string(),
                }
            })?;
            Wanted::Correlation(id.clone())
        }
        (None, None) => {
            return Err(CtlError::BadArgument {
                what: "OP_ID",
                reason: "name an operation id or --correlation-id".to_owned(),
            });
        }
    };
    let (records, place) = match &args.host {
        Some(host) => through_hub(global, host, &wanted).await?,
        None => local(&args.state_dir, &wanted)?,
    };
    if records.is_empty() {
        let what = match &wanted {
            Wanted::Op(op_id) => format!("operation {op_id}"),
            Wanted::Correlation(id) => format!("no operation with correlation id {id}"),
        };
        return Err(CtlError::Hub {
            status: 404,
            code: "unknown_operation".to_owned(),
            message: format!("{what} is not in {place}"),
            request_id: None,
        });
    }
    if global.json() {
        let value = match (&wanted, records.as_slice()) {
            (Wanted::Op(_), [one]) => serde_json::to_value(one),
            _ => serde_json::to_value(&records),
        }
        .map_err(|source| CtlError::Decode {
            what: "output".to_owned(),
            source,
        })?;
        return table::print_json(&value);
    }
    for record in &records {
        print(record)?;
    }
    Ok(())
}

/// The records the hub holds for `host`.
async fn through_hub(
    global: &GlobalArgs,
    host: &str,
    wanted: &Wanted,
) -> Result<(Vec<OperationRecord>, String), CtlError> {
    let client = crate::connect(global)?;
    let host_id = resolve::host_id(&client, host).await?;
    let query = match wanted {
        Wanted::Op(op_id) => format!("op={op_id}"),
        Wanted::Correlation(id) => format!("correlation={id}&limit=256"),
    };
    let records: Vec<OperationRecord> = decode(
        "operation records",
        client
            .get(&format!("/v1/admin/hosts/{host_id}/operations?{query}"))
            .await?,
    )?;
    Ok((
        records,
        format!("what host {host_id} reported to the hub (its newest operations)"),
    ))
}

/// The records of this host's own journal.
fn local(
    state_dir: &std::path::Path,
    wanted: &Wanted,
) -> Result<(Vec<OperationRecord>, String), CtlError> {
    let path = state_dir.join("journal.sqlite");
    if !path.exists() {
        return Err(CtlError::ReadInput {
            path,
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let journal = |e: bosun_agentd::ops::journal::JournalError| CtlError::BadArgument {
        what: "journal",
        reason: error_chain(&e),
    };
    let store = Store::open(&path, SystemClock::shared()).map_err(journal)?;
    let operations = match wanted {
        Wanted::Op(op_id) => store
            .operation(*op_id)
            .map_err(journal)?
            .into_iter()
            .collect(),
        Wanted::Correlation(id) => {
            let mut ops: Vec<_> = store
                .recent_operations(LOCAL_SCAN)
                .map_err(journal)?
                .into_iter()
                .filter(|op| op.correlation_id.as_deref() == Some(id.as_str()))
                .collect();
            ops.reverse();
            ops
        }
    };
    let mut records = Vec::with_capacity(operations.len());
    for op in operations {
        let steps = store.steps(op.op_id).map_err(journal)?;
        records.push(op_tail::record(&op, &steps));
    }
    Ok((records, path.display().to_string()))
}

fn print(op: &OperationRecord) -> Result<(), CtlError> {
    outln!(
        "operation {} ({}) {}{}",
        op.op_id,
        op.kind,
        op.status,
        op.error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    )?;
    let facts = [
        ("guest", op.guest_id.clone()),
        ("vmid", op.vmid.map(|v| v.to_string())),
        ("job", op.job_id.clone()),
        ("request", op.request_id.clone()),
        ("correlation", op.correlation_id.clone()),
    ];
    for (name, value) in facts {
        if let Some(value) = value {
            outln!("  {name}: {value}")?;
        }
    }
    outln!(
        "  started {}, ended {}",
        op.started_at,
        op.ended_at
            .map_or_else(|| "-".to_owned(), |t| t.to_string())
    )?;
    if op.steps_omitted > 0 {
        outln!("  ({} earlier steps not reported)", op.steps_omitted)?;
    }
    for s in &op.steps {
        outln!(
            "  {:>2}. {:<20} {:<6} {}{}{}",
            s.seq,
            s.name,
            s.state,
            s.detail,
            s.upid
                .as_deref()
                .map(|u| format!(" upid={u}"))
                .unwrap_or_default(),
            s.error
                .as_deref()
                .map(|e| format!(" error={e}"))
                .unwrap_or_default(),
        )?;
    }
    Ok(())
}
