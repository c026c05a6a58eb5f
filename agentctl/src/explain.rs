//! `bosun-agentctl explain (OP_ID | --correlation-id C)`: operations and their journal steps,
//! read from this host's agent journal with the agent's own store (the one reader of its
//! schema). `bosunctl explain --host H` reads the same records through the hub (the tail the
//! agent reports), from anywhere.

use std::path::{Path, PathBuf};

use bosun_agentd::clock::SystemClock;
use bosun_agentd::links::hub::op_tail;
use bosun_agentd::ops::journal::{JournalError, OpId, Store};
use bosun_proto::oplog::OperationRecord;

/// Operations of one correlation id looked at in the journal (the newest).
const LOCAL_SCAN: u32 = 10_000;

/// `bosun-agentctl explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The operation id (from logs, audit entries, `bosunctl job list` or `--correlation-id`).
    #[arg(required_unless_present = "correlation_id")]
    pub op_id: Option<String>,
    /// Every operation carrying this correlation id (printed by `bosunctl desired set`).
    #[arg(long, conflicts_with = "op_id")]
    pub correlation_id: Option<String>,
    /// The agent's state directory, instead of the one the config names.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the records as JSON (one object by id, an array by correlation id), as
    /// `bosunctl --output json explain` does.
    #[arg(long)]
    pub json: bool,
}

/// What to look for.
#[derive(Debug)]
pub enum Wanted {
    /// One operation.
    Op(OpId),
    /// Every operation of a correlation id, oldest first.
    Correlation(String),
}

/// Why `explain` found nothing to print.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The operation id or correlation id is not one.
    #[error("{what}: {reason}")]
    BadArgument {
        /// The argument.
        what: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// The state directory holds no journal.
    #[error("no agent journal at {}", path.display())]
    NoJournal {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The journal could not be read.
    #[error("reading the journal at {}", path.display())]
    Journal {
        /// The journal's file.
        path: PathBuf,
        /// What the store said.
        #[source]
        source: JournalError,
    },
    /// Nothing in the journal matches.
    #[error("{what}: not in {}", path.display())]
    NotFound {
        /// What was looked for.
        what: String,
        /// The journal's file.
        path: PathBuf,
    },
    /// The records could not be written as JSON.
    #[error("writing the records as JSON")]
    Json(#[source] serde_json::Error),
}

impl ExplainError {
    /// The process's exit code: 64 (EX_USAGE) for a bad argument, 66 (EX_NOINPUT) when there
    /// is no journal or nothing in it matches, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::BadArgument { .. } => 64,
            Self::NoJournal { .. } | Self::NotFound { .. } => 66,
            Self::Journal { .. } | Self::Json(_) => 1,
        }
    }
}

impl ExplainArgs {
    /// What the arguments ask for.
    pub fn wanted(&self) -> Result<Wanted, ExplainError> {
        match (&self.op_id, &self.correlation_id) {
            (Some(raw), _) => raw
                .parse()
                .map(Wanted::Op)
                .map_err(|e| ExplainError::BadArgument {
                    what: "OP_ID",
                    reason: format!("{raw:?} is not an operation id: {e}"),
                }),
            (None, Some(id)) => {
                bosun_proto::oplog::check_correlation_id("--correlation-id", id).map_err(|e| {
                    ExplainError::BadArgument {
                        what: "--correlation-id",
                        reason: e.to_string(),
                    }
                })?;
                Ok(Wanted::Correlation(id.clone()))
            }
            (None, None) => Err(ExplainError::BadArgument {
                what: "OP_ID",
                reason: "name an operation id or --correlation-id".to_owned(),
            }),
        }
    }
}

/// The lines `explain` prints: the records' text, or their JSON (one object when one
/// operation was asked for by id). The lines are raw; the caller escapes control characters.
pub fn explain(state_dir: &Path, wanted: &Wanted, json: bool) -> Result<String, ExplainError> {
    let path = state_dir.join("journal.sqlite");
    let records = read(&path, wanted)?;
    if records.is_empty() {
        let what = match wanted {
            Wanted::Op(op_id) => format!("operation {op_id}"),
            Wanted::Correlation(id) => format!("an operation with correlation id {id}"),
        };
        return Err(ExplainError::NotFound { what, path });
    }
    if json {
        let value = match (wanted, records.as_slice()) {
            (Wanted::Op(_), [one]) => serde_json::to_string_pretty(one),
            _ => serde_json::to_string_pretty(&records),
        };
        return value.map_err(ExplainError::Json);
    }
    Ok(records
        .iter()
        .flat_map(OperationRecord::text_lines)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The records of the journal at `path` that `wanted` names.
pub fn read(path: &Path, wanted: &Wanted) -> Result<Vec<OperationRecord>, ExplainError> {
    if !path.exists() {
        return Err(ExplainError::NoJournal {
            path: path.to_owned(),
        });
    }
    let journal = |source| ExplainError::Journal {
        path: path.to_owned(),
        source,
    };
    let store = Store::open(path, SystemClock::shared()).map_err(journal)?;
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
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(op_id: Option<&str>, correlation_id: Option<&str>) -> ExplainArgs {
        ExplainArgs {
            op_id: op_id.map(str::to_owned),
            correlation_id: correlation_id.map(str::to_owned),
            state_dir: None,
            json: false,
        }
    }

    #[test]
    fn refuses_an_id_that_is_not_one() {
        let err = args(Some("not-a-uuid"), None).wanted().unwrap_err();
        assert!(matches!(
            err,
            ExplainError::BadArgument { what: "OP_ID", .. }
        ));
        assert_eq!(err.exit_code(), 64);
        let err = args(None, Some("bad\u{7}id")).wanted().unwrap_err();
        assert!(matches!(
            err,
            ExplainError::BadArgument {
                what: "--correlation-id",
                ..
            }
        ));
        assert!(args(None, None).wanted().is_err());
    }

    #[test]
    fn a_state_dir_without_a_journal_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let wanted = Wanted::Correlation("c-1".to_owned());
        let err = explain(dir.path(), &wanted, false).unwrap_err();
        assert!(matches!(err, ExplainError::NoJournal { .. }), "{err}");
        assert_eq!(err.exit_code(), 66);
    }
}
