//! [`Store`] for [`PgStore`]: each call one transaction through the statements of the
//! `pg_*` modules (the row locks and wake-ups are described in [`super`]).

use bosun_proto::admin::{
    Alert, DesiredAccepted, Event, HostDetail, HostStatus, HostSummary, JobAccepted, JobRecord,
};
use bosun_proto::alert_triage::{AckAlert, CreateSilence, Silence};
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::job::JobResult;
use bosun_proto::oplog::OperationRecord;
use rusqlite::params;
use uuid::Uuid;

use super::super::audit_trail::{self, AuditQuery};
use super::super::pg_conn::{OptionalExtension as _, PgError, PgTx, sql};
use super::super::retention::{PruneCursor, PruneStep, Pruned, RetentionConfig};
use super::super::tx::Tx;
use super::super::{
    DesiredFacts, DesiredWrite, Enrolled, Enrollment, EventQuery, HostCounts, HostCredentials,
    NewEnrollToken, NewJob, OperationQuery, PollRecord, PollRecorded, PollView, Store, StoreError,
    StoreResult, WakeUp, WatchChange, hosts, watch,
};
use super::{
    PRUNE_SLICE, PgStore, SWEEP_SLICE, host_status, listen, retryable, signed, ts, unsigned, uuid,
    wake,
};
use crate::deadman::DeadManConfig;
use crate::secret::SecretHash;

impl Store for PgStore {
    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()> {
        self.write("init admin", |tx| {
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT 1::BIGINT FROM meta WHERE key = 'admin_token_hash' FOR UPDATE",
                    &[],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql("init admin"))?;
            if exists.is_some() {
                return Err(StoreError::AlreadyInitialized);
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('admin_token_hash', $1), ('initialized_ms', $2)",
                params![hash.0.as_slice(), now_ms.to_string()],
            )
            .map_err(|source| match source {
                // Another replica's `init` won the race.
                PgError::Db(ref e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) =>
                {
                    StoreError::AlreadyInitialized
                }
                source => StoreError::Postgres {
                    op: "init admin",
                    source,
                },
            })?;
            Tx::from(tx).event(now_ms, None, "initialized", &serde_json::json!({}))
        })
    }

    fn admin_hash(&self) -> StoreResult<SecretHash> {
        self.read("read admin hash", |tx| {
            let bytes: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM meta WHERE key = 'admin_token_hash'",
                    &[],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql("read admin hash"))?;
            let bytes = bytes.ok_or(StoreError::NotInitialized)?;
            SecretHash::from_slice(&bytes).ok_or(StoreError::Corrupt {
                what: "admin token hash",
                reason: format!("{} bytes instead of 32", bytes.len()),
            })
        })
    }

    fn create_enroll_token(&self, token: NewEnrollToken) -> StoreResult<()> {
        self.write("create enrollment token", |tx| {
            super::super::enroll::create_token(tx.into(), &token)
        })
    }

    fn list_enroll_tokens(
        &self,
        now_ms: i64,
    ) -> StoreResult<Vec<bosun_proto::admin::EnrollTokenInfo>> {
        self.read("list enrollment tokens", |tx| {
            super::super::enroll::list_tokens(tx.into(), now_ms)
        })
    }

    fn revoke_enroll_token(
        &self,
        token_id: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::EnrollTokenState> {
        self.write("revoke enrollment token", |tx| {
            super::super::enroll::revoke_token(tx.into(), token_id, now_ms)
        })
    }

    fn enroll(&self, e: Enrollment) -> StoreResult<Enrolled> {
        self.write("enroll", |tx| {
            let enrolled = super::super::enroll::enroll(tx.into(), &e)?;
            if enrolled.replaced.is_some() {
                wake(tx, enrolled.host_id)?;
            }
            Ok(enrolled)
        })
    }

    fn host_credentials(&self, host_id: Uuid) -> StoreResult<Option<HostCredentials>> {
        self.read("read host credentials", |tx| {
            let row: Option<(Vec<u8>, String)> = tx
                .query_row(
                    "SELECT key_hash, status FROM hosts WHERE host_id = $1",
                    params![host_id.to_string()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(sql("read host credentials"))?;
            row.map(|(hash, status)| {
                Ok(HostCredentials {
                    key_hash: SecretHash::from_slice(&hash).ok_or(StoreError::Corrupt {
                        what: "host key hash",
                        reason: format!("{} bytes instead of 32", hash.len()),
                    })?,
                    status: host_status(&status)?,
                })
            })
            .transpose()
        })
    }

    fn approve_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write("approve host", |tx| {
            hosts::set_status(tx.into(), host_id, HostStatus::Active, now_ms)
        })
    }

    fn revoke_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write("revoke host", |tx| {
            hosts::set_status(tx.into(), host_id, HostStatus::Revoked, now_ms)?;
            wake(tx, host_id)
        })
    }

    fn remove_host(
        &self,
        host_id: Uuid,
        forget_escrow: bool,
        now_ms: i64,
    ) -> StoreResult<super::super::RemovedHost> {
        self.write("remove host", |tx| {
            super::super::host_removal::remove_host(tx.into(), host_id, forget_escrow, now_ms)
        })
    }

    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        let mut hosts: Vec<String> = polls.iter().map(|p| p.host_id.to_string()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let hosts = hosts.join(",");
        // The batch's hosts, locked in id order: batches of different replicas wait for each
        // other instead of deadlocking.
        let lock = |tx: &PgTx<'_>| {
            tx.execute(
                "SELECT host_id FROM hosts WHERE host_id = ANY(string_to_array($1, ','))
                 ORDER BY host_id FOR UPDATE",
                params![hosts],
            )
            .map_err(sql("record polls"))
        };
        // First without savepoints (each costs two round trips per poll): a poll refused
        // before anything of it was written is answered with its error; any other failure
        // rolls the batch back and it runs again below.
        let isolate = std::cell::Cell::new(false);
        let fast = self.write("record polls", |tx| {
            lock(tx)?;
            let mut results = Vec::with_capacity(polls.len());
            for poll in &polls {
                match hosts::record_poll(tx.into(), poll) {
                    Ok(recorded) => results.push(Ok(recorded)),
                    Err(err) if refused_before_writing(&err) => results.push(Err(err)),
                    Err(err) => {
                        isolate.set(!retryable(&err));
                        return Err(err);
                    }
                }
            }
            Ok(results)
        });
        if !isolate.get() {
            return fast;
        }
        // Each poll in a savepoint of its own, so the one that failed leaves the others.
        self.write("record polls", |tx| {
            lock(tx)?;
            let mut results = Vec::with_capacity(polls.len());
            for poll in &polls {
                tx.batch("SAVEPOINT poll").map_err(sql("record polls"))?;
                let outcome = match hosts::record_poll(tx.into(), poll) {
                    // The server aborted the whole transaction: run the batch again.
                    Err(err) if retryable(&err) => return Err(err),
                    outcome => outcome,
                };
                match &outcome {
                    Ok(_) => tx.batch("RELEASE SAVEPOINT poll"),
                    Err(_) => tx.batch("ROLLBACK TO SAVEPOINT poll"),
                }
                .map_err(sql("record polls"))?;
                results.push(outcome);
            }
            Ok(results)
        })
    }

    fn poll_view(&self, host_id: Uuid) -> StoreResult<PollView> {
        self.read("read poll view", |tx| {
            super::super::jobs::poll_view(tx.into(), host_id)
        })
    }

    fn put_desired(&self, write: DesiredWrite) -> StoreResult<DesiredAccepted> {
        self.write("put desired state", |tx| {
            let accepted = super::super::jobs::put_desired(tx.into(), &write)?;
            if accepted.created {
                wake(tx, write.host_id)?;
            }
            Ok(accepted)
        })
    }

    fn desired_current(&self, host_id: Uuid) -> StoreResult<Option<DesiredRevision>> {
        self.read("read desired state", |tx| {
            super::super::desired::current(tx.into(), host_id)
        })
    }

    fn desired_facts(&self, host_id: Uuid) -> StoreResult<DesiredFacts> {
        self.read("read desired status", |tx| {
            super::super::desired::facts(tx.into(), host_id)
        })
    }

    fn operations(
        &self,
        host_id: Uuid,
        query: OperationQuery,
        limit: usize,
    ) -> StoreResult<Vec<OperationRecord>> {
        self.read("list operation records", |tx| {
            super::super::desired::operations(tx.into(), host_id, &query, limit)
        })
    }

    fn submit_job(&self, job: NewJob) -> StoreResult<JobAccepted> {
        self.write("submit job", |tx| {
            let accepted = super::super::jobs::submit_job(tx.into(), &job)?;
            if accepted.created {
                wake(tx, job.host_id)?;
            }
            Ok(accepted)
        })
    }

    fn finish_job(&self, host_id: Uuid, result: &JobResult, now_ms: i64) -> StoreResult<()> {
        self.write("finish job", |tx| {
            super::super::jobs::finish_job(tx.into(), host_id, result, now_ms)
        })
    }

    fn cancel_job(
        &self,
        host_id: Uuid,
        job_id: Uuid,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::JobState> {
        self.write("cancel job", |tx| {
            super::super::jobs::cancel_job(tx.into(), host_id, job_id, now_ms)
        })
    }

    fn list_jobs(&self, host_id: Uuid) -> StoreResult<Vec<JobRecord>> {
        self.read("list jobs", |tx| {
            super::super::jobs::list_jobs(tx.into(), host_id)
        })
    }

    fn put_escrow(
        &self,
        host_id: Uuid,
        blob: &str,
        key_fingerprint: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<WatchChange>> {
        self.write("put escrow", |tx| {
            super::super::escrow::put(tx.into(), host_id, blob, key_fingerprint, now_ms)
        })
    }

    fn escrow(&self, host_id: Uuid) -> StoreResult<Option<String>> {
        self.read("read escrow", |tx| {
            super::super::escrow::blob(tx.into(), host_id)
        })
    }

    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo> {
        self.write("put artifact", |tx| {
            super::super::artifacts::put(tx.into(), sha256, data, now_ms).map(|(info, _)| info)
        })
    }

    fn artifact(&self, sha256: &str) -> StoreResult<Option<super::super::ArtifactBytes>> {
        self.read("read artifact", |tx| {
            super::super::artifacts::get_held(tx.into(), sha256)
        })
    }

    fn list_artifacts(&self) -> StoreResult<Vec<bosun_proto::admin::ArtifactInfo>> {
        self.read("list artifacts", |tx| {
            super::super::artifacts::list(tx.into())
        })
    }

    fn list_hosts(&self) -> StoreResult<Vec<HostSummary>> {
        self.read("list hosts", |tx| hosts::list_hosts(tx.into()))
    }

    fn host_detail(&self, host_id: Uuid) -> StoreResult<HostDetail> {
        self.read("show host", |tx| hosts::host_detail(tx.into(), host_id))
    }

    fn host_counts(&self) -> StoreResult<HostCounts> {
        self.read("count hosts", |tx| hosts::host_counts(tx.into()))
    }

    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>> {
        let swept = self.as_sweeper("sweep", |tx| {
            let plan = |tx: &PgTx<'_>| {
                let (rows, monitored, suspicion_open) =
                    hosts::liveness(tx.into(), now_ms, config.grace_factor)?;
                let plan =
                    crate::deadman::plan_sweep(&rows, monitored, suspicion_open, now_ms, config);
                let idle = plan.changes.is_empty()
                    && plan.alerts.is_empty()
                    && plan.suspicion_open == suspicion_open;
                Ok::<_, StoreError>((plan, idle))
            };
            if plan(tx)?.1 {
                return Ok(Vec::new());
            }
            // Something changes: plan again with polls held off, so no host heard from in
            // between is marked overdue.
            tx.batch("LOCK TABLE hosts IN EXCLUSIVE MODE")
                .map_err(sql("sweep"))?;
            let (plan, idle) = plan(tx)?;
            if idle {
                return Ok(Vec::new());
            }
            hosts::apply_sweep(tx.into(), &plan, now_ms)
        })?;
        Ok(swept.unwrap_or_default())
    }

    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>> {
        // In slices, one transaction each, as the SQLite store sweeps: the rows of the hosts a
        // slice judged stay locked only until it ends.
        let mut changes = Vec::new();
        let mut after = String::new();
        loop {
            let slice = self.as_sweeper("sweep backups", |tx| {
                watch::sweep_slice(tx.into(), now_ms, &after, SWEEP_SLICE)
            })?;
            match slice {
                Some((judged, last)) => {
                    changes.extend(judged);
                    match last {
                        Some(last) => after = last,
                        None => break,
                    }
                }
                // Another replica took the lock over: it sweeps from now on.
                None => break,
            }
        }
        Ok(changes)
    }

    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep> {
        let started = std::time::Instant::now();
        let mut pruned = Pruned::default();
        let mut cursor = from;
        loop {
            match self.prune_slice(now_ms, config, &mut cursor, PRUNE_SLICE, &mut pruned)? {
                // Not the sweeper (or no longer): the replica that is prunes.
                None | Some(true) => return Ok(PruneStep { pruned, next: None }),
                Some(false) if started.elapsed() >= budget => {
                    return Ok(PruneStep {
                        pruned,
                        next: Some(cursor),
                    });
                }
                Some(false) => {}
            }
        }
    }

    fn audit(&self, query: &AuditQuery) -> StoreResult<Vec<bosun_proto::admin::AuditRecord>> {
        let (text, params) = audit_trail::statement(audit_trail::Dialect::Postgres, query);
        let refs: Vec<&dyn rusqlite::ToSql> = params.iter().map(|p| p.as_ref()).collect();
        self.read("read audit trail", |tx| {
            let rows: Vec<audit_trail::AuditRow> = tx
                .prepare(&text)
                .and_then(|mut stmt| {
                    stmt.query_map(&refs, |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                        ))
                    })?
                    .collect()
                })
                .map_err(sql("read audit trail"))?;
            rows.into_iter().map(audit_trail::record).collect()
        })
    }

    fn list_alerts(&self, limit: u32) -> StoreResult<Vec<Alert>> {
        self.read("list alerts", |tx| {
            super::super::dashboard_reads::recent_alerts(tx.into(), None, limit)
        })
    }

    fn ack_alert(&self, ack: &AckAlert, now_ms: i64) -> StoreResult<bosun_proto::admin::OpenAlert> {
        self.write("acknowledge alert", |tx| {
            super::super::dashboard_reads::ack(tx.into(), ack, now_ms)
        })
    }

    fn create_silence(&self, request: &CreateSilence, now_ms: i64) -> StoreResult<Silence> {
        self.write("create silence", |tx| {
            super::super::alert_triage::create_silence(tx.into(), request, now_ms)
        })
    }

    fn list_silences(&self, now_ms: i64) -> StoreResult<Vec<Silence>> {
        self.read("list silences", |tx| {
            super::super::alert_triage::in_force(tx.into(), None, now_ms)
        })
    }

    fn remove_silence(&self, id: u64, now_ms: i64) -> StoreResult<Silence> {
        self.write("remove silence", |tx| {
            super::super::alert_triage::remove_silence(tx.into(), id, now_ms)
        })
    }

    fn list_events(&self, query: EventQuery) -> StoreResult<Vec<Event>> {
        self.read("list events", |tx| {
            let rows = tx
                .prepare(
                    "SELECT seq, at_ms, host_id, kind, detail FROM
                     (SELECT * FROM events WHERE ($1::TEXT IS NULL OR host_id = $1) AND seq > $2
                      ORDER BY seq DESC LIMIT $3) AS newest ORDER BY seq",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(
                        params![
                            query.host_id.map(|h| h.to_string()),
                            signed(query.after.unwrap_or(0)),
                            query.limit
                        ],
                        |r| {
                            Ok((
                                r.get::<_, i64>(0)?,
                                r.get::<_, i64>(1)?,
                                r.get::<_, Option<String>>(2)?,
                                r.get::<_, String>(3)?,
                                r.get::<_, String>(4)?,
                            ))
                        },
                    )
                })
                .map_err(sql("list events"))?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, at_ms, host_id, kind, detail) = row.map_err(sql("list events"))?;
                events.push(Event {
                    seq: unsigned(seq),
                    at: ts(at_ms)?,
                    host_id: host_id.as_deref().map(uuid).transpose()?,
                    kind,
                    detail: serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
                        what: "event detail",
                        reason: e.to_string(),
                    })?,
                });
            }
            Ok(events)
        })
    }

    fn dashboard_facts(
        &self,
        query: super::super::dashboard::DashboardQuery,
    ) -> StoreResult<super::super::dashboard::DashboardFacts> {
        self.read("dashboard facts", |tx| {
            super::super::dashboard_reads::facts(tx.into(), query)
        })
    }

    fn watch_wakeups(&self, wake: WakeUp) {
        let config = self.config.clone();
        self.handle().spawn(listen(config, wake));
    }
}

/// Whether `record_poll` refused the poll before writing anything of it.
fn refused_before_writing(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::UnknownHost { .. }
            | StoreError::WrongHostKey { .. }
            | StoreError::HostNotActive { .. }
    )
}
