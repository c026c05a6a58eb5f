//! The [`Store`], written once over what each backend supplies ([`Backend`]): a read and a
//! write transaction handed over as a [`Tx`], and the few calls each store makes its own way
//! (setting up, the poll writer's batches, the sweeps and retention slices, where artifact
//! bytes live, the wake-ups replicas send each other).

use std::sync::Arc;

use bosun_proto::admin::{
    Alert, DesiredAccepted, Event, HostDetail, HostStatus, HostSummary, JobAccepted, JobRecord,
};
use bosun_proto::alert_triage::{AckAlert, CreateSilence, Silence};
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::job::JobResult;
use bosun_proto::operator_token::OperatorTokenInfo;
use bosun_proto::oplog::OperationRecord;
use rusqlite::params;
use uuid::Uuid;

use super::audit_trail::{self, AuditQuery};
use super::codec::{host_status, signed, ts, unsigned, uuid};
use super::retention::{PruneCursor, PruneStep, RetentionConfig};
use super::traits::{
    AccessStore, AlertStore, ArtifactStore, AuditStore, HostStore, HubKeyStore, JobStore, PollStore,
};
use super::tx::{Dialect, Tx};
use super::{
    ArtifactBytes, DesiredFacts, DesiredWrite, Enrolled, Enrollment, EventQuery, Heartbeat,
    HostCounts, HostCredentials, NewEnrollToken, NewJob, NewOperatorToken, OperationQuery,
    OperatorTokenRecord, PollRecord, PollRecorded, PollView, StoreError, StoreResult, WakeUp,
    WatchChange, host_key_rotation, hosts, hub_keys, operator_tokens,
};
use crate::deadman::DeadManConfig;
use crate::secret::SecretHash;

/// What a store backend supplies; every other [`Store`] call is written once, below.
pub(super) trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `f` in a read transaction (it may run again when the database asks for a retry).
    fn read_tx<R>(
        &self,
        op: &'static str,
        f: impl FnMut(Tx<'_, '_>) -> StoreResult<R>,
    ) -> StoreResult<R>;
    /// Runs `f` in a write transaction (it may run again when the database asks for a retry).
    fn write_tx<R>(
        &self,
        op: &'static str,
        f: impl FnMut(Tx<'_, '_>) -> StoreResult<R>,
    ) -> StoreResult<R>;
    /// See [`Store::init_admin`](crate::store::AccessStore::init_admin).
    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()>;
    /// See [`Store::record_polls`](crate::store::PollStore::record_polls).
    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>>;
    /// See [`Store::commit_polls`](crate::store::PollStore::commit_polls); a store whose
    /// commit waits for the disk by itself records the batch as `record_polls` does.
    fn commit_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        self.record_polls(polls)
    }
    /// See [`Store::record_poll_now`](crate::store::PollStore::record_poll_now); a store that must wait for a server never does.
    fn record_poll_now(&self, poll: &PollRecord) -> Option<StoreResult<(PollRecorded, PollView)>> {
        let _ = poll;
        None
    }
    /// See [`Store::heartbeat`](crate::store::PollStore::heartbeat); a store that writes on its
    /// caller's thread has none.
    fn heartbeat<'a>(self: Arc<Self>, poll: &'a PollRecord) -> Option<Heartbeat<'a>> {
        let _ = poll;
        None
    }
    /// See [`Store::sync`](crate::store::PollStore::sync).
    fn sync(&self) -> StoreResult<()> {
        Ok(())
    }
    /// See [`Store::flush`](crate::store::PollStore::flush); a store whose commits the server makes durable by itself has
    /// nothing to do.
    fn flush(&self) -> StoreResult<()> {
        Ok(())
    }
    /// See [`Store::sweep`](crate::store::PollStore::sweep).
    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>>;
    /// See [`Store::sweep_backups`](crate::store::PollStore::sweep_backups).
    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>>;
    /// See [`Store::prune`](crate::store::AuditStore::prune).
    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep>;
    /// See [`Store::put_artifact`](crate::store::ArtifactStore::put_artifact).
    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo>;
    /// See [`Store::artifact`](crate::store::ArtifactStore::artifact).
    fn artifact(&self, sha256: &str) -> StoreResult<Option<ArtifactBytes>>;
    /// See [`Store::watch_wakeups`](crate::store::PollStore::watch_wakeups); a store one hub uses alone has no one to hear from.
    fn watch_wakeups(&self, wake: WakeUp) {
        let _ = wake;
    }
}

impl<B: Backend> AccessStore for B {
    fn check_initialized(&self) -> StoreResult<()> {
        self.read_tx("check initialized", |tx| {
            let found: Option<i64> = tx.query_opt(
                "check initialized",
                "SELECT COUNT(*) FROM meta WHERE key = 'initialized_ms'",
                &[],
                |r| r.get(0),
            )?;
            match found {
                Some(n) if n > 0 => Ok(()),
                _ => Err(StoreError::NotInitialized),
            }
        })
    }
    fn operator_token(&self, presented: SecretHash) -> StoreResult<Option<OperatorTokenRecord>> {
        self.read_tx("look up operator token", |tx| {
            operator_tokens::lookup(tx, &presented)
        })
    }
    fn touch_operator_token(&self, name: &str, now_ms: i64) -> StoreResult<()> {
        self.write_tx("note operator token use", |tx| {
            operator_tokens::touch(tx, name, now_ms)
        })
    }
    fn create_operator_token(&self, token: NewOperatorToken) -> StoreResult<OperatorTokenInfo> {
        self.write_tx("create operator token", |tx| {
            operator_tokens::create(tx, &token)
        })
    }
    fn list_operator_tokens(&self, now_ms: i64) -> StoreResult<Vec<OperatorTokenInfo>> {
        self.read_tx("list operator tokens", |tx| {
            operator_tokens::list(tx, now_ms)
        })
    }
    fn revoke_operator_token(&self, name: &str, now_ms: i64) -> StoreResult<OperatorTokenInfo> {
        self.write_tx("revoke operator token", |tx| {
            operator_tokens::revoke(tx, name, now_ms)
        })
    }
    fn rotate_operator_token(
        &self,
        name: &str,
        hash: SecretHash,
        now_ms: i64,
    ) -> StoreResult<OperatorTokenInfo> {
        self.write_tx("rotate operator token", |tx| {
            operator_tokens::rotate(tx, name, &hash, now_ms)
        })
    }
    fn record_dashboard_login(&self, name: &str, now_ms: i64) -> StoreResult<()> {
        self.write_tx("record dashboard login", |tx| {
            tx.event(
                now_ms,
                None,
                "dashboard_login",
                &serde_json::json!({ "by": name }),
            )
        })
    }
    fn create_enroll_token(&self, token: NewEnrollToken) -> StoreResult<()> {
        self.write_tx("create enrollment token", |tx| {
            super::enroll::create_token(tx, &token)
        })
    }
    fn list_enroll_tokens(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<bosun_proto::admin::EnrollTokenInfo>> {
        self.read_tx("list enrollment tokens", |tx| {
            super::enroll::list_tokens(tx, now_ms, limit)
        })
    }
    fn revoke_enroll_token(
        &self,
        token_id: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::EnrollTokenState> {
        self.write_tx("revoke enrollment token", |tx| {
            super::enroll::revoke_token(tx, token_id, now_ms)
        })
    }
    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()> {
        Backend::init_admin(self, hash, now_ms)
    }
}

impl<B: Backend> HostStore for B {
    fn enroll(&self, e: Enrollment) -> StoreResult<Enrolled> {
        self.write_tx("enroll", |tx| {
            let enrolled = super::enroll::enroll(tx, &e)?;
            if enrolled.replaced.is_some() {
                tx.wake(enrolled.host_id)?;
            }
            Ok(enrolled)
        })
    }
    fn host_credentials(&self, host_id: Uuid) -> StoreResult<Option<HostCredentials>> {
        self.read_tx("read host credentials", |tx| {
            let row: Option<(Vec<u8>, String, host_key_rotation::HostKeyFacts)> = tx.query_opt(
                "read host credentials",
                &format!(
                    "SELECT key_hash, status, {} FROM hosts WHERE host_id = ?1",
                    host_key_rotation::KEY_COLUMNS
                ),
                params![host_id.to_string()],
                |r| Ok((r.get(0)?, r.get(1)?, host_key_rotation::facts(r, 2)?)),
            )?;
            row.map(|(hash, status, key)| {
                Ok(HostCredentials {
                    key_hash: SecretHash::from_slice(&hash).ok_or(StoreError::Corrupt {
                        what: "host key hash",
                        reason: format!("{} bytes instead of 32", hash.len()),
                    })?,
                    status: host_status(&status)?,
                    next_key_hash: key.next,
                    key_issued_ms: key.issued_ms,
                })
            })
            .transpose()
        })
    }
    fn stage_host_key(
        &self,
        host_id: Uuid,
        current: SecretHash,
        next: SecretHash,
        now_ms: i64,
    ) -> StoreResult<bool> {
        self.write_tx("stage host key", |tx| {
            host_key_rotation::stage(tx, host_id, current, next, now_ms)
        })
    }
    fn promote_host_key(&self, host_id: Uuid, next: SecretHash, now_ms: i64) -> StoreResult<bool> {
        self.write_tx("promote host key", |tx| {
            host_key_rotation::promote(tx, host_id, next, now_ms)
        })
    }
    fn request_host_key_rotation(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write_tx("request host key rotation", |tx| {
            host_key_rotation::request(tx, host_id, now_ms)
        })
    }
    fn approve_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write_tx("approve host", |tx| {
            hosts::set_status(tx, host_id, HostStatus::Active, now_ms)
        })
    }
    fn revoke_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write_tx("revoke host", |tx| {
            hosts::set_status(tx, host_id, HostStatus::Revoked, now_ms)?;
            tx.wake(host_id)
        })
    }
    fn remove_host(
        &self,
        host_id: Uuid,
        forget_escrow: bool,
        now_ms: i64,
    ) -> StoreResult<super::RemovedHost> {
        self.write_tx("remove host", |tx| {
            super::host_removal::remove_host(tx, host_id, forget_escrow, now_ms)
        })
    }
    fn put_escrow(
        &self,
        host_id: Uuid,
        blob: &str,
        key_fingerprint: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<WatchChange>> {
        self.write_tx("put escrow", |tx| {
            let hostname = super::escrow::put(tx, host_id, blob, key_fingerprint, now_ms)?;
            super::watch::judge(tx, host_id, &hostname, now_ms)
        })
    }
    fn escrow(&self, host_id: Uuid) -> StoreResult<Option<String>> {
        self.read_tx("read escrow", |tx| super::escrow::blob(tx, host_id))
    }
    fn list_hosts(&self) -> StoreResult<Vec<HostSummary>> {
        self.read_tx("list hosts", hosts::list_hosts)
    }
    fn host_detail(&self, host_id: Uuid) -> StoreResult<HostDetail> {
        self.read_tx("show host", |tx| hosts::host_detail(tx, host_id))
    }
    fn host_counts(&self) -> StoreResult<HostCounts> {
        self.read_tx("count hosts", hosts::host_counts)
    }
    fn change_host_labels(
        &self,
        host_id: Uuid,
        change: &bosun_proto::capabilities::LabelChange,
        now_ms: i64,
    ) -> StoreResult<std::collections::BTreeMap<String, String>> {
        self.write_tx("change labels", |tx| {
            super::host_profile::change_labels(tx, host_id, change, now_ms)
        })
    }
    fn hosts_matching(&self, filter: &super::host_profile::HostFilter) -> StoreResult<Vec<Uuid>> {
        self.read_tx("filter hosts", |tx| {
            super::host_profile::matching(tx, filter)
        })
    }
    fn resolve_id(&self, kind: super::id_lookup::IdKind, text: &str) -> StoreResult<Uuid> {
        self.read_tx("resolve id prefix", |tx| {
            super::id_lookup::resolve(tx, kind, text)
        })
    }
    fn host_history(
        &self,
        host_id: Uuid,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<Vec<super::history::HistoryBucket>> {
        self.read_tx("read host history", |tx| {
            super::history::read(tx, host_id, from_ms, to_ms)
        })
    }
}

impl<B: Backend> PollStore for B {
    fn poll_view(&self, host_id: Uuid) -> StoreResult<PollView> {
        self.read_tx("read poll view", |tx| super::jobs::poll_view(tx, host_id))
    }
    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        Backend::record_polls(self, polls)
    }
    fn commit_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        Backend::commit_polls(self, polls)
    }
    fn record_poll_now(&self, poll: &PollRecord) -> Option<StoreResult<(PollRecorded, PollView)>> {
        Backend::record_poll_now(self, poll)
    }
    fn heartbeat<'a>(self: Arc<Self>, poll: &'a PollRecord) -> Option<Heartbeat<'a>> {
        Backend::heartbeat(self, poll)
    }
    fn sync(&self) -> StoreResult<()> {
        Backend::sync(self)
    }
    fn flush(&self) -> StoreResult<()> {
        Backend::flush(self)
    }
    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>> {
        Backend::sweep(self, now_ms, config)
    }
    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>> {
        Backend::sweep_backups(self, now_ms)
    }
    fn record_history(&self, buckets: &[super::history::HistoryBucket]) -> StoreResult<usize> {
        self.write_tx("record host history", |tx| {
            super::history::record(tx, buckets)
        })
    }
    fn watch_wakeups(&self, wake: WakeUp) {
        Backend::watch_wakeups(self, wake);
    }
}

impl<B: Backend> JobStore for B {
    fn put_desired(&self, write: DesiredWrite) -> StoreResult<DesiredAccepted> {
        self.write_tx("put desired state", |tx| {
            let accepted = super::jobs::put_desired(tx, &write)?;
            if accepted.created {
                tx.wake(write.host_id)?;
            }
            Ok(accepted)
        })
    }
    fn desired_current(&self, host_id: Uuid) -> StoreResult<Option<DesiredRevision>> {
        self.read_tx("read desired state", |tx| {
            super::desired::current(tx, host_id)
        })
    }
    fn desired_facts(&self, host_id: Uuid) -> StoreResult<DesiredFacts> {
        self.read_tx("read desired status", |tx| {
            super::desired::facts(tx, host_id)
        })
    }
    fn operations(
        &self,
        host_id: Uuid,
        query: OperationQuery,
        limit: usize,
    ) -> StoreResult<Vec<OperationRecord>> {
        self.read_tx("list operation records", |tx| {
            super::desired::operations(tx, host_id, &query, limit)
        })
    }
    fn submit_job(&self, job: NewJob) -> StoreResult<JobAccepted> {
        self.write_tx("submit job", |tx| {
            let accepted = super::jobs::submit_job(tx, &job)?;
            if accepted.created {
                tx.wake(job.host_id)?;
            }
            Ok(accepted)
        })
    }
    fn finish_job(
        &self,
        host_id: Uuid,
        result: &JobResult,
        now_ms: i64,
    ) -> StoreResult<Option<bosun_proto::admin::Alert>> {
        self.write_tx("finish job", |tx| {
            super::jobs::finish_job(tx, host_id, result, now_ms)
        })
    }
    fn cancel_job(
        &self,
        host_id: Uuid,
        job_id: Uuid,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::JobState> {
        self.write_tx("cancel job", |tx| {
            super::jobs::cancel_job(tx, host_id, job_id, now_ms)
        })
    }
    fn list_jobs(&self, host_id: Uuid, limit: u32) -> StoreResult<Vec<JobRecord>> {
        self.read_tx("list jobs", |tx| super::jobs::list_jobs(tx, host_id, limit))
    }
}

impl<B: Backend> AlertStore for B {
    fn list_alerts(&self, limit: u32) -> StoreResult<Vec<Alert>> {
        self.read_tx("list alerts", |tx| {
            super::dashboard_reads::recent_alerts(tx, None, limit)
        })
    }
    fn ack_alert(&self, ack: &AckAlert, now_ms: i64) -> StoreResult<bosun_proto::admin::OpenAlert> {
        self.write_tx("acknowledge alert", |tx| {
            super::dashboard_reads::ack(tx, ack, now_ms)
        })
    }
    fn create_silence(&self, request: &CreateSilence, now_ms: i64) -> StoreResult<Silence> {
        self.write_tx("create silence", |tx| {
            super::alert_triage::create_silence(tx, request, now_ms)
        })
    }
    fn list_silences(&self, now_ms: i64, limit: u32) -> StoreResult<Vec<Silence>> {
        self.read_tx("list silences", |tx| {
            super::alert_triage::newest_in_force(tx, now_ms, limit)
        })
    }
    fn remove_silence(&self, id: u64, now_ms: i64) -> StoreResult<Silence> {
        self.write_tx("remove silence", |tx| {
            super::alert_triage::remove_silence(tx, id, now_ms)
        })
    }
    fn dashboard_facts(
        &self,
        query: super::dashboard::DashboardQuery,
    ) -> StoreResult<super::dashboard::DashboardFacts> {
        self.read_tx("dashboard facts", |tx| {
            super::dashboard_reads::facts(tx, query)
        })
    }
    fn list_events(&self, query: EventQuery) -> StoreResult<Vec<Event>> {
        self.read_tx("list events", |tx| {
            let rows: Vec<(i64, i64, Option<String>, String, String)> = tx.query_map(
                "list events",
                "SELECT seq, at_ms, host_id, kind, detail FROM
                 (SELECT * FROM events WHERE (CAST(?1 AS TEXT) IS NULL OR host_id = ?1)
                    AND seq > ?2 ORDER BY seq DESC LIMIT ?3) AS newest ORDER BY seq",
                params![
                    query.host_id.map(|h| h.to_string()),
                    signed(query.after.unwrap_or(0)),
                    query.limit
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )?;
            rows.into_iter()
                .map(|(seq, at_ms, host_id, kind, detail)| {
                    Ok(Event {
                        seq: unsigned(seq),
                        at: ts(at_ms)?,
                        host_id: host_id.as_deref().map(uuid).transpose()?,
                        kind,
                        detail: serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
                            what: "event detail",
                            reason: e.to_string(),
                        })?,
                    })
                })
                .collect()
        })
    }
}

impl<B: Backend> AuditStore for B {
    fn audit(&self, query: &AuditQuery) -> StoreResult<Vec<bosun_proto::admin::AuditRecord>> {
        self.read_tx("read audit trail", |tx| {
            let dialect = match tx.dialect() {
                Dialect::Sqlite => audit_trail::Dialect::Sqlite,
                Dialect::Postgres => audit_trail::Dialect::Postgres,
            };
            let (text, params) = audit_trail::statement(dialect, query);
            let refs: Vec<&dyn rusqlite::ToSql> = params.iter().map(|p| p.as_ref()).collect();
            let rows: Vec<audit_trail::AuditRow> =
                tx.query_map("read audit trail", &text, &refs, |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                })?;
            rows.into_iter().map(audit_trail::record).collect()
        })
    }
    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep> {
        Backend::prune(self, now_ms, config, from, budget)
    }
}

impl<B: Backend> ArtifactStore for B {
    fn list_artifacts(&self, limit: u32) -> StoreResult<Vec<bosun_proto::admin::ArtifactInfo>> {
        self.read_tx("list artifacts", |tx| super::artifacts::list(tx, limit))
    }
    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo> {
        Backend::put_artifact(self, sha256, data, now_ms)
    }
    fn artifact(&self, sha256: &str) -> StoreResult<Option<ArtifactBytes>> {
        Backend::artifact(self, sha256)
    }
}

impl<B: Backend> HubKeyStore for B {
    fn key_rotation(&self) -> StoreResult<hub_keys::KeyRotation> {
        self.read_tx("read hub keys", hub_keys::rotation)
    }
    fn announced_hub_keys(&self) -> StoreResult<hub_keys::Announced> {
        self.read_tx("read hub keys", hub_keys::announced)
    }
    fn active_hub_key(&self) -> StoreResult<Option<hub_keys::KeyMaterial>> {
        self.read_tx("read the active hub key", hub_keys::active)
    }
    fn stage_hub_key(
        &self,
        serving: &hub_keys::KeyMaterial,
        next: &hub_keys::KeyMaterial,
        now_ms: i64,
    ) -> StoreResult<()> {
        self.write_tx("stage hub key", |tx| {
            hub_keys::stage(tx, serving, next, now_ms)
        })
    }
    fn activate_hub_key(&self, force: bool, now_ms: i64) -> StoreResult<String> {
        self.write_tx("activate hub key", |tx| {
            hub_keys::activate(tx, force, now_ms)
        })
    }
    fn retire_hub_key(&self, now_ms: i64) -> StoreResult<hub_keys::KeyRotation> {
        self.write_tx("retire hub key", |tx| hub_keys::retire(tx, now_ms))
    }
    fn publish_hub_pins(&self, pins: &hub_keys::SignedPins, now_ms: i64) -> StoreResult<()> {
        self.write_tx("publish the signed pin set", |tx| {
            hub_keys::publish(tx, pins, now_ms)
        })
    }
    fn mark_restored(&self, restored: &super::RestoredHub) -> StoreResult<()> {
        self.write_tx("record the restore", |tx| {
            super::restored::mark(tx, restored)
        })
    }
    fn restored_ms(&self) -> StoreResult<Option<i64>> {
        self.read_tx("read the restore mark", super::restored::restored_ms)
    }
}
