//! Desired state, signed jobs and what a poll gets back.

use bosun_proto::admin::{DesiredAccepted, HostStatus, JobAccepted, JobRecord, JobState};
use bosun_proto::job::{JobOutcome, JobResult};
use rusqlite::params;

use super::pg_conn::{OptionalExtension as _, PgTx};
use uuid::Uuid;

use super::pg_hosts::{parse, require_host};
use super::poll_report::{HostFacts, Pending};
use super::postgres::{event, host_status, signed, sql, ts, ts_opt, unsigned, uuid};
use super::{DesiredWrite, NewJob, PollView, StoreError, StoreResult};

fn job_state(text: &str) -> StoreResult<JobState> {
    match text {
        "queued" => Ok(JobState::Queued),
        "acked" => Ok(JobState::Acked),
        "succeeded" => Ok(JobState::Succeeded),
        "failed" => Ok(JobState::Failed),
        "rejected" => Ok(JobState::Rejected),
        other => Err(StoreError::Corrupt {
            what: "job state",
            reason: format!("unknown state `{other}`"),
        }),
    }
}

pub(super) fn poll_view(tx: &PgTx<'_>, host_id: Uuid) -> StoreResult<PollView> {
    let id = host_id.to_string();
    let (poll_interval_s, audit_seq, status, report_seq): (u32, Option<i64>, String, Option<i64>) =
        tx.prepare_cached(
            "SELECT poll_interval_s, audit_seq, status, report_seq FROM hosts WHERE host_id = $1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
        })
        .map_err(sql("read poll view"))?
        .ok_or(StoreError::UnknownHost { host_id })?;
    let status = host_status(&status)?;
    if status != HostStatus::Active {
        return Err(StoreError::HostNotActive { host_id, status });
    }
    Ok(pending(tx, &id, None)?.view(HostFacts {
        poll_interval_s,
        audit_acked_seq: audit_seq.map(unsigned),
        report_seq: report_seq.map(unsigned),
    }))
}

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

pub(super) fn put_desired(tx: &PgTx<'_>, write: &DesiredWrite) -> StoreResult<DesiredAccepted> {
    require_host(tx, write.host_id)?;
    let id = write.host_id.to_string();
    if let Some((key, hash)) = &write.idempotency {
        let earlier: Option<(Vec<u8>, i64)> = tx
            .query_row(
                "SELECT request_hash, generation FROM idempotency WHERE host_id = $1 AND key = $2",
                params![id, key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(sql("put desired state"))?;
        if let Some((earlier_hash, generation)) = earlier {
            if earlier_hash.as_slice() != hash.as_slice() {
                return Err(StoreError::IdempotencyConflict { key: key.clone() });
            }
            return Ok(DesiredAccepted {
                host_id: write.host_id,
                generation: unsigned(generation),
                created: false,
            });
        }
    }
    let current: Option<i64> = tx
        .query_row(
            "SELECT generation FROM desired WHERE host_id = $1",
            params![id],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql("put desired state"))?;
    let generation = current.unwrap_or(0).saturating_add(1);
    tx.execute(
        "INSERT INTO desired (host_id, generation, document, updated_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (host_id) DO UPDATE SET generation = excluded.generation,
             document = excluded.document, updated_ms = excluded.updated_ms",
        params![id, generation, write.document, write.now_ms],
    )
    .map_err(sql("put desired state"))?;
    super::pg_desired::record(
        tx,
        write.host_id,
        unsigned(generation),
        &write.document,
        write.correlation_id.as_deref(),
        write.now_ms,
    )?;
    if let Some((key, hash)) = &write.idempotency {
        tx.execute(
            "INSERT INTO idempotency (host_id, key, request_hash, generation, created_ms) VALUES ($1, $2, $3, $4, $5)",
            params![id, key, hash.as_slice(), generation, write.now_ms],
        )
        .map_err(sql("put desired state"))?;
    }
    event(
        tx,
        write.now_ms,
        Some(write.host_id),
        "desired_changed",
        &serde_json::json!({ "generation": generation, "correlation_id": write.correlation_id }),
    )?;
    // After a replacement: a desired state written once the new box named its recipient is
    // taken as the resealed one.
    super::pg_enroll::clear_reseal(tx, write.host_id, generation, write.now_ms)?;
    Ok(DesiredAccepted {
        host_id: write.host_id,
        generation: unsigned(generation),
        created: true,
    })
}

pub(super) fn submit_job(tx: &PgTx<'_>, job: &NewJob) -> StoreResult<JobAccepted> {
    require_host(tx, job.host_id)?;
    let existing: Option<(String, Vec<u8>, String, String)> = tx
        .query_row(
            "SELECT host_id, document, signature, state FROM jobs WHERE job_id = $1",
            params![job.job_id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .map_err(sql("submit job"))?;
    if let Some((host, document, signature, state)) = existing {
        if uuid(&host)? != job.host_id || document != job.document || signature != job.signature {
            return Err(StoreError::JobConflict { job_id: job.job_id });
        }
        return Ok(JobAccepted {
            job_id: job.job_id,
            host_id: job.host_id,
            state: job_state(&state)?,
            created: false,
        });
    }
    tx.execute(
        "INSERT INTO jobs (job_id, host_id, kind, document, signature, state, submitted_ms)
         VALUES ($1, $2, $3, $4, $5, 'queued', $6)",
        params![
            job.job_id.to_string(),
            job.host_id.to_string(),
            job.kind,
            job.document,
            job.signature,
            job.now_ms
        ],
    )
    .map_err(sql("submit job"))?;
    event(
        tx,
        job.now_ms,
        Some(job.host_id),
        "job_queued",
        &serde_json::json!({ "job_id": job.job_id, "kind": job.kind }),
    )?;
    Ok(JobAccepted {
        job_id: job.job_id,
        host_id: job.host_id,
        state: JobState::Queued,
        created: true,
    })
}

pub(super) fn finish_job(
    tx: &PgTx<'_>,
    host_id: Uuid,
    result: &JobResult,
    now_ms: i64,
) -> StoreResult<()> {
    require_host(tx, host_id)?;
    let state: Option<(String, Option<String>)> = tx
        .query_row(
            "SELECT state, result FROM jobs WHERE job_id = $1 AND host_id = $2",
            params![result.job_id.to_string(), host_id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql("finish job"))?;
    let (state, stored) = state.ok_or(StoreError::UnknownJob {
        job_id: result.job_id,
        host_id,
    })?;
    let target = match result.outcome {
        JobOutcome::Succeeded => JobState::Succeeded,
        JobOutcome::Failed => JobState::Failed,
        JobOutcome::Rejected => JobState::Rejected,
    };
    let current = job_state(&state)?;
    if matches!(
        current,
        JobState::Succeeded | JobState::Failed | JobState::Rejected
    ) {
        let same = stored
            .as_deref()
            .map(parse::<JobResult>("job result"))
            .transpose()?
            .is_some_and(|earlier| earlier == *result);
        return if same {
            Ok(())
        } else {
            Err(StoreError::JobFinished {
                job_id: result.job_id,
                state: current.as_str(),
            })
        };
    }
    let json = serde_json::to_string(result).map_err(|e| StoreError::Corrupt {
        what: "job result",
        reason: e.to_string(),
    })?;
    tx.execute(
        "UPDATE jobs SET state = $1, result = $2, finished_ms = $3, acked_ms = COALESCE(acked_ms, $3)
         WHERE job_id = $4",
        params![target.as_str(), json, now_ms, result.job_id.to_string()],
    )
    .map_err(sql("finish job"))?;
    event(
        tx,
        now_ms,
        Some(host_id),
        "job_finished",
        &serde_json::json!({ "job_id": result.job_id, "outcome": target.as_str() }),
    )
}

pub(super) fn list_jobs(tx: &PgTx<'_>, host_id: Uuid) -> StoreResult<Vec<JobRecord>> {
    require_host(tx, host_id)?;
    let mut stmt = tx
        .prepare(
            "SELECT job_id, kind, state, submitted_ms, acked_ms, result FROM jobs WHERE host_id = $1 ORDER BY seq",
        )
        .map_err(sql("list jobs"))?;
    let rows = stmt
        .query_map(params![host_id.to_string()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .map_err(sql("list jobs"))?;
    let mut jobs = Vec::new();
    for row in rows {
        let (job_id, kind, state, submitted_ms, acked_ms, result) =
            row.map_err(sql("list jobs"))?;
        jobs.push(JobRecord {
            job_id: uuid(&job_id)?,
            host_id,
            kind,
            state: job_state(&state)?,
            submitted_at: ts(submitted_ms)?,
            acked_at: ts_opt(acked_ms)?,
            result: result
                .as_deref()
                .map(parse::<JobResult>("job result"))
                .transpose()?,
        });
    }
    Ok(jobs)
}
