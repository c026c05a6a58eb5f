//! The stored state report: a full report replaces it; a delta is merged into the stored
//! report when its base is exactly that report, or into the one before it when its base is
//! that one (the agent builds on the last report it saw acknowledged, one behind when it
//! abandoned a held poll). Anything else is not applied and the agent is asked for a full
//! report.

use bosun_proto::delta::ReportDelta;
use bosun_proto::report::StateReport;
use rusqlite::params;

use super::pg_conn::{OptionalExtension as _, PgTx};

use super::postgres::{signed, sql, unsigned};
use super::{ReportUpdate, StoreError, StoreResult};

/// Stores what the poll reports; `false` when a delta was not applied (no base for it, or
/// older than what is stored): the stored report is left as it was.
pub(super) fn store_report(tx: &PgTx<'_>, host: &str, update: &ReportUpdate) -> StoreResult<bool> {
    match update {
        ReportUpdate::Full { seq, json } => {
            tx.prepare_cached(
                "UPDATE hosts SET report = $1, report_seq = $2, prev_report = NULL, prev_seq = NULL
                 WHERE host_id = $3",
            )
            .and_then(|mut stmt| stmt.execute(params![json, signed(*seq), host]))
            .map_err(sql("store report"))?;
            Ok(true)
        }
        ReportUpdate::Delta(delta) => store_delta(tx, host, delta),
    }
}

fn store_delta(tx: &PgTx<'_>, host: &str, delta: &ReportDelta) -> StoreResult<bool> {
    type Row = (Option<String>, Option<i64>, Option<String>, Option<i64>);
    let (stored, stored_seq, prev, prev_seq): Row = tx
        .prepare_cached(
            "SELECT report, report_seq, prev_report, prev_seq FROM hosts WHERE host_id = $1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![host], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
        })
        .map_err(sql("read stored report"))?
        .unwrap_or_default();
    let stored_seq = stored_seq.map(unsigned);
    let prev_seq = prev_seq.map(unsigned);
    if stored_seq.is_some_and(|s| delta.seq <= s) {
        tracing::debug!(host_id = host, seq = delta.seq, stored_seq = ?stored_seq, "report delta older than the stored report; ignored");
        return Ok(false);
    }
    // Seq 0 is an unnumbered report: never a base.
    let on = |seq: Option<u64>, text: &Option<String>| {
        delta.base_seq != 0 && seq == Some(delta.base_seq) && text.is_some()
    };
    if on(stored_seq, &stored) {
        // The stored report becomes the previous one.
        if delta.changes_nothing() {
            tx.prepare_cached(
                "UPDATE hosts SET prev_report = report, prev_seq = report_seq, report_seq = $1
                 WHERE host_id = $2",
            )
            .and_then(|mut stmt| stmt.execute(params![signed(delta.seq), host]))
            .map_err(sql("store report"))?;
            return Ok(true);
        }
        let Some(merged) = merge(host, stored.as_deref(), delta)? else {
            return Ok(false);
        };
        tx.prepare_cached(
            "UPDATE hosts SET prev_report = report, prev_seq = report_seq, report = $1, report_seq = $2
             WHERE host_id = $3",
        )
        .and_then(|mut stmt| stmt.execute(params![merged, signed(delta.seq), host]))
        .map_err(sql("store report"))?;
        return Ok(true);
    }
    if on(prev_seq, &prev) {
        // Built on the report before the stored one: merge into that, keep it as previous.
        let merged = if delta.changes_nothing() {
            prev
        } else {
            merge(host, prev.as_deref(), delta)?
        };
        let Some(merged) = merged else {
            return Ok(false);
        };
        tx.prepare_cached("UPDATE hosts SET report = $1, report_seq = $2 WHERE host_id = $3")
            .and_then(|mut stmt| stmt.execute(params![merged, signed(delta.seq), host]))
            .map_err(sql("store report"))?;
        return Ok(true);
    }
    tracing::info!(
        host_id = host,
        base_seq = delta.base_seq,
        stored_seq = ?stored_seq,
        "report delta has no base here; asking for a full report"
    );
    Ok(false)
}

/// The base report with the delta applied, as JSON; `None` when the base is unreadable.
fn merge(host: &str, base: Option<&str>, delta: &ReportDelta) -> StoreResult<Option<String>> {
    let Some(mut report) = base.and_then(|text| serde_json::from_str::<StateReport>(text).ok())
    else {
        tracing::warn!(
            host_id = host,
            "stored report unreadable; asking for a full report"
        );
        return Ok(None);
    };
    report.apply(delta);
    serde_json::to_string(&report)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            what: "state report",
            reason: e.to_string(),
        })
}
