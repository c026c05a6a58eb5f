//! The self-restore-test (DESIGN §8): a backup nobody restored is a hope, so the agent
//! restores each guest's newest backup into a scratch guest of its kind on the policy's
//! cadence (a container's into a scratch container, a VM's into a scratch VM: an archive is
//! proved as its guest's kind before anything is restored, decision 0118), starts it, checks
//! it stays up, runs the guest's own restore check inside it (`check.rs`: through the helper
//! in a container, through the guest agent's `exec` in a VM, `vm_check.rs`, decision 0120),
//! and destroys it.
//!
//! ```text
//!  wake ──► policy enabled, inside its window? ──► the guest most overdue (never tested
//!           first), the tier after the one it was last tested on (so each tier is proven)
//!           ├─ no archive on any tier ............. skipped (audited once)
//!           ├─ host memory or worker slots short .. skipped (audited once)
//!           └─ test: next_id ─► record scratch ─► restore (start=0) ─► isolate (every link
//!              down, mount points removed, scratch hostname, onboot=0) ─► start ─► stays
//!              running for `stay_up` ─► restore check (helper, links still down) ─► stop,
//!              destroy ─► result journaled: passed, failed, or not_checked (booted, but no
//!              check installed or no helper: never `passed`)
//! ```
//!
//! The scratch guest is recorded scratch in the journal before Proxmox is asked to create
//! it; that record, never a tag the hub or Proxmox could set, is what lets the agent destroy
//! it unsigned. It gets no network, no mounts and no bootstrap, so a backup restored here
//! can reach nothing. One test runs at a time (the tester is one loop), and a test longer
//! than the policy's timeout fails and is cleaned up. A test the agent was stopped in the
//! middle of is cleaned up at the next start ([`close_interrupted`]) and recorded
//! `interrupted`.

mod check;
mod interrupted;
mod steps;
pub mod vm_check;
mod vm_steps;

pub use interrupted::close_interrupted;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{DesiredState, GuestKind, RestoreTestPolicy};
use bosun_pve::{Pve, PveQemu, StorageId};
use jiff::Timestamp;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::data::backup::ArchiveProver;
use crate::data::backup::tiers::TierPlan;
use crate::data::desired::DesiredSnapshot;
use crate::data::recovery::source::{BackupSource, newest_on_tier_as};
use crate::guests::localapi::{RestoreTestBoard, RestoreTestRecord};
use crate::guests::reconcile::compensate::compensate_with_retries;
use crate::guests::reconcile::provision::compensate_vm_with_retries;
use crate::guests::reconcile::replay::wait_unlocked;
use crate::links::helper::HelperClient;
use crate::ops::journal::{
    AuditEvent, JournalHandle, LastRestoreTest, NewOperation, RestoreTestResult, TestOutcome,
};
use crate::ops::operation::OpJournal;
use crate::ops::operation::OpKind;

/// How the tester paces itself and what it leaves the host.
#[derive(Debug, Clone)]
pub struct RestoreTestConfig {
    /// Where scratch guests' volumes go.
    pub storage: StorageId,
    /// The longest sleep between looks, so policy and time changes are picked up.
    pub check_interval: Duration,
    /// How long a scratch guest must stay running after its start.
    pub stay_up: Duration,
    /// How often its status is read meanwhile.
    pub poll: Duration,
    /// Memory the host must keep free beyond the scratch guest's own.
    pub min_free_memory_mib: u64,
    /// A test waits while the node runs this many tasks or more.
    pub max_active_tasks: usize,
    /// How long one minute of the policy's `timeout_minutes` lasts (60 s; tests shorten it).
    pub minute: Duration,
    /// How long the guest's own restore check may run (1 s to 30 min).
    pub check_timeout: Duration,
    /// How long a scratch VM's guest agent is waited for after its start, before its test
    /// fails (two of the policy's minutes in the agent).
    pub agent_wait: Duration,
}

impl RestoreTestConfig {
    /// The defaults, with scratch guests on `storage`.
    pub fn new(storage: StorageId) -> Self {
        Self {
            storage,
            check_interval: Duration::from_secs(60),
            stay_up: Duration::from_secs(30),
            poll: Duration::from_secs(2),
            min_free_memory_mib: 1024,
            max_active_tasks: 8,
            minute: Duration::from_secs(60),
            check_timeout: Duration::from_secs(300),
            agent_wait: Duration::from_secs(120),
        }
    }
}

/// The parts the tester works with.
pub struct RestoreTester<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    clock: SharedClock,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    tiers: watch::Receiver<TierPlan>,
    board: RestoreTestBoard,
    config: RestoreTestConfig,
    /// Checks an archive before it is restored.
    prover: ArchiveProver,
    /// Runs the guest's restore check inside the scratch guest; without it a test that boots
    /// ends `not_checked`.
    helper: Option<HelperClient>,
    /// Skips already audited (by guest and kind), so a skip repeated every pass is
    /// audited once; at most one per desired guest and kind.
    skipped: BTreeSet<(Option<String>, SkipKind)>,
    /// A scratch guest could not be destroyed: no new test until the agent restarts.
    stuck: bool,
}

impl<P: Pve> std::fmt::Debug for RestoreTester<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreTester")
            .field("config", &self.config)
            .field("stuck", &self.stuck)
            .finish_non_exhaustive()
    }
}

/// What one pass decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassOutcome {
    /// Nothing to do now.
    Idle,
    /// A guest could not be tested now, and why.
    Skipped(String),
    /// A test ran.
    Tested(TestOutcome),
}

/// Why a due test did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SkipKind {
    /// No tier holds an archive of the due guests.
    NothingToRestore,
    /// Host memory, or the node's workers, are short (or unknown).
    NoRoom,
    /// The journal could not begin or record a test.
    Journal,
}

/// One due test: a guest and what it is restored from.
#[derive(Debug, Clone)]
struct Candidate {
    guest_id: String,
    /// The guest's kind: what its archive is proved as and restored into.
    kind: GuestKind,
    memory_mib: u64,
    source: BackupSource,
}

impl<P: PveQemu + 'static> RestoreTester<P> {
    /// A tester of the guests `desired` names, restoring from `tiers`, publishing results
    /// to `board` (the local API's `GET /v1/restore-test/status`).
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts a tester works with, each shared with the rest of the agent"
    )]
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        clock: SharedClock,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        tiers: watch::Receiver<TierPlan>,
        board: RestoreTestBoard,
        config: RestoreTestConfig,
        prover: ArchiveProver,
    ) -> Self {
        Self {
            pve,
            journal,
            clock,
            desired,
            tiers,
            board,
            config,
            prover,
            helper: None,
            skipped: BTreeSet::new(),
            stuck: false,
        }
    }

    /// The same tester, running the guest's restore check through `helper`.
    pub fn with_helper(mut self, helper: Option<HelperClient>) -> Self {
        self.helper = helper;
        self
    }

    /// Runs passes until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        self.publish_board().await;
        loop {
            let outcome = self.pass().await;
            if matches!(outcome, PassOutcome::Tested(_)) {
                // Another guest may be due right away.
                continue;
            }
            let wake = self
                .clock
                .now()
                .saturating_add(
                    jiff::SignedDuration::try_from(self.config.check_interval)
                        .unwrap_or(jiff::SignedDuration::from_secs(60)),
                )
                .unwrap_or(Timestamp::MAX);
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.clock.sleep_until(wake) => {}
                _ = self.desired.changed() => {}
                _ = self.tiers.changed() => {}
            }
        }
    }

    /// Publishes every guest's newest result to the local API's board.
    async fn publish_board(&self) {
        match self.journal.last_restore_tests().await {
            Ok(tests) => {
                for (guest_id, newest) in newest_per_guest(&tests) {
                    self.board.record(&guest_id, record_of(newest));
                }
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "restore-test results unreadable")
            }
        }
    }

    /// Looks once: runs the most overdue guest's test if one is due and the host can take it.
    pub async fn pass(&mut self) -> PassOutcome {
        let Some(snapshot) = self.desired.borrow().clone() else {
            return PassOutcome::Idle;
        };
        let policy = snapshot.state.restore_test_policy;
        if !policy.enabled || self.stuck {
            return PassOutcome::Idle;
        }
        let now = self.clock.now();
        if let Some(window) = policy.window {
            let hour = u8::try_from(now.to_zoned(jiff::tz::TimeZone::UTC).hour()).unwrap_or(0);
            if !window.contains_hour(hour) {
                return PassOutcome::Idle;
            }
        }
        let candidate = match self.due(&snapshot.state, &policy, now).await {
            Ok(Some(candidate)) => candidate,
            Ok(None) => return PassOutcome::Idle,
            Err(skip) => return self.skip(None, SkipKind::NothingToRestore, skip).await,
        };
        if let Err(why) = self.room_for(candidate.memory_mib).await {
            return self
                .skip(Some(&candidate.guest_id), SkipKind::NoRoom, why)
                .await;
        }
        match self.test(&candidate, &policy).await {
            Ok(outcome) => {
                self.skipped.clear();
                PassOutcome::Tested(outcome)
            }
            Err(why) => {
                self.skip(Some(&candidate.guest_id), SkipKind::Journal, why)
                    .await
            }
        }
    }

    async fn skip(
        &mut self,
        guest_id: Option<&str>,
        kind: SkipKind,
        reason: String,
    ) -> PassOutcome {
        if self.skipped.insert((guest_id.map(str::to_owned), kind)) {
            tracing::info!(guest_id, reason = %reason, "restore test skipped");
            let mut event = AuditEvent::new("restore_test.skipped");
            event.guest_id = guest_id.map(str::to_owned);
            event.detail = json!({ "reason": reason });
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::warn!(error = %error_chain(&e), "could not audit a skipped restore test");
            }
        }
        PassOutcome::Skipped(reason)
    }

    /// The most overdue guest and its archive; `Err` when the only due guests have nothing
    /// to restore.
    async fn due(
        &self,
        desired: &DesiredState,
        policy: &RestoreTestPolicy,
        now: Timestamp,
    ) -> Result<Option<Candidate>, String> {
        let plan = self.tiers.borrow().clone();
        if plan.tiers.is_empty() {
            return Ok(None);
        }
        let tests = self
            .journal
            .last_restore_tests()
            .await
            .map_err(|e| error_chain(&e))?;
        // The guests the agent created, with the kind it recorded (decision 0123): desired
        // state calling a container a VM never takes its restore tests away.
        let ours: BTreeMap<String, bosun_proto::desired::GuestKind> = self
            .journal
            .all_provenance()
            .await
            .map_err(|e| error_chain(&e))?
            .into_iter()
            .filter(|p| !p.is_scratch())
            .filter_map(|p| Some((p.guest_id()?.to_owned(), p.kind())))
            .collect();
        let interval = jiff::SignedDuration::from_hours(i64::from(policy.interval_days) * 24);
        let mut due: Vec<(Option<Timestamp>, &bosun_proto::desired::GuestSpec)> = desired
            .guests
            .iter()
            // Only guests the journal holds as the agent's own, each tested as the kind the
            // journal recorded (decision 0123), never the kind desired state names.
            .filter(|g| ours.contains_key(&g.guest_id.to_string()))
            .filter_map(|g| {
                let last = tests
                    .iter()
                    .filter(|t| t.result.guest_id == g.guest_id.to_string())
                    .map(|t| t.finished_at)
                    .max();
                let is_due = last.is_none_or(|at| now.duration_since(at) >= interval);
                is_due.then_some((last, g))
            })
            .collect();
        // Never tested first, then the longest ago.
        due.sort_by_key(|(last, g)| (*last, g.guest_id));
        let mut why = Vec::new();
        for (_, spec) in due {
            let guest_id = spec.guest_id.to_string();
            let Some(&kind) = ours.get(&guest_id) else {
                continue;
            };
            let last_storage = tests
                .iter()
                .filter(|t| t.result.guest_id == guest_id)
                .max_by_key(|t| t.finished_at)
                .map(|t| t.result.storage.clone());
            // Rotate: start after the tier tested last, so each tier is proven in turn.
            let start = last_storage
                .and_then(|s| plan.tiers.iter().position(|t| t.storage.as_str() == s))
                .map_or(0, |i| i + 1);
            let count = plan.tiers.len();
            for offset in 0..count {
                let tier = &plan.tiers[(start + offset) % count];
                let guest = (guest_id.as_str(), kind);
                match newest_on_tier_as(&*self.pve, &self.journal, &self.prover, guest, tier).await
                {
                    Ok(source) => {
                        return Ok(Some(Candidate {
                            guest_id,
                            kind,
                            memory_mib: u64::from(spec.resources.memory_mib),
                            source,
                        }));
                    }
                    Err(reason) => why.push(format!("{guest_id}: {reason}")),
                }
            }
        }
        if why.is_empty() {
            Ok(None)
        } else {
            Err(format!("nothing to restore: {}", why.join("; ")))
        }
    }

    /// Whether the host has the memory and the free workers for a scratch guest of
    /// `memory_mib`.
    async fn room_for(&self, memory_mib: u64) -> Result<(), String> {
        let nodes = self
            .pve
            .nodes()
            .await
            .map_err(|e| format!("host memory unknown: {}", error_chain(&e)))?;
        let node = nodes
            .iter()
            .find(|n| n.node == self.pve.node().as_str())
            .ok_or("host memory unknown: the node is not listed")?;
        let free_mib = node
            .maxmem
            .unwrap_or(0)
            .saturating_sub(node.mem.unwrap_or(0))
            >> 20;
        let need = memory_mib.saturating_add(self.config.min_free_memory_mib);
        if free_mib < need {
            return Err(format!(
                "host memory short: {free_mib} MiB free, {need} MiB needed"
            ));
        }
        let active = self
            .pve
            .active_tasks()
            .await
            .map_err(|e| format!("node tasks unknown: {}", error_chain(&e)))?
            .len();
        if active >= self.config.max_active_tasks {
            return Err(format!(
                "node busy: {active} tasks running, at most {} before a restore test",
                self.config.max_active_tasks
            ));
        }
        Ok(())
    }

    /// Runs one test and records it; `Err` when the journal could not begin or record it
    /// (then no test runs until the agent restarts, so a broken journal is not a loop).
    async fn test(
        &mut self,
        candidate: &Candidate,
        policy: &RestoreTestPolicy,
    ) -> Result<TestOutcome, String> {
        let started = tokio::time::Instant::now();
        let source = &candidate.source;
        let op = match OpJournal::begin(
            &self.journal,
            NewOperation {
                kind: OpKind::RestoreTest,
                guest_id: Some(candidate.guest_id.clone()),
                vmid: None,
                job_id: None,
                request_id: None,
            },
        )
        .await
        {
            Ok(op) => op,
            Err(e) => {
                self.stuck = true;
                return Err(format!(
                    "could not begin a restore test: {}",
                    error_chain(&e)
                ));
            }
        };
        tracing::info!(guest_id = %candidate.guest_id, kind = candidate.kind.as_str(), archive = %source.archive, tier = source.tier, op_id = %op.op_id(), "restore test starting");
        let mut scratch = None;
        let limit = self
            .config
            .minute
            .saturating_mul(policy.timeout_minutes.max(1));
        let steps = match candidate.kind {
            GuestKind::Lxc => {
                tokio::time::timeout(limit, self.steps(&op, source, &mut scratch)).await
            }
            GuestKind::Qemu => {
                tokio::time::timeout(limit, self.vm_steps(&op, source, &mut scratch)).await
            }
        };
        let (outcome, detail) = match steps {
            Ok(Ok(ref verdict)) => (verdict.outcome, verdict.detail.clone()),
            Ok(Err(ref e)) => (TestOutcome::Failed, Some(error_chain(e))),
            Err(_) => (
                TestOutcome::Failed,
                Some(format!(
                    "timed out after {} minutes",
                    policy.timeout_minutes
                )),
            ),
        };
        if steps.is_err() {
            // Cut off mid-step: the step's task (a restore, a start) is looked up and
            // followed to its end, so the cleanup below sees what Proxmox did.
            match self.journal.unfinished_operations().await {
                Ok(all) => {
                    if let Some(open) = all.iter().find(|u| u.operation.op_id == op.op_id()) {
                        crate::ops::operation::replay::close_open_step(&*self.pve, &op, open).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "could not read the timed-out test's last step")
                }
            }
        }
        let destroyed = match candidate.kind {
            GuestKind::Lxc => {
                if let Some(vmid) = scratch
                    && let Err(e) = wait_unlocked(&*self.pve, vmid).await
                {
                    tracing::warn!(vmid = vmid.get(), error = %e, "the scratch guest stays locked; destroying it anyway");
                }
                compensate_with_retries(&*self.pve, &op, scratch).await
            }
            // Stopped, then destroyed with `purge`, only while it carries the test's tag.
            GuestKind::Qemu => compensate_vm_with_retries(&*self.pve, &op, scratch).await,
        };
        if let Err(e) = destroyed {
            // The op stays running: the next start's replay destroys the scratch guest.
            tracing::error!(op_id = %op.op_id(), error = %error_chain(&e), "a scratch guest could not be destroyed; restore tests wait for the next start");
            self.stuck = true;
            return Ok(TestOutcome::Failed);
        }
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let result = RestoreTestResult {
            guest_id: candidate.guest_id.clone(),
            storage: source.storage.as_str().to_owned(),
            archive: Some(source.archive.to_string()),
            outcome,
            duration_ms,
            detail,
        };
        tracing::info!(guest_id = %candidate.guest_id, ?outcome, duration_ms, detail = ?result.detail, "restore test finished");
        if let Err(e) = self.journal.finish_restore_test(op.op_id(), result).await {
            self.stuck = true;
            return Err(format!(
                "could not record a restore test: {}",
                error_chain(&e)
            ));
        }
        self.publish_board().await;
        Ok(outcome)
    }
}

/// Each guest's newest result over its tiers.
fn newest_per_guest(tests: &[LastRestoreTest]) -> BTreeMap<String, &LastRestoreTest> {
    let mut out: BTreeMap<String, &LastRestoreTest> = BTreeMap::new();
    for test in tests {
        let slot = out.entry(test.result.guest_id.clone()).or_insert(test);
        if test.finished_at > slot.finished_at {
            *slot = test;
        }
    }
    out
}

fn record_of(test: &LastRestoreTest) -> RestoreTestRecord {
    RestoreTestRecord {
        finished_at: test.finished_at,
        passed: test.result.outcome == TestOutcome::Passed,
        outcome: test.result.outcome,
        duration_s: test.result.duration_ms / 1000,
        archive: test.result.archive.clone().unwrap_or_default(),
        detail: test.result.detail.clone(),
    }
}
