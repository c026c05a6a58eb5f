//! A day of a two-tier backup policy on a host with 50 running guests, for
//! `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-tests --test integration -- --ignored --nocapture agent_tier_bench::`).
//!
//! The agent's `BackupService` (with tiers) and `PolicyScheduler` run in this
//! process against `bosun-pvesim` at `SimConfig::fast()` (a vzdump takes 0.2 s).
//! The first tier backs up to `local` daily at 02:00 (keep-daily 7), the second to
//! a PBS target daily at 03:00 (keep-daily 14). Both clocks are moved to 02:00:30
//! and then to 03:00:30 of one day; measured: the wall time until every backup is
//! done and journaled, the vzdump requests the simulator saw (one at a time), the
//! journal's size, and the process's peak RSS and CPU time over the day. The
//! simulator runs on its own runtime (threads named `pvesim`), so the CPU time is
//! split between it and the rest (the agent, its journal thread and this test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::two_tiers;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_agentd::clock::ManualClock;
use bosun_agentd::data::backup::scheduler::GuestSourceError;
use bosun_agentd::data::backup::tiers;
use bosun_agentd::data::backup::{
    BackupConfig, BackupService, GuestRef, GuestSource, PolicyScheduler, SchedulerConfig,
};
use bosun_agentd::guests::queue::GuestQueue;
use bosun_agentd::ops::journal::JournalHandle;
use bosun_proto::desired::Retention;
use bosun_pve::{
    Op, Pve, PveClient, PveConfig, PveOps, RestoreRequest, RetryPolicy, StorageId, TlsTrust, Vmid,
    VolumeId,
};
use bosun_pvesim::{SimConfig, SimHandle, Simulator};
use jiff::Timestamp;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const GUESTS: u32 = 50;
/// The longest a tier's 50 backups may take before the benchmark fails.
const TIER_LIMIT: Duration = Duration::from_secs(180);

#[derive(Debug)]
struct Guests(Vec<GuestRef>);

impl GuestSource for Guests {
    fn running_guests(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<GuestRef>, GuestSourceError>> + Send + '_>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

fn keep_daily(days: u32) -> Retention {
    Retention {
        keep_daily: days,
        ..Retention::default()
    }
}

/// The simulator on a runtime of its own, so its threads can be told apart.
struct SimRuntime {
    sim: SimHandle,
    runtime: Option<tokio::runtime::Runtime>,
}

impl SimRuntime {
    async fn start(config: SimConfig) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pvesim")
            .enable_all()
            .build()
            .unwrap();
        let sim = runtime
            .spawn(async move {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                Simulator::start(config, listener).await.unwrap()
            })
            .await
            .unwrap();
        Self {
            sim,
            runtime: Some(runtime),
        }
    }

    async fn shutdown(self) {
        self.sim.clone().shutdown().await;
    }
}

impl Drop for SimRuntime {
    fn drop(&mut self) {
        // Dropped inside the test's runtime, where it must not block.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// CPU ticks (user + system) from a `/proc/.../stat` line, and the thread's name.
fn stat_ticks(stat: &str) -> (String, u64) {
    let name = stat
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map_or_else(String::new, |(name, _)| name.to_owned());
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (name, ticks)
}

/// CPU ticks of the whole process, and of its live threads named `pvesim`.
fn cpu_ticks() -> (u64, u64) {
    let (_, total) = stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap());
    let mut sim = 0;
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = entry.unwrap().path().join("stat");
        // A thread may end between the listing and the read.
        if let Ok(stat) = std::fs::read_to_string(path) {
            let (name, ticks) = stat_ticks(&stat);
            if name.starts_with("pvesim") {
                sim += ticks;
            }
        }
    }
    (total, sim)
}

/// A `/proc/self/status` field in kB.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// The journal as SQLite sees it: its size in bytes (pages in use, wherever they are
/// written), the WAL file's size, and the rows of operations, steps and backup outcomes.
#[derive(Debug, Clone, Copy)]
struct JournalFigures {
    bytes: u64,
    wal_bytes: u64,
    operations: u64,
    steps: u64,
    outcomes: u64,
}

fn journal_figures(path: &Path) -> JournalFigures {
    let db = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    let one = |sql: &str| {
        let n: i64 = db.query_row(sql, [], |r| r.get(0)).unwrap();
        u64::try_from(n).unwrap()
    };
    JournalFigures {
        bytes: one("PRAGMA page_count") * one("PRAGMA page_size"),
        wal_bytes: std::fs::metadata(path.with_file_name("journal.db-wal")).map_or(0, |m| m.len()),
        operations: one("SELECT count(*) FROM operations"),
        steps: one("SELECT count(*) FROM op_steps"),
        outcomes: one("SELECT count(*) FROM backup_outcomes"),
    }
}

/// The vzdump requests the simulator saw so far: (vmid, storage, prune-backups).
fn vzdumps(sim: &SimHandle) -> Vec<(String, String, String)> {
    let param = |params: &[(String, String)], key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .map(|r| {
            assert_eq!(r.status, 200, "a vzdump was refused: {r:?}");
            (
                param(&r.params, "vmid"),
                param(&r.params, "storage"),
                param(&r.params, "prune-backups"),
            )
        })
        .collect()
}

/// Checks from the request log that no vzdump task was followed after the next vzdump
/// was sent (the agent polls a task until it has stopped), and from the tasks' logs that
/// no vzdump ever waited for the node's global lock. Gives the vzdump UPIDs in order.
fn assert_one_vzdump_at_a_time(sim: &SimHandle) -> Vec<String> {
    let mut upids: Vec<String> = Vec::new();
    let mut posts = 0usize;
    // For each UPID: the number of vzdump requests sent before its first and last poll.
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in sim.requests() {
        if r.method == "POST" && r.path.ends_with("/vzdump") {
            posts += 1;
            continue;
        }
        let Some(upid) = r
            .path
            .split('/')
            .find(|s| s.starts_with("UPID:") && s.contains(":vzdump:"))
        else {
            continue;
        };
        let entry = seen.entry(upid.to_owned()).or_insert_with(|| {
            upids.push(upid.to_owned());
            (posts, posts)
        });
        entry.1 = posts;
    }
    for (n, upid) in upids.iter().enumerate() {
        let (first, last) = seen[upid];
        assert_eq!(
            (first, last),
            (n + 1, n + 1),
            "vzdump task {upid} (number {}) was followed while another was sent",
            n + 1
        );
        let log = sim.task_log(upid).unwrap();
        assert!(
            !log.iter().any(|l| l.contains("trying to get global lock")),
            "{upid} waited for another vzdump: {log:?}"
        );
        assert_eq!(sim.task_exitstatus(upid).as_deref(), Some("OK"), "{upid}");
    }
    assert_eq!(upids.len(), posts, "every vzdump sent was followed");
    upids
}

/// Waits until every guest's run on `tier` has ended; gives the time it took.
async fn tier_done(backups: &BackupService, guests: &[GuestRef], tier: u32) -> Duration {
    let started = Instant::now();
    loop {
        let open = guests
            .iter()
            .filter(|g| {
                backups
                    .status_of(&g.guest_id, tier)
                    .is_none_or(|r| !r.phase.is_terminal())
            })
            .count();
        if open == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < TIER_LIMIT,
            "tier {tier}: {open} of {} backups not done after {TIER_LIMIT:?}",
            guests.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Restores `GUESTS` running containers from the simulator's golden archive.
async fn restore_guests(sim: &SimHandle, pve: &Arc<PveClient>) -> Vec<GuestRef> {
    let golden = sim.endpoint().golden_volid.clone();
    let mut restores = tokio::task::JoinSet::new();
    for n in 0..GUESTS {
        let pve = pve.clone();
        let golden = golden.clone();
        restores.spawn(async move {
            let vmid = Vmid::new(101 + n).unwrap();
            let mut request = RestoreRequest::new(
                vmid,
                VolumeId::new(golden).unwrap(),
                StorageId::new("local-lvm").unwrap(),
            );
            request.start = true;
            request.unique = true;
            let upid = pve.restore_ct(&request).await.unwrap();
            pve.wait_task(Op::RestoreCt, &upid).await.unwrap();
            GuestRef {
                guest_id: format!("0195a0e0-0000-7000-8000-{:012}", n + 1),
                vmid,
                kind: bosun_proto::desired::GuestKind::Lxc,
            }
        });
    }
    let mut guests = restores.join_all().await;
    guests.sort_by_key(|g| g.vmid.get());
    for g in &guests {
        if sim.guest_running(g.vmid.get()) != Some(true) {
            let upid = pve.start_ct(g.vmid).await.unwrap();
            pve.wait_task(Op::StartCt, &upid).await.unwrap();
        }
    }
    guests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn two_tier_day_figures() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let midnight: Timestamp = "2026-03-02T00:00:00Z".parse().unwrap();
    let sim_config = SimConfig::fast();
    let task_time = sim_config.durations.vzdump.mul_f64(sim_config.time_scale);
    let sim_rt = SimRuntime::start(sim_config).await;
    let sim = sim_rt.sim.clone();
    sim.set_time(midnight);
    let clock = ManualClock::new(midnight);
    let endpoint = sim.endpoint().clone();
    let pve = Arc::new(
        PveClient::new(PveConfig {
            base_url: endpoint.url.parse().unwrap(),
            node: bosun_pve::NodeName::new(endpoint.node.clone()).unwrap(),
            token_id: endpoint.tokens.agent.id.clone(),
            token_secret: endpoint.tokens.agent.secret.clone().into(),
            trust: TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
            policy: RetryPolicy::fast(),
        })
        .unwrap(),
    );
    let guests = restore_guests(&sim, &pve).await;
    assert_eq!(guests.len(), usize::try_from(GUESTS).unwrap());

    // The PBS target, registered as the agent would.
    let pbs = two_tiers::register_pbs(&sim, &*pve).await;

    let local = StorageId::new("local").unwrap();
    // Daily at 02:00 on `local` keeping 7 days, daily at 03:00 on PBS keeping 14.
    let desired = two_tiers::desired(keep_daily(7), keep_daily(14));
    let floor = two_tiers::floor(keep_daily(7), keep_daily(14));
    let plan = tiers::plan(&desired, None, Some(&floor), &local, 0);
    assert_eq!(plan.tiers.len(), 2, "{plan:?}");
    assert_eq!(plan.tiers[0].storage, local);
    assert_eq!(plan.tiers[1].storage, pbs);

    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.db");
    let journal = JournalHandle::open(&journal_path, clock.shared())
        .await
        .unwrap();
    let mut config = BackupConfig::new(local.clone());
    config.poll_interval = Duration::from_millis(10);
    config.time_zone = jiff::tz::TimeZone::UTC;
    let (_plan_tx, plan_rx) = watch::channel(plan);
    let backups = BackupService::with_tiers(
        PveOps::shared(pve.clone()),
        journal.clone(),
        GuestQueue::new(8),
        clock.shared(),
        config,
        plan_rx,
        None,
    );
    let (policy_tx, policy_rx) = watch::channel(Some(desired.backup_policy.clone()));
    let scheduler = PolicyScheduler::new(
        backups.clone(),
        Arc::new(Guests(guests.clone())),
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
    // Let the first pass (which reads each guest's listing on both storages) settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(vzdumps(&sim).is_empty(), "nothing is due at midnight");

    // The day.
    let requests_before = sim.requests().len();
    let journal_before = journal_figures(&journal_path);
    let rss_before = status_kb("VmRSS");
    // Resets VmHWM to the current RSS, so the peak is the day's.
    let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let (cpu0, sim0) = cpu_ticks();
    let day = Instant::now();

    let two = "2026-03-02T02:00:30Z".parse().unwrap();
    sim.set_time(two);
    clock.set(two);
    let first = tier_done(&backups, &guests, 0).await;
    let after_first = vzdumps(&sim);
    assert_eq!(after_first.len(), guests.len(), "{after_first:?}");
    assert!(
        guests
            .iter()
            .all(|g| backups.status_of(&g.guest_id, 1).is_none()),
        "no second-tier backup before 03:00"
    );

    let three = "2026-03-02T03:00:30Z".parse().unwrap();
    sim.set_time(three);
    clock.set(three);
    let second = tier_done(&backups, &guests, 1).await;
    let wall = day.elapsed();
    let (cpu1, sim1) = cpu_ticks();
    let hwm = status_kb("VmHWM");
    let rss_after = status_kb("VmRSS");
    let journal_after = journal_figures(&journal_path);
    let day_requests = sim.requests().split_off(requests_before);
    let requests = day_requests.len();
    let task_reads = day_requests
        .iter()
        .filter(|r| r.path.contains("/tasks/UPID:"))
        .count();

    // Exactly one vzdump per guest and tier, each with its tier's retention.
    let sent = vzdumps(&sim);
    assert_eq!(sent.len(), 100, "{sent:?}");
    for (tier, storage, prune) in [
        (&sent[..50], local.as_str(), "keep-daily=7"),
        (&sent[50..], pbs.as_str(), "keep-daily=14"),
    ] {
        let vmids: BTreeSet<&str> = tier.iter().map(|(v, _, _)| v.as_str()).collect();
        assert_eq!(vmids.len(), guests.len(), "one vzdump per guest: {tier:?}");
        assert!(
            tier.iter().all(|(_, s, p)| s == storage && p == prune),
            "{tier:?}"
        );
    }
    let upids = assert_one_vzdump_at_a_time(&sim);
    assert_eq!(upids.len(), 100);

    assert_eq!(
        journal_after.operations - journal_before.operations,
        100,
        "one journaled operation per backup"
    );
    // 100 successful outcomes journaled: tier 0 and tier 1 for each guest.
    let last = journal.last_backups().await.unwrap();
    assert_eq!(last.len(), 100, "{last:?}");
    assert!(last.iter().all(|b| b.ok), "{last:?}");
    for g in &guests {
        for (tier, storage) in [(0, local.as_str()), (1, pbs.as_str())] {
            let found = last
                .iter()
                .find(|b| b.guest_id == g.guest_id && b.tier == Some(tier))
                .unwrap_or_else(|| panic!("no tier {tier} outcome for {}", g.guest_id));
            assert_eq!(found.storage, storage);
            assert!(found.archive.is_some(), "{found:?}");
        }
    }
    for (g, tier) in guests.iter().flat_map(|g| [(g, 0), (g, 1)]) {
        let run = backups.status_of(&g.guest_id, tier).unwrap();
        assert_eq!(run.phase.as_str(), "done", "{run:?}");
    }

    let ticks = |t: u64| Duration::from_millis(t * 10);
    let cpu = ticks(cpu1 - cpu0);
    let sim_cpu = ticks(sim1 - sim0);
    println!(
        "two-tier day, {GUESTS} guests: 100 backups done and journaled in {:.2} s (tier 0 at 02:00: {:.2} s, tier 1 at 03:00: {:.2} s); \
         {} vzdump requests, one at a time, each task {:.2} s: {:.1} ms per backup besides the task; {requests} PVE requests in all, {task_reads} of them task status or log reads",
        wall.as_secs_f64(),
        first.as_secs_f64(),
        second.as_secs_f64(),
        sent.len(),
        task_time.as_secs_f64(),
        (wall.as_secs_f64() - task_time.as_secs_f64() * 100.0) * 10.0,
    );
    println!(
        "journal: {} kB ({} kB before the day; WAL file {} kB), +{} operations, +{} steps, +{} backup outcomes",
        journal_after.bytes / 1024,
        journal_before.bytes / 1024,
        journal_after.wal_bytes / 1024,
        journal_after.operations - journal_before.operations,
        journal_after.steps - journal_before.steps,
        journal_after.outcomes - journal_before.outcomes,
    );
    println!(
        "process over the day: VmHWM {hwm} kB{} (VmRSS {rss_before} kB before, {rss_after} kB after); \
         cpu {:.2} s = {:.1}% of a core (simulator threads {:.2} s, agent and test {:.2} s = {:.1}% of a core)",
        if hwm_reset {
            ""
        } else {
            " (peak since start: VmHWM could not be reset)"
        },
        cpu.as_secs_f64(),
        cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
        sim_cpu.as_secs_f64(),
        (cpu - sim_cpu.min(cpu)).as_secs_f64(),
        (cpu - sim_cpu.min(cpu)).as_secs_f64() / wall.as_secs_f64() * 100.0,
    );

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the scheduler stops")
        .unwrap();
    journal.close().await.unwrap();
    sim_rt.shutdown().await;
}
