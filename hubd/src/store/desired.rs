//! The documents behind desired-state generations (`desired_history`) and the operation
//! journal records agents report (`host_operations`).
//!
//! History is bounded per host: the current generation, the one the host last applied and
//! the [`KEEP_RECENT_GENERATIONS`] newest are kept; older rows go in the transaction that writes a new
//! generation or records a newly applied one. Operation records are bounded too: the newest
//! [`MAX_STORED_PER_HOST`] per host by start time.

use bosun_proto::desired::DesiredState;
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::oplog::{MAX_STORED_PER_HOST, OperationRecord};
use rusqlite::params;
use uuid::Uuid;

use super::codec::parse;
use super::codec::{signed, ts, ts_opt, unsigned};
use super::tx::Tx;
use super::{DesiredFacts, OperationQuery, StoreError, StoreResult};

/// Generations kept besides the current and the last-applied one.
pub const KEEP_RECENT_GENERATIONS: u32 = 8;

/// Where a generation came from: the operator's correlation id and the token that set it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Provenance<'a> {
    /// The operator's correlation id.
    pub correlation_id: Option<&'a str>,
    /// The operator token's name.
    pub set_by: Option<&'a str>,
}

/// Records generation `generation` of `host`'s desired state and prunes older ones.
pub(super) fn record(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    generation: u64,
    document: &str,
    provenance: Provenance<'_>,
    now_ms: i64,
) -> StoreResult<()> {
    let host = host_id.to_string();
    tx.execute(
        "record desired history",
        "INSERT INTO desired_history
             (host_id, generation, document, correlation_id, set_by, stored_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (host_id, generation) DO UPDATE SET document = excluded.document,
             correlation_id = excluded.correlation_id, set_by = excluded.set_by,
             stored_ms = excluded.stored_ms",
        params![
            host,
            signed(generation),
            document,
            provenance.correlation_id,
            provenance.set_by,
            now_ms
        ],
    )?;
    prune(tx, &host)
}

/// Drops the generations of `host` that are neither current, last applied, nor among the
/// [`KEEP_RECENT_GENERATIONS`] newest.
pub(super) fn prune(tx: Tx<'_, '_>, host: &str) -> StoreResult<()> {
    tx.execute(
        "prune desired history",
        "DELETE FROM desired_history WHERE host_id = ?1
           AND generation NOT IN (SELECT generation FROM desired_history WHERE host_id = ?1
                                  ORDER BY generation DESC LIMIT ?2)
           AND generation <> COALESCE((SELECT applied_generation FROM hosts WHERE host_id = ?1), 0)
           AND generation <> COALESCE((SELECT generation FROM desired WHERE host_id = ?1), 0)",
        params![host, KEEP_RECENT_GENERATIONS],
    )?;
    Ok(())
}

/// One stored generation, if the hub still keeps it.
fn revision(tx: Tx<'_, '_>, host: &str, generation: u64) -> StoreResult<Option<DesiredRevision>> {
    if generation == 0 {
        return Ok(None);
    }
    let row: Option<(String, Option<String>, Option<String>, i64)> = tx.query_opt(
        "read desired history",
        "SELECT document, correlation_id, set_by, stored_ms FROM desired_history
         WHERE host_id = ?1 AND generation = ?2",
        params![host, signed(generation)],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    row.map(|(document, correlation_id, set_by, stored_ms)| {
        Ok(DesiredRevision {
            generation,
            correlation_id,
            set_by,
            stored_at: ts(stored_ms)?,
            document: parse::<DesiredState>("desired state")(&document)?,
        })
    })
    .transpose()
}

/// The current generation's revision, if one was ever set.
pub(super) fn current(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<Option<DesiredRevision>> {
    tx.require_host(host_id)?;
    let host = host_id.to_string();
    let generation: Option<i64> = tx.query_opt(
        "read desired state",
        "SELECT generation FROM desired WHERE host_id = ?1",
        params![host],
        |r| r.get(0),
    )?;
    match generation {
        Some(generation) => revision(tx, &host, unsigned(generation)),
        None => Ok(None),
    }
}

/// What `GET …/desired/status` is made of.
pub(super) fn facts(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<DesiredFacts> {
    let current = current(tx, host_id)?;
    let host = host_id.to_string();
    let (known, applied, last_seen_ms): (i64, i64, Option<i64>) = tx.query_row(
        "read desired status",
        "SELECT known_generation, applied_generation, last_seen_ms FROM hosts WHERE host_id = ?1",
        params![host],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let applied_revision = revision(tx, &host, unsigned(applied))?;
    let report = super::stored_report::stored_report(tx, &host)?;
    let operations = match current.as_ref().and_then(|c| c.correlation_id.clone()) {
        Some(id) => operations(
            tx,
            host_id,
            &OperationQuery::Correlation(id),
            MAX_STORED_PER_HOST,
        )?,
        None => Vec::new(),
    };
    Ok(DesiredFacts {
        current,
        applied: applied_revision,
        known_generation: unsigned(known),
        applied_generation: unsigned(applied),
        last_seen: ts_opt(last_seen_ms)?,
        report,
        operations,
    })
}

/// Stores the operation records a poll carried (a record replaces the stored one of the
/// same id) and keeps the newest [`MAX_STORED_PER_HOST`] of the host.
pub(super) fn store_operations(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    records: &[OperationRecord],
) -> StoreResult<()> {
    if records.is_empty() {
        return Ok(());
    }
    let host = host_id.to_string();
    for record in records {
        let json = serde_json::to_string(record).map_err(|e| StoreError::Corrupt {
            what: "operation record",
            reason: e.to_string(),
        })?;
        tx.execute(
            "store operation records",
            "INSERT INTO host_operations (host_id, op_id, correlation_id, started_ms, record)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (host_id, op_id) DO UPDATE SET correlation_id = excluded.correlation_id,
                 started_ms = excluded.started_ms, record = excluded.record",
            params![
                host,
                record.op_id.to_string(),
                record.correlation_id,
                record.started_at.as_millisecond(),
                json
            ],
        )?;
    }
    tx.execute(
        "prune operation records",
        "DELETE FROM host_operations WHERE host_id = ?1 AND op_id NOT IN
           (SELECT op_id FROM host_operations WHERE host_id = ?1
            ORDER BY started_ms DESC, op_id DESC LIMIT ?2)",
        params![host, i64::try_from(MAX_STORED_PER_HOST).unwrap_or(i64::MAX)],
    )?;
    Ok(())
}

/// Stored operation records of a host matching `query`, oldest first, at most `limit`
/// (the newest ones).
pub(super) fn operations(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    query: &OperationQuery,
    limit: usize,
) -> StoreResult<Vec<OperationRecord>> {
    tx.require_host(host_id)?;
    let (filter, value) = match query {
        OperationQuery::Recent => ("1 = 1 OR CAST(?2 AS TEXT) IS NULL", None),
        OperationQuery::Op(op_id) => ("op_id = ?2", Some(op_id.to_string())),
        OperationQuery::Correlation(id) => ("correlation_id = ?2", Some(id.clone())),
    };
    // The filter's parameter is typed (`CAST`) so PostgreSQL knows it when it goes unused.
    let texts: Vec<String> = tx.query_map(
        "list operation records",
        &format!(
            "SELECT record FROM (SELECT record, started_ms, op_id FROM host_operations
               WHERE host_id = ?1 AND ({filter}) ORDER BY started_ms DESC, op_id DESC LIMIT ?3)
             AS newest ORDER BY started_ms, op_id"
        ),
        params![
            host_id.to_string(),
            value,
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        |r| r.get(0),
    )?;
    let mut records = Vec::with_capacity(texts.len());
    for text in texts {
        records.push(parse::<OperationRecord>("operation record")(&text)?);
    }
    Ok(records)
}
