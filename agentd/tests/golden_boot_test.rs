//! A new golden build's boot test against the simulator: the build's archive restored into a
//! scratch guest (recorded scratch before Proxmox is asked, every link down), started, seen
//! running, destroyed; a base that does not start fails the test and leaves nothing; a test
//! the agent was stopped in is cleaned up at the next start and closed failed, and no
//! customer guest is ever touched.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::guests::golden_build::boot_test::{BootTest, BootTestError, BootTester};
use bosun_agentd::ops::journal::{GoldenBuild, OpStatus};
use bosun_pve::StorageId;
use bosun_pvesim::FaultConfig;
use localapi_support::Harness;

fn build_of(h: &Harness) -> GoldenBuild {
    let endpoint = h.sim.endpoint();
    GoldenBuild {
        volid: endpoint.golden_volid.clone(),
        sha256: endpoint.golden_sha256.clone(),
        size: 4096,
        version: "2026.11-1".into(),
        controller_digest: format!("sha256:{}", "1".repeat(64)),
        built_at: jiff::Timestamp::now(),
        recipe_serial: 0,
    }
}

fn tester(h: &Harness, stay_up: Duration) -> BootTester<bosun_pve::PveClient> {
    let mut tester = BootTester::new(
        Arc::clone(&h.pve),
        h.journal.clone(),
        StorageId::new("local-lvm").unwrap(),
    );
    tester.stay_up = stay_up;
    tester.poll = Duration::from_millis(100);
    tester.timeout = Duration::from_secs(60);
    tester
}

fn customers(h: &Harness) -> Vec<u32> {
    h.guests.iter().map(|g| g.vmid).collect()
}

/// The DELETEs of containers that reached Proxmox.
fn destroys(h: &Harness) -> Vec<String> {
    h.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/lxc/"))
        .map(|r| r.path)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_that_boots_passes_and_its_scratch_guest_is_destroyed() {
    let h = Harness::start().await;
    let build = build_of(&h);
    tester(&h, Duration::from_secs(1))
        .boot(&build)
        .await
        .unwrap();
    assert_eq!(h.sim.guest_ids(), customers(&h));
    // Restored from the build onto a vmid that is no customer's, its links put down before
    // the start, then destroyed.
    let restore = h
        .sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .unwrap();
    assert!(
        restore
            .params
            .iter()
            .any(|(k, v)| k == "ostemplate" && *v == build.volid),
        "{restore:?}"
    );
    let isolated = h.sim.requests().into_iter().any(|r| {
        r.method == "PUT"
            && r.path.ends_with("/config")
            && r.params.iter().any(|(_, v)| v.contains("link_down=1"))
    });
    assert!(isolated, "every link is down before the start");
    let destroyed = destroys(&h);
    assert_eq!(destroyed.len(), 1, "{destroyed:?}");
    assert!(
        customers(&h)
            .iter()
            .all(|v| !destroyed[0].ends_with(&format!("/lxc/{v}")))
    );
    assert!(
        h.journal
            .all_provenance()
            .await
            .unwrap()
            .iter()
            .all(|p| !p.is_scratch()),
        "no scratch record is left"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_that_does_not_start_fails_and_leaves_nothing() {
    let h = Harness::start().await;
    h.sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzstart".into()],
        ..FaultConfig::default()
    });
    let err = tester(&h, Duration::from_secs(1))
        .boot(&build_of(&h))
        .await
        .unwrap_err();
    assert!(matches!(err, BootTestError::Step { .. }), "{err}");
    assert_eq!(h.sim.guest_ids(), customers(&h));
    assert_eq!(destroys(&h).len(), 1);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_test_stopped_in_the_middle_is_cleaned_up_at_the_next_start() {
    let h = Harness::start().await;
    let build = build_of(&h);
    let running = tester(&h, Duration::from_secs(30));
    let run = tokio::spawn(async move { running.boot(&build).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let scratch_running = h
            .sim
            .guest_ids()
            .into_iter()
            .filter(|v| !customers(&h).contains(v))
            .any(|v| h.sim.guest_running(v) == Some(true));
        if scratch_running {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no scratch guest ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.abort();
    let _ = run.await;
    assert_eq!(h.sim.guest_ids().len(), customers(&h).len() + 1);
    let unfinished = bosun_agentd::ops::operation::replay::sort(&h.journal)
        .await
        .unwrap();
    assert_eq!(unfinished.restore_tests.len(), 1);
    let op_id = unfinished.restore_tests[0].operation.op_id;
    let closed = bosun_agentd::data::restore_test::close_interrupted(
        &*h.pve,
        &h.journal,
        unfinished.restore_tests,
    )
    .await;
    assert_eq!(closed, 1);
    assert_eq!(h.sim.guest_ids(), customers(&h));
    let op = h.journal.operation(op_id).await.unwrap().unwrap();
    assert_eq!(op.status, OpStatus::Failed);
    // Not a restore test of any guest.
    assert!(h.journal.last_restore_tests().await.unwrap().is_empty());
    assert_eq!(destroys(&h).len(), 1);
    h.shutdown().await;
}
