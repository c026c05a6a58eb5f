//! `make demo`'s scenario as a test: the same driver (`bosunctl::demo`) runs the real binaries
//! of this build — simulator, hub, agent, `bosunctl`, `ssh-keygen` — and the test asserts on
//! what it established and on what it left behind (no process, a transcript, the artifacts).
//!
//! The binaries come from the same target directory as this test (`cargo nextest run
//! --workspace` and `make test` build them). When the suite runs as root the agent runs as the
//! unprivileged `bosun-test` user that `scripts/install-deps` creates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bosunctl::demo::{DemoArgs, Outcome};

/// `target/<profile>/`, where cargo puts the workspace's binaries.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .to_owned();
    for name in ["bosunctl", "bosun-hubd", "bosun-agentd", "bosun-pvesim"] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
            dir.join(name).display()
        );
    }
    dir
}

fn alive(pid: u32) -> bool {
    // A zombie is not left behind: the demo reaps every child it started.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z')))
        })
        .unwrap_or(false)
}

#[test]
fn the_demo_scenario_passes_and_leaves_nothing_running() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bins = bin_dir();
    let dir = tempfile::tempdir().unwrap();
    // The agent may run as another user: it must reach its files under the demo folder.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("demo-out");
    let args = DemoArgs {
        out: out.clone(),
        time_scale: 0.05,
        bin_dir: Some(bins),
        proxmox_only: false,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let begun = Instant::now();
    let mut outcome = Outcome::default();
    let result = runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(150),
            bosunctl::demo::run_with_outcome(&args, &mut outcome),
        )
        .await
    });
    let took = begun.elapsed();
    let transcript = std::fs::read_to_string(out.join("transcript.txt")).unwrap_or_default();
    let result = result.expect("the demo finishes within 150 s");
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    if !root {
        // Without the root helper no golden archive can be hashed: the demo says so at once.
        let error = format!("{result:?}");
        assert!(
            error.contains("the demo needs root"),
            "{error}\n{transcript}"
        );
        return;
    }
    assert!(result.is_ok(), "{result:?}\n{transcript}");
    assert!(took < Duration::from_secs(120), "the demo took {took:?}");

    // Enrolled, provisioned, the dropped guest destroyed once and only by the signed job.
    assert!(outcome.host_id.is_some());
    let (_, kept_vmid) = outcome.kept.expect("a kept guest");
    let (_, dropped_vmid) = outcome.dropped.expect("a dropped guest");
    assert_ne!(kept_vmid, dropped_vmid);
    assert_eq!(outcome.destroys, [dropped_vmid], "{transcript}");
    assert!(outcome.replay_refused);
    // A customer's backup named as a golden archive: no restore, and the hub alerted.
    assert_eq!(outcome.hostile_golden, Some((0, true)), "{transcript}");

    // Overdue while the agent was stopped, then recovered, in that order.
    let overdue = outcome.alerts.iter().position(|k| k == "host_overdue");
    let recovered = outcome.alerts.iter().position(|k| k == "host_recovered");
    assert!(
        matches!((overdue, recovered), (Some(o), Some(r)) if o < r),
        "{:?}",
        outcome.alerts
    );

    // Root starts the agent as an unprivileged user.
    match outcome.agent_uid {
        Some(uid) => assert_ne!(uid, 0),
        None => panic!("running as root, the agent must not run as root"),
    }

    // As root, the helper runs: the reference client's pass and the cross-guest refusal.
    {
        let guest = outcome.guest_client.clone().expect("step 3 ran");
        assert!(guest.backup_due, "{transcript}");
        // The bootstrap arrives by `pct push`, not a bind mount, so Proxmox takes the
        // snapshot, and the guest's own listing shows it.
        assert!(guest.snapshot.starts_with("bosun-"), "{guest:?}");
        assert!(
            guest.snapshots_listed.contains(&guest.snapshot),
            "{guest:?}"
        );
        assert!(guest.app_restarted, "{transcript}");
        assert!(
            ["snapshotted", "archived", "done"].contains(&guest.backup_phase.as_str()),
            "the quiesced backup got past the snapshot: {guest:?}"
        );
        assert_eq!(outcome.cross_guest_status, Some(403), "{transcript}");
        // The backup step 3 took reaches the hub from the agent's journal: the last
        // `bosunctl status` (after the agent's restart in step 7) shows it.
        let last_backup = transcript
            .lines()
            .rfind(|l| l.contains("last backup "))
            .unwrap_or_default();
        assert!(
            last_backup.ends_with("(ok)") && !last_backup.contains("never"),
            "{last_backup:?}\n{transcript}"
        );
        let prefix = outcome.helper_prefix.clone().expect("a helper prefix");
        assert!(!prefix.exists(), "the helper prefix is removed");
    }

    // An offsite PBS target, mounted with its sealed password, becomes the second tier; the
    // first tier prunes nothing until the operator's floor is signed, then prunes to it.
    let tiers = outcome.tiers.clone().expect("step 9 ran");
    assert_eq!(tiers.target_status, "mounted", "{transcript}");
    assert!(tiers.storage_id.starts_with("bosun-pbs-"), "{tiers:?}");
    assert!(
        tiers
            .held_before_floor
            .as_deref()
            .is_some_and(|h| h.contains("no signed retention floor")),
        "{tiers:?}"
    );
    let (before_held, after_held) = tiers.held_run.expect("a run while retention was held");
    assert_eq!(
        after_held,
        before_held + 1,
        "nothing pruned without a floor"
    );
    assert_eq!(tiers.good, [0, 1], "a good backup on both tiers: {tiers:?}");
    let [first, pbs] = tiers.tiers.as_slice() else {
        panic!("two tiers: {tiers:?}");
    };
    assert_eq!((first.tier, pbs.tier), (0, 1));
    assert!(first.written >= 2 && first.pruned >= 1, "{first:?}");
    assert_eq!(first.after, first.keep_last as usize, "{first:?}");
    assert!(pbs.written >= 1, "{pbs:?}");
    assert!((1..=pbs.keep_last as usize).contains(&pbs.after), "{pbs:?}");
    assert_eq!(pbs.storage, tiers.storage_id);
    for prefix in ["tier 0 ", "tier 1 pbs-offsite "] {
        let line = tiers
            .status_lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}…` line: {:?}", tiers.status_lines));
        assert!(
            line.contains("last good ") && line.ends_with("ago (alpha)"),
            "{line:?}"
        );
        assert!(transcript.contains(line.as_str()), "{line:?}\n{transcript}");
    }

    // A restore test of alpha's backup passes and leaves no scratch guest; alpha, destroyed
    // behind Bosun's back, comes back at its vmid with its file, and the hub knows RPO/RTO.
    let recovery = &outcome.recovery;
    let (result, tier) = recovery.restore_test.clone().expect("step 10 ran");
    assert_eq!(result, "passed", "{transcript}");
    assert!(!tier.is_empty(), "{recovery:?}");
    let (before, after) = recovery.guests_around_test.clone().unwrap();
    assert_eq!(before, after, "no scratch guest left");
    let (vmid, kept) = recovery.restored.expect("step 11 ran");
    assert!(kept, "{transcript}");
    assert_eq!(
        Some(vmid),
        outcome.kept.map(|(_, v)| v),
        "alpha is back at its vmid"
    );
    let alert = recovery.alert.clone().unwrap();
    assert!(alert.contains("RPO") && alert.contains("RTO"), "{alert}");
    assert!(transcript.contains(&alert), "{transcript}");

    // The narration numbers and checks each step, and ends with the summary.
    let steps = 11;
    assert!(transcript.contains("[7] the agent stops"), "{transcript}");
    assert!(transcript.contains("[9] an offsite PBS"), "{transcript}");
    assert!(transcript.contains("[10] restore tests"), "{transcript}");
    assert!(
        transcript.contains("[11] guest alpha is destroyed"),
        "{transcript}"
    );
    assert!(
        transcript.contains(&format!("demo passed: {steps} steps")),
        "{transcript}"
    );
    assert!(out.join("logs/agentd.log").is_file());
    assert!(out.join("logs/hubd.log").is_file());

    // No process is left behind.
    let pids: Vec<u32> = std::fs::read_to_string(out.join("pids.txt"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        pids.len() >= 4,
        "simulator, hub and the agent twice: {pids:?}"
    );
    let left: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
}

#[test]
fn a_missing_program_names_the_build_step() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("no-binaries");
    std::fs::create_dir(&empty).unwrap();
    let args = DemoArgs {
        out: dir.path().join("demo-out"),
        time_scale: 0.05,
        bin_dir: Some(empty),
        proxmox_only: false,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(bosunctl::demo::run(&args))
        .expect_err("no binaries, no demo");
    let text = bosun_proto::error_chain(&err);
    assert!(text.contains("step 1"), "{text}");
    assert!(text.contains("is missing"), "{text}");
}
