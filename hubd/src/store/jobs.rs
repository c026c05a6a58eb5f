//! Desired state, signed jobs and what a poll gets back.

use bosun_proto::admin::{
    AlertKind, DesiredAccepted, HostStatus, JobAccepted, JobRecord, JobState,
};
use bosun_proto::job::{JobOutcome, JobResult};
use rusqlite::params;
use uuid::Uuid;

use super::codec::parse;
use super::codec::{host_status, signed, ts, ts_opt, unsigned, uuid};
use super::host_key_rotation::HostKeyFacts;
use super::host_row::HostFacts;
use super::tx::Tx;
use super::{DesiredWrite, NewJob, PollView, StoreError, StoreResult};

fn job_state(text: &str) -> StoreResult<JobState> {
    match text {
        "queued" => Ok(JobState::Queued),
        "acked" => Ok(JobState::Acked),
        "succeeded" => Ok(JobState::Succeeded),
        "failed" => Ok(JobState::Failed),
        "rejected" => Ok(JobState::Rejected),
        "cancelled" => Ok(JobState::Cancelled),
        other => Err(StoreError::Corrupt {
            what: "job state",
            reason: format!("unknown state `{other}`"),
        }),
    }
}

pub(super) fn poll_view(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<PollView> {
    let id = host_id.to_string();
    type Row = (u32, Option<i64>, String, Option<i64>, HostKeyFacts);
    let (poll_interval_s, audit_seq, status, report_seq, host_key): Row = tx
        .query_opt(
            "read poll view",
            &format!(
                "SELECT poll_interval_s, audit_seq, status, report_seq, {} FROM hosts
                 WHERE host_id = ?1",
                super::host_key_rotation::KEY_COLUMNS
            ),
            params![id],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    super::host_key_rotation::facts(r, 4)?,
                ))
            },
        )?
        .ok_or(StoreError::UnknownHost { host_id })?;
    let status = host_status(&status)?;
    if status != HostStatus::Active {
        return Err(StoreError::HostNotActive { host_id, status });
    }
    Ok(super::pending::pending(tx, &id, None)?.view(HostFacts {
        poll_interval_s,
        audit_acked_seq: audit_seq.map(unsigned),
        report_seq: report_seq.map(unsigned),
        host_key,
    }))
}

pub(super) fn put_desired(tx: Tx<'_, '_>, write: &DesiredWrite) -> StoreResult<DesiredAccepted> {
    tx.require_host(write.host_id)?;
    let id = write.host_id.to_string();
    if let Some((key, hash)) = &write.idempotency {
        let earlier: Option<(Vec<u8>, i64)> = tx.query_opt(
            "put desired state",
            "SELECT request_hash, generation FROM idempotency WHERE host_id = ?1 AND key = ?2",
            params![id, key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
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
    let current: Option<i64> = tx.query_opt(
        "put desired state",
        "SELECT generation FROM desired WHERE host_id = ?1",
        params![id],
        |r| r.get(0),
    )?;
    let generation = signed(super::restored::next_generation(
        tx,
        write.host_id,
        current.map_or(0, unsigned),
    )?);
    tx.execute(
        "put desired state",
        "INSERT INTO desired (host_id, generation, document, updated_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (host_id) DO UPDATE SET generation = excluded.generation,
             document = excluded.document, updated_ms = excluded.updated_ms",
        params![id, generation, write.document, write.now_ms],
    )?;
    super::desired::record(
        tx,
        write.host_id,
        unsigned(generation),
        &write.document,
        super::desired::Provenance {
            correlation_id: write.correlation_id.as_deref(),
            set_by: write.set_by.as_deref(),
        },
        write.now_ms,
    )?;
    if let Some((key, hash)) = &write.idempotency {
        tx.execute("put desired state", "INSERT INTO idempotency (host_id, key, request_hash, generation, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)", params![id, key, hash.as_slice(), generation, write.now_ms])?;
    }
    // What the alerts weigh changed (the restore-test policy, the guests): the backup sweep
    // judges the host at its next pass.
    super::watch::judge_soon(tx, &id, write.now_ms)?;
    tx.event(
        write.now_ms,
        Some(write.host_id),
        "desired_changed",
        &serde_json::json!({ "generation": generation, "correlation_id": write.correlation_id }),
    )?;
    // After a replacement: a desired state written once the new box named its recipient is
    // taken as the resealed one.
    super::enroll::clear_reseal(tx, write.host_id, generation, write.now_ms)?;
    Ok(DesiredAccepted {
        host_id: write.host_id,
        generation: unsigned(generation),
        created: true,
    })
}

pub(super) fn submit_job(tx: Tx<'_, '_>, job: &NewJob) -> StoreResult<JobAccepted> {
    tx.require_host(job.host_id)?;
    let existing: Option<(String, Vec<u8>, String, String)> = tx.query_opt(
        "submit job",
        "SELECT host_id, document, signature, state FROM jobs WHERE job_id = ?1",
        params![job.job_id.to_string()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
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
        "submit job",
        "INSERT INTO jobs (job_id, host_id, kind, document, signature, state, submitted_ms,
             priority)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7)",
        params![
            job.job_id.to_string(),
            job.host_id.to_string(),
            job.kind,
            job.document,
            job.signature,
            job.now_ms,
            job.priority
        ],
    )?;
    tx.event(
        job.now_ms,
        Some(job.host_id),
        "job_queued",
        &serde_json::json!({ "job_id": job.job_id, "kind": job.kind, "priority": job.priority }),
    )?;
    Ok(JobAccepted {
        job_id: job.job_id,
        host_id: job.host_id,
        state: JobState::Queued,
        created: true,
    })
}

/// Records a job's result once; a refusal (`rejected`) also raises `job_refused`, returned for
/// delivery (once: a repeated result changes nothing and raises nothing).
pub(super) fn finish_job(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    result: &JobResult,
    now_ms: i64,
) -> StoreResult<Option<bosun_proto::admin::Alert>> {
    tx.require_host(host_id)?;
    let state: Option<(String, Option<String>, String)> = tx.query_opt(
        "finish job",
        "SELECT state, result, kind FROM jobs WHERE job_id = ?1 AND host_id = ?2",
        params![result.job_id.to_string(), host_id.to_string()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let (state, stored, kind) = state.ok_or(StoreError::UnknownJob {
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
            Ok(None)
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
    tx.execute("finish job", "UPDATE jobs SET state = ?1, result = ?2, finished_ms = ?3, acked_ms = COALESCE(acked_ms, ?3)
         WHERE job_id = ?4", params![target.as_str(), json, now_ms, result.job_id.to_string()])?;
    tx.event(
        now_ms,
        Some(host_id),
        "job_finished",
        &serde_json::json!({ "job_id": result.job_id, "outcome": target.as_str() }),
    )?;
    if target != JobState::Rejected {
        return Ok(None);
    }
    job_refused(tx, host_id, result, &kind, now_ms).map(Some)
}

/// Most characters of the agent's refusal detail an alert repeats.
const MAX_REFUSAL_TEXT: usize = 512;

/// The `job_refused` alert of a job the host refused: nothing ran, an operator must sign it
/// again (or fix the host's signers).
fn job_refused(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    result: &JobResult,
    kind: &str,
    now_ms: i64,
) -> StoreResult<bosun_proto::admin::Alert> {
    let hostname: String = tx.query_row(
        "read host name",
        "SELECT hostname FROM hosts WHERE host_id = ?1",
        params![host_id.to_string()],
        |r| r.get(0),
    )?;
    let detail: String = result
        .detail
        .chars()
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                ' '
            } else {
                c
            }
        })
        .take(MAX_REFUSAL_TEXT)
        .collect();
    let alert = crate::deadman::PlannedAlert {
        kind: AlertKind::JobRefused,
        host_id: Some(host_id),
        message: format!(
            "host {hostname} refused signed job {} ({kind}): {detail}; nothing ran",
            result.job_id
        ),
        hostname: Some(hostname),
        subject: Some(result.job_id.to_string()),
    };
    super::alert_triage::insert_alert(tx, now_ms, &alert)
}

/// Cancels a job that is still queued: the next polls no longer carry it. Cancelling a
/// cancelled job again changes nothing; a job the agent acknowledged or finished is refused
/// (`JobState`), as the agent holds it already.
pub(super) fn cancel_job(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    job_id: Uuid,
    now_ms: i64,
) -> StoreResult<JobState> {
    tx.require_host(host_id)?;
    let state: Option<String> = tx.query_opt(
        "cancel job",
        "SELECT state FROM jobs WHERE job_id = ?1 AND host_id = ?2",
        params![job_id.to_string(), host_id.to_string()],
        |r| r.get(0),
    )?;
    let state = job_state(&state.ok_or(StoreError::UnknownJob { job_id, host_id })?)?;
    match state {
        JobState::Cancelled => return Ok(state),
        JobState::Queued => {}
        other => {
            return Err(StoreError::JobNotQueued {
                job_id,
                state: other.as_str(),
            });
        }
    }
    tx.execute(
        "cancel job",
        "UPDATE jobs SET state = 'cancelled', finished_ms = ?1 WHERE job_id = ?2 AND state = 'queued'",
        params![now_ms, job_id.to_string()],
    )?;
    tx.event(
        now_ms,
        Some(host_id),
        "job_cancelled",
        &serde_json::json!({ "job_id": job_id }),
    )?;
    Ok(JobState::Cancelled)
}

/// The newest `limit` jobs of `host_id`, oldest first.
pub(super) fn list_jobs(tx: Tx<'_, '_>, host_id: Uuid, limit: u32) -> StoreResult<Vec<JobRecord>> {
    tx.require_host(host_id)?;
    let rows = tx.query_map(
        "list jobs",
        "SELECT job_id, kind, state, submitted_ms, acked_ms, result, priority FROM (
             SELECT seq, job_id, kind, state, submitted_ms, acked_ms, result, priority FROM jobs
             WHERE host_id = ?1 ORDER BY seq DESC LIMIT ?2
         ) AS newest ORDER BY seq",
        params![host_id.to_string(), i64::from(limit)],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<i64>(3)?,
                r.get::<Option<i64>>(4)?,
                r.get::<Option<String>>(5)?,
                r.get::<i32>(6)?,
            ))
        },
    )?;
    let mut jobs = Vec::with_capacity(rows.len());
    for (job_id, kind, state, submitted_ms, acked_ms, result, priority) in rows {
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
            priority,
        });
    }
    Ok(jobs)
}
