//! Backups of one guest on request (the local API's `POST /v1/backup`, or the agent's own
//! policy scheduler) with observable phases, and the policy's `due` verdict.
//!
//! ```text
//!  start() ──► queued ──GuestQueue (one mutation per guest)──► running
//!                                   vzdump task log, polled:
//!       "create storage snapshot 'vzdump'" ──► snapshotted   (apps may restart)
//!       "Finished Backup of VM n"          ──► archived
//!       task OK + journaled                ──► done
//!       task error / lost task             ──► failed
//! ```
//!
//! Where the guest's volumes cannot snapshot, vzdump falls back to suspend mode and logs
//! so; the run then reports `storage_snapshot: unavailable` and reaches `snapshotted` only
//! together with `archived`: a quiesced controller must wait for the archive.
//!
//! Each run is one journaled operation (`kind = "backup"`, one `vzdump` step with its UPID)
//! that ends together with its outcome (storage, archive, size; `Store::finish_backup`): the
//! hub's "last backup" per guest and storage is read from there. A run a stop interrupted is
//! ended at the next start ([`interrupted`]).
//! The last successful backup per guest is remembered in memory and, after a restart, read
//! once from the backup storage's listing (the newest archive of the guest).

pub mod content;
mod floor;
pub mod interrupted;
pub mod notes;
mod progress;
pub mod proof;
mod run;
pub mod schedule;
pub mod scheduler;
pub mod tiers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};
use utoipa::ToSchema;

pub use floor::{FloorKeeper, FloorOffer};
pub use progress::LogProgress;
pub use proof::{ArchiveProver, ArchiveReadError, ArchiveReader, ProofError, Verified};
pub use schedule::{CalendarEvent, DueVerdict, ScheduleError};
pub use scheduler::{GuestSource, PolicyScheduler, SchedulerConfig};

use crate::clock::SharedClock;
use crate::guests::queue::{GuestKey, GuestQueue, QueueError};
use crate::ops::journal::{JournalError, JournalHandle, NewOperation};
use crate::ops::operation::OpJournal;
use crate::ops::operation::OpKind;
use bosun_proto::desired::{BackupPolicy, Retention};
use bosun_pve::GuestOps;
use bosun_pve::{PveError, StorageId, Vmid};
use tiers::{Tier, TierPlan};

/// Where a backup run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackupPhase {
    /// Accepted, waiting for the guest's earlier work to finish.
    Queued,
    /// vzdump is running; the storage snapshot does not exist yet.
    Running,
    /// The storage snapshot exists: a quiesced controller may restart its apps.
    Snapshotted,
    /// The archive is written.
    Archived,
    /// The backup finished and is recorded.
    Done,
    /// The backup failed; `error` says why.
    Failed,
}

impl BackupPhase {
    /// Whether the run has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed)
    }

    /// The phase as its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Snapshotted => "snapshotted",
            Self::Archived => "archived",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

/// Whether this run has a storage snapshot to copy from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StorageSnapshot {
    /// Not known yet.
    Pending,
    /// vzdump took the storage snapshot.
    Taken,
    /// The guest's storage cannot snapshot; vzdump suspended the guest instead, so the copy
    /// is consistent only once archived.
    Unavailable,
}

/// Who asked for a backup run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackupInitiator {
    /// The guest's controller, through `POST /v1/backup`.
    #[default]
    Controller,
    /// The agent's policy scheduler: the deadline passed and the controller did not back up.
    Scheduler,
}

impl BackupInitiator {
    /// The initiator as its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Controller => "controller",
            Self::Scheduler => "scheduler",
        }
    }
}

/// One backup run as the local API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BackupRun {
    /// The run (the journal operation id).
    pub run_id: String,
    /// Where it stands.
    pub phase: BackupPhase,
    /// The vzdump mode asked for.
    pub mode: String,
    /// Whether a storage snapshot exists for the copy.
    pub storage_snapshot: StorageSnapshot,
    /// The controller declared its apps quiesced.
    pub quiesced: bool,
    /// The controller's bound on its apps' downtime, in seconds.
    pub max_quiesce_s: Option<u32>,
    /// Who started the run.
    pub initiator: BackupInitiator,
    /// When the run was requested (RFC 3339).
    #[schema(value_type = String, format = DateTime)]
    pub requested_at: Timestamp,
    /// When the phase last changed (RFC 3339).
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// When the storage snapshot (or, without one, the archive) became consistent.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub consistent_at: Option<Timestamp>,
    /// The vzdump task, once started.
    pub upid: Option<String>,
    /// The archive's volume id, once known.
    pub archive: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

/// What a caller asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupRequest {
    /// The tier to back up to (0 = the first, the one a controller quiesces for).
    pub tier: u32,
    /// The controller stopped its apps first.
    pub quiesced: bool,
    /// The controller's bound on its apps' downtime.
    pub max_quiesce_s: Option<u32>,
    /// Who asks.
    pub initiator: BackupInitiator,
}

/// The policy's verdict for one guest: what `GET /v1/backup/due` answers and what the
/// agent's scheduler acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// Whether a backup is due, and when.
    pub verdict: DueVerdict,
    /// The guest's last successful backup, if any.
    pub last_success: Option<Timestamp>,
}

/// The guest a backup is for, as resolved from its token (never from the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRef {
    /// The hub's guest id.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: Vmid,
    /// A container or a VM: whose config the backup tags (decision 0118).
    pub kind: bosun_proto::desired::GuestKind,
}

/// How backups are taken.
#[derive(Debug, Clone)]
pub struct BackupConfig {
    /// The vzdump target storage.
    pub storage: StorageId,
    /// How often a running task's status and log are read.
    pub poll_interval: Duration,
    /// Consecutive failed polls after which the run is failed as lost.
    pub max_poll_errors: u32,
    /// The node's time zone, in which the policy's calendar event is read.
    pub time_zone: TimeZone,
    /// Without a tier plan: the least time between two scheduled backups of a guest.
    pub min_interval_seconds: Option<u32>,
}

impl BackupConfig {
    /// Backups to `storage`, polled every second, in the system's time zone.
    pub fn new(storage: StorageId) -> Self {
        Self {
            storage,
            poll_interval: Duration::from_secs(1),
            max_poll_errors: 10,
            time_zone: TimeZone::system(),
            min_interval_seconds: None,
        }
    }
}

/// Everything that can go wrong starting or evaluating a backup.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A run of this guest is already queued or in progress.
    #[error("a backup of guest {guest_id} is already {phase}")]
    InProgress {
        /// The guest.
        guest_id: String,
        /// The phase of the run in progress.
        phase: &'static str,
    },
    /// The work queue refused the run (the agent is shutting down).
    #[error("failed to queue the backup of guest {guest_id}")]
    Queue {
        /// The guest.
        guest_id: String,
        /// The cause.
        #[source]
        source: QueueError,
    },
    /// The journal failed.
    #[error("failed to journal the backup of guest {guest_id}")]
    Journal {
        /// The guest.
        guest_id: String,
        /// The cause.
        #[source]
        source: JournalError,
    },
    /// The policy's schedule is not a calendar event Bosun understands.
    #[error("the backup policy's schedule {schedule:?} is invalid")]
    Schedule {
        /// The schedule as given.
        schedule: String,
        /// Why it was refused.
        #[source]
        source: ScheduleError,
    },
    /// The tier is not planned (the policy changed meanwhile).
    #[error("guest {guest_id}: no backup tier {tier} is planned")]
    NoSuchTier {
        /// The guest.
        guest_id: String,
        /// The tier asked for.
        tier: u32,
    },
    /// Listing the guest's archives failed.
    #[error("failed to list backups of vmid {vmid}")]
    ListBackups {
        /// The guest.
        vmid: Vmid,
        /// The cause.
        #[source]
        source: PveError,
    },
}

/// A run's key: the guest and the tier.
type RunKey = (String, u32);

/// Starts backups and answers their status. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BackupService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ops: Arc<dyn GuestOps>,
    journal: JournalHandle,
    queue: GuestQueue,
    clock: SharedClock,
    config: BackupConfig,
    /// The tiers; `None` runs one tier on the configured storage, pruning nothing.
    tiers: Option<watch::Receiver<TierPlan>>,
    /// The current or most recent run per (guest, tier).
    runs: Mutex<HashMap<RunKey, BackupRun>>,
    /// The newest successful backup per (guest, storage): `None` means "none exists";
    /// absent means "not read yet".
    last_success: Mutex<HashMap<(String, String), Option<Timestamp>>>,
    /// One vzdump per node at a time: Proxmox serializes them behind a global lock anyway,
    /// and a queue of tasks each waiting on it would only hold locks and time out.
    vzdump_slot: Semaphore,
    /// Records what proves each archive when its backup ends; `None`: archives are recorded
    /// unproven (and so never restored).
    prover: Option<ArchiveProver>,
}

impl BackupService {
    /// A service taking backups through `ops`, serialized per guest by `queue`.
    pub fn new(
        ops: Arc<dyn GuestOps>,
        journal: JournalHandle,
        queue: GuestQueue,
        clock: SharedClock,
        config: BackupConfig,
    ) -> Self {
        Self::build(ops, journal, queue, clock, config, None, None)
    }

    /// A service backing up to the tiers `tiers` publishes (tier 0 is the one
    /// `POST /v1/backup` and the policy deadline use), proving each archive with `prover`.
    pub fn with_tiers(
        ops: Arc<dyn GuestOps>,
        journal: JournalHandle,
        queue: GuestQueue,
        clock: SharedClock,
        config: BackupConfig,
        tiers: watch::Receiver<TierPlan>,
        prover: Option<ArchiveProver>,
    ) -> Self {
        Self::build(ops, journal, queue, clock, config, Some(tiers), prover)
    }

    fn build(
        ops: Arc<dyn GuestOps>,
        journal: JournalHandle,
        queue: GuestQueue,
        clock: SharedClock,
        config: BackupConfig,
        tiers: Option<watch::Receiver<TierPlan>>,
        prover: Option<ArchiveProver>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                ops,
                journal,
                queue,
                clock,
                config,
                tiers,
                runs: Mutex::new(HashMap::new()),
                last_success: Mutex::new(HashMap::new()),
                vzdump_slot: Semaphore::new(1),
                prover,
            }),
        }
    }

    /// Tier `index` as planned now. Without a plan, tier 0 is the configured storage with
    /// the storage's own pruning left alone.
    pub fn tier(&self, index: u32) -> Option<Tier> {
        match &self.inner.tiers {
            Some(plan) => plan.borrow().tier(index).cloned(),
            None => (index == 0).then(|| Tier {
                index: 0,
                target: None,
                kind: None,
                storage: self.inner.config.storage.clone(),
                schedule: String::new(),
                extra_schedule: None,
                min_interval_seconds: self.inner.config.min_interval_seconds.unwrap_or(0),
                quiesce_grace_minutes: 0,
                desired: Retention::default(),
                applied: Retention::default(),
                held: None,
            }),
        }
    }

    /// A receiver that changes with the tier plan, if the service follows one.
    pub fn tier_changes(&self) -> Option<watch::Receiver<TierPlan>> {
        self.inner.tiers.clone()
    }

    /// Whether runs prune per their tier (a plan is followed).
    fn prunes(&self) -> bool {
        self.inner.tiers.is_some()
    }

    /// The configuration.
    pub fn config(&self) -> &BackupConfig {
        &self.inner.config
    }

    /// Queues a snapshot-mode backup of `guest` and returns the run in phase `queued`.
    pub async fn start(
        &self,
        guest: GuestRef,
        request: BackupRequest,
        request_id: Option<String>,
    ) -> Result<BackupRun, BackupError> {
        let now = self.inner.clock.now();
        let Some(tier) = self.tier(request.tier) else {
            return Err(BackupError::NoSuchTier {
                guest_id: guest.guest_id,
                tier: request.tier,
            });
        };
        let key: RunKey = (guest.guest_id.clone(), tier.index);
        let mut reserved = BackupRun {
            run_id: String::new(),
            phase: BackupPhase::Queued,
            mode: "snapshot".to_owned(),
            storage_snapshot: StorageSnapshot::Pending,
            quiesced: request.quiesced,
            max_quiesce_s: request.max_quiesce_s,
            initiator: request.initiator,
            requested_at: now,
            updated_at: now,
            consistent_at: None,
            upid: None,
            archive: None,
            error: None,
        };
        {
            // Reserve the slot before any await so two requests cannot both start a run.
            let mut runs = self.inner.runs.lock();
            if let Some(run) = runs.get(&key).filter(|r| !r.phase.is_terminal()) {
                return Err(BackupError::InProgress {
                    guest_id: guest.guest_id,
                    phase: run.phase.as_str(),
                });
            }
            runs.insert(key.clone(), reserved.clone());
        }
        let begun = OpJournal::begin(
            &self.inner.journal,
            NewOperation {
                kind: OpKind::Backup,
                guest_id: Some(guest.guest_id.clone()),
                vmid: Some(guest.vmid.get()),
                job_id: None,
                request_id,
            },
        )
        .await;
        let op = match begun {
            Ok(op) => op,
            Err(source) => {
                self.forget_reservation(&key);
                return Err(BackupError::Journal {
                    guest_id: guest.guest_id,
                    source,
                });
            }
        };
        let op_id = op.op_id();
        reserved.run_id = op_id.to_string();
        self.update(&key, |r| r.run_id = op_id.to_string());
        let service = self.clone();
        let queued = {
            let guest = guest.clone();
            self.inner
                .queue
                .submit(GuestKey::guest(&guest.guest_id), async move {
                    service.run(guest, op, request, tier).await;
                })
        };
        match queued {
            Ok(op) => {
                // The run goes on without us; its outcome lands in the status.
                drop(op);
                tracing::info!(guest_id = %guest.guest_id, vmid = %guest.vmid, op_id = %op_id, tier = key.1, quiesced = request.quiesced, initiator = request.initiator.as_str(), "backup queued");
                Ok(reserved)
            }
            Err(source) => {
                let _ = self
                    .inner
                    .journal
                    .finish_operation(
                        op_id,
                        crate::ops::journal::OpStatus::Failed,
                        Some(source.to_string()),
                    )
                    .await;
                self.forget_reservation(&key);
                Err(BackupError::Queue {
                    guest_id: guest.guest_id,
                    source,
                })
            }
        }
    }

    /// The guest's current or most recent first-tier run since the agent started.
    pub fn status(&self, guest_id: &str) -> Option<BackupRun> {
        self.status_of(guest_id, 0)
    }

    /// The guest's current or most recent run on tier `tier` since the agent started.
    pub fn status_of(&self, guest_id: &str, tier: u32) -> Option<BackupRun> {
        self.inner
            .runs
            .lock()
            .get(&(guest_id.to_owned(), tier))
            .cloned()
    }

    /// When the guest's last successful first-tier backup was taken.
    pub async fn last_success(&self, guest: &GuestRef) -> Result<Option<Timestamp>, BackupError> {
        let storage = self
            .tier(0)
            .map_or_else(|| self.inner.config.storage.clone(), |t| t.storage);
        self.last_success_on(guest, &storage).await
    }

    /// When the guest's last successful backup to `storage` was taken, reading the storage
    /// once if the agent has not seen one since it started.
    pub async fn last_success_on(
        &self,
        guest: &GuestRef,
        storage: &StorageId,
    ) -> Result<Option<Timestamp>, BackupError> {
        let key = (guest.guest_id.clone(), storage.as_str().to_owned());
        if let Some(known) = self.inner.last_success.lock().get(&key) {
            return Ok(*known);
        }
        let items = self
            .inner
            .ops
            .list_backups(storage, guest.vmid)
            .await
            .map_err(|source| BackupError::ListBackups {
                vmid: guest.vmid,
                source,
            })?;
        let newest = items
            .iter()
            .filter_map(|i| i.ctime)
            .max()
            .and_then(|secs| i64::try_from(secs).ok())
            .and_then(|secs| Timestamp::from_second(secs).ok());
        // A run that finished meanwhile knows better.
        let value = *self.inner.last_success.lock().entry(key).or_insert(newest);
        Ok(value)
    }

    /// Evaluates `policy` for `guest` now: the one verdict both `GET /v1/backup/due` and
    /// the agent's scheduler use for the first tier.
    pub async fn policy_verdict(
        &self,
        guest: &GuestRef,
        policy: &BackupPolicy,
    ) -> Result<PolicyVerdict, BackupError> {
        let last_success = self.last_success(guest).await?;
        // Under a tier plan the first tier's timing is the plan's (its schedule, the one
        // desired state adds, the least interval); the policy gives the quiesce grace.
        match self
            .inner
            .tiers
            .as_ref()
            .and_then(|t| t.borrow().tier(0).cloned())
        {
            Some(first) => self.verdict(
                &first.schedules(),
                policy.quiesce_grace_minutes,
                first.min_interval_seconds,
                last_success,
            ),
            None => self.verdict(
                &[policy.schedule.as_str()],
                policy.quiesce_grace_minutes,
                self.inner.config.min_interval_seconds.unwrap_or(0),
                last_success,
            ),
        }
    }

    /// Evaluates tier `tier`'s own schedule for `guest` now (no quiesce grace past the
    /// first tier: no controller waits for those).
    pub async fn tier_verdict(
        &self,
        guest: &GuestRef,
        tier: &Tier,
    ) -> Result<PolicyVerdict, BackupError> {
        let last_success = self.last_success_on(guest, &tier.storage).await?;
        self.verdict(
            &tier.schedules(),
            tier.quiesce_grace_minutes,
            tier.min_interval_seconds,
            last_success,
        )
    }

    /// Evaluates the calendar events `schedules` together, never sooner than
    /// `min_interval_seconds` (0: no bound) after `last_success`.
    fn verdict(
        &self,
        schedules: &[&str],
        grace_minutes: u32,
        min_interval_seconds: u32,
        last_success: Option<Timestamp>,
    ) -> Result<PolicyVerdict, BackupError> {
        let events = schedules
            .iter()
            .map(|schedule| {
                CalendarEvent::parse(schedule).map_err(|source| BackupError::Schedule {
                    schedule: (*schedule).to_owned(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let min_interval = (min_interval_seconds > 0)
            .then(|| jiff::SignedDuration::from_secs(i64::from(min_interval_seconds)));
        let verdict = schedule::evaluate_all(
            &events,
            grace_minutes,
            min_interval,
            last_success,
            self.inner.clock.now(),
            &self.inner.config.time_zone,
        );
        Ok(PolicyVerdict {
            verdict,
            last_success,
        })
    }

    /// The clock the service reads.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// The journal the service records runs in.
    pub fn journal(&self) -> &JournalHandle {
        &self.inner.journal
    }

    /// Records a successful backup to `storage` taken at `at`.
    pub fn record_success(&self, guest_id: &str, storage: &StorageId, at: Timestamp) {
        let mut known = self.inner.last_success.lock();
        let entry = known
            .entry((guest_id.to_owned(), storage.as_str().to_owned()))
            .or_insert(None);
        if entry.is_none_or(|t| t < at) {
            *entry = Some(at);
        }
    }

    fn forget_reservation(&self, key: &RunKey) {
        self.inner.runs.lock().remove(key);
    }

    /// Applies `change` to the run at `key` and returns the result.
    fn update(&self, key: &RunKey, change: impl FnOnce(&mut BackupRun)) -> Option<BackupRun> {
        let now = self.inner.clock.now();
        let mut runs = self.inner.runs.lock();
        let run = runs.get_mut(key)?;
        change(run);
        run.updated_at = now;
        Some(run.clone())
    }
}
