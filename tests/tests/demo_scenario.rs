//! `make demo`'s scenario as a test: the same driver (`bosun_demo`) runs the real binaries
//! of this build — simulator, hub, agent, `bosunctl`, `ssh-keygen` — and the test asserts on
//! what it established and on what it left behind (no process, a transcript, the artifacts).
//!
//! The binaries come from the same target directory as this test (`cargo nextest run
//! --workspace` and `make test` build them). When the suite runs as root the agent runs as the
//! unprivileged `bosun-test` user that `scripts/install-deps` creates.
//!
//! `--scenario host-loss` runs through the same driver: a host lost and brought back on a new
//! box with the customer's recovery code. Besides the demo's own zero-knowledge search, the
//! test reads the words off the sheet itself and searches the hub's data and the logs again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_demo::{DemoArgs, Outcome, Scenario};

/// `target/<profile>/`, where cargo puts the workspace's binaries.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .to_owned();
    for name in [
        "bosunctl",
        "bosun-hubd",
        "bosun-agentd",
        "bosun-agentctl",
        "bosun-pvesim",
        "bosun-cloudflared-sim",
    ] {
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
    let (dir, outcome, result, took, transcript) =
        run_demo(Scenario::Full, Duration::from_secs(390));
    let out = dir.path().join("demo-out");
    // Without the root helper no golden archive can be hashed: the demo says so at once.
    // 39 steps (about 190 s on two cores while other builds ran, steps 33 and 34 about 25 s of
    // it) and the 8 s the kept hub is watched.
    if !passed_as_root(
        &result,
        (took, Duration::from_secs(330)),
        (&transcript, &out),
    ) {
        return;
    }

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

    // An offsite PBS target the operator's signed plan names, mounted with its sealed
    // password, becomes the second tier; the first tier prunes nothing while the plan keeps
    // every backup, then prunes to the next plan's retention. The NFS tier no plan names is
    // refused.
    let tiers = outcome.tiers.clone().expect("step 9 ran");
    assert_eq!(tiers.target_status, "mounted", "{transcript}");
    assert!(tiers.storage_id.starts_with("bosun-pbs-"), "{tiers:?}");
    assert!(
        tiers
            .held_before_floor
            .as_deref()
            .is_some_and(|h| h.contains("keeps every backup")),
        "{tiers:?}"
    );
    let (before_held, after_held) = tiers.held_run.expect("a run while retention was held");
    assert_eq!(
        after_held,
        before_held + 1,
        "nothing pruned while the plan keeps all"
    );
    assert!(tiers.nfs_refused, "{transcript}");
    assert!(transcript.contains("storage_refused"), "{transcript}");
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

    // Step 12: alpha's newest archive, changed on the storage, is refused by a signed
    // restore-now before anything reaches Proxmox, and the hub raises archive_rejected.
    let (job, detail, rejected) = recovery.changed_archive.clone().expect("step 12 ran");
    assert_ne!(job, "succeeded", "{detail}");
    assert!(detail.contains("failed its check"), "{detail}");
    assert!(
        rejected.contains("refused to restore archive"),
        "{rejected}"
    );
    assert!(
        transcript.contains("[12] a changed archive is never restored"),
        "{transcript}"
    );

    // Step 13: the dashboard's pages after a login, both metrics endpoints, the CLI by name.
    assert!(
        transcript.contains("[13] the operator's desk"),
        "{transcript}"
    );
    assert!(
        transcript.contains("$ bosunctl audit --host ") && transcript.contains("job.finished"),
        "{transcript}"
    );
    assert!(
        transcript.contains("agent /metrics on 127.0.0.1:")
            && transcript.contains("(exit 11): not in sync, the host refuses"),
        "{transcript}"
    );
    // The desk's title claims nothing; its verdict is what the diff said.
    let step13 = step_text(&transcript, 13);
    let title = step13.lines().next().unwrap();
    assert!(!title.contains("in sync"), "{title}");
    assert!(
        step13.contains("): desired diff ") && step13.contains(": not in sync, the host refuses"),
        "{step13}"
    );
    // A refused line through the door is said as refused, never `exit null`; the verify
    // summary counts what could not run as such, never as ok.
    assert!(!transcript.contains("exit null"), "{transcript}");
    assert!(
        transcript.contains("(on the host) refused by the support shell"),
        "{transcript}"
    );
    let verify_step = transcript
        .lines()
        .find(|l| l.trim_start().starts_with("verification") && l.contains("could not run"));
    assert!(verify_step.is_some(), "{transcript}");

    // Step 14: a job the hub forged is refused and stages nothing; the operator's signed
    // update is staged into slot b and committed by the health gate.
    let update = outcome.self_update.clone().expect("step 14 ran");
    assert_eq!(update.forged["outcome"], "rejected", "{transcript}");
    assert!(
        update.forged["detail"]
            .as_str()
            .is_some_and(|d| d.contains("unknown_signer")),
        "{:?}",
        update.forged
    );
    assert_eq!(update.signed["outcome"], "succeeded", "{transcript}");
    assert_eq!(update.signed["output"]["slot"], "b");
    assert_eq!(update.phase.as_deref(), Some("committed"), "{transcript}");
    // The signed job came from `fleet rollout --label ring=canary`: the host done in wave 1.
    assert_eq!(update.rollout["stopped"], false, "{:?}", update.rollout);
    assert_eq!(
        update.rollout["hosts"][0]["outcome"], "done",
        "{:?}",
        update.rollout
    );
    assert_eq!(
        update.rollout["hosts"][0]["wave"], 1,
        "{:?}",
        update.rollout
    );
    assert!(
        transcript.contains("[14] the agent updates itself")
            && transcript.contains("hub: event agent_update_committed"),
        "{transcript}"
    );

    // Step 15: the operator's signed break-glass job opens an expiring, restricted door for
    // the operator's key through the real helper; the signed disable removes it.
    let door = outcome.break_glass.clone().expect("step 15 ran");
    assert_eq!(door.enabled["outcome"], "succeeded", "{transcript}");
    let public = std::fs::read_to_string(out.join("operator/id_ed25519.pub")).unwrap();
    let key_blob = public.split_whitespace().nth(1).unwrap();
    assert!(
        door.line.starts_with("expiry-time=\"")
            && door.line.contains("Z\",restrict,")
            && door
                .line
                .contains(",command=\"/usr/libexec/bosun/bosun-support --session ")
            && door.line.contains(key_blob),
        "{}",
        door.line
    );
    assert_eq!(door.disabled["outcome"], "succeeded", "{transcript}");
    assert_eq!(door.disabled["output"]["removed"], true, "{transcript}");
    assert!(door.alerts[0].contains("SHA256:"), "{:?}", door.alerts);
    assert!(
        transcript.contains("[15] break-glass")
            && transcript.contains("hub: break_glass_open")
            && transcript.contains("break_glass.command")
            && transcript.contains("hub: break_glass_closed"),
        "{transcript}"
    );

    // Step 16: the node's CPU past the high threshold raises host_cpu_high; back below the
    // low one, host_usage_recovered.
    let health = outcome.host_health.clone().expect("step 16 ran");
    assert!(health.raised.contains("97%"), "{health:?}");
    assert!(!health.recovered.is_empty(), "{health:?}");
    assert!(
        transcript.contains("[16] host health")
            && transcript.contains("hub: host_cpu_high")
            && transcript.contains("hub: host_usage_recovered"),
        "{transcript}"
    );

    // The last step: alpha's controller reads what was done to alpha (and the host's
    // break-glass door), never bravo's decommission, of which the operator was notified.
    let audit = outcome.audit_log.clone().expect("the audit-log step ran");
    for want in [
        "localapi.snapshot done",
        "restore_test done",
        "break_glass.opened",
        "break_glass.command",
    ] {
        assert!(
            audit.entries.iter().any(|e| e.contains(want)),
            "{want}: {audit:?}"
        );
    }
    assert!(
        !audit.entries.iter().any(|e| e.contains("decommission_job")),
        "{audit:?}"
    );
    assert!(
        audit
            .notification
            .contains("decommissioned by a signed job"),
        "{audit:?}"
    );
    assert!(
        transcript.contains("audit log (GET /v1/audit)")
            && transcript.contains("hub: destructive_operation"),
        "{transcript}"
    );
    assert!(
        audit
            .protection
            .iter()
            .any(|l| l.starts_with("Backup tier 0")),
        "alpha reads its own protection: {audit:?}"
    );
    assert!(
        transcript.contains("GET /v1/protection with alpha's token"),
        "{transcript}"
    );

    // An adopted guest: the job signed for another hostname is refused and writes nothing;
    // the right one gives the container its identity in one write.
    let consent = outcome.consent.clone().expect("the consent step ran");
    assert_eq!(consent.exits, [3, 0, 3], "{consent:?}");
    assert_eq!(consent.foreign, 403, "{consent:?}");
    assert_eq!(consent.seen.len(), 3, "{consent:?}");
    let adopted = outcome.adopted.clone().expect("the adopt step ran");
    assert!(adopted.refused.contains("hostname_mismatch"), "{adopted:?}");
    assert_eq!(adopted.writes, 1, "{adopted:?}");
    assert!(
        adopted.adopted["identity"]
            .as_str()
            .is_some_and(|i| i.starts_with("bosun-op-")),
        "{adopted:?}"
    );
    assert!(transcript.contains("an adopted guest"), "{transcript}");

    // Step 17: charlie's archive, its orders torn, restores and boots; the guest's own check
    // fails the test with its words, the hub alerts, and no scratch guest is left.
    let checked = outcome
        .restore_check
        .clone()
        .expect("the restore-check step ran");
    assert_eq!(
        checked.outcome,
        Some(bosun_proto::report::RestoreTestOutcome::Failed),
        "{checked:?}"
    );
    assert!(
        checked.detail.contains("exited with status 1")
            && checked.detail.contains("/srv/shop/orders.db: FAILED"),
        "{checked:?}"
    );
    assert!(checked.alert.contains("charlie"), "{checked:?}");
    assert_eq!(checked.guests_around_test.0, checked.guests_around_test.1);
    assert!(
        transcript.contains("[17] a restore test fails on corrupt data"),
        "{transcript}"
    );
    assert!(
        transcript.contains("hub: restore_test_failed"),
        "{transcript}"
    );
    // Step 10's pass was the guest's own check passing, not only a boot; the status lines it
    // shows are read after the test: they say it passed, never `never`.
    assert!(
        transcript.contains("the guest's own check passed inside it"),
        "{transcript}"
    );
    let step10 = step_text(&transcript, 10);
    assert!(
        step10.contains("restore-test") && step10.contains("passed"),
        "{step10}"
    );
    assert!(
        !step10.contains("last restore-test never"),
        "step 10 says no restore test right after one passed:\n{step10}"
    );

    // Step 19: the operator acknowledges the failed restore test and silences CPU alerts,
    // each an event in the hub's log.
    assert!(
        transcript.contains("[19] the operator triages")
            && transcript.contains("hub events: alert_acknowledged, alert_silenced"),
        "{transcript}"
    );

    // Step 20: the dashboard's pages saved after the last step, styled from the stylesheet
    // beside them and linking each other, so they read once the hub has stopped; they show
    // the end of the day (step 17's failed restore test open, acknowledged in step 19).
    assert!(
        transcript.contains("[20] the dashboard as the day ends"),
        "{transcript}"
    );
    let saved = out.join("dashboard");
    let css = std::fs::read_to_string(saved.join("dashboard.css")).unwrap();
    assert!(css.contains('{'), "{css}");
    for file in ["fleet.html", "host.html", "alerts.html", "events.html"] {
        let page = std::fs::read_to_string(saved.join(file)).unwrap();
        assert!(
            page.contains("<html") && page.contains(r#"href="dashboard.css""#),
            "{file}: {page}"
        );
        assert!(!page.contains("/ui/static/"), "{file}: {page}");
    }
    let fleet = std::fs::read_to_string(saved.join("fleet.html")).unwrap();
    assert!(fleet.contains(r#"href="host.html""#), "{fleet}");
    // The narration says what the saved page shows: the host's state on the fleet page, after
    // the triage (step 19) and in the saved file (step 20), and the host by its name in step
    // 22's command.
    let host_id = outcome.host_id.unwrap();
    let state = bosun_demo::fleet_page::host_state(&fleet, host_id)
        .unwrap_or_else(|| panic!("fleet.html shows no state for the host:\n{fleet}"));
    let hostname = hub_name(&transcript);
    assert!(
        step_text(&transcript, 19).contains(&format!(
            "dashboard after the triage: host {hostname} {state} ("
        )),
        "fleet.html shows {hostname} {state}:\n{}",
        step_text(&transcript, 19)
    );
    assert!(
        step_text(&transcript, 20)
            .contains(&format!("saved fleet.html: host {hostname} {state}\n")),
        "fleet.html shows {hostname} {state}:\n{}",
        step_text(&transcript, 20)
    );
    assert!(
        step_text(&transcript, 22).contains(&format!("$ bosunctl hosts rotate-key {hostname} ")),
        "{}",
        step_text(&transcript, 22)
    );
    let alerts = std::fs::read_to_string(saved.join("alerts.html")).unwrap();
    assert!(
        alerts.contains("restore_test_failed") && alerts.contains("acknowledged"),
        "{alerts}"
    );

    // Labels and capabilities: the host found by its labels and what it reported of itself,
    // not by a label or capability it lacks; `hosts show` prints both.
    let labels = step_text(&transcript, 26);
    for want in [
        "[26] labels and capabilities",
        "hub: event host_labeled",
        "hosts list --label site=fra1   → 1 host: this one",
        "hosts list --label site=ams1   → no host",
        "--capability helper --capability arch=",
        "hosts list --capability tunnel   → no host",
        "labels:        ring=canary, site=fra1, tier=gold",
        "has:           helper",
        // The demo's agent has a pool (step 32): no warning.
        "yes: each new guest gets a static address of it, under ipfilter",
    ] {
        assert!(labels.contains(want), "{want}:\n{labels}");
    }

    // PBS verification: an ok verify of alpha's group on the tier the plan names, then
    // damaged chunks failing it and verify_failed naming the guest and the tier.
    let verified = outcome.verified.clone().expect("the verify step ran");
    let (alpha_id, alpha_vmid) = outcome.kept.unwrap();
    assert!(
        verified.tier.starts_with("backup@pbs!bosun@127.0.0.1:"),
        "{verified:?}"
    );
    assert!(verified.damaged >= 1, "{verified:?}");
    assert!(
        verified.alert.contains(&alpha_id.to_string()) && verified.alert.contains(&verified.tier),
        "{verified:?}"
    );
    let step27 = step_text(&transcript, 27);
    assert!(
        step27.contains(&format!("backup-type=ct backup-id={alpha_vmid} → ok in "))
            && step27.contains("hub: verify_failed"),
        "{step27}"
    );

    // The managed controller: guest delta, from the host's own golden build, reports the
    // recipe's signed digest; its crashed controller is restarted in place, never destroyed.
    let managed = outcome.controller.clone().expect("the controller step ran");
    assert!(managed.signed.starts_with("sha256:"), "{managed:?}");
    assert_eq!(
        managed.reported,
        (Some(managed.signed.clone()), Some(managed.signed.clone())),
        "{managed:?}"
    );
    assert!(
        managed.crash_to_restart_ms >= 1500
            && managed.crash_to_healed_ms >= managed.crash_to_restart_ms,
        "restarted once silent for heal_after (2.5 s since its last report, sent each second), healed after the restart: {managed:?}"
    );
    assert_eq!(managed.destroyed_after_crash, 0, "{managed:?}");
    let step28 = step_text(&transcript, 28);
    assert!(
        step28.contains("controller.restarted") && step28.contains("healed in place"),
        "{step28}"
    );

    // A new controller rolled out by label to golden guest delta: the helper placed the signed
    // image and restarted the controller on it, the rollout committed, and the hub shows the
    // digest the helper measured in the guest.
    let updated = outcome
        .controller_update
        .clone()
        .expect("the controller update step ran");
    assert!(
        updated.digest.starts_with("sha256:") && updated.digest != managed.signed,
        "{updated:?}"
    );
    assert_eq!(updated.reported.as_deref(), Some(updated.digest.as_str()));
    assert_eq!(updated.rollout["stopped"], false, "{updated:?}");
    assert_eq!(
        updated.rollout["hosts"][0]["outcome"], "done",
        "{updated:?}"
    );
    assert!(
        updated.to_healthy_ms >= updated.to_restart_ms,
        "{updated:?}"
    );
    let step29 = step_text(&transcript, 29);
    assert!(
        step29.contains("helper restart_controller with the signed digest")
            && step29.contains("the rollout committed"),
        "{step29}"
    );

    // The tunnel, managed: the signed route written as one ingress rule to alpha's address on
    // the bridge with the catch-all last, the sealed credentials beside it (both 0640), read
    // by both replicas of the stand-in, restarted one at a time; the report, `status` and
    // `hosts show` carry its health and version; a hung replica is restarted after 3 failed
    // probes, the other left alone; a hub's forged route is refused and changes nothing.
    let tunnel = outcome.tunnel.clone().expect("the tunnel step ran");
    let service = tunnel.service.clone();
    assert!(
        service.starts_with("http://") && service.ends_with(":80"),
        "{tunnel:?}"
    );
    assert_eq!(
        tunnel.ingress,
        [
            (Some("alpha.demo.example".to_owned()), service.clone()),
            (None, "http_status:404".to_owned()),
        ],
        "{tunnel:?}"
    );
    assert_eq!(tunnel.modes, (0o640, 0o640), "{tunnel:?}");
    let tunnel_id = "6ff42ae2-765d-4adf-8112-31c55c1551ef".to_owned();
    assert_eq!(
        tunnel.credentials,
        [Some(tunnel_id.clone()), Some(tunnel_id)],
        "{tunnel:?}"
    );
    assert_eq!(tunnel.all_down_samples, 0, "never without a ready replica");
    let version = bosun_pvesim::cloudflared::VERSION;
    assert_eq!(
        tunnel.reported,
        (1, Some(8), Some(version.to_owned())),
        "{tunnel:?}"
    );
    for line in [&tunnel.lines.0, &tunnel.lines.1] {
        assert!(
            line.contains("ready, 1 route(s), 8 edge connection(s)")
                && line.contains(&format!("cloudflared {version}")),
            "{tunnel:?}"
        );
    }
    assert!(tunnel.lines.1.starts_with("tunnel:"), "{tunnel:?}");
    assert!(
        tunnel.failure_to_restart_ms >= 400 && tunnel.failure_to_restart_ms < 5_000,
        "restarted after 3 failed probes 200 ms apart: {tunnel:?}"
    );
    assert!(tunnel.failure_to_ready_ms >= tunnel.failure_to_restart_ms + 300);
    assert_eq!(tunnel.other_restarted, 0, "{tunnel:?}");
    assert!(tunnel.restarts.1 > tunnel.restarts.0, "{tunnel:?}");
    // Refused for its signature: the forgery raised the serial past the operator's.
    assert!(
        tunnel.forged_refused.contains("data_plan.refused")
            && tunnel.forged_refused.contains("does not match"),
        "{tunnel:?}"
    );
    assert!(tunnel.forged_changed_nothing && !tunnel.secret_in_status);
    let step30 = step_text(&transcript, 30);
    assert!(
        step30.contains("tunnel failure to restart ")
            && step30.contains("service: http_status:404")
            && step30.contains("$ bosunctl hosts show"),
        "{step30}"
    );

    // Step 31: the customer's key, signed into the plan, reaches alpha's bootstrap alone and
    // the controller writes it where the golden image's sshd reads it.
    let app = outcome
        .customer_app
        .clone()
        .expect("the customer's app step ran");
    assert!(app.key.starts_with("ssh-ed25519 "), "{app:?}");
    assert_eq!(app.bootstrap_keys, std::slice::from_ref(&app.key));
    assert_eq!(
        (app.written.clone(), app.mode),
        (format!("{}\n", app.key), 0o600)
    );
    let step31 = step_text(&transcript, 31);
    assert!(
        step31.contains("\"guest_access\": guest alpha")
            && step31.contains("/etc/bosun/authorized_keys/root (0600)"),
        "{step31}"
    );

    // The last step: every running guest at its own address of the pool, under ipfilter.
    let step32 = step_text(&transcript, 32);
    assert!(
        step32.contains("firewall: enable=1 ipfilter=1")
            && step32.contains("net0 ip=192.0.2.1")
            && step32.contains("address 192.0.2.1"),
        "{step32}"
    );

    // Step 33: the shop's chain comes up db, app, web, each with its place in Proxmox's own
    // startup order; `explain --order` says what waits on what; a hub's cycle is refused and
    // stops no guest.
    let order = outcome.order.clone().expect("the order step ran");
    let chain = ["db", "app", "web"];
    assert_eq!(order.restores, chain, "{order:?}");
    assert_eq!(order.starts, chain, "{order:?}");
    assert_eq!(
        order.startup,
        [
            ("db".to_owned(), "order=1,up=0,down=60".to_owned()),
            ("app".to_owned(), "order=2,up=0,down=60".to_owned()),
            ("web".to_owned(), "order=3,up=0,down=60".to_owned()),
        ]
    );
    assert!(
        order.explained.contains("waits on db") && order.explained.contains("waits on app"),
        "{}",
        order.explained
    );
    assert_eq!(order.cycle_refused.len(), 3, "{order:?}");
    assert!(
        order
            .cycle_refused
            .iter()
            .all(|l| l.contains("closes a cycle"))
            && order.cycle_explained.matches("refused: ").count() == 3,
        "{order:?}"
    );
    assert!(order.ran_through_cycle);
    let step33 = step_text(&transcript, 33);
    assert!(
        step33.contains("bring-up: desired state stored → db, app and web running")
            && step33.contains("startup: order=3,up=0,down=60"),
        "{step33}"
    );

    // Step 34: each share as Proxmox stores it; a loosening past the plan held at its ceilings,
    // refused and audited; the operator's classes back.
    let share = outcome.share.clone().expect("the share step ran");
    let stored =
        |u: &str, l: &str, r: &str| (Some(u.to_owned()), Some(l.to_owned()), Some(r.to_owned()));
    assert_eq!(
        share.applied,
        [
            ("web".to_owned(), stored("200", "1", "20")),
            ("app".to_owned(), stored("300", "2", "50")),
            ("db".to_owned(), stored("300", "2", "50")),
        ]
    );
    assert_eq!(share.loosened, stored("400", "2", "100"));
    assert_eq!(share.refused.len(), 3, "{share:?}");
    assert!(share.audited.contains("guest.share_refused"), "{share:?}");
    assert_eq!(share.restored, stored("200", "1", "20"));

    // Step 35: the node's access as the operator sets it up: `pve setup` finds it all in place
    // and writes nothing; `pve check` passes on the agent's token, the guest agent's reach on
    // pool bosun alone; the administrator's token was for the run only.
    let access = outcome.pve_access.clone().expect("the pve access step ran");
    assert!(access.setup.contains("nothing changed"), "{}", access.setup);
    assert_eq!(access.check["passed"], true, "{}", access.check);
    let reach = access.check["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "guest-reach")
        .cloned()
        .expect("a guest-reach check");
    assert_eq!(reach["status"], "ok", "{reach}");
    assert!(
        reach["detail"]
            .as_str()
            .is_some_and(|d| d.contains("/pool/bosun") && d.contains("on no other path")),
        "{reach}"
    );
    assert!(!out.join("operator/pve-admin-token").exists());
    assert!(
        transcript.contains("[35] the node's access, as an operator sets it up"),
        "{transcript}"
    );

    // Step 36: a VM beside the containers, from the base signed for a VM, into Bosun's pool,
    // running as `qemu` in `bosunctl status`; every other guest a container.
    let vm = outcome.vm.clone().expect("the vm step ran");
    assert!(
        vm.restored_from
            .as_deref()
            .is_some_and(|v| v.starts_with("local:backup/vzdump-qemu-") && v.ends_with(".vma.zst")),
        "{vm:?}"
    );
    assert_eq!(vm.pool.as_deref(), Some("bosun"), "{vm:?}");
    assert!(
        vm.status_line.starts_with(&format!(
            "guest vm-shop vmid {} qemu desired running",
            vm.vmid
        )),
        "{vm:?}"
    );
    let containers = vm
        .kinds
        .iter()
        .filter(|(_, k)| *k == bosun_proto::desired::GuestKind::Lxc)
        .count();
    assert!(containers >= 4, "{vm:?}");
    assert_eq!(vm.kinds.len(), containers + 1, "{vm:?}");
    assert!(
        transcript.contains("[36] a virtual machine beside the containers"),
        "{transcript}"
    );

    // Steps 37 to 39: the VM backed up as a VM with vzdump's freeze, restore-tested in a
    // scratch VM with its own check passed, and recovered by DR at its vmid with its MAC.
    let life = outcome
        .vm_lifecycle
        .clone()
        .expect("the VM's lifecycle ran");
    assert!(
        life.archive.starts_with("local:backup/vzdump-qemu-"),
        "{life:?}"
    );
    assert!(
        matches!(
            &life.restore_test,
            Some((bosun_proto::report::RestoreTestOutcome::Passed, _, _))
        ),
        "{life:?}"
    );
    assert!(
        !life.net0.0.is_empty() && life.net0.0.split(',').next() == life.net0.1.split(',').next(),
        "{life:?}"
    );
    assert!(
        life.alert.contains(&format!("(vmid {})", vm.vmid)) && life.alert.contains("RTO"),
        "{life:?}"
    );
    for step in [
        "[37] the VM backed up",
        "[38] the VM restore-tested",
        "[39] the VM recovered",
    ] {
        assert!(transcript.contains(step), "{step}: {transcript}");
    }

    // The narration numbers and checks each step, and ends with the summary.
    let steps = 39;
    assert!(transcript.contains("[7] the agent stops"), "{transcript}");
    // The last step: guest alpha past its own threshold, a degraded disk of the node.
    assert!(
        transcript.contains("hub: guest_cpu_high — CPU usage of guest alpha")
            && transcript.contains("hub: disk_failing — disk /dev/sda")
            && transcript.contains("hub: disk_recovered"),
        "{transcript}"
    );
    assert!(
        transcript.contains("[22] the host's key rotates")
            && transcript.contains("the old key is refused (401)"),
        "{transcript}"
    );
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
    // The last step rotates the hub's key under the polling agent.
    assert!(
        transcript.contains("[21] the hub's key rotates while the agent keeps polling"),
        "{transcript}"
    );
    let hub_log = std::fs::read_to_string(out.join("logs/hubd.log")).unwrap();
    assert!(hub_log.contains("serving the hub's new key"), "{hub_log}");
    let agent_log = std::fs::read_to_string(out.join("logs/agentd.log")).unwrap();
    assert!(
        agent_log.contains("the operator's signed hub keys taken"),
        "the agent took the operator's signed set of hub keys"
    );

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

/// `make demo ARGS=…` and `make demo-host-loss ARGS=…` hand `ARGS` to bosun-demo (read with
/// `make -n`, which prints the recipes without running them).
#[test]
fn make_demo_passes_args_to_the_demo() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for target in ["demo", "demo-host-loss"] {
        let out = std::process::Command::new("make")
            .arg("-n")
            .arg("-C")
            .arg(&repo)
            .args([target, "ARGS=--keep-running --time-scale 0.1"])
            .output()
            .expect("make runs");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("bosun-demo "))
            .unwrap_or_else(|| panic!("`make -n {target}` runs no bosun-demo:\n{text}"));
        assert!(
            line.ends_with("--keep-running --time-scale 0.1"),
            "{target}: {line}"
        );
    }
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
        scenario: Scenario::Full,
        keep_running: false,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(bosun_demo::run(&args))
        .expect_err("no binaries, no demo");
    let text = bosun_errchain::error_chain(&err);
    assert!(text.contains("step 1"), "{text}");
    assert!(text.contains("is missing"), "{text}");
}

/// Runs the demo with `scenario` in a fresh folder (reachable by the agent's user) within
/// `limit`; gives the folder, the outcome, the result, the time taken and the transcript.
/// As root the demo must have passed within `bound`; as another user it must have stopped at
/// once, saying it needs root. Gives whether there is a passed run to look at.
#[track_caller]
fn passed_as_root(
    result: &Result<(), bosun_demo::DemoError>,
    (took, bound): (Duration, Duration),
    (transcript, out): (&str, &std::path::Path),
) -> bool {
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    if !root {
        let error = format!("{result:?}");
        assert!(
            error.contains("the demo needs root"),
            "{error}\n{transcript}"
        );
        return false;
    }
    // The error comes last, after the tails of the daemons' logs: a CI run that keeps only the
    // end of the output still shows what failed and what the agent and the hub said about it.
    assert!(
        result.is_ok(),
        "{transcript}\n{}\n{result:?}",
        log_tails(out)
    );
    assert!(took < bound, "the demo took {took:?}");
    true
}

/// The last lines of the hub's and the agent's logs under `out/logs`, each headed by its name.
fn log_tails(out: &std::path::Path) -> String {
    const LINES: usize = 25;
    let mut tails = String::new();
    for name in ["hubd", "agentd"] {
        let path = out.join(format!("logs/{name}.log"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(LINES);
        tails.push_str(&format!("--- the last lines of {}\n", path.display()));
        for line in &lines[start..] {
            tails.push_str(line);
            tails.push('\n');
        }
    }
    tails
}

fn run_demo(
    scenario: Scenario,
    limit: Duration,
) -> (
    tempfile::TempDir,
    Outcome,
    Result<(), bosun_demo::DemoError>,
    Duration,
    String,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bins = bin_dir();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("demo-out");
    // The full walk runs with --keep-running: once it passed, its hub still answers, until
    // the stop below.
    let keep_running = scenario == Scenario::Full;
    let args = DemoArgs {
        out: out.clone(),
        time_scale: 0.05,
        bin_dir: Some(bins),
        proxmox_only: false,
        scenario,
        keep_running,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let begun = Instant::now();
    let mut outcome = Outcome::default();
    let result = runtime.block_on(async {
        let kept = hub_still_answers(&out);
        tokio::time::timeout(limit, bosun_demo::run_until(&args, &mut outcome, kept)).await
    });
    let took = begun.elapsed();
    let transcript = std::fs::read_to_string(out.join("transcript.txt")).unwrap_or_default();
    let result = result.unwrap_or_else(|_| panic!("the demo finishes within {limit:?}"));
    (dir, outcome, result, took, transcript)
}

/// What a `--keep-running` demo waits for: the hub it left running answers on the URL the
/// operator's saved connection names, with the pinned certificate, and the agent keeps
/// polling it: past the demo's overdue bound (3 s) and its stop bound (5 s), the host is
/// still `ok`, seen within the last seconds, and no `host_overdue` alert is open.
async fn hub_still_answers(out: &Path) {
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("operator/ctl.json")).unwrap()).unwrap();
    let (url, fingerprint, token) = (
        saved["hub_url"].as_str().unwrap(),
        saved["fingerprint"].as_str().unwrap(),
        saved["admin_token"].as_str().unwrap(),
    );
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(fingerprint).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let resp = client.get(format!("{url}/v1/health")).send().await.unwrap();
    assert_eq!(
        resp.status(),
        reqwest::StatusCode::OK,
        "the kept hub answers"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let get = |path: &str| {
        let request = client.get(format!("{url}{path}")).bearer_auth(token);
        async move {
            let resp = request.send().await.unwrap();
            assert!(resp.status().is_success(), "{resp:?}");
            resp.json::<serde_json::Value>().await.unwrap()
        }
    };
    let hosts = get("/v1/admin/hosts").await;
    let host = &hosts[0];
    assert_eq!(host["liveness"], "ok", "the kept agent polls on: {hosts}");
    let last_seen: jiff::Timestamp = host["last_seen"].as_str().unwrap().parse().unwrap();
    let silent = jiff::Timestamp::now().duration_since(last_seen);
    assert!(
        silent < jiff::SignedDuration::from_secs(3),
        "the kept agent last polled {silent:?} ago: {host}"
    );
    let open = get("/v1/admin/alerts/open").await;
    assert!(
        !open
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "host_overdue"),
        "the kept host is not overdue: {open}"
    );
    // Settled: what the walk broke and the operator can put right is put right, the host is in
    // sync, and its sped-up verification has nothing left to fail on.
    for kind in ["escrow_missing", "storage_refused", "verify_failed"] {
        assert!(
            !open.as_array().unwrap().iter().any(|a| a["kind"] == kind),
            "{kind} is still open on the kept host: {open}"
        );
    }
    assert_eq!(
        host["desired_generation"], host["applied_generation"],
        "the kept host is in sync: {host}"
    );
    // A repeated outcome is one row with its count: no action fills the trail.
    let trail = get(&format!(
        "/v1/admin/audit?host={}&limit=500",
        host["host_id"].as_str().unwrap()
    ))
    .await;
    let entries = trail["entries"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|e| e["action"] == "verify.failed")
        .collect();
    assert!(
        !failed.is_empty() && failed.len() <= 2,
        "each change of a verification's outcome is one row: {failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|e| e["repeats"].as_u64().unwrap_or(1) > 1),
        "the repeats are counted: {failed:?}"
    );
}

/// The transcript's lines of step `number`, from its title to the next step's.
fn step_text(transcript: &str, number: usize) -> String {
    let start = transcript
        .find(&format!("\n[{number}] "))
        .unwrap_or_else(|| panic!("no step {number}:\n{transcript}"));
    let rest = &transcript[start + 1..];
    let end = rest.find("\n[").map_or(rest.len(), |i| i + 1);
    rest[..end].to_owned()
}

/// The host's name as step 1 says the hub shows it (`hub shows host NAME (ID) ok`).
fn hub_name(transcript: &str) -> String {
    transcript
        .lines()
        .find_map(|l| l.trim().strip_prefix("hub shows host "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("step 1 names no host:\n{transcript}"))
        .to_owned()
}

/// The 12 words on the sheet, read with `pdftotext` the way a person reads them: the numbered
/// grid, each word from the BIP39 list, in the order of the numbers.
fn words_on_sheet(pdf: &Path) -> String {
    let out = std::process::Command::new("pdftotext")
        .args(["-layout"])
        .arg(pdf)
        .arg("-")
        .output()
        .expect("pdftotext runs (scripts/install-deps installs poppler-utils)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let words = bosun_demo::escrow::numbered_grid(&text)
        .unwrap_or_else(|| panic!("the sheet shows 12 numbered words:\n{text}"));
    words.as_str().to_owned()
}

/// Every file under `root` (or `root` itself), read whole.
fn files_under(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    if root.is_file() {
        return vec![(root.to_owned(), std::fs::read(root).unwrap())];
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root).unwrap().flatten() {
        found.extend(files_under(&entry.path()));
    }
    found
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn the_host_loss_scenario_brings_the_host_back_and_leaves_nothing_running() {
    let (dir, outcome, result, took, transcript) =
        run_demo(Scenario::HostLoss, Duration::from_secs(150));
    let out = dir.path().join("demo-out");
    // Box a provisions its guests through the root helper, as in the main scenario.
    if !passed_as_root(
        &result,
        (took, Duration::from_secs(120)),
        (&transcript, &out),
    ) {
        return;
    }
    let walk = outcome.host_loss.clone().expect("the host-loss walk ran");

    // Box b took over the host's identity; the agents never ran as root.
    let host = walk.host_id.expect("a host");
    assert_eq!(walk.new_box_host_id, Some(host));
    assert!(walk.agent_uid.is_some_and(|uid| uid != 0), "{walk:?}");

    // Two guests, each backed up to the PBS with its marker.
    assert_eq!(walk.guests.len(), 2, "{walk:?}");
    for guest in &walk.guests {
        assert!(guest.archive.starts_with("bosun-pbs-"), "{guest:?}");
        assert!(
            guest
                .archive
                .contains(&format!(":backup/ct/{}/", guest.vmid)),
            "{guest:?}"
        );
    }

    // The escrow: a one-page A4 PDF and its picture, a verified escrow at the hub, and a
    // second `create` refused with EX_TEMPFAIL.
    let sheet = walk.sheet.clone().expect("a recovery sheet");
    assert!(
        sheet.starts_with(&out),
        "the sheet is kept in the demo folder"
    );
    assert!(std::fs::read(&sheet).unwrap().starts_with(b"%PDF"));
    let png = walk.sheet_png.clone().expect("page 1 as PNG");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let (pages, size) = walk.sheet_pages.clone().unwrap();
    assert_eq!(pages, 1);
    assert!(size.contains("A4"), "{size}");
    assert_eq!(walk.escrow_state.as_deref(), Some("verified"));
    assert_eq!(walk.second_create_exit, Some(75));

    // The operator could not hand an active host to a new box; box b then waited.
    let refusal = walk.restore_token_refused.clone().unwrap_or_default();
    assert!(refusal.contains("not revoked"), "{refusal}");
    let reason = walk.waiting_reason.clone().unwrap_or_default();
    assert!(reason.contains("escrow recover"), "{reason}");
    assert_eq!(walk.creates_while_waiting, Some(0), "no blank guest");
    assert_eq!(walk.key_before_recover, Some(false), "no key of its own");
    assert!(walk.reseal_required_since.is_some(), "{walk:?}");
    assert!(walk.reseal_cleared);

    // The words brought back the same K.
    let old = walk
        .fingerprint_old
        .clone()
        .expect("K's fingerprint on box a");
    assert_eq!(walk.fingerprint_recovered.as_deref(), Some(old.as_str()));

    // Both guests came back from their archives, at the archives' vmids, with their data.
    assert_eq!(walk.restored.len(), 2, "{walk:?}");
    for guest in &walk.guests {
        let back = walk
            .restored
            .iter()
            .find(|r| r.guest_id == guest.guest_id)
            .unwrap_or_else(|| panic!("{} did not come back: {walk:?}", guest.name));
        assert_eq!(back.vmid, guest.vmid, "{back:?}");
        assert_eq!(back.archive, guest.archive, "{back:?}");
        assert!(back.marker_back && back.running, "{back:?}");
    }
    assert_eq!(walk.restored_alerts.len(), 2);
    for alert in &walk.restored_alerts {
        assert!(alert.contains("RPO") && alert.contains("RTO"), "{alert}");
        assert!(transcript.contains(alert.as_str()), "{transcript}");
    }
    // What the hub answered the revoke, in a word, never its JSON spread over lines.
    let step5 = step_text(&transcript, 5);
    assert!(
        step5.contains("$ bosunctl hosts revoke ") && step5.contains("→ revoked"),
        "{step5}"
    );
    assert!(
        step5
            .lines()
            .all(|l| l.starts_with("      ") || l.starts_with("[5]")),
        "every line of step 5 is its title or a detail under it: {step5}"
    );

    // The demo's own search found nothing, and it did read the hub's data.
    let scan = walk.scan.clone().expect("the zero-knowledge search ran");
    assert!(scan.found.is_empty(), "{scan:?}");
    assert_eq!(scan.needles, 13, "the phrase, its 11 pairs, K");
    assert!(scan.control_hits > 0, "{scan:?}");
    // Searched again here, with the words read off the sheet by this test.
    let words = words_on_sheet(&sheet);
    let key: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("agent-a/state/pbs-encryption-key.json")).unwrap(),
    )
    .unwrap();
    let k = key["data"].as_str().unwrap().to_owned();
    let pairs: Vec<String> = words
        .split(' ')
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w.join(" "))
        .collect();
    let places: Vec<(PathBuf, Vec<u8>)> = [out.join("hub"), out.join("logs")]
        .iter()
        .flat_map(|root| files_under(root))
        .collect();
    assert!(
        places
            .iter()
            .any(|(p, _)| p.to_string_lossy().ends_with("agentd-b.log"))
    );
    for (place, bytes) in &places {
        assert!(!contains(bytes, &words), "the words reached {place:?}");
        for pair in &pairs {
            assert!(!contains(bytes, pair), "two words reached {place:?}");
        }
        assert!(!contains(bytes, &k), "K reached {place:?}");
    }
    assert!(!transcript.contains(&words));

    // Numbered, timed, checked steps and the summary.
    for step in [
        "[3] with the customer present",
        "[6] box b",
        "[10] zero knowledge",
    ] {
        assert!(transcript.contains(step), "{step}\n{transcript}");
    }
    assert!(transcript.contains("demo passed: 10 steps"), "{transcript}");

    // No process left behind, no helper prefix left.
    let pids: Vec<u32> = std::fs::read_to_string(out.join("pids.txt"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        pids.len() >= 7,
        "two simulators, the hub, two helpers, two agents: {pids:?}"
    );
    let left: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
    assert_eq!(walk.helper_prefixes.len(), 2);
    for prefix in &walk.helper_prefixes {
        assert!(!prefix.exists(), "{} is left", prefix.display());
    }
}
