//! The stored state report: a full report replaces it, a delta is merged into it when its
//! base is exactly the stored report.

use bosun_proto::report::StateReport;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::sqlite::{signed, sql, unsigned};
use super::{ReportUpdate, StoreResult};

/// Stores what the poll reports; `false` when a delta had no base to apply to (the
/// stored report is left as it was and the agent must send a full one).
pub(super) fn store_report(
    tx: &Connection,
    host: &str,
    update: &ReportUpdate,
) -> StoreResult<bool> {
    match update {
        ReportUpdate::Full { seq, json } => {
            write(tx, host, Some(json), *seq)?;
            Ok(true)
        }
        ReportUpdate::Delta(delta) => {
            let (stored, stored_seq): (Option<String>, Option<i64>) = tx
                .prepare_cached("SELECT report, report_seq FROM hosts WHERE host_id = ?1")
                .and_then(|mut stmt| {
                    stmt.query_row(params![host], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .map_err(sql("read stored report"))?
                .unwrap_or((None, None));
            // Seq 0 is an unnumbered report: never a base.
            let base_ok = stored.is_some()
                && stored_seq.map(unsigned) == Some(delta.base_seq)
                && delta.base_seq != 0;
            if !base_ok {
                tracing::info!(
                    host_id = host,
                    base_seq = delta.base_seq,
                    stored_seq = ?stored_seq,
                    "report delta has no base here; asking for a full report"
                );
                return Ok(false);
            }
            if delta.changes_nothing() {
                write(tx, host, None, delta.seq)?;
                return Ok(true);
            }
            let Some(mut report) = stored
                .as_deref()
                .and_then(|text| serde_json::from_str::<StateReport>(text).ok())
            else {
                tracing::warn!(
                    host_id = host,
                    "stored report unreadable; asking for a full report"
                );
                return Ok(false);
            };
            report.apply(delta);
            let json = serde_json::to_string(&report).map_err(|e| super::StoreError::Corrupt {
                what: "state report",
                reason: e.to_string(),
            })?;
            write(tx, host, Some(&json), delta.seq)?;
            Ok(true)
        }
    }
}

fn write(tx: &Connection, host: &str, json: Option<&str>, seq: u64) -> StoreResult<()> {
    tx.prepare_cached(
        "UPDATE hosts SET report = COALESCE(?1, report), report_seq = ?2 WHERE host_id = ?3",
    )
    .and_then(|mut stmt| stmt.execute(params![json, signed(seq), host]))
    .map_err(sql("store report"))?;
    Ok(())
}
