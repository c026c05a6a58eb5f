//! What waits for a host at its poll, as the SQLite store reads it: two statements, each
//! compiled once (the PostgreSQL store reads it in one, [`super::pg_pending`]).

use rusqlite::{Connection, OptionalExtension as _, params};

use super::StoreResult;
use super::poll_report::Pending;
use super::sqlite::{signed, sql, unsigned};

/// What waits for a host: its desired generation with the operator's correlation id, the
/// document too unless it is the generation the agent says it `knows`, and its queued jobs,
/// oldest first. (A join, like an `ORDER BY`, beside a bound parameter makes SQLite compile
/// the statement again for every binding; these statements avoid both.)
pub(super) fn pending(tx: &Connection, id: &str, knows: Option<u64>) -> StoreResult<Pending> {
    let desired: Option<(i64, Option<String>, Option<String>)> = tx
        .prepare_cached(
            "SELECT d.generation, CASE WHEN d.generation = ?2 THEN NULL ELSE d.document END,
                    (SELECT h.correlation_id FROM desired_history h
                     WHERE h.host_id = d.host_id AND h.generation = d.generation)
             FROM desired d WHERE d.host_id = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![id, knows.map_or(-1, signed)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .map_err(sql("read poll view"))?;
    let mut stmt = tx
        .prepare_cached(
            "SELECT seq, document, signature FROM jobs WHERE host_id = ?1 AND state = 'queued'",
        )
        .map_err(sql("read poll view"))?;
    let mut jobs = stmt
        .query_map(params![id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .map_err(sql("read poll view"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql("read poll view"))?;
    jobs.sort_unstable_by_key(|(seq, _, _)| *seq);
    let jobs = jobs
        .into_iter()
        .map(|(_, document, signature)| (document, signature))
        .collect();
    let (generation, desired_json, correlation_id) = match desired {
        Some((generation, document, correlation)) => (unsigned(generation), document, correlation),
        None => (0, None, None),
    };
    Ok(Pending {
        generation,
        desired_json,
        jobs,
        correlation_id,
    })
}
