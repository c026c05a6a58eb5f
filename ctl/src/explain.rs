//! `bosunctl explain --host H (OP_ID | --correlation-id C | --order)`: operations and their
//! journal steps through the hub (the agent reports the tail of its operation journal; the hub
//! keeps the newest records of each host). `--correlation-id` finds the operations a `desired
//! set` caused. `--order` shows the order the host's guests come up and go down in, and what
//! waits on what (decision 0099). On the host itself, `bosun-agentctl explain` reads the
//! agent's journal (decision 0057); asked without `--host`, this command says so.

use std::path::PathBuf;

use bosun_proto::oplog::OperationRecord;
use uuid::Uuid;

use crate::client::decode;
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::{outln, resolve, table};

/// Where reading this host's own journal went.
const LOCAL_MOVED: &str = "reading this host's own agent journal is `bosun-agentctl explain` \
     now (on the host, as the agent's user: `sudo -u bosun bosun-agentctl explain OP_ID`); \
     `bosunctl explain --host HOST` reads what the host reported through the hub";

/// `bosunctl explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The operation id (from logs, audit entries, `job list` or `--correlation-id`).
    #[arg(required_unless_present_any = ["correlation_id", "order"])]
    pub op_id: Option<String>,
    /// Every operation carrying this correlation id (printed by `desired set`).
    #[arg(long, conflicts_with = "op_id")]
    pub correlation_id: Option<String>,
    /// The order the host's guests come up and go down in: each one's place, what it waits on
    /// and whether it waits now, and the requirements refused with why.
    #[arg(long, conflicts_with_all = ["op_id", "correlation_id"], requires = "host")]
    pub order: bool,
    /// The host (id or hostname) whose reported journal to search, through the hub.
    #[arg(long)]
    pub host: Option<String>,
    /// No longer read here: this host's own journal is `bosun-agentctl explain`'s. Kept so
    /// the old form is told where it went.
    #[arg(long, hide = true, conflicts_with = "host")]
    pub state_dir: Option<PathBuf>,
}

/// What to look for.
enum Wanted {
    Op(Uuid),
    Correlation(String),
}

/// Runs `explain`.
pub async fn run(args: &ExplainArgs, global: &GlobalArgs) -> Result<(), CtlError> {
    let Some(host) = &args.host else {
        return Err(CtlError::BadArgument {
            what: "--host",
            reason: LOCAL_MOVED.to_owned(),
        });
    };
    if args.order {
        return crate::explain_order::run(global, host).await;
    }
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
    let (records, place) = through_hub(global, host, &wanted).await?;
    if records.is_empty() {
        return Err(not_found(&wanted, &place));
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

/// What is said when `place` holds nothing `wanted` names (exit 8).
fn not_found(wanted: &Wanted, place: &str) -> CtlError {
    let message = match wanted {
        Wanted::Op(op_id) => format!("operation {op_id} is not in {place}"),
        Wanted::Correlation(id) => format!("no operation with correlation id {id} is in {place}"),
    };
    CtlError::Hub {
        status: 404,
        code: "unknown_operation".to_owned(),
        message,
        request_id: None,
    }
}

/// The records the hub holds for `host`.
async fn through_hub(
    global: &GlobalArgs,
    host: &str,
    wanted: &Wanted,
) -> Result<(Vec<OperationRecord>, String), CtlError> {
    let client = crate::client::connect(global)?;
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

fn print(op: &OperationRecord) -> Result<(), CtlError> {
    for line in op.text_lines() {
        outln!("{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_found_is_said_in_one_sentence() {
        let place = "what host h reported to the hub (its newest operations)";
        let said = not_found(&Wanted::Correlation("nope".to_owned()), place).to_string();
        assert!(
            said.contains("no operation with correlation id nope is in what host h reported"),
            "{said}"
        );
        assert!(!said.contains("is not in"), "{said}");
        let op = Uuid::from_u128(7);
        let said = not_found(&Wanted::Op(op), place).to_string();
        assert!(
            said.contains(&format!("operation {op} is not in what")),
            "{said}"
        );
        assert_eq!(
            not_found(&Wanted::Op(op), place).exit_code(),
            crate::error::exit::NOT_FOUND
        );
    }
}
