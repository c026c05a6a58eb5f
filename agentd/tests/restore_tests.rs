//! A month of restore tests against the simulator in seconds: the tester restores a guest's
//! newest backup into a scratch guest inside the policy's window, once per interval,
//! rotating through the tiers; isolates it (every link down, no mount point); starts it;
//! runs the guest's own restore check inside it through the helper's real `restore_check`
//! (with the simulator's `pct`); destroys it. A host short of memory skips the test and says
//! so once; a test over its timeout fails and is cleaned up; a test the agent stopped in the
//! middle is cleaned up at the next start and recorded `interrupted`. An archive whose data
//! is corrupt boots and fails its check; a guest without a check, or an agent without a
//! helper, ends `not_checked`, never `passed`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::guest_check;
use crate::localapi_support;
use crate::two_tiers;

use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::clock::ManualClock;
use bosun_agentd::data::backup::tiers::{self, TierPlan};
use bosun_agentd::data::desired::DesiredSnapshot;
use bosun_agentd::data::restore_test::{PassOutcome, RestoreTestConfig, RestoreTester};
use bosun_agentd::links::helper::HelperClient;
use bosun_agentd::ops::journal::TestOutcome;
use bosun_proto::desired::{DesiredState, GuestSpec, Retention, TestWindow};
use bosun_pve::{Pve, StorageId, Vmid};
use jiff::Timestamp;
use localapi_support::Harness;
use localapi_support::fake_helper::FakeHelper;
use tokio::sync::watch;

struct Rig {
    h: Harness,
    clock: ManualClock,
    tester: RestoreTester<bosun_pve::PveClient>,
    pbs: StorageId,
    helper: FakeHelper,
    _desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    _plan: watch::Sender<TierPlan>,
}

/// What the guest and the agent bring to a restore test.
#[derive(Debug, Clone, Copy)]
struct Setup {
    /// The agent has a helper (one that runs the real `restore_check`).
    helper: bool,
    /// The guest installed a restore check before its backups.
    check: bool,
}

const BOTH: Setup = Setup {
    helper: true,
    check: true,
};

fn day(d: i64, hh_mm: &str) -> Timestamp {
    let base: Timestamp = format!("2026-03-02T{hh_mm}:00Z").parse().unwrap();
    base.checked_add(jiff::SignedDuration::from_hours(24 * d))
        .unwrap()
}

/// The harness guest as desired state names it.
fn spec_of(h: &Harness) -> GuestSpec {
    let guest = h.guest(0);
    serde_json::from_value(serde_json::json!({
        "guest_id": guest.guest_id,
        "hostname": "shop",
        "vmid": guest.vmid,
        "customer": { "customer_id": "c1", "display_name": "C1" },
        "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 8 },
        "power": "running",
        "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "0".repeat(64) }
    }))
    .unwrap()
}

impl Rig {
    async fn start(configure: impl FnOnce(&mut RestoreTestConfig)) -> Self {
        Self::start_with(BOTH, configure).await
    }

    async fn start_with(setup: Setup, configure: impl FnOnce(&mut RestoreTestConfig)) -> Self {
        let clock = ManualClock::new(day(0, "01:00"));
        let h = Harness::start_with(localapi_support::Options {
            journal_clock: Some(clock.shared()),
            ..localapi_support::Options::default()
        })
        .await;
        h.sim.set_time(day(0, "01:00"));
        let pbs = two_tiers::register_pbs_with(&h.sim, &*h.pve, Some(&h.pbs_key)).await;
        let mut desired: DesiredState =
            two_tiers::desired(Retention::default(), Retention::default());
        desired.guests = vec![spec_of(&h)];
        desired.restore_test_policy.enabled = true;
        desired.restore_test_policy.interval_days = 7;
        desired.restore_test_policy.timeout_minutes = 30;
        desired.restore_test_policy.window = Some(TestWindow {
            start_hour: 2,
            hours: 4,
        });
        let plan = tiers::plan(&desired, None, None, &StorageId::new("local").unwrap(), 0);
        assert_eq!(plan.tiers.len(), 2);
        let (plan_tx, plan_rx) = watch::channel(plan);
        let (desired_tx, desired_rx) = watch::channel(Some(Arc::new(DesiredSnapshot {
            generation: 1,
            state: desired,
            request_id: None,
            correlation_id: None,
            plan: None,
            refused: Vec::new(),
            unknown_kinds: Vec::new(),
        })));
        // The guest is one this agent created.
        let guest = h.guest(0).clone();
        localapi_support::record_own_guest(&h.journal, &guest.guest_id, guest.vmid).await;
        let mut config = RestoreTestConfig::new(StorageId::new("local-lvm").unwrap());
        config.stay_up = Duration::from_millis(300);
        config.poll = Duration::from_millis(50);
        configure(&mut config);
        let helper_dir = h.dir.path().join("helper");
        std::fs::create_dir_all(&helper_dir).unwrap();
        let helper = FakeHelper::start(&helper_dir);
        helper.use_sim_pct(&helper_dir, &h.sim);
        if setup.check {
            guest_check::install(&h.sim, h.guest(0).vmid).await;
        }
        let tester = RestoreTester::new(
            h.pve.clone(),
            h.journal.clone(),
            clock.shared(),
            desired_rx,
            plan_rx,
            h.board.clone(),
            config,
            h.prover.clone(),
        )
        .with_helper(setup.helper.then(|| HelperClient::socket(&helper.socket)));
        let rig = Self {
            h,
            clock,
            tester,
            pbs,
            helper,
            _desired: desired_tx,
            _plan: plan_tx,
        };
        rig.back_up("local").await;
        let pbs = rig.pbs.clone();
        rig.back_up(pbs.as_str()).await;
        rig.h.sim.clear_requests();
        rig
    }

    /// A real vzdump of the guest to `storage`, journaled as the agent's own backup.
    async fn back_up(&self, storage: &str) -> String {
        let guest = self.h.guest(0);
        localapi_support::journaled_backup(
            &self.h.pve,
            &self.h.journal,
            &self.h.prover,
            &guest.guest_id,
            guest.vmid,
            storage,
        )
        .await
    }

    fn at(&self, to: Timestamp) {
        self.h.sim.set_time(to);
        self.clock.set(to);
    }

    /// Restores the simulator received, with their storage (archive's) and params.
    fn restores(&self) -> Vec<Vec<(String, String)>> {
        self.h
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/lxc"))
            .map(|r| r.params)
            .filter(|p| p.iter().any(|(k, v)| k == "restore" && v == "1"))
            .collect()
    }

    /// Only the harness guest is left.
    fn only_the_guest_left(&self) {
        let harness: Vec<u32> = self.h.guests.iter().map(|g| g.vmid).collect();
        assert_eq!(self.h.sim.guest_ids(), harness);
    }
}

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_month_of_restore_tests_rotates_tiers_inside_the_window() {
    let mut rig = Rig::start(|_| {}).await;
    // 01:00 is outside the 02:00–06:00 window.
    assert_eq!(rig.tester.pass().await, PassOutcome::Idle);
    let mut tiers_tested = Vec::new();
    for week in 0..5 {
        rig.at(day(7 * week, "02:30"));
        let outcome = rig.tester.pass().await;
        assert_eq!(
            outcome,
            PassOutcome::Tested(TestOutcome::Passed),
            "week {week}"
        );
        rig.only_the_guest_left();
        // Not due again the next day, even inside the window.
        rig.at(day(7 * week + 1, "03:00"));
        assert_eq!(rig.tester.pass().await, PassOutcome::Idle, "week {week}");
        let tests = rig.h.journal.last_restore_tests().await.unwrap();
        let newest = tests.iter().max_by_key(|t| t.finished_at).unwrap();
        tiers_tested.push(newest.result.storage.clone());
    }
    let pbs = rig.pbs.as_str().to_owned();
    assert_eq!(
        tiers_tested,
        vec![
            "local".to_owned(),
            pbs.clone(),
            "local".into(),
            pbs,
            "local".into()
        ]
    );
    // Every scratch restore: fresh MACs, a scratch name, never started by the restore.
    let restores = rig.restores();
    assert_eq!(restores.len(), 5);
    for r in &restores {
        assert_eq!(param(r, "unique"), Some("1"));
        assert_eq!(param(r, "start"), None);
        assert!(param(r, "hostname").unwrap().starts_with("restore-test-"));
        assert_eq!(param(r, "onboot"), Some("0"));
    }
    // Every link was taken down before the scratch guest first started.
    let log = rig.h.sim.requests();
    let isolations: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, r)| r.method == "PUT" && r.path.ends_with("/config"))
        .filter(|(_, r)| param(&r.params, "net0").is_some_and(|n| n.contains("link_down=1")))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(isolations.len(), 5);
    let start_of = |i: usize, path: &str| {
        log[i].method == "POST" && log[i].path == format!("{path}/status/start")
    };
    for at in isolations {
        let path = log[at].path.trim_end_matches("/config").to_owned();
        let vmid = path.rsplit('/').next().unwrap().to_owned();
        // The restore that made this scratch guest: the last one of its vmid before `at`.
        let restored = (0..at)
            .rev()
            .find(|i| {
                log[*i].method == "POST"
                    && log[*i].path.ends_with("/lxc")
                    && param(&log[*i].params, "vmid") == Some(vmid.as_str())
            })
            .expect("the scratch guest was restored");
        assert!(
            !(restored..at).any(|i| start_of(i, &path)),
            "{path} started before its links were down"
        );
        assert!(
            (at..log.len()).any(|i| start_of(i, &path)),
            "{path} never started"
        );
    }
    let status = rig.h.board.status(&rig.h.guest(0).guest_id);
    assert_eq!(status.state, "passed");
    // Each test ran the guest's own check, in its scratch guest, never in the guest itself.
    let checked = rig.helper.restore_checks();
    assert_eq!(checked.len(), 5, "{checked:?}");
    assert!(!checked.contains(&rig.h.guest(0).vmid), "{checked:?}");
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_short_of_memory_skips_and_says_so_once() {
    let mut rig = Rig::start(|c| c.min_free_memory_mib = 1 << 30).await;
    rig.at(day(0, "02:30"));
    for _ in 0..3 {
        match rig.tester.pass().await {
            PassOutcome::Skipped(why) => assert!(why.contains("memory short"), "{why}"),
            other => panic!("expected a skip, got {other:?}"),
        }
    }
    assert!(rig.restores().is_empty(), "nothing reached Proxmox");
    let skips = rig
        .h
        .journal
        .audit_since(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event == "restore_test.skipped")
        .count();
    assert_eq!(skips, 1);
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_workers_are_busy_skips_the_test() {
    // Every worker slot counts as taken: no restore test starts.
    let mut rig = Rig::start(|c| c.max_active_tasks = 0).await;
    rig.at(day(0, "02:30"));
    match rig.tester.pass().await {
        PassOutcome::Skipped(why) => assert!(why.contains("node busy"), "{why}"),
        other => panic!("expected a skip, got {other:?}"),
    }
    assert!(rig.restores().is_empty(), "nothing reached Proxmox");
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_over_its_timeout_fails_and_leaves_no_scratch_guest() {
    // One policy minute lasts 5 ms: the restore cannot finish in the 1 "minute" allowed.
    let mut rig = Rig::start(|c| c.minute = Duration::from_millis(5)).await;
    rig.at(day(0, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::Failed)
    );
    rig.only_the_guest_left();
    let tests = rig.h.journal.last_restore_tests().await.unwrap();
    let detail = tests[0].result.detail.clone().unwrap();
    assert!(detail.contains("timed out"), "{detail}");
    assert_eq!(rig.h.board.status(&rig.h.guest(0).guest_id).state, "failed");
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scratch_guest_that_dies_after_its_start_fails_the_test() {
    let mut rig = Rig::start(|c| c.stay_up = Duration::from_secs(3)).await;
    rig.at(day(0, "02:30"));
    let sim = rig.h.sim.clone();
    let pve = rig.h.pve.clone();
    let guests: Vec<u32> = rig.h.guests.iter().map(|g| g.vmid).collect();
    // Every scratch guest dies as soon as it runs (stopped from outside).
    let killer = tokio::spawn(async move {
        loop {
            for vmid in sim.guest_ids() {
                if !guests.contains(&vmid) && sim.guest_running(vmid) == Some(true) {
                    let _ = pve.stop_ct(Vmid::new(vmid).unwrap()).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let outcome = rig.tester.pass().await;
    killer.abort();
    assert_eq!(outcome, PassOutcome::Tested(TestOutcome::Failed));
    rig.only_the_guest_left();
    let tests = rig.h.journal.last_restore_tests().await.unwrap();
    let detail = tests[0].result.detail.clone().unwrap();
    assert!(detail.contains("stopped"), "{detail}");
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_stopped_in_the_middle_is_cleaned_up_at_the_next_start() {
    let rig = Rig::start(|c| c.stay_up = Duration::from_secs(30)).await;
    rig.at(day(0, "02:30"));
    let Rig { h, mut tester, .. } = rig;
    let run = tokio::spawn(async move { tester.pass().await });
    // The agent stops while the scratch guest runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let scratch: Vec<u32> = h
            .sim
            .guest_ids()
            .into_iter()
            .filter(|v| h.guests.iter().all(|g| g.vmid != *v))
            .collect();
        if scratch
            .iter()
            .any(|v| h.sim.guest_running(*v) == Some(true))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no scratch guest ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.abort();
    let _ = run.await;
    let harness: Vec<u32> = h.guests.iter().map(|g| g.vmid).collect();
    assert_eq!(
        h.sim.guest_ids().len(),
        harness.len() + 1,
        "the scratch guest is left running"
    );
    let unfinished = bosun_agentd::ops::operation::replay::sort(&h.journal)
        .await
        .unwrap();
    assert_eq!(unfinished.restore_tests.len(), 1);
    let closed = bosun_agentd::data::restore_test::close_interrupted(
        &*h.pve,
        &h.journal,
        unfinished.restore_tests,
    )
    .await;
    assert_eq!(closed, 1);
    assert_eq!(h.sim.guest_ids(), harness);
    let tests = h.journal.last_restore_tests().await.unwrap();
    assert_eq!(tests[0].result.outcome, TestOutcome::Interrupted);
    assert_eq!(tests[0].result.storage, "local");
    // Nothing scratch is left in the journal either.
    assert!(
        h.journal
            .all_provenance()
            .await
            .unwrap()
            .iter()
            .all(|p| !p.is_scratch())
    );
    // Exactly one destroy reached Proxmox: the scratch guest's, never the customer's.
    let destroys = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/lxc/"))
        .map(|r| r.path)
        .collect::<Vec<_>>();
    assert_eq!(destroys.len(), 1, "{destroys:?}");
    assert!(
        harness
            .iter()
            .all(|v| !destroys[0].ends_with(&format!("/lxc/{v}"))),
        "{destroys:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_archive_fails_its_restore_test_and_leaves_nothing() {
    let mut rig = Rig::start(|_| {}).await;
    // The newest local backup was taken mid-upgrade: it restores but cannot boot.
    let broken = rig.back_up("local").await;
    rig.h
        .sim
        .damage_archive(&broken, bosun_pvesim::ArchiveDamage::NoInit)
        .unwrap();
    rig.at(day(0, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::Failed)
    );
    rig.only_the_guest_left();
    let tests = rig.h.journal.last_restore_tests().await.unwrap();
    assert_eq!(tests[0].result.archive.as_deref(), Some(broken.as_str()));
    let detail = tests[0].result.detail.clone().unwrap();
    assert!(detail.contains("startup for container"), "{detail}");
    assert_eq!(rig.h.board.status(&rig.h.guest(0).guest_id).state, "failed");
    // An unreadable PBS archive fails the next week's test on that tier the same way.
    let pbs_archive = rig
        .h
        .journal
        .good_archives(
            rig.h.guest(0).guest_id.clone(),
            rig.pbs.as_str().to_owned(),
            1,
        )
        .await
        .unwrap()[0]
        .archive
        .clone();
    rig.h
        .sim
        .damage_archive(&pbs_archive, bosun_pvesim::ArchiveDamage::Unreadable)
        .unwrap();
    rig.at(day(7, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::Failed)
    );
    rig.only_the_guest_left();
    rig.h.shutdown().await;
}

/// The newest result of the harness guest, as the journal holds it.
async fn newest(rig: &Rig) -> bosun_agentd::ops::journal::LastRestoreTest {
    rig.h
        .journal
        .last_restore_tests()
        .await
        .unwrap()
        .into_iter()
        .max_by_key(|t| t.finished_at)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_corrupt_data_boots_and_fails_its_restore_check() {
    let mut rig = Rig::start(|_| {}).await;
    // The newest local backup holds the app's data damaged; its init is whole.
    let corrupt = rig.back_up("local").await;
    rig.h
        .sim
        .damage_archive(
            &corrupt,
            bosun_pvesim::ArchiveDamage::CorruptData {
                path: guest_check::DATA.to_owned(),
            },
        )
        .unwrap();
    rig.at(day(0, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::Failed)
    );
    rig.only_the_guest_left();
    let test = newest(&rig).await;
    assert_eq!(test.result.archive.as_deref(), Some(corrupt.as_str()));
    let detail = test.result.detail.clone().unwrap();
    assert_eq!(
        detail,
        format!(
            "the guest's restore check exited with status 1: {}: FAILED | \
             sha256sum: WARNING: 1 computed checksum did NOT match",
            guest_check::DATA
        )
    );
    // It booted and stayed up: only the check failed, inside the scratch guest.
    let steps: Vec<String> = rig
        .h
        .journal
        .steps(test.op_id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(steps.iter().any(|s| s == "stayed_up"), "{steps:?}");
    assert!(steps.iter().any(|s| s == "restore_check"), "{steps:?}");
    let checked = rig.helper.restore_checks();
    assert_eq!(checked.len(), 1);
    assert_ne!(checked[0], rig.h.guest(0).vmid);
    let status = rig.h.board.status(&rig.h.guest(0).guest_id);
    assert_eq!(status.state, "failed");
    assert!(
        status.message.contains("orders.db: FAILED"),
        "{}",
        status.message
    );
    // The hub hears a failure with the check's words.
    let reports = bosun_agentd::links::hub::report::restore_tests(&rig.h.journal).await;
    let report = reports
        .iter()
        .find(|r| r.tier.as_deref() == Some("local"))
        .unwrap();
    assert_eq!(
        report.outcome,
        Some(bosun_proto::report::RestoreTestOutcome::Failed)
    );
    assert!(!report.passed);
    assert!(
        report.detail.contains("orders.db: FAILED"),
        "{}",
        report.detail
    );

    // The next week's test, from the PBS tier's whole archive, passes its check again.
    rig.at(day(7, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::Passed)
    );
    rig.only_the_guest_left();
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_without_a_restore_check_is_booted_not_checked_never_passed() {
    let mut rig = Rig::start_with(
        Setup {
            helper: true,
            check: false,
        },
        |_| {},
    )
    .await;
    rig.at(day(0, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::NotChecked)
    );
    rig.only_the_guest_left();
    assert_eq!(rig.helper.restore_checks().len(), 1, "the helper looked");
    let test = newest(&rig).await;
    assert_eq!(
        test.result.detail.as_deref(),
        Some(
            "booted, not checked: the guest installs no restore check at /etc/bosun/restore-check"
        )
    );
    assert_eq!(test.last_passed_at, None, "not a pass");
    let status = rig.h.board.status(&rig.h.guest(0).guest_id);
    assert_eq!(status.state, "not_checked");
    assert_eq!(status.last.as_ref().map(|l| l.passed), Some(false));
    let reports = bosun_agentd::links::hub::report::restore_tests(&rig.h.journal).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0].outcome,
        Some(bosun_proto::report::RestoreTestOutcome::NotChecked)
    );
    assert!(!reports[0].passed);
    assert_eq!(reports[0].last_passed_at, None);
    // Not due again the next day: the test ran, its result is just not a pass.
    rig.at(day(1, "03:00"));
    assert_eq!(rig.tester.pass().await, PassOutcome::Idle);
    rig.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_helper_boots_the_guest_but_does_not_check_it() {
    let mut rig = Rig::start_with(
        Setup {
            helper: false,
            check: true,
        },
        |_| {},
    )
    .await;
    rig.at(day(0, "02:30"));
    assert_eq!(
        rig.tester.pass().await,
        PassOutcome::Tested(TestOutcome::NotChecked)
    );
    rig.only_the_guest_left();
    assert!(rig.helper.restore_checks().is_empty());
    let detail = newest(&rig).await.result.detail.unwrap();
    assert!(
        detail.starts_with("booted, not checked: no [helper]"),
        "{detail}"
    );
    assert_eq!(
        rig.h.board.status(&rig.h.guest(0).guest_id).state,
        "not_checked"
    );
    rig.h.shutdown().await;
}
