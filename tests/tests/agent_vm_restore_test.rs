//! A VM guest's restore test (decision 0120), run the way the agent meets it: the real agent
//! and hub over TLS, a VM provisioned from a base signed for a VM, backed up by a signed plan,
//! its restore-test policy switched on by the desired state. The newest archive is restored
//! into a scratch VM with every link down in the restore request itself, booted, and the
//! guest's own check runs through the guest agent's `exec` in the scratch VM only; the
//! scratch VM is destroyed with `purge`; the hub shows the result. A check that fails fails the
//! test, a scratch VM whose agent never answers fails it without a hang, and an agent killed
//! in the middle of a test leaves no scratch VM once it is started again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::guest_check::{CHECKSUMS, DATA, ORDERS};
use agent_support::vm::{POOL, VmStack, append_config, calls, vm_golden};

use std::time::{Duration, Instant};

use agent_support::crash::{assert_tripped, host_id, journal, kill, log_tail, spawn_agent};
use agent_support::*;
use bosun_proto::report::{RestoreTestOutcome, RestoreTestReport, StateReport};
use bosun_pvesim::{LoggedRequest, SimHandle};
use serde_json::{Value, json};
use sha2::Digest as _;
use uuid::Uuid;

/// Restore tests on the simulator's time: a scratch guest stays up 1 s, a policy minute lasts
/// 1 s (so a scratch VM's guest agent gets 2 s to answer).
const BACKUP: &str = "[backup]\nstorage = \"local\"\nrestore_test_stay_up_ms = 1000\n\
                      restore_test_minute_ms = 1000\n";

/// Where the VM's guest agent lives in the simulated image.
const QGA: &str = "/usr/sbin/qemu-ga";

/// Installs the guest's restore check inside VM `vmid` as its controller does at quiesce time:
/// the checksums of [`ORDERS`], the check verifying them, and `data` as what [`DATA`] holds.
fn install_check(sim: &SimHandle, vmid: u32, data: &[u8]) {
    let sums = format!("{:x}  {DATA}\n", sha2::Sha256::digest(ORDERS));
    let script = format!(
        "#!/bin/sh -e\n# Written by the guest's controller at quiesce time.\n\
         /usr/bin/sha256sum --check --strict --quiet {CHECKSUMS}\n"
    );
    assert!(sim.write_vm_file(vmid, DATA, data, 0o644));
    assert!(sim.write_vm_file(vmid, CHECKSUMS, sums.as_bytes(), 0o644));
    let check = bosun_proto::helper::RESTORE_CHECK_PATH;
    assert!(sim.write_vm_file(vmid, check, script.as_bytes(), 0o755));
}

/// `desired` with a signed plan that backs its guests up to `local` every five seconds.
fn with_backups(mut desired: Value, host: Uuid) -> Value {
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    desired["data_plan"] =
        agent_support::signing::signed_plan(&agent_support::signing::plan_of(&desired, host));
    desired
}

/// `desired` with restore tests on, daily, each at most ten policy minutes.
fn with_restore_tests(mut desired: Value) -> Value {
    desired["restore_test_policy"] =
        json!({ "enabled": true, "interval_days": 1, "timeout_minutes": 10 });
    desired
}

/// Waits until the hub shows an ok backup of `guest` (its archive and proof journaled) on a
/// `vzdump-qemu` archive of `vmid` on `local`.
async fn archived(sim: &SimHandle, hub: &RealHub, (host, guest): (Uuid, Uuid), vmid: u32) {
    let prefix = format!("local:backup/vzdump-qemu-{vmid}-");
    eventually(Duration::from_secs(30), "a vzdump-qemu archive", || {
        let found = sim
            .storage_volumes("local")
            .iter()
            .any(|v| v.starts_with(&prefix));
        async move { found }
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "the hub shows the backup ok",
        || async move {
            let detail = hub.host(host).await;
            let report: Option<StateReport> =
                serde_json::from_value(detail["last_report"].clone()).ok();
            report.is_some_and(|r| r.last_backups.iter().any(|b| b.guest_id == guest && b.ok))
        },
    )
    .await;
}

/// The hub's finished restore test of `guest`, once the hub holds one.
async fn hub_restore_test(hub: &RealHub, host: Uuid, guest: Uuid) -> RestoreTestReport {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let detail = hub.host(host).await;
        let report: Option<StateReport> =
            serde_json::from_value(detail["last_report"].clone()).ok();
        let found = report.and_then(|r| {
            r.restore_tests
                .into_iter()
                .find(|t| t.guest_id == guest && t.outcome.is_some())
        });
        if let Some(test) = found {
            return test;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub shows no finished restore test of {guest}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The VM restores of a scratch VM that reached Proxmox.
fn scratch_restores(sim: &SimHandle) -> Vec<LoggedRequest> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .filter(|r| {
            r.params
                .iter()
                .any(|(k, v)| k == "name" && v.starts_with("restore-test-"))
        })
        .collect()
}

fn param<'a>(request: &'a LoggedRequest, key: &str) -> Option<&'a str> {
    request
        .params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The scratch VM's vmid, from its one restore; that restore sent every link down in the
/// request itself and put the VM in Bosun's pool, and no later config change of the scratch
/// VM brought a link up.
fn scratch_with_links_down(sim: &SimHandle) -> u32 {
    let restores = scratch_restores(sim);
    assert_eq!(restores.len(), 1, "{restores:?}");
    let restore = &restores[0];
    assert_eq!(param(restore, "pool"), Some("bosun"), "{restore:?}");
    assert_eq!(param(restore, "start"), None, "{restore:?}");
    let nets: Vec<&(String, String)> = restore
        .params
        .iter()
        .filter(|(k, _)| k.starts_with("net"))
        .collect();
    assert!(!nets.is_empty(), "no netN sent: {restore:?}");
    for (key, value) in &nets {
        assert!(
            value.split(',').any(|p| p == "link_down=1"),
            "{key} restored with its link up: {value}"
        );
        assert!(
            !value.contains(':'),
            "{key} keeps the archive's MAC: {value}"
        );
    }
    let vmid: u32 = param(restore, "vmid").unwrap().parse().unwrap();
    let config = format!("/nodes/pve/qemu/{vmid}/config");
    for request in sim.requests() {
        if request.method == "PUT" && request.path == config {
            for (key, value) in &request.params {
                assert!(
                    !key.starts_with("net") || value.split(',').any(|p| p == "link_down=1"),
                    "a config change brought {key} up: {value}"
                );
            }
        }
    }
    vmid
}

/// How many guest-agent `exec` and `exec-status` calls reached each VM.
fn execs_per_vm(sim: &SimHandle) -> std::collections::BTreeMap<u32, usize> {
    let mut out = std::collections::BTreeMap::new();
    for request in sim.requests() {
        let Some(rest) = request.path.strip_prefix("/nodes/pve/qemu/") else {
            continue;
        };
        let Some((vmid, call)) = rest.split_once('/') else {
            continue;
        };
        if call == "agent/exec" || call == "agent/exec-status" {
            *out.entry(vmid.parse().unwrap()).or_default() += 1;
        }
    }
    out
}

/// The scratch VM was destroyed as a VM, with `purge`, and never as a container.
fn destroyed_as_a_vm(sim: &SimHandle, scratch: u32) {
    let requests = sim.requests();
    let deleted = requests
        .iter()
        .find(|r| r.method == "DELETE" && r.path == format!("/nodes/pve/qemu/{scratch}"))
        .unwrap_or_else(|| panic!("scratch vm {scratch} was never destroyed"));
    assert_eq!(param(deleted, "purge"), Some("1"), "{deleted:?}");
    assert!(
        !requests
            .iter()
            .any(|r| r.path.starts_with(&format!("/nodes/pve/lxc/{scratch}"))),
        "a container call reached the scratch vm"
    );
}

/// A VM in Bosun's pool that Bosun did not create (an operator's, put there by hand),
/// running with its guest agent.
async fn stranger_in_the_pool(sim: &SimHandle) -> u32 {
    let golden = sim
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.starts_with("local:backup/vzdump-qemu-9001-"))
        .unwrap();
    let stranger = bosun_pve::Vmid::new(4321).unwrap();
    let mut request = bosun_pve::VmRestoreRequest::new(
        stranger,
        bosun_pve::VolumeId::new(golden).unwrap(),
        bosun_pve::StorageId::new("local-lvm".to_owned()).unwrap(),
    );
    request.pool = Some(bosun_pve::PoolId::new("bosun").unwrap());
    request.start = true;
    let root = root_client(sim);
    let upid = bosun_pve::PveQemu::restore_vm(&root, &request)
        .await
        .unwrap();
    bosun_pve::Pve::wait_task(&root, bosun_pve::Op::RestoreVm, &upid)
        .await
        .unwrap();
    stranger.get()
}

/// Backs the stack's VM up by a signed plan, then switches restore tests on; gives the hub's
/// finished test and how long it took from the switch.
async fn backed_up_and_tested(stack: &mut VmStack) -> (RestoreTestReport, Duration) {
    let desired = with_backups(stack.desired.clone(), stack.host);
    stack.put_desired(desired).await;
    let ids = (stack.host, stack.guest);
    archived(&stack.sim, &stack.hub, ids, stack.vmid).await;
    let desired = with_restore_tests(stack.desired.clone());
    let started = Instant::now();
    stack.put_desired(desired).await;
    let test = hub_restore_test(&stack.hub, stack.host, stack.guest).await;
    (test, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_restore_test_runs_the_guests_check_through_its_agent_in_a_scratch_vm_with_links_down()
{
    let mut stack = VmStack::running_with(BACKUP).await;
    let stranger = stranger_in_the_pool(&stack.sim).await;
    install_check(&stack.sim, stack.vmid, ORDERS);
    stack.sim.clear_requests();
    let (test, took) = backed_up_and_tested(&mut stack).await;
    let sim = &stack.sim;

    assert_eq!(test.outcome, Some(RestoreTestOutcome::Passed), "{test:?}");
    let prefix = format!("local:backup/vzdump-qemu-{}-", stack.vmid);
    assert!(
        test.archive
            .as_deref()
            .is_some_and(|a| a.starts_with(&prefix)),
        "{test:?}"
    );
    let scratch = scratch_with_links_down(sim);
    assert_ne!(scratch, stack.vmid);
    // The scratch VM was started, then checked through its own agent: a probe and the check,
    // each an exec and its status; no exec ever reached the guest or the stranger.
    let execs = execs_per_vm(sim);
    assert_eq!(
        execs.keys().copied().collect::<Vec<_>>(),
        vec![scratch],
        "{execs:?}"
    );
    assert!(execs[&scratch] >= 4, "{execs:?}");
    let starts: Vec<_> = calls(sim)
        .into_iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/status/start"))
        .collect();
    assert_eq!(
        starts,
        vec![(
            "POST".to_owned(),
            format!("/nodes/pve/qemu/{scratch}/status/start")
        )]
    );
    destroyed_as_a_vm(sim, scratch);
    let mut left = sim.vm_ids();
    left.sort_unstable();
    let mut want = vec![stack.vmid, stranger];
    want.sort_unstable();
    assert_eq!(left, want, "the scratch vm is gone, the others are kept");
    assert!(sim.guest_ids().is_empty(), "a container was made");
    let journaled = journal(&stack.files.state_dir)
        .last_restore_tests()
        .unwrap();
    let measured = journaled
        .iter()
        .find(|t| t.result.guest_id == stack.guest.to_string())
        .map(|t| t.result.duration_ms)
        .unwrap();
    eprintln!(
        "VM restore test on the simulator: {measured} ms as the agent measured it (1 s of it the \
         scratch VM's stay-up), {took:?} from the policy to the hub's report"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_data_no_longer_matches_its_check_fails_its_restore_test() {
    let mut stack = VmStack::running_with(BACKUP).await;
    install_check(&stack.sim, stack.vmid, b"order 1: 0 chairs\n");
    stack.sim.clear_requests();
    let (test, _) = backed_up_and_tested(&mut stack).await;

    assert_eq!(test.outcome, Some(RestoreTestOutcome::Failed), "{test:?}");
    let detail = test.detail.clone();
    assert!(
        detail.contains("exited with status 1") && detail.contains(&format!("{DATA}: FAILED")),
        "{detail}"
    );
    let scratch = scratch_with_links_down(&stack.sim);
    destroyed_as_a_vm(&stack.sim, scratch);
    assert_eq!(stack.sim.vm_ids(), vec![stack.vmid]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scratch_vm_whose_agent_never_answers_fails_its_test_and_is_destroyed() {
    let mut stack = VmStack::running_with(BACKUP).await;
    install_check(&stack.sim, stack.vmid, ORDERS);
    // The customer removed the guest agent from the VM: its backups hold none either.
    assert!(stack.sim.remove_vm_file(stack.vmid, QGA));
    stack.sim.clear_requests();
    let (test, took) = backed_up_and_tested(&mut stack).await;

    assert_eq!(test.outcome, Some(RestoreTestOutcome::Failed), "{test:?}");
    let detail = test.detail.clone();
    assert!(detail.contains("did not answer within 2 s"), "{detail}");
    let scratch = scratch_with_links_down(&stack.sim);
    assert!(execs_per_vm(&stack.sim).is_empty(), "an exec was sent");
    destroyed_as_a_vm(&stack.sim, scratch);
    assert_eq!(stack.sim.vm_ids(), vec![stack.vmid]);
    // Bounded by the agent's wait, far below the policy's ten minutes.
    assert!(took < Duration::from_secs(30), "{took:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_during_a_vm_restore_test_leaves_no_scratch_vm_after_its_restart() {
    const POINT: &str = "restore_test.restore_check.intent";
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, BACKUP);
    let (_, _, golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, Some(POINT));
    let host = host_id(&files.state_dir).await;
    let guest = Uuid::new_v4();
    let desired = agent_support::vm::desired_of(&[(
        guest,
        "vm-shop",
        bosun_proto::desired::GuestKind::Qemu,
        golden,
    )]);
    hub.put_desired(host, &desired).await;
    eventually(Duration::from_secs(60), "the vm runs", || {
        let running = sim
            .vm_ids()
            .iter()
            .any(|v| sim.vm_running(*v) == Some(true));
        async move { running }
    })
    .await;
    let vmid = sim.vm_ids()[0];
    install_check(&sim, vmid, ORDERS);
    let desired = with_backups(desired, host);
    hub.put_desired(host, &desired).await;
    archived(&sim, &hub, (host, guest), vmid).await;
    sim.clear_requests();
    hub.put_desired(host, &with_restore_tests(desired)).await;
    assert_tripped(&mut child, &files.config_path, POINT).await;
    // Killed with its scratch VM running.
    let scratch = scratch_with_links_down(&sim);
    assert_eq!(sim.vm_running(scratch), Some(true), "{:?}", sim.vm_ids());

    let mut child = spawn_agent(&files.config_path, None);
    eventually(
        Duration::from_secs(60),
        "the scratch vm is destroyed",
        || {
            let gone = sim.vm_ids() == vec![vmid];
            async move { gone }
        },
    )
    .await;
    destroyed_as_a_vm(&sim, scratch);
    // The test is recorded interrupted once the scratch VM is gone, the record written after
    // the destroy the assertion above saw.
    let guest_id = guest.to_string();
    let interrupted = || {
        journal(&files.state_dir)
            .last_restore_tests()
            .unwrap()
            .iter()
            .any(|t| {
                t.result.guest_id == guest_id
                    && t.result.outcome == bosun_agentd::ops::journal::TestOutcome::Interrupted
            })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !interrupted() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        interrupted(),
        "{:?}; the agent's log ends:\n{}",
        journal(&files.state_dir).last_restore_tests().unwrap(),
        log_tail(&files.config_path, 60)
    );
    assert!(
        journal(&files.state_dir)
            .provenance(scratch)
            .unwrap()
            .is_none()
    );
    assert_eq!(
        sim.vm_running(vmid),
        Some(true),
        "the guest's own vm is untouched"
    );
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
