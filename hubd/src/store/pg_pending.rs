//! What waits for a host at its poll, as the PostgreSQL store reads it: one statement, a
//! round trip fewer on every poll (the SQLite store reads it in two, [`super::sqlite_pending`]).

use rusqlite::params;

use super::StoreResult;
use super::pg_conn::PgTx;
use super::poll_report::Pending;
use super::postgres::{signed, sql, unsigned};

/// What waits for a host: its desired generation with the operator's correlation id, the
/// document too unless it is the generation the agent says it `knows`, and its queued jobs,
/// oldest first; read in one statement, a round trip fewer on every poll.
pub(super) fn pending(tx: &PgTx<'_>, id: &str, knows: Option<u64>) -> StoreResult<Pending> {
    // Part 0: the desired state; part 1: the queued jobs.
    let mut stmt = tx
        .prepare_cached(
            "SELECT 0 AS part, d.generation AS n,
                    CASE WHEN d.generation = $2 THEN NULL ELSE d.document END AS text,
                    (SELECT h.correlation_id FROM desired_history h
                     WHERE h.host_id = d.host_id AND h.generation = d.generation) AS note,
                    NULL::BYTEA AS bytes
             FROM desired d WHERE d.host_id = $1
             UNION ALL
             SELECT 1, j.seq, NULL, j.signature, j.document
             FROM jobs j WHERE j.host_id = $1 AND j.state = 'queued'",
        )
        .map_err(sql("read poll view"))?;
    type Part = (i32, i64, Option<String>, Option<String>, Option<Vec<u8>>);
    let rows = stmt
        .query_map(params![id, knows.map_or(-1, signed)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .map_err(sql("read poll view"))?
        .collect::<Result<Vec<Part>, _>>()
        .map_err(sql("read poll view"))?;
    let mut pending = Pending {
        generation: 0,
        desired_json: None,
        jobs: Vec::new(),
        correlation_id: None,
    };
    let mut jobs = Vec::new();
    for (part, n, text, note, bytes) in rows {
        if part == 0 {
            pending.generation = unsigned(n);
            pending.desired_json = text;
            pending.correlation_id = note;
        } else {
            jobs.push((n, bytes.unwrap_or_default(), note.unwrap_or_default()));
        }
    }
    jobs.sort_unstable_by_key(|(seq, _, _)| *seq);
    pending.jobs = jobs
        .into_iter()
        .map(|(_, document, signature)| (document, signature))
        .collect();
    Ok(pending)
}
