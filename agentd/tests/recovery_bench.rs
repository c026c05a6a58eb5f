//! Figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-agentd --test recovery_bench -- --ignored --nocapture --test-threads=1`).
//!
//! - `dr_overhead_figures`: a lost guest restored by the agent's DR (`Provisioner::recover`:
//!   the source chosen from the journal and the storage listing, the bootstrap check, the
//!   record moved, the restore, identity and size, the start, the audit) against the raw
//!   Proxmox work it needs (the restore task, then the start task), on `bosun-pvesim` at
//!   `SimConfig::fast()`; median of 15 each.
//! - `twenty_restore_tests_figures`: 20 guests restore-tested back to back in one window by
//!   the `RestoreTester`, with the wall time and the process's peak RSS.
//! - `archive_check_figures`: what checking a file archive before a restore costs (the
//!   helper's verb reading and hashing the whole file, plus the volume lookup), for a 1 GB
//!   and a 10 GB archive file in the simulator's `local` dump directory.

#![allow(
    clippy::unwrap_used,
    reason = "benchmark code: a panic is a failed run with its location"
)]

use crate::localapi_support;
use crate::two_tiers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_agentd::clock::{ManualClock, SystemClock};
use bosun_agentd::data::backup::tiers;
use bosun_agentd::data::desired::DesiredSnapshot;
use bosun_agentd::data::recovery::newest_surviving;
use bosun_agentd::data::restore_test::{PassOutcome, RestoreTestConfig, RestoreTester};
use bosun_agentd::guests::reconcile::golden::GoldenCheck;
use bosun_agentd::guests::reconcile::provision::{Provisioner, Recovery};
use bosun_proto::desired::{GuestSpec, Retention};
use bosun_pve::{Op, Pve, RestoreRequest, StorageId, Vmid, VolumeId};
use localapi_support::{Harness, Options};
use tokio::sync::watch;

fn spec(guest_id: &str, vmid: u32) -> GuestSpec {
    serde_json::from_value(serde_json::json!({
        "guest_id": guest_id,
        "hostname": format!("g{vmid}"),
        "customer": { "customer_id": "c1", "display_name": "C1" },
        "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 4 },
        "power": "running",
        "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "0".repeat(64) }
    }))
    .unwrap()
}

/// Records `vmid` as the agent's guest `guest_id` and backs it up to `local`, journaled.
async fn own_and_back_up(h: &Harness, guest_id: &str, vmid: u32) -> String {
    localapi_support::record_own_guest(&h.journal, guest_id, vmid).await;
    localapi_support::journaled_backup(&h.pve, &h.journal, &h.prover, guest_id, vmid, "local").await
}

async fn task(h: &Harness, op: Op, upid: bosun_pve::Upid) {
    h.pve.wait_task(op, &upid).await.unwrap();
}

async fn destroy(h: &Harness, vmid: u32) {
    let id = Vmid::new(vmid).unwrap();
    if h.sim.guest_running(vmid) == Some(true) {
        let upid = h.pve.stop_ct(id).await.unwrap();
        task(h, Op::StopCt, upid).await;
    }
    let upid = h.pve.destroy_ct(id, true).await.unwrap();
    task(h, Op::DestroyCt, upid).await;
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn dr_overhead_figures() {
    let h = Harness::start_with(Options {
        guests: 1,
        ..Options::default()
    })
    .await;
    let guest = h.guest(0).clone();
    let archive = own_and_back_up(&h, &guest.guest_id, guest.vmid).await;
    let mut desired = two_tiers::desired(Retention::default(), Retention::default());
    first_tier_only(&mut desired);
    let plan = tiers::plan(&desired, None, None, &StorageId::new("local").unwrap(), 0);
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        StorageId::new("local-lvm").unwrap(),
        512,
        Arc::new(GoldenCheck::new(
            h.journal.clone(),
            None,
            h.dir.path().join("allowed_signers"),
            uuid::Uuid::new_v4(),
            SystemClock::shared(),
        )),
    );
    let spec = spec(&guest.guest_id, guest.vmid);
    const RUNS: usize = 15;
    let (mut raw, mut agent) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        // Raw: the restore and the start, nothing else.
        destroy(&h, guest.vmid).await;
        let began = Instant::now();
        let mut request = RestoreRequest::new(
            Vmid::new(guest.vmid).unwrap(),
            VolumeId::new(archive.clone()).unwrap(),
            StorageId::new("local-lvm").unwrap(),
        );
        request.unique = false;
        let upid = h.pve.restore_ct(&request).await.unwrap();
        task(&h, Op::RestoreCt, upid).await;
        let upid = h
            .pve
            .start_ct(Vmid::new(guest.vmid).unwrap())
            .await
            .unwrap();
        task(&h, Op::StartCt, upid).await;
        raw.push(began.elapsed());

        // The agent's DR of the same guest from the same archive.
        destroy(&h, guest.vmid).await;
        let lost_since = h
            .journal
            .note_lost(guest.guest_id.clone(), guest.vmid)
            .await
            .unwrap();
        let began = Instant::now();
        let source = newest_surviving(&*h.pve, &h.journal, &h.prover, &guest.guest_id, &plan)
            .await
            .unwrap();
        let recovery = Recovery {
            lost_vmid: guest.vmid,
            source,
            lost_since,
            trigger: "auto",
        };
        let vmid = provisioner.recover(&spec, recovery, None).await.unwrap();
        agent.push(began.elapsed());
        assert_eq!(vmid.get(), guest.vmid);
        assert_eq!(h.sim.guest_running(guest.vmid), Some(true));
    }
    let (raw, agent) = (median(raw), median(agent));
    println!(
        "DR of one guest ({RUNS} runs, median): raw restore + start {} ms; agent DR {} ms; ratio {:.2}",
        raw.as_millis(),
        agent.as_millis(),
        agent.as_secs_f64() / raw.as_secs_f64()
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn twenty_restore_tests_figures() {
    let clock = ManualClock::new("2026-03-02T02:30:00Z".parse().unwrap());
    let h = Harness::start_with(Options {
        guests: 20,
        journal_clock: Some(clock.shared()),
        ..Options::default()
    })
    .await;
    h.sim.set_time("2026-03-02T02:30:00Z".parse().unwrap());
    let mut desired = two_tiers::desired(Retention::default(), Retention::default());
    first_tier_only(&mut desired);
    for g in &h.guests {
        own_and_back_up(&h, &g.guest_id, g.vmid).await;
        desired.guests.push(spec(&g.guest_id, g.vmid));
    }
    desired.restore_test_policy.enabled = true;
    desired.restore_test_policy.window = Some(bosun_proto::desired::TestWindow {
        start_hour: 2,
        hours: 4,
    });
    let plan = tiers::plan(&desired, None, None, &StorageId::new("local").unwrap(), 0);
    let (_plan_tx, plan_rx) = watch::channel(plan);
    let (_desired_tx, desired_rx) = watch::channel(Some(Arc::new(DesiredSnapshot {
        generation: 1,
        state: desired,
        request_id: None,
        correlation_id: None,
        plan: None,
        refused: Vec::new(),
        unknown_kinds: Vec::new(),
    })));
    let mut config = RestoreTestConfig::new(StorageId::new("local-lvm").unwrap());
    config.stay_up = Duration::from_millis(500);
    config.poll = Duration::from_millis(100);
    let mut tester = RestoreTester::new(
        h.pve.clone(),
        h.journal.clone(),
        clock.shared(),
        desired_rx,
        plan_rx,
        h.board.clone(),
        config,
        h.prover.clone(),
    );
    let rss_before = status_kb("VmRSS");
    let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let began = Instant::now();
    let mut passed = 0;
    while let PassOutcome::Tested(outcome) = tester.pass().await {
        // No helper here: each scratch guest boots and stays up, and is not checked.
        assert_eq!(outcome, bosun_agentd::ops::journal::TestOutcome::NotChecked);
        passed += 1;
    }
    let took = began.elapsed();
    assert_eq!(passed, 20);
    println!(
        "20 restore tests in one window: {passed} booted (not checked: no helper) in {:.1} s ({:.2} s each, 0.5 s of it staying up); VmHWM {} kB (VmRSS before {rss_before} kB, peak reset: {hwm_reset})",
        took.as_secs_f64(),
        took.as_secs_f64() / f64::from(passed),
        status_kb("VmHWM")
    );
    h.shutdown().await;
}

/// The two-tier fixture without its PBS tier: these figures are about the local tier.
fn first_tier_only(desired: &mut bosun_proto::desired::DesiredState) {
    desired.backup_policy.further_tiers.clear();
    desired.storage.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn archive_check_figures() {
    use std::io::Write as _;
    let h = Harness::start_with(Options {
        guests: 1,
        ..Options::default()
    })
    .await;
    let guest = h.guest(0).clone();
    localapi_support::record_own_guest(&h.journal, &guest.guest_id, guest.vmid).await;
    let vmid = Vmid::new(guest.vmid).unwrap();
    let local = StorageId::new("local").unwrap();
    for (label, bytes) in [("1 GB", 1_000_000_000_u64), ("10 GB", 10_000_000_000)] {
        let volid = h
            .pve
            .backup_ct(&bosun_pve::VzdumpRequest::new(vmid, local.clone()))
            .await
            .unwrap()
            .volid;
        let path = h
            .pve
            .volume_attributes(&VolumeId::new(volid.clone()).unwrap())
            .await
            .unwrap()
            .path;
        // The archive's bytes: written in full (not sparse), 1 MiB of varied data repeated.
        let written = Instant::now();
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let block: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut left = bytes;
        while left > 0 {
            let n = usize::try_from(left.min(block.len() as u64)).unwrap();
            file.write_all(&block[..n]).unwrap();
            left -= n as u64;
        }
        file.into_inner().unwrap().sync_all().unwrap();
        let write_time = written.elapsed();
        let item = h
            .pve
            .list_content(
                &local,
                bosun_pve::ContentFilter {
                    content: Some(bosun_pve::ContentType::Backup),
                    vmid: Some(vmid),
                },
            )
            .await
            .unwrap()
            .into_iter()
            .find(|i| i.volid == volid)
            .unwrap();
        let proved = Instant::now();
        let proof = h
            .prover
            .prove(&guest.guest_id, vmid, &volid, Some(&item))
            .await
            .unwrap();
        let prove_time = proved.elapsed();
        let mut checks = Vec::new();
        for _ in 0..3 {
            let began = Instant::now();
            h.prover
                .check(&guest.guest_id, &item, Some(&proof))
                .await
                .unwrap();
            checks.push(began.elapsed());
        }
        checks.sort();
        let median = checks[1];
        let rate = bytes as f64 / median.as_secs_f64() / 1e6;
        eprintln!(
            "archive check, {label}: written in {write_time:.1?}; proven (first read) in {prove_time:.2?}; \
             checked in {median:.2?} median of 3 (min {:.2?}, max {:.2?}), {rate:.0} MB/s",
            checks[0], checks[2]
        );
        std::fs::remove_file(&path).unwrap();
    }
}
