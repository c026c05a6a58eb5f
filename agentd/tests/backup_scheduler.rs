//! The agent's own policy backups against the simulator: once the deadline passes without
//! the controller backing up, the scheduler takes the backup itself, exactly once per due
//! period, journaled and audited; a failed one waits out its backoff. Time is a manual
//! clock, so hours of policy pass in moments.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::clock::ManualClock;
use bosun_agentd::data::backup::scheduler::GuestSourceError;
use bosun_agentd::data::backup::{
    BackupConfig, BackupInitiator, BackupPhase, BackupService, GuestRef, GuestSource,
    PolicyScheduler, SchedulerConfig,
};
use bosun_proto::desired::BackupPolicy;
use bosun_pve::PveOps;
use bosun_pve::{StorageId, Vmid};
use bosun_pvesim::FaultConfig;
use futures::future::BoxFuture;
use jiff::Timestamp;
use localapi_support::{Harness, daily_policy};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The harness's first guest, always running.
#[derive(Debug)]
struct OneGuest(GuestRef);

impl GuestSource for OneGuest {
    fn running_guests(&self) -> BoxFuture<'_, Result<Vec<GuestRef>, GuestSourceError>> {
        Box::pin(async move { Ok(vec![self.0.clone()]) })
    }
}

struct Rig {
    h: Harness,
    clock: ManualClock,
    backups: BackupService,
    guest: GuestRef,
    policy: watch::Sender<Option<BackupPolicy>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Rig {
    /// A scheduler over the harness's first guest, started at `start` with `policy`.
    async fn start(start: &str, policy: Option<BackupPolicy>) -> Self {
        let h = Harness::start().await;
        let clock = ManualClock::new(start.parse().unwrap());
        let mut config = BackupConfig::new(StorageId::new("local").unwrap());
        config.poll_interval = Duration::from_millis(10);
        config.time_zone = jiff::tz::TimeZone::UTC;
        let backups = BackupService::new(
            PveOps::shared(h.pve.clone()),
            h.journal.clone(),
            h.queue.clone(),
            clock.shared(),
            config,
        );
        let guest = GuestRef {
            guest_id: h.guest(0).guest_id.clone(),
            vmid: Vmid::new(h.guest(0).vmid).unwrap(),
            kind: bosun_proto::desired::GuestKind::Lxc,
        };
        let (policy, policy_rx) = watch::channel(policy);
        let scheduler = PolicyScheduler::new(
            backups.clone(),
            Arc::new(OneGuest(guest.clone())),
            policy_rx,
            SchedulerConfig::default(),
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn(scheduler.run(stop.clone()));
        Self {
            h,
            clock,
            backups,
            guest,
            policy,
            stop,
            task,
        }
    }

    /// vzdump requests for the guest the simulator received.
    fn vzdumps(&self) -> usize {
        let vmid = self.guest.vmid.to_string();
        self.h
            .sim
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
            .filter(|r| r.params.iter().any(|(k, v)| k == "vmid" && *v == vmid))
            .count()
    }

    /// Moves the clock to `to` (the scheduler wakes) and waits, in real time, until the
    /// simulator saw `vzdumps` requests and the guest's run (if any) ended.
    async fn at(&self, to: &str, vzdumps: usize) {
        self.clock.set(to.parse().unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ended = self
                .backups
                .status(&self.guest.guest_id)
                .is_none_or(|r| r.phase.is_terminal());
            if self.vzdumps() == vzdumps && ended {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "at {to}: {} vzdumps, wanted {vzdumps}; run {:?}",
                self.vzdumps(),
                self.backups.status(&self.guest.guest_id)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Give the scheduler a moment to act wrongly, should it.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(self.vzdumps(), vzdumps, "at {to}: one vzdump too many");
    }

    async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the scheduler stops")
            .unwrap();
        self.h.shutdown().await;
    }
}

fn hourly(grace: u32) -> BackupPolicy {
    daily_policy("hourly", grace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_backs_up_once_per_period_when_no_controller_does() {
    // 11:00's deadline passed before the scheduler started: not caught up.
    let rig = Rig::start("2026-03-10T11:59:00Z", Some(hourly(0))).await;
    rig.at("2026-03-10T11:59:30Z", 0).await;

    // 12:00 with no grace: the agent backs up at once, without any API call.
    rig.at("2026-03-10T12:00:00Z", 1).await;
    let run = rig.backups.status(&rig.guest.guest_id).unwrap();
    assert_eq!(run.phase, BackupPhase::Done, "{run:?}");
    assert_eq!(run.initiator, BackupInitiator::Scheduler);
    assert!(!run.quiesced);
    assert_eq!(run.mode, "snapshot");
    let wire = serde_json::to_value(&run).unwrap();
    assert_eq!(wire["initiator"], "scheduler");

    // Journaled: the outcome is the guest's last backup, the operation names its origin.
    let last = rig.h.journal.last_backups().await.unwrap();
    let mine: Vec<_> = last
        .iter()
        .filter(|b| b.guest_id == rig.guest.guest_id)
        .collect();
    assert_eq!(mine.len(), 1, "{last:?}");
    assert!(mine[0].ok);
    assert_eq!(mine[0].op_id.to_string(), run.run_id);
    assert_eq!(mine[0].archive, run.archive);
    let op = rig
        .h
        .journal
        .operation(mine[0].op_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(op.kind, "backup");
    assert_eq!(
        op.request_id.as_deref(),
        Some("scheduler:2026-03-10T12:00:00Z")
    );
    // Audited with the reason.
    let audit = rig.h.journal.audit_since(0, 1000).await.unwrap();
    let scheduled: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "backup.scheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{audit:?}");
    assert_eq!(
        scheduled[0].event.detail["reason"],
        "deadline passed, controller did not back up"
    );
    assert_eq!(
        scheduled[0].event.guest_id.as_deref(),
        Some(&*rig.guest.guest_id)
    );

    // The rest of the hour: nothing more.
    rig.at("2026-03-10T12:30:00Z", 1).await;
    rig.at("2026-03-10T12:59:59Z", 1).await;
    // The next period: exactly one more.
    rig.at("2026-03-10T13:00:00Z", 2).await;
    rig.at("2026-03-10T13:20:00Z", 2).await;
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_waits_for_the_controller_until_the_deadline() {
    let rig = Rig::start("2026-03-10T11:30:00Z", Some(hourly(20))).await;
    rig.at("2026-03-10T12:00:00Z", 0).await;
    rig.at("2026-03-10T12:19:59Z", 0).await;
    rig.at("2026-03-10T12:20:00Z", 1).await;
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_backup_before_the_deadline_leaves_nothing_to_do() {
    let rig = Rig::start("2026-03-10T11:30:00Z", Some(hourly(20))).await;
    rig.at("2026-03-10T12:05:00Z", 0).await;
    // The controller backs up (through the same service, as POST /v1/backup does).
    rig.backups
        .start(rig.guest.clone(), Default::default(), None)
        .await
        .unwrap();
    rig.at("2026-03-10T12:05:00Z", 1).await;
    assert_eq!(
        rig.backups.status(&rig.guest.guest_id).unwrap().initiator,
        BackupInitiator::Controller
    );
    rig.at("2026-03-10T12:20:00Z", 1).await;
    rig.at("2026-03-10T12:50:00Z", 1).await;
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scheduled_backup_is_retried_after_its_backoff() {
    let rig = Rig::start("2026-03-10T11:30:00Z", Some(daily_policy("12:00", 0))).await;
    rig.h.sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzdump".to_owned()],
        ..FaultConfig::default()
    });
    rig.at("2026-03-10T12:00:00Z", 1).await;
    let run = rig.backups.status(&rig.guest.guest_id).unwrap();
    assert_eq!(run.phase, BackupPhase::Failed, "{run:?}");
    let failed_at: Timestamp = run.updated_at;
    assert_eq!(failed_at, "2026-03-10T12:00:00Z".parse().unwrap());

    // No tight loop: nothing during the first 5 minutes.
    rig.at("2026-03-10T12:01:00Z", 1).await;
    rig.at("2026-03-10T12:04:59Z", 1).await;
    // Then a retry, which fails again: the next waits 10 minutes.
    rig.at("2026-03-10T12:05:00Z", 2).await;
    rig.at("2026-03-10T12:14:59Z", 2).await;
    rig.h.sim.set_faults(FaultConfig::default());
    rig.at("2026-03-10T12:15:00Z", 3).await;
    let run = rig.backups.status(&rig.guest.guest_id).unwrap();
    assert_eq!(run.phase, BackupPhase::Done, "{run:?}");
    // Backed up for the day: nothing more.
    rig.at("2026-03-10T18:00:00Z", 3).await;
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_nothing_is_backed_up_until_one_arrives() {
    let rig = Rig::start("2026-03-10T11:30:00Z", None).await;
    rig.at("2026-03-10T12:00:00Z", 0).await;
    rig.at("2026-03-10T13:00:00Z", 0).await;
    // The policy arrives: the scheduler wakes for it (no clock move) and 13:00's deadline,
    // passed while the agent ran, is acted on.
    rig.policy.send_replace(Some(hourly(0)));
    rig.at("2026-03-10T13:00:00Z", 1).await;
    rig.at("2026-03-10T13:30:00Z", 1).await;
    rig.at("2026-03-10T14:00:00Z", 2).await;
    rig.shutdown().await;
}
