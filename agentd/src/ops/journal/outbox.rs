//! The job-result outbox: a result is written before it is sent and marked
//! delivered only once the hub acknowledged it. Undelivered results go out
//! again after a restart.

use jiff::Timestamp;
use rusqlite::{Transaction, params};

use super::audit::AuditEvent;
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

/// A refused job, as recorded by [`Store::record_refusals`].
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The `job.refused` audit row.
    pub event: AuditEvent,
    /// The job id and its `rejected` result document (JSON), when the hub is told.
    pub result: Option<(String, String)>,
}

/// A job result waiting for the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingResult {
    /// The job.
    pub job_id: String,
    /// The `bosun.job-result/v1` document as JSON.
    pub body: String,
}

impl Store {
    /// Queues a job result for delivery (the first result of a job wins).
    pub fn queue_job_result(&mut self, job_id: &str, body: &str) -> Result<(), JournalError> {
        let now = self.now();
        self.write("queue job result", |tx| queue_in(tx, now, job_id, body))
    }

    /// Records a batch of job refusals in one transaction: each refusal's audit row
    /// and, where it has one, its `rejected` result in the outbox. One fsync for a
    /// whole poll's worth of refused jobs.
    pub fn record_refusals(&mut self, refusals: &[Refusal]) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record job refusals", |tx| {
            for refusal in refusals {
                super::audit::append(tx, now, &refusal.event)?;
                if let Some((job_id, body)) = &refusal.result {
                    queue_in(tx, now, job_id, body)?;
                }
            }
            Ok(())
        })
    }

    /// Results not yet acknowledged by the hub, oldest first.
    pub fn undelivered_job_results(&self) -> Result<Vec<PendingResult>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT job_id, body FROM job_results WHERE delivered_ms IS NULL
                 ORDER BY created_ms, job_id",
            )
            .map_err(query_err("read undelivered job results"))?;
        let rows = stmt
            .query_map([], |row| {
                Ok(PendingResult {
                    job_id: row.get(0)?,
                    body: row.get(1)?,
                })
            })
            .map_err(query_err("read undelivered job results"))?;
        rows.collect::<Result<_, _>>()
            .map_err(query_err("read undelivered job results"))
    }

    /// Marks a result delivered; `false` when no undelivered result of that job exists.
    pub fn mark_job_result_delivered(&mut self, job_id: &str) -> Result<bool, JournalError> {
        let now = to_ms(self.now());
        self.write("mark job result delivered", |tx| {
            tx.execute(
                "UPDATE job_results SET delivered_ms = ?2 WHERE job_id = ?1 AND delivered_ms IS NULL",
                params![job_id, now],
            )
            .map(|changed| changed > 0)
            .map_err(query_err("mark job result delivered"))
        })
    }
}

pub(super) fn queue_in(
    tx: &Transaction<'_>,
    now: Timestamp,
    job_id: &str,
    body: &str,
) -> Result<(), JournalError> {
    tx.execute(
        "INSERT OR IGNORE INTO job_results (job_id, body, created_ms) VALUES (?1, ?2, ?3)",
        params![job_id, body, to_ms(now)],
    )
    .map_err(query_err("queue job result"))?;
    Ok(())
}

journal_calls! {
    /// See [`Store::queue_job_result`].
    fn queue_job_result(job_id: String, body: String) -> ()
        = |s| s.queue_job_result(&job_id, &body);
    /// See [`Store::record_refusals`].
    fn record_refusals(refusals: Vec<Refusal>) -> () = |s| s.record_refusals(&refusals);
    /// See [`Store::undelivered_job_results`].
    fn undelivered_job_results() -> Vec<PendingResult> = |s| s.undelivered_job_results();
    /// See [`Store::mark_job_result_delivered`].
    fn mark_job_result_delivered(job_id: String) -> bool = |s| s.mark_job_result_delivered(&job_id);
}
