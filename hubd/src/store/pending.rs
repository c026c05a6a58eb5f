//! What waits for a host at its poll. The two stores read it differently, each the cheaper way
//! for it: SQLite in two statements, each compiled once (a join, like an `ORDER BY`, beside a
//! bound parameter makes SQLite compile the statement again for every binding; these avoid
//! both); PostgreSQL in one, a round trip fewer on every poll.

use rusqlite::params;

use super::StoreResult;
use super::codec::{signed, unsigned};
use super::host_row::Pending;
use super::tx::{Dialect, Row, Tx};

/// The desired generation, its document (unless known) and correlation id.
type DesiredPart = (i64, Option<String>, Option<String>);

/// A queued job: its priority, sequence, exact signed bytes and armored signature.
type JobPart = (i32, i64, Vec<u8>, String);

/// The order a poll hands queued jobs in: highest priority first, then oldest first
/// (decision 0072).
fn in_queue_order(jobs: &mut [JobPart]) {
    jobs.sort_unstable_by_key(|(priority, seq, _, _)| (std::cmp::Reverse(*priority), *seq));
}

/// What waits for a host: its desired generation with the operator's correlation id, the
/// document too unless it is the generation the agent says it `knows`, and its queued jobs,
/// highest priority first, then oldest first.
pub(super) fn pending(tx: Tx<'_, '_>, id: &str, knows: Option<u64>) -> StoreResult<Pending> {
    let knows = knows.map_or(-1, signed);
    let (desired, mut jobs) = match tx.dialect() {
        Dialect::Sqlite => in_two_statements(tx, id, knows)?,
        Dialect::Postgres => in_one_statement(tx, id, knows)?,
    };
    in_queue_order(&mut jobs);
    let (generation, desired_json, correlation_id) = match desired {
        Some((generation, document, correlation)) => (unsigned(generation), document, correlation),
        None => (0, None, None),
    };
    Ok(Pending {
        generation,
        desired_json,
        jobs: jobs
            .into_iter()
            .map(|(_, _, document, signature)| (document, signature))
            .collect(),
        correlation_id,
    })
}

/// What waits for the host `h` of a poll's statement, as columns after the host row's: the
/// desired generation, its document unless it is generation `?2` (the one the agent knows),
/// its correlation id, and how many jobs are queued. Correlated subqueries, each compiled once
/// with the statement (see the module docs), so a poll reads its host row and what waits for
/// it in one statement; the jobs themselves are read only when some are queued.
pub(super) const WAITING_COLUMNS: &str = "
    (SELECT d.generation FROM desired d WHERE d.host_id = h.host_id),
    (SELECT CASE WHEN d.generation = ?2 THEN NULL ELSE d.document END
     FROM desired d WHERE d.host_id = h.host_id),
    (SELECT c.correlation_id FROM desired d, desired_history c
     WHERE d.host_id = h.host_id AND c.host_id = d.host_id AND c.generation = d.generation),
    (SELECT COUNT(*) FROM jobs j WHERE j.host_id = h.host_id AND j.state = 'queued')";

/// [`WAITING_COLUMNS`] as read.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    generation: Option<i64>,
    document: Option<String>,
    correlation_id: Option<String>,
    queued: i64,
}

impl Waiting {
    /// Reads [`WAITING_COLUMNS`] from column `first` of `row` on.
    pub fn read(row: &Row<'_, '_>, first: usize) -> rusqlite::Result<Self> {
        Ok(Self {
            generation: row.get(first)?,
            document: row.get(first + 1)?,
            correlation_id: row.get(first + 2)?,
            queued: row.get(first + 3)?,
        })
    }

    /// What waits, the queued jobs read now (after the poll acknowledged what it did).
    pub fn pending(self, tx: Tx<'_, '_>, id: &str) -> StoreResult<Pending> {
        let jobs = if self.queued > 0 {
            queued_jobs(tx, id)?
        } else {
            Vec::new()
        };
        Ok(self.with_jobs(jobs))
    }

    /// Whether this answers a poll whose agent knows generation `known` as a new read of the
    /// same rows would: no generation set, or the one the agent knows, so no document to send
    /// (a replica keeps it for the next heartbeat, decision 0131).
    pub fn answers(&self, known: u64) -> bool {
        self.document.is_none()
            && self
                .generation
                .is_none_or(|generation| generation == signed(known))
    }

    /// Whether jobs are queued for the host (to be read with [`Self::pending`]).
    pub fn jobs_queued(&self) -> bool {
        self.queued > 0
    }

    /// What waits, with no job queued.
    pub fn without_jobs(self) -> Pending {
        self.with_jobs(Vec::new())
    }

    fn with_jobs(self, mut jobs: Vec<JobPart>) -> Pending {
        in_queue_order(&mut jobs);
        Pending {
            generation: self.generation.map_or(0, unsigned),
            desired_json: self.document,
            jobs: jobs
                .into_iter()
                .map(|(_, _, document, signature)| (document, signature))
                .collect(),
            correlation_id: self.correlation_id,
        }
    }
}

/// The host's queued jobs, unordered.
fn queued_jobs(tx: Tx<'_, '_>, id: &str) -> StoreResult<Vec<JobPart>> {
    tx.query_map(
        "read poll view",
        "SELECT priority, seq, document, signature FROM jobs
         WHERE host_id = ?1 AND state = 'queued'",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
}

fn in_two_statements(
    tx: Tx<'_, '_>,
    id: &str,
    knows: i64,
) -> StoreResult<(Option<DesiredPart>, Vec<JobPart>)> {
    let desired = tx.query_opt(
        "read poll view",
        "SELECT d.generation, CASE WHEN d.generation = ?2 THEN NULL ELSE d.document END,
                (SELECT h.correlation_id FROM desired_history h
                 WHERE h.host_id = d.host_id AND h.generation = d.generation)
         FROM desired d WHERE d.host_id = ?1",
        params![id, knows],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    Ok((desired, queued_jobs(tx, id)?))
}

fn in_one_statement(
    tx: Tx<'_, '_>,
    id: &str,
    knows: i64,
) -> StoreResult<(Option<DesiredPart>, Vec<JobPart>)> {
    // Part 0: the desired state; part 1: the queued jobs.
    type Part = (
        i32,
        i64,
        Option<String>,
        Option<String>,
        Option<Vec<u8>>,
        i32,
    );
    let rows: Vec<Part> = tx.query_map(
        "read poll view",
        "SELECT 0 AS part, d.generation AS n,
                CASE WHEN d.generation = ?2 THEN NULL ELSE d.document END AS text,
                (SELECT h.correlation_id FROM desired_history h
                 WHERE h.host_id = d.host_id AND h.generation = d.generation) AS note,
                NULL::BYTEA AS bytes, 0 AS priority
         FROM desired d WHERE d.host_id = ?1
         UNION ALL
         SELECT 1, j.seq, NULL, j.signature, j.document, j.priority
         FROM jobs j WHERE j.host_id = ?1 AND j.state = 'queued'",
        params![id, knows],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        },
    )?;
    let mut desired = None;
    let mut jobs = Vec::new();
    for (part, n, text, note, bytes, priority) in rows {
        if part == 0 {
            desired = Some((n, text, note));
        } else {
            jobs.push((
                priority,
                n,
                bytes.unwrap_or_default(),
                note.unwrap_or_default(),
            ));
        }
    }
    Ok((desired, jobs))
}
