//! Integrity verification between restore tests (DESIGN §8, decisions 0079 and 0103): on the
//! cadence of the desired state held to the signed plan (`verify_policy`, at least as often as
//! the plan's `verify_hours`), the agent has each PBS tier's server verify each of its guests'
//! backup groups, in the target's namespace, through PBS's own API ([`pbs`]), and has the
//! helper re-hash each guest's archives on every other tier (local, directory, USB, NFS,
//! CIFS) against the SHA-256 recorded at backup ([`files`]).
//!
//! ```text
//!  wake ──► policy on? ──► the (guest, PBS tier) most overdue (never verified first)
//!           └─ open the tier's sealed token (for this target, this host) ─► POST verify
//!              (ct/<vmid>, ns) ─► follow the task ─► ok | failed (PBS found damage) |
//!              error (could not run or finish) ─► journaled ─► reported per guest and tier
//! ```
//!
//! A verification that could not run is tried again after a quarter of the interval; one that
//! ran is due again after the interval. Up to four run at once, one per guest and tier; one
//! that outlives the interval gives its turn back and is followed on, so a guest whose group
//! takes PBS hours to read delays its own verification, never its neighbours'. File tiers have
//! a lane of their own: one re-hash at a time on the host, paced by the helper.

pub mod files;
pub mod pbs;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{StorageTarget, StorageType};
use bosun_proto::verify::{VerifyOutcome, VerifyReport};
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::data::backup::tiers::Tier;
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::target::parse_pbs;
use crate::ops::journal::{AuditEvent, JournalHandle, LastVerification, Verification};
use crate::trust::keys::credentials::CredentialOpener;
use pbs::{PbsClient, PbsError, TaskState};

/// Most characters of PBS's task status kept as a verification's detail (what the hub takes).
const MAX_DETAIL: usize = bosun_proto::verify::MAX_DETAIL_CHARS;

/// How the verifier paces itself.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    /// How long one hour of the policy's interval lasts (an hour; tests shorten it).
    pub hour: Duration,
    /// The longest sleep between looks.
    pub check_interval: Duration,
    /// How often a running task is looked at.
    pub poll: Duration,
    /// The longest one PBS call may take.
    pub call_timeout: Duration,
    /// The longest a verify task may run before it counts as an error.
    pub max_task: Duration,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            hour: Duration::from_secs(3600),
            check_interval: Duration::from_secs(60),
            poll: Duration::from_secs(2),
            call_timeout: Duration::from_secs(30),
            max_task: Duration::from_secs(6 * 3600),
        }
    }
}

/// Most verifications that hold a turn at once: what PBS is asked to read in parallel.
const MAX_RUNNING: usize = 4;

/// The verifier's loop.
pub struct Verifier {
    journal: JournalHandle,
    clock: SharedClock,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    worker: Arc<Worker>,
    /// Verifications started and not yet finished, by task.
    running: HashMap<tokio::task::Id, Running>,
    tasks: JoinSet<Verification>,
    /// The file tiers' check; `None`: file tiers are not verified (no helper).
    files: Option<files::FileTiers>,
}

/// What runs one verification: the parts a spawned task needs.
struct Worker {
    sealing: Arc<CredentialOpener>,
    host_id: uuid::Uuid,
    config: VerifyConfig,
}

/// A verification in flight.
#[derive(Debug)]
struct Running {
    guest_id: String,
    tier: String,
    started: tokio::time::Instant,
    /// A file tier's re-hash (its own lane: one at a time), not a PBS task.
    file: bool,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("config", &self.worker.config)
            .field("running", &self.running.len())
            .finish_non_exhaustive()
    }
}

/// One due verification.
#[derive(Debug, Clone)]
struct Due {
    guest_id: String,
    vmid: u32,
    target: StorageTarget,
}

impl Verifier {
    /// A verifier of the guests and PBS tiers `desired` names.
    pub fn new(
        journal: JournalHandle,
        clock: SharedClock,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        sealing: Arc<CredentialOpener>,
        host_id: uuid::Uuid,
        config: VerifyConfig,
    ) -> Self {
        Self {
            journal,
            clock,
            desired,
            worker: Arc::new(Worker {
                sealing,
                host_id,
                config,
            }),
            running: HashMap::new(),
            tasks: JoinSet::new(),
            files: None,
        }
    }

    /// The verifier re-hashing file tiers' archives too, through `files`.
    #[must_use]
    pub fn with_files(mut self, files: files::FileTiers) -> Self {
        self.files = Some(files);
        self
    }

    /// Runs verifications until `cancel`: the most overdue start while turns are free, and
    /// each is recorded as it finishes.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            self.start_due().await;
            tokio::select! {
                () = cancel.cancelled() => return,
                Some(joined) = self.tasks.join_next_with_id() => self.finished(joined).await,
                () = self.clock.sleep(self.worker.config.check_interval) => {}
                _ = self.desired.changed() => {}
            }
        }
    }

    /// Starts the most overdue verifications while fewer than [`MAX_RUNNING`] hold a turn.
    ///
    /// A verification that has run longer than the policy's interval gives its turn back and
    /// is followed on: a guest whose group takes PBS hours to read (a customer who filled a
    /// large disk) delays its own next verification, never another guest's. At most one runs
    /// per guest and tier, so what is followed stays bounded by desired state.
    async fn start_due(&mut self) {
        let Some(snapshot) = self.desired.borrow().clone() else {
            return;
        };
        let policy = snapshot.state.verify_policy;
        if !policy.enabled {
            return;
        }
        let interval = self
            .worker
            .config
            .hour
            .saturating_mul(policy.interval_hours);
        self.start_file(&snapshot, interval).await;
        loop {
            let turns = self
                .running
                .values()
                .filter(|r| !r.file && r.started.elapsed() < interval)
                .count();
            if turns >= MAX_RUNNING {
                return;
            }
            let due = match self.due(&snapshot, interval).await {
                Ok(Some(due)) => due,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "verification: the journal is unreadable");
                    return;
                }
            };
            let worker = Arc::clone(&self.worker);
            let running = Running {
                guest_id: due.guest_id.clone(),
                tier: due.target.durable_id.clone(),
                started: tokio::time::Instant::now(),
                file: false,
            };
            let handle = self.tasks.spawn(async move { worker.verify(&due).await });
            self.running.insert(handle.id(), running);
        }
    }

    /// Starts the most overdue file tier's re-hash unless one runs (one at a time on the
    /// host: the helper reads one archive at a time).
    async fn start_file(&mut self, snapshot: &DesiredSnapshot, interval: Duration) {
        let Some(files) = self.files.clone() else {
            return;
        };
        if self.running.values().any(|r| r.file) {
            return;
        }
        let due = match self.due_file(&files, snapshot, interval).await {
            Ok(Some(due)) => due,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "file verification: the journal is unreadable");
                return;
            }
        };
        let running = Running {
            guest_id: due.0.clone(),
            tier: due.1.report_key().to_owned(),
            started: tokio::time::Instant::now(),
            file: true,
        };
        let handle = self
            .tasks
            .spawn(async move { files.verify(due.0, due.1).await });
        self.running.insert(handle.id(), running);
    }

    /// The (guest, file tier) most overdue: never verified first, then the longest ago. Only
    /// desired guests with an archive recorded on the tier's storage count.
    async fn due_file(
        &self,
        files: &files::FileTiers,
        snapshot: &DesiredSnapshot,
        interval: Duration,
    ) -> Result<Option<(String, Tier)>, String> {
        let desired = desired_guests(snapshot);
        let last = self
            .journal
            .last_verifications()
            .await
            .map_err(|e| error_chain(&e))?;
        let now = self.clock.now();
        let mut best: Option<(Option<Timestamp>, (String, Tier))> = None;
        for tier in files.current() {
            let guests = files.guests_on(&tier).await.map_err(|e| error_chain(&e))?;
            for guest_id in guests.intersection(&desired) {
                let key = tier.report_key();
                let previous = last
                    .iter()
                    .find(|l| &l.verification.guest_id == guest_id && l.verification.tier == key);
                if !is_due(previous, now, interval) {
                    continue;
                }
                let at = previous.map(|p| p.finished_at);
                if best.as_ref().is_none_or(|(b, _)| at < *b) {
                    best = Some((at, (guest_id.clone(), tier.clone())));
                }
            }
        }
        Ok(best.map(|(_, due)| due))
    }

    /// Records a finished verification (audited when PBS found damage).
    async fn finished(&mut self, joined: Result<(tokio::task::Id, Verification), JoinError>) {
        let verification = match joined {
            Ok((id, verification)) => {
                self.running.remove(&id);
                verification
            }
            Err(e) => {
                let running = self.running.remove(&e.id());
                tracing::error!(error = %e, ?running, "a verification task ended without an outcome");
                return;
            }
        };
        tracing::info!(guest_id = %verification.guest_id, tier = %verification.tier, outcome = ?verification.outcome, duration_ms = verification.duration_ms, detail = %verification.detail, "verification finished");
        if verification.outcome == VerifyOutcome::Failed {
            let mut event = AuditEvent::new("verify.failed");
            event.guest_id = Some(verification.guest_id.clone());
            event.detail = serde_json::json!({
                "tier": verification.tier,
                "detail": verification.detail,
            });
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::warn!(error = %error_chain(&e), "could not audit a failed verification");
            }
        }
        if let Err(e) = self.journal.record_verification(verification).await {
            tracing::error!(error = %error_chain(&e), "could not record a verification");
        }
    }
    /// The (guest, PBS tier) most overdue and not in flight: never verified first, then the
    /// longest ago.
    async fn due(
        &self,
        snapshot: &DesiredSnapshot,
        interval: Duration,
    ) -> Result<Option<Due>, String> {
        let state = &snapshot.state;
        let tiers: Vec<&StorageTarget> = state
            .storage
            .iter()
            .filter(|t| t.kind == StorageType::Pbs)
            .filter(|t| {
                state.backup_policy.target.as_deref() == Some(t.durable_id.as_str())
                    || state.backup_policy.further_tiers.contains(&t.durable_id)
            })
            .collect();
        let desired = desired_guests(snapshot);
        // Rows of guests and tiers no longer in desired state go: the report would carry them
        // as unverified for ever (and the hub would call them overdue). File tiers' rows stay
        // while their tier runs.
        let file_tiers = self.files.as_ref().map(files::FileTiers::current);
        let tier_ids = tiers
            .iter()
            .map(|t| t.durable_id.clone())
            .chain(
                file_tiers
                    .into_iter()
                    .flatten()
                    .map(|t| t.report_key().to_owned()),
            )
            .collect();
        match self
            .journal
            .prune_verifications(desired.clone(), tier_ids)
            .await
        {
            Ok(0) => {}
            Ok(gone) => tracing::info!(
                gone,
                "verifications of guests or tiers no longer in desired state removed"
            ),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "verifications of departed guests not removed")
            }
        }
        if tiers.is_empty() {
            return Ok(None);
        }
        let ours: Vec<(String, u32)> = self
            .journal
            .all_provenance()
            .await
            .map_err(|e| error_chain(&e))?
            .into_iter()
            .filter(|p| !p.is_scratch())
            .filter_map(|p| Some((p.guest_id()?.to_owned(), p.vmid())))
            .filter(|(g, _)| desired.contains(g))
            .collect();
        let last = self
            .journal
            .last_verifications()
            .await
            .map_err(|e| error_chain(&e))?;
        let now = self.clock.now();
        let mut best: Option<(Option<Timestamp>, Due)> = None;
        for (guest_id, vmid) in &ours {
            for target in &tiers {
                let previous = last.iter().find(|l| {
                    &l.verification.guest_id == guest_id && l.verification.tier == target.durable_id
                });
                let in_flight = self
                    .running
                    .values()
                    .any(|r| &r.guest_id == guest_id && r.tier == target.durable_id);
                if in_flight || !is_due(previous, now, interval) {
                    continue;
                }
                let at = previous.map(|p| p.finished_at);
                if best.as_ref().is_none_or(|(b, _)| at < *b) {
                    best = Some((
                        at,
                        Due {
                            guest_id: guest_id.clone(),
                            vmid: *vmid,
                            target: (*target).clone(),
                        },
                    ));
                }
            }
        }
        Ok(best.map(|(_, due)| due))
    }
}

impl Worker {
    /// Verifies one group and says how it went.
    async fn verify(&self, due: &Due) -> Verification {
        let started = tokio::time::Instant::now();
        let (outcome, detail) = match self.run_task(due).await {
            Ok(exit) if exit == "OK" => (VerifyOutcome::Ok, "OK".to_owned()),
            Ok(exit) => (VerifyOutcome::Failed, bounded(&exit)),
            Err(e) => {
                tracing::warn!(guest_id = %due.guest_id, error = %error_chain(&e), "verification could not run");
                (VerifyOutcome::Error, bounded(&e.to_string()))
            }
        };
        Verification {
            guest_id: due.guest_id.clone(),
            tier: due.target.durable_id.clone(),
            outcome,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail,
        }
    }

    /// Starts the PBS task and follows it to its exit status.
    async fn run_task(&self, due: &Due) -> Result<String, VerifyError> {
        let target = &due.target;
        let repo = parse_pbs(&target.durable_id).map_err(|_| VerifyError::BadTarget)?;
        let sealed = target
            .credentials
            .as_ref()
            .ok_or(VerifyError::NoCredentials)?;
        let secret = self
            .sealing
            .open_credential(sealed, self.host_id, &target.identity())
            .map_err(|_| VerifyError::NoCredentials)?
            .secret;
        let client = PbsClient::new(&repo, &secret, self.config.call_timeout)?;
        let upid = client
            .start_verify(&repo.datastore, target.namespace.as_deref(), due.vmid)
            .await?;
        tracing::info!(guest_id = %due.guest_id, %upid, "verification started");
        let deadline = tokio::time::Instant::now() + self.config.max_task;
        let mut misses = 0u32;
        loop {
            tokio::time::sleep(self.config.poll).await;
            match client.task(&upid).await {
                Ok(TaskState::Stopped(exit)) => return Ok(exit),
                Ok(TaskState::Running) => misses = 0,
                Err(e) if misses >= 3 => return Err(e.into()),
                Err(_) => misses += 1,
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(VerifyError::TooLong);
            }
        }
    }
}

/// Why a verification could not run: `Display` is the reported detail.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The target's `durable_id` is not a PBS repository.
    #[error("the target is not a PBS repository")]
    BadTarget,
    /// The target's sealed token is absent or does not open for it on this host.
    #[error("the target's sealed credentials are not at hand")]
    NoCredentials,
    /// A PBS call failed.
    #[error(transparent)]
    Pbs(#[from] PbsError),
    /// The task outlived the agent's bound.
    #[error("the verify task ran too long")]
    TooLong,
}

/// The guest ids desired state names.
fn desired_guests(snapshot: &DesiredSnapshot) -> BTreeSet<String> {
    snapshot
        .state
        .guests
        .iter()
        .map(|g| g.guest_id.to_string())
        .collect()
}

/// Whether a (guest, tier) with `previous` verification is due at `now`.
fn is_due(previous: Option<&LastVerification>, now: Timestamp, interval: Duration) -> bool {
    let Some(previous) = previous else {
        return true;
    };
    let wait = match previous.verification.outcome {
        VerifyOutcome::Ok | VerifyOutcome::Failed => interval,
        VerifyOutcome::Error | VerifyOutcome::Unknown => interval / 4,
    };
    let wait = SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX);
    now.duration_since(previous.finished_at) >= wait
}

/// PBS's text kept printable and short.
fn bounded(text: &str) -> String {
    text.chars()
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                ' '
            } else {
                c
            }
        })
        .take(MAX_DETAIL)
        .collect()
}

/// The newest verification per (guest, tier), as the report carries them.
pub async fn reports(journal: &JournalHandle) -> Vec<VerifyReport> {
    match journal.last_verifications().await {
        Ok(rows) => rows
            .into_iter()
            .take(bosun_proto::verify::MAX_VERIFICATIONS)
            .filter_map(|l| {
                Some(VerifyReport {
                    guest_id: uuid::Uuid::parse_str(&l.verification.guest_id).ok()?,
                    tier: l.verification.tier,
                    finished_at: l.finished_at,
                    outcome: l.verification.outcome,
                    duration_ms: l.verification.duration_ms,
                    detail: bounded(&l.verification.detail),
                    last_ok_at: l.last_ok_at,
                    last_failed_at: l.last_failed_at,
                    first_at: l.first_at,
                })
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "verifications unreadable; report sent without them");
            Vec::new()
        }
    }
}
