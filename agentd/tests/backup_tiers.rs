//! A week of a two-tier policy against the simulator in seconds: the first tier (the local
//! vzdump storage, daily at 02:00) and a PBS offsite tier (daily at 03:00), each with its
//! own retention passed to vzdump as `prune-backups`. The agent's clock and the simulator's
//! are both set by the test, so archive times are the scheduled days and pruning sees them.
//! With the local storage gone, the PBS tier still gets its backups and the local tier's
//! failures are journaled per tier.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;
use crate::two_tiers;

use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::clock::ManualClock;
use bosun_agentd::data::backup::scheduler::GuestSourceError;
use bosun_agentd::data::backup::tiers::{self, TierPlan};
use bosun_agentd::data::backup::{
    BackupConfig, BackupService, GuestRef, GuestSource, PolicyScheduler, SchedulerConfig,
};
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::{Retention, StorageRole, StorageType, TargetPolicy};
use bosun_pve::{Pve, PveOps, StorageCreate, StorageId, StorageKind, Vmid};
use futures::future::BoxFuture;
use jiff::Timestamp;
use localapi_support::Harness;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use two_tiers::{PBS, desired, floor, target};

#[derive(Debug)]
struct OneGuest(GuestRef);

impl GuestSource for OneGuest {
    fn running_guests(&self) -> BoxFuture<'_, Result<Vec<GuestRef>, GuestSourceError>> {
        Box::pin(async move { Ok(vec![self.0.clone()]) })
    }
}

fn keep(last: u32, daily: u32) -> Retention {
    Retention {
        keep_last: last,
        keep_daily: daily,
        ..Retention::default()
    }
}

/// The NAS every rig registers: a first tier that can be lost.
const NAS: &str = "nas.example:/export/backups";

struct Rig {
    h: Harness,
    clock: ManualClock,
    backups: BackupService,
    guest: GuestRef,
    pbs: StorageId,
    plan: watch::Sender<TierPlan>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Rig {
    async fn start(start: &str, plan: TierPlan) -> Self {
        let h = Harness::start().await;
        let at: Timestamp = start.parse().unwrap();
        h.sim.set_time(at);
        let clock = ManualClock::new(at);
        let pbs = two_tiers::register_pbs(&h.sim, &*h.pve).await;
        // A NAS the first tier can be moved to (and lose), registered before any pass.
        h.sim.add_nfs_remote("nas.example", "/export/backups");
        h.pve
            .create_storage(&StorageCreate {
                storage: storage_id_of(StorageType::Nfs, NAS),
                kind: StorageKind::Nfs {
                    server: "nas.example".into(),
                    export: "/export/backups".into(),
                    content: vec![bosun_pve::ContentType::Backup],
                    options: None,
                },
            })
            .await
            .unwrap();
        let mut config = BackupConfig::new(StorageId::new("local").unwrap());
        config.poll_interval = Duration::from_millis(10);
        config.time_zone = jiff::tz::TimeZone::UTC;
        let (plan, plan_rx) = watch::channel(plan);
        let backups = BackupService::with_tiers(
            PveOps::shared(h.pve.clone()),
            h.journal.clone(),
            h.queue.clone(),
            clock.shared(),
            config,
            plan_rx,
            None,
        );
        let guest = GuestRef {
            guest_id: h.guest(0).guest_id.clone(),
            vmid: Vmid::new(h.guest(0).vmid).unwrap(),
            kind: bosun_proto::desired::GuestKind::Lxc,
        };
        let policy = desired(Retention::default(), Retention::default()).backup_policy;
        let (policy_tx, policy_rx) = watch::channel(Some(policy));
        let scheduler = PolicyScheduler::new(
            backups.clone(),
            Arc::new(OneGuest(guest.clone())),
            policy_rx,
            SchedulerConfig::default(),
        );
        let stop = CancellationToken::new();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                // The policy feed lives as long as the scheduler.
                let _policy = policy_tx;
                scheduler.run(stop).await;
            })
        };
        Self {
            h,
            clock,
            backups,
            guest,
            pbs,
            plan,
            stop,
            task,
        }
    }

    /// vzdump requests the simulator received for the guest's backups to `storage`.
    fn vzdumps(&self, storage: &str) -> Vec<Vec<(String, String)>> {
        let vmid = self.guest.vmid.to_string();
        self.h
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
            .map(|r| r.params)
            .filter(|p| p.iter().any(|(k, v)| k == "vmid" && *v == vmid))
            .filter(|p| p.iter().any(|(k, v)| k == "storage" && v == storage))
            .collect()
    }

    /// Sets both clocks to `to` and waits until the simulator saw `local` and `pbs` vzdumps
    /// and no run is in progress.
    async fn at(&self, to: Timestamp, local: usize, pbs: usize) {
        self.h.sim.set_time(to);
        self.clock.set(to);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let idle = (0..2).all(|tier| {
                self.backups
                    .status_of(&self.guest.guest_id, tier)
                    .is_none_or(|r| r.phase.is_terminal())
            });
            let seen = (
                self.vzdumps("local").len(),
                self.vzdumps(self.pbs.as_str()).len(),
            );
            if seen == (local, pbs) && idle {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "at {to}: saw (local, pbs) = {seen:?}, wanted {:?}",
                (local, pbs)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The guest's archives on `storage`.
    fn archives(&self, storage: &str) -> Vec<String> {
        let vmid = self.guest.vmid.get();
        self.h
            .sim
            .storage_volumes(storage)
            .into_iter()
            .filter(|v| v.contains(&format!("-{vmid}-")) || v.contains(&format!("/{vmid}/")))
            .collect()
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

fn day(d: i64, hh_mm: &str) -> Timestamp {
    let base: Timestamp = format!("2026-03-02T{hh_mm}:30Z").parse().unwrap();
    base.checked_add(jiff::SignedDuration::from_hours(24 * d))
        .unwrap()
}

fn prune_of(params: &[(String, String)]) -> Option<&str> {
    params
        .iter()
        .find(|(k, _)| k == "prune-backups")
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_week_of_two_tiers_keeps_what_each_tier_retains() {
    let local = keep(0, 3);
    let pbs = keep(2, 0);
    let plan = tiers::plan(
        &desired(local, pbs),
        None,
        Some(&floor(keep(0, 2), keep(1, 0))),
        &StorageId::new("local").unwrap(),
        0,
    );
    let rig = Rig::start("2026-03-02T00:00:00Z", plan).await;
    for d in 0..7 {
        let n = usize::try_from(d).unwrap() + 1;
        // 02:00 is the first tier's; PBS waits for 03:00.
        rig.at(day(d, "02:00"), n, n - 1).await;
        rig.at(day(d, "03:00"), n, n).await;
    }
    // keep-daily=3 on the local storage, keep-last=2 on PBS: what vzdump's pruning leaves.
    let kept_local = rig.archives("local");
    assert_eq!(kept_local.len(), 3, "{kept_local:?}");
    for d in ["03_06", "03_07", "03_08"] {
        assert!(
            kept_local.iter().any(|v| v.contains(d)),
            "{d} in {kept_local:?}"
        );
    }
    let kept_pbs = rig.archives(rig.pbs.as_str());
    assert_eq!(
        kept_pbs,
        vec![
            format!(
                "{}:backup/ct/{}/2026-03-07T03:00:30Z",
                rig.pbs, rig.guest.vmid
            ),
            format!(
                "{}:backup/ct/{}/2026-03-08T03:00:30Z",
                rig.pbs, rig.guest.vmid
            ),
        ]
    );
    // Each tier's vzdump carried its own retention.
    assert!(
        rig.vzdumps("local")
            .iter()
            .all(|p| prune_of(p) == Some("keep-daily=3"))
    );
    assert!(
        rig.vzdumps(rig.pbs.as_str())
            .iter()
            .all(|p| prune_of(p) == Some("keep-last=2"))
    );
    // Journaled per tier, reported under the PBS target's durable id.
    let last = rig.h.journal.last_backups().await.unwrap();
    let mine: Vec<_> = last
        .iter()
        .filter(|b| b.guest_id == rig.guest.guest_id)
        .collect();
    assert_eq!(mine.len(), 2, "{mine:?}");
    let offsite = mine.iter().find(|b| b.tier == Some(1)).unwrap();
    assert!(offsite.ok);
    assert_eq!(offsite.target.as_deref(), Some(PBS));
    assert_eq!(offsite.storage, rig.pbs.as_str());
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_shorter_retention_prunes_nothing() {
    // The hub asks for keep-last=1 on both tiers; no floor was ever signed.
    let plan = tiers::plan(
        &desired(keep(1, 0), keep(1, 0)),
        None,
        None,
        &StorageId::new("local").unwrap(),
        0,
    );
    let rig = Rig::start("2026-03-02T00:00:00Z", plan).await;
    for d in 0..3 {
        let n = usize::try_from(d).unwrap() + 1;
        rig.at(day(d, "02:00"), n, n - 1).await;
        rig.at(day(d, "03:00"), n, n).await;
    }
    assert_eq!(rig.archives("local").len(), 3);
    assert_eq!(rig.archives(rig.pbs.as_str()).len(), 3);
    assert!(
        rig.vzdumps("local")
            .iter()
            .all(|p| prune_of(p) == Some("keep-all=1"))
    );
    // A signed floor below what the hub asks lets the hub's retention through.
    let signed = tiers::plan(
        &desired(keep(1, 0), keep(1, 0)),
        None,
        Some(&floor(keep(1, 0), keep(1, 0))),
        &StorageId::new("local").unwrap(),
        0,
    );
    rig.plan.send_replace(signed);
    rig.at(day(3, "02:00"), 4, 3).await;
    rig.at(day(3, "03:00"), 4, 4).await;
    assert_eq!(rig.archives("local").len(), 1);
    assert_eq!(rig.archives(rig.pbs.as_str()).len(), 1);
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_local_tier_gone_pbs_still_gets_its_backups() {
    // The first tier on the NFS vzdump target this time, so it can be lost.
    let mut d = desired(keep(0, 3), keep(2, 0));
    let policy = TargetPolicy {
        schedule: None,
        retention: Retention::default(),
        default: false,
        schedulable: true,
    };
    d.storage.push(target(
        StorageType::Nfs,
        NAS,
        StorageRole::VzdumpTarget,
        policy,
    ));
    d.backup_policy.target = Some(NAS.into());
    let mut f = floor(keep(0, 3), keep(2, 0));
    f.tiers[0].target = Some(NAS.into());
    let plan = tiers::plan(&d, None, Some(&f), &StorageId::new("local").unwrap(), 0);
    let nas = storage_id_of(StorageType::Nfs, NAS);
    assert_eq!(plan.tiers[0].storage, nas);
    let rig = Rig::start("2026-03-02T00:00:00Z", plan).await;
    let count = |rig: &Rig| rig.vzdumps(nas.as_str()).len();
    rig.h.sim.set_time(day(0, "02:00"));
    rig.clock.set(day(0, "02:00"));
    wait_for("the first tier's backup on day 0", || count(&rig) == 1).await;
    rig.at(day(0, "03:00"), 0, 1).await;
    // The NAS drops off the network.
    rig.h.sim.set_remote_reachable("nas.example", false);
    rig.h.sim.set_time(day(1, "02:00"));
    rig.clock.set(day(1, "02:00"));
    wait_for("the first tier's attempt on day 1", || count(&rig) == 2).await;
    rig.at(day(1, "03:00"), 0, 2).await;
    let last = rig.h.journal.last_backups().await.unwrap();
    let mine: Vec<_> = last
        .iter()
        .filter(|b| b.guest_id == rig.guest.guest_id)
        .collect();
    let local = mine.iter().find(|b| b.tier == Some(0)).unwrap();
    let offsite = mine.iter().find(|b| b.tier == Some(1)).unwrap();
    assert!(!local.ok, "{local:?}");
    assert_eq!(local.target.as_deref(), Some(NAS));
    assert!(local.error.is_some());
    assert!(
        local.last_ok_at.is_some(),
        "the day before's backup is remembered"
    );
    assert!(offsite.ok, "{offsite:?}");
    assert_eq!(rig.archives(rig.pbs.as_str()).len(), 2);
    rig.shutdown().await;
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
