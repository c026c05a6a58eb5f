//! Job runs and nonces: a job id runs at most once, a nonce is seen once.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::{JobClaim, JobOutcome, JobRun, OpId};
use super::store::Store;
use super::store::{from_ms, opt_from_ms, parse_op_id, query_err, to_ms};

impl Store {
    /// Claims a verified job to run: records its nonce and its run in one
    /// transaction (with an audit row), or refuses a job id that already ran
    /// or a nonce already seen.
    pub fn claim_job(&mut self, claim: &JobClaim) -> Result<(), JournalError> {
        let now = self.now();
        self.write("claim job", |tx| {
            if let Some(run) = job_run_in(tx, &claim.job_id)? {
                return Err(JournalError::JobAlreadyRun {
                    job_id: claim.job_id.clone(),
                    outcome: run.outcome,
                });
            }
            let first: Option<String> = tx
                .query_row(
                    "SELECT job_id FROM nonces WHERE nonce = ?1",
                    [&claim.nonce],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err("claim job"))?;
            if let Some(first_job_id) = first {
                return Err(JournalError::NonceReused { first_job_id });
            }
            tx.execute(
                "INSERT INTO nonces (nonce, job_id, seen_ms, expires_ms) VALUES (?1, ?2, ?3, ?4)",
                params![
                    claim.nonce,
                    claim.job_id,
                    to_ms(now),
                    to_ms(claim.expires_at)
                ],
            )
            .map_err(query_err("claim job"))?;
            tx.execute(
                "INSERT INTO job_runs (job_id, kind, signer_fingerprint, principals, started_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    claim.job_id,
                    claim.kind,
                    claim.signer_fingerprint,
                    claim.principals,
                    to_ms(now)
                ],
            )
            .map_err(query_err("claim job"))?;
            if let Some(timeout_s) = claim.timeout_s {
                tx.execute(
                    "INSERT INTO job_timeouts (job_id, timeout_s) VALUES (?1, ?2)",
                    params![claim.job_id, timeout_s],
                )
                .map_err(query_err("claim job"))?;
            }
            let mut event = AuditEvent::new("job.claimed");
            event.job_id = Some(claim.job_id.clone());
            event.detail = serde_json::json!({
                "kind": claim.kind,
                "signer": claim.signer_fingerprint,
                "principals": claim.principals,
            });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// Records how a claimed job ended (once), linking the operation that ran it.
    pub fn finish_job(
        &mut self,
        job_id: &str,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<&str>,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("finish job", |tx| {
            finish_job_in(tx, now, job_id, outcome, op_id, detail)
        })
    }

    /// [`Store::finish_job`] and [`Store::queue_job_result`] in one transaction:
    /// a job never ends without its result waiting for delivery.
    pub fn finish_job_with_result(
        &mut self,
        job_id: &str,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<&str>,
        result_body: &str,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("finish job", |tx| {
            finish_job_in(tx, now, job_id, outcome, op_id, detail)?;
            super::outbox::queue_in(tx, now, job_id, result_body)
        })
    }

    /// A job run, if the job was ever claimed.
    pub fn job_run(&self, job_id: &str) -> Result<Option<JobRun>, JournalError> {
        let raw = self
            .conn
            .query_row(
                &format!("{SELECT_JOB} WHERE job_id = ?1"),
                [job_id],
                raw_job,
            )
            .optional()
            .map_err(query_err("read job run"))?;
        raw.map(RawJob::into_job_run).transpose()
    }

    /// Whether a nonce was ever seen (and not yet pruned).
    pub fn nonce_seen(&self, nonce: &str) -> Result<bool, JournalError> {
        self.conn
            .query_row("SELECT 1 FROM nonces WHERE nonce = ?1", [nonce], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(query_err("read nonce"))
    }

    /// Forgets at most `limit` nonces of jobs that expired before `before`; returns how
    /// many. Pass a cutoff behind the expiry check's skew allowance, so a job whose nonce is
    /// forgotten is already refused as expired ([`crate::ops::nonce_prune`]); its job id
    /// stays in `job_runs` and refuses a rerun all the same.
    pub fn prune_nonces(&mut self, before: Timestamp, limit: u32) -> Result<usize, JournalError> {
        self.write("prune nonces", |tx| {
            tx.execute(
                "DELETE FROM nonces WHERE nonce IN
                     (SELECT nonce FROM nonces WHERE expires_ms < ?1 LIMIT ?2)",
                params![to_ms(before), limit],
            )
            .map_err(query_err("prune nonces"))
        })
    }
}

fn finish_job_in(
    tx: &Transaction<'_>,
    now: Timestamp,
    job_id: &str,
    outcome: JobOutcome,
    op_id: Option<OpId>,
    detail: Option<&str>,
) -> Result<(), JournalError> {
    let run = job_run_in(tx, job_id)?.ok_or_else(|| JournalError::UnknownJob {
        job_id: job_id.to_owned(),
    })?;
    if run.outcome.is_some() {
        return Err(JournalError::JobAlreadyRun {
            job_id: job_id.to_owned(),
            outcome: run.outcome,
        });
    }
    tx.execute(
        "UPDATE job_runs SET outcome = ?2, op_id = ?3, detail = ?4, ended_ms = ?5
         WHERE job_id = ?1",
        params![
            job_id,
            outcome.as_str(),
            op_id.map(|id| id.to_string()),
            detail,
            to_ms(now)
        ],
    )
    .map_err(query_err("finish job"))?;
    let mut event = AuditEvent::new("job.finished");
    event.job_id = Some(job_id.to_owned());
    event.op_id = op_id;
    event.detail = serde_json::json!({ "outcome": outcome.as_str(), "detail": detail });
    audit::append(tx, now, &event)?;
    Ok(())
}

fn job_run_in(tx: &Transaction<'_>, job_id: &str) -> Result<Option<JobRun>, JournalError> {
    tx.query_row(
        &format!("{SELECT_JOB} WHERE job_id = ?1"),
        [job_id],
        raw_job,
    )
    .optional()
    .map_err(query_err("read job run"))?
    .map(RawJob::into_job_run)
    .transpose()
}

const SELECT_JOB: &str = "SELECT job_id, kind, op_id, signer_fingerprint, principals,
        started_ms, ended_ms, outcome, detail,
        (SELECT t.timeout_s FROM job_timeouts t WHERE t.job_id = job_runs.job_id)
        FROM job_runs";

struct RawJob {
    job_id: String,
    kind: String,
    op_id: Option<String>,
    signer_fingerprint: String,
    principals: String,
    started_ms: i64,
    ended_ms: Option<i64>,
    outcome: Option<String>,
    detail: Option<String>,
    timeout_s: Option<u32>,
}

fn raw_job(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawJob> {
    Ok(RawJob {
        job_id: row.get(0)?,
        kind: row.get(1)?,
        op_id: row.get(2)?,
        signer_fingerprint: row.get(3)?,
        principals: row.get(4)?,
        started_ms: row.get(5)?,
        ended_ms: row.get(6)?,
        outcome: row.get(7)?,
        detail: row.get(8)?,
        timeout_s: row.get(9)?,
    })
}

impl RawJob {
    fn into_job_run(self) -> Result<JobRun, JournalError> {
        const T: &str = "job_runs";
        let outcome = self
            .outcome
            .map(|text| {
                JobOutcome::parse(&text).ok_or(JournalError::Corrupt {
                    table: T,
                    column: "outcome",
                    value: text,
                })
            })
            .transpose()?;
        Ok(JobRun {
            job_id: self.job_id,
            kind: self.kind,
            op_id: self.op_id.map(|id| parse_op_id(id, T)).transpose()?,
            signer_fingerprint: self.signer_fingerprint,
            principals: self.principals,
            started_at: from_ms(self.started_ms, T, "started_ms")?,
            ended_at: opt_from_ms(self.ended_ms, T, "ended_ms")?,
            outcome,
            detail: self.detail,
            timeout_s: self.timeout_s,
        })
    }
}

journal_calls! {
    /// See [`Store::claim_job`].
    fn claim_job(claim: JobClaim) -> () = |s| s.claim_job(&claim);
    /// See [`Store::finish_job`].
    fn finish_job(
        job_id: String,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<String>,
    ) -> ()
        = |s| s.finish_job(&job_id, outcome, op_id, detail.as_deref());
    /// See [`Store::job_run`].
    fn job_run(job_id: String) -> Option<JobRun> = |s| s.job_run(&job_id);
    /// See [`Store::nonce_seen`].
    fn nonce_seen(nonce: String) -> bool = |s| s.nonce_seen(&nonce);
    /// See [`Store::prune_nonces`].
    fn prune_nonces(before: jiff::Timestamp, limit: u32) -> usize
        = |s| s.prune_nonces(before, limit);
    /// See [`Store::finish_job_with_result`].
    fn finish_job_with_result(
        job_id: String,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<String>,
        result_body: String,
    ) -> ()
        = |s| s.finish_job_with_result(&job_id, outcome, op_id, detail.as_deref(), &result_body);
}
