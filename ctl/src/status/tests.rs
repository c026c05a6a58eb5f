use bosun_proto::admin::HostDetail;
use serde_json::json;

use super::*;

const A: &str = "0190f5a6-0000-7000-8000-00000000000a";
const B: &str = "0190f5a6-0000-7000-8000-00000000000b";

fn host(report_guests: serde_json::Value) -> HostDetail {
    let desired = json!({
        "schema": "bosun.desired/v1",
        "guests": [{
            "guest_id": A,
            "hostname": "alpha",
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": "running",
            "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned() },
        }],
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    });
    let value = json!({
        "host_id": "0190f5a6-0000-7000-8000-000000000001",
        "hostname": "pve1",
        "status": "active",
        "liveness": "ok",
        "last_seen": "2026-11-21T01:00:00Z",
        "agent_version": "0.1.0",
        "controller_version": null,
        "desired_generation": 2,
        "known_generation": 2,
        "applied_generation": 2,
        "pending_jobs": 0,
        "enrolled_at": "2026-11-21T00:59:00Z",
        "poll_interval_seconds": 1,
        "desired": desired,
        "last_report": {
            "schema": "bosun.report/v1",
            "host": { "cpu_count": 2, "cpu_usage": 0.1, "memory_total_mib": 4096,
                      "memory_used_mib": 1024, "disk_total_gib": 100, "disk_used_gib": 20 },
            "guests": report_guests,
            "storage": [],
            "last_backups": [
                { "guest_id": A, "target": "local", "finished_at": "2026-11-21T00:30:00Z", "ok": true },
                { "guest_id": A, "target": "local", "finished_at": "2026-11-21T00:50:00Z", "ok": false },
            ],
            "last_restore_test": null,
            "tunnel": null,
            "versions": { "agent": "0.1.0" },
            "audit": [],
        },
        "escrow_updated_at": null,
    });
    serde_json::from_value(value).expect("a valid host detail")
}

#[test]
fn desired_and_reported_guests_merge_by_id_and_undesired_ones_stand_out() {
    let detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        { "guest_id": B, "vmid": 101, "hostname": "bravo", "status": "orphaned" },
    ]));
    let lines = guest_lines(&detail);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].vmid, Some(100));
    assert!(lines[0].desired);
    assert_eq!(lines[0].observed, "running");
    assert_eq!(lines[1].hostname, "bravo");
    assert!(!lines[1].desired);
    assert_eq!(lines[1].observed, "orphaned");
}

#[test]
fn each_guest_line_says_its_kind_as_reported_else_as_desired() {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running", "kind": "qemu" },
        { "guest_id": B, "vmid": 101, "hostname": "bravo", "status": "orphaned" },
    ]));
    let lines = guest_lines(&detail);
    assert_eq!(lines[0].kind, GuestKind::Qemu);
    assert_eq!(lines[1].kind, GuestKind::Lxc);
    let status = FleetStatus {
        hosts: vec![detail.clone()],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let text = render(&status).join("\n");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("  guest {name}")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("alpha"), "guest alpha vmid 100 qemu desired running");
    assert_eq!(line("bravo"), "guest bravo vmid 101 lxc undesired orphaned");
    // `hosts show` says the same, one field a guest.
    assert_eq!(
        guest_fields(&detail),
        [
            (
                "guest",
                "alpha (vmid 100): qemu, desired, running".to_owned()
            ),
            (
                "guest",
                "bravo (vmid 101): lxc, undesired, orphaned".to_owned()
            ),
        ]
    );
    // A VM desired but not built yet is a VM already.
    detail.last_report.as_mut().unwrap().guests.clear();
    detail.desired.as_mut().unwrap().guests[0].kind = GuestKind::Qemu;
    let lines = guest_lines(&detail);
    assert_eq!(lines[0].kind, GuestKind::Qemu);
    assert_eq!(lines[0].observed, "absent");
}

#[test]
fn a_guests_assigned_address_is_shown_on_its_line() {
    let detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running",
          "addresses": ["192.0.2.11"] },
    ]));
    let lines = guest_lines(&detail);
    assert_eq!(lines[0].addresses, ["192.0.2.11"]);
}

#[test]
fn a_desired_guest_not_yet_reported_is_absent() {
    let lines = guest_lines(&host(json!([])));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].observed, "absent");
    assert_eq!(lines[0].vmid, None);
}

#[test]
fn the_rendering_names_the_newest_backup_and_missing_restore_test() {
    let status = FleetStatus {
        hosts: vec![host(json!([
            { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        ]))],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let text = render(&status).join("\n");
    assert!(
        text.contains("last backup       2026-11-21 00:50:00Z on local (FAILED)"),
        "{text}"
    );
    assert!(text.contains("last restore-test never"), "{text}");
    assert!(text.contains("alpha"), "{text}");
    assert!(text.contains("open alerts: none"), "{text}");
}

#[test]
fn a_broken_guest_shows_as_broken() {
    let status = FleetStatus {
        hosts: vec![host(json!([
            { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "broken" },
        ]))],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    assert_eq!(guest_lines(&status.hosts[0])[0].observed, "broken");
    let text = render(&status).join("\n");
    assert!(
        text.lines()
            .any(|l| l.contains("alpha") && l.contains("desired") && l.ends_with("broken")),
        "{text}"
    );
}

/// A host with a USB target that dropped, a PBS target, and two tiers: `alpha` backed up to
/// both, `bravo` last good a day ago on PBS and failed since; the floor holds tier 1.
fn host_with_tiers() -> HostDetail {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        { "guest_id": B, "vmid": 101, "hostname": "bravo", "status": "running" },
    ]));
    let report = detail.last_report.as_mut().unwrap();
    report.storage = serde_json::from_value(json!([
        { "durable_id": "usb-1", "status": "disconnected", "type": "usb", "role": "vzdump-target",
          "free_gib": null, "detail": "device gone" },
        { "durable_id": "backup@pbs@pbs.example:store1", "status": "mounted", "type": "pbs",
          "role": "pbs-offsite", "free_gib": 812 },
        { "durable_id": "pbs:backup.example.net:8007:datastore=customers:ns=eu/hetzner/fsn1:user=bosun-host-7@pbs",
          "status": "mounted", "type": "pbs", "role": "pbs-offsite", "free_gib": 9000,
          "storage_id": "bosun-pbs-eu" },
    ]))
    .unwrap();
    report.tiers = serde_json::from_value(json!([
        { "tier": 0, "target": "local", "storage_id": "local", "schedule": "01:00",
          "desired": { "keep_last": 3 }, "applied": { "keep_last": 3 } },
        { "tier": 1, "target": "backup@pbs@pbs.example:store1", "storage_id": "bosun-pbs",
          "schedule": "02:30", "desired": { "keep_daily": 3 },
          "applied": { "keep_daily": 7, "keep_weekly": 4 }, "held": "below the signed floor" },
    ]))
    .unwrap();
    report.last_backups = serde_json::from_value(json!([
        { "guest_id": A, "target": "local", "tier": 0, "finished_at": "2026-11-21T09:00:00Z", "ok": true },
        { "guest_id": A, "target": "backup@pbs@pbs.example:store1", "tier": 1,
          "finished_at": "2026-11-21T09:00:00Z", "ok": true },
        { "guest_id": B, "target": "backup@pbs@pbs.example:store1", "tier": 1,
          "finished_at": "2026-11-21T11:40:00Z", "ok": false, "error": "datastore full",
          "last_ok_at": "2026-11-20T12:00:00Z" },
    ]))
    .unwrap();
    detail
}

#[test]
fn storage_targets_and_tiers_show_status_free_space_and_last_good_ages() {
    let status = FleetStatus {
        hosts: vec![host_with_tiers()],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    let text = lines.join("\n");
    assert!(
        lines.contains(
            &"  storage usb-1  usb  vzdump-target  DISCONNECTED  free ?  (device gone)".to_owned()
        ),
        "{text}"
    );
    assert!(
        lines.contains(
            &"  storage backup@pbs@pbs.example:store1  pbs  pbs-offsite  mounted  free 812 GiB"
                .to_owned()
        ),
        "{text}"
    );
    assert!(
        lines.contains(
            &"  tier 0 (target not reported) on local: last good 3h ago (alpha)".to_owned()
        ),
        "{text}"
    );
    assert!(
        lines.contains(
            &"  tier 1 pbs-offsite on bosun-pbs: last good 3h ago (alpha), 1d ago (bravo) FAILED 20m ago"
                .to_owned()
        ),
        "{text}"
    );
    assert!(
        lines.contains(
            &"    retention held by the floor: below the signed floor (applies keep_daily 7, keep_weekly 4, desired keep_daily 3)"
                .to_owned()
        ),
        "{text}"
    );
    // Tier 0 holds nothing: no retention line under it.
    let tier0 = lines
        .iter()
        .position(|l| l.starts_with("  tier 0"))
        .unwrap();
    assert!(lines[tier0 + 1].starts_with("  tier 1"), "{text}");
    // The lines that were there stay.
    assert!(
        text.contains(
            "last backup       2026-11-21 11:40:00Z on backup@pbs@pbs.example:store1 (FAILED)"
        ),
        "{text}"
    );
}

#[test]
fn storage_targets_are_named_by_their_plan_label() {
    let mut detail = host_with_tiers();
    let desired = detail.desired.as_mut().unwrap();
    desired.storage = serde_json::from_value(json!([{
        "type": "pbs", "durable_id": "backup@pbs@pbs.example:store1", "class": "slow",
        "role": "pbs-offsite", "policy": {}, "state": "attached", "label": "offsite",
    }]))
    .unwrap();
    let status = FleetStatus {
        hosts: vec![detail],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    let text = lines.join("\n");
    assert!(
        lines.contains(
            &"  storage offsite  pbs  pbs-offsite  mounted  free 812 GiB  id backup@pbs@pbs.example:store1"
                .to_owned()
        ),
        "{text}"
    );
    assert!(
        text.contains("  tier 1 pbs-offsite on offsite: last good"),
        "{text}"
    );
    assert!(
        text.contains("last backup       2026-11-21 11:40:00Z on offsite (FAILED)"),
        "{text}"
    );
}

#[test]
fn a_host_without_tiers_or_storage_shows_neither() {
    let status = FleetStatus {
        hosts: vec![host(json!([]))],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let text = render(&status).join("\n");
    assert!(!text.contains("storage "), "{text}");
    assert!(!text.contains("tier "), "{text}");
}

#[test]
fn ages_are_coarse_and_count_back_from_now() {
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let ago = |s: &str| crate::table::ago(s.parse().unwrap(), now);
    assert_eq!(ago("2026-11-21T11:59:15Z"), "45s ago");
    assert_eq!(ago("2026-11-21T11:40:00Z"), "20m ago");
    assert_eq!(ago("2026-11-21T09:00:00Z"), "3h ago");
    assert_eq!(ago("2026-11-19T11:00:00Z"), "2d ago");
    assert_eq!(ago("2026-11-21T12:05:00Z"), "in 5m");
}

/// `alpha` restore-tested from two tiers (passed locally, failed on PBS after a pass eight
/// days ago), `bravo` interrupted, and a test of a guest no longer on the host.
fn host_with_restore_tests() -> HostDetail {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        { "guest_id": B, "vmid": 101, "hostname": "bravo", "status": "running" },
    ]));
    let report = detail.last_report.as_mut().unwrap();
    report.restore_tests = serde_json::from_value(json!([
        { "guest_id": A, "finished_at": "2026-11-21T11:40:00Z", "passed": false,
          "duration_seconds": 125, "detail": "the guest did not stay up", "outcome": "failed",
          "tier": "bosun-pbs-1a2b3c4d", "archive": "bosun-pbs-1a2b3c4d:backup/ct/100/2026-11-20T02:30:00Z",
          "last_passed_at": "2026-11-13T12:00:00Z" },
        { "guest_id": A, "finished_at": "2026-11-21T09:00:00Z", "passed": true,
          "duration_seconds": 41, "outcome": "passed", "tier": "local",
          "archive": "local:backup/vzdump-lxc-100-2026_11_21-01_00_00.tar.zst",
          "last_passed_at": "2026-11-21T09:00:00Z" },
        { "guest_id": B, "finished_at": "2026-11-20T12:00:00Z", "passed": false,
          "duration_seconds": 3_720, "outcome": "interrupted", "tier": "local" },
        { "guest_id": "0190f5a6-0000-7000-8000-00000000000c", "finished_at": "2026-11-19T12:00:00Z",
          "passed": true, "duration_seconds": 30, "outcome": "passed", "tier": "local" },
    ]))
    .unwrap();
    report.last_restore_test = report.restore_tests.first().cloned();
    detail
}

#[test]
fn each_guest_shows_its_last_restore_test_per_tier_with_outcome_age_and_duration() {
    let status = FleetStatus {
        hosts: vec![host_with_restore_tests()],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    let text = lines.join("\n");
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line `{prefix}` in:\n{text}"))
    };
    let alpha = at("  guest alpha");
    assert_eq!(
        lines[alpha + 1..alpha + 3],
        [
            "    restore-test bosun-pbs-1a2b3c4d  FAILED 20m ago, took 2m 5s: the guest did not stay up; last passed 8d ago",
            "    restore-test local  passed 3h ago, took 41s",
        ],
        "{text}"
    );
    let bravo = at("  guest bravo");
    assert_eq!(
        lines[bravo + 1],
        "    restore-test local  INTERRUPTED 1d ago, took 1h 2m; last passed never",
        "{text}"
    );
    assert_eq!(
        lines[bravo + 2],
        "  restore-test of 0190f5a6-0000-7000-8000-00000000000c from local  passed 2d ago, took 30s",
        "{text}"
    );
    assert!(
        text.contains(
            "last restore-test FAILED at 2026-11-21 11:40:00Z (2m 5s), alpha on bosun-pbs-1a2b3c4d"
        ),
        "{text}"
    );
    // `--json` is the hub's host detail as it was: every result, whole.
    let json = serde_json::to_value(&status).unwrap();
    let tests = &json["hosts"][0]["last_report"]["restore_tests"];
    assert_eq!(tests.as_array().map(Vec::len), Some(4), "{json}");
    assert_eq!(tests[0]["outcome"], "failed");
    assert_eq!(tests[0]["tier"], "bosun-pbs-1a2b3c4d");
    assert_eq!(tests[0]["last_passed_at"], "2026-11-13T12:00:00Z");
}

#[test]
fn an_older_agents_last_restore_test_still_shows() {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
    ]));
    detail.last_report.as_mut().unwrap().last_restore_test = Some(
        serde_json::from_value(json!({
            "guest_id": A, "finished_at": "2026-11-21T06:00:00Z", "passed": false,
            "duration_seconds": 12, "detail": "restore failed",
        }))
        .unwrap(),
    );
    let status = FleetStatus {
        hosts: vec![detail],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    let text = lines.join("\n");
    assert!(
        text.contains("last restore-test FAILED at 2026-11-21 06:00:00Z (12s), alpha on -"),
        "{text}"
    );
    assert!(
        lines.contains(
            &"    restore-test -  FAILED 6h ago, took 12s: restore failed; last passed never"
                .to_owned()
        ),
        "{text}"
    );
}

#[test]
fn a_test_that_booted_but_was_not_checked_says_so_and_is_no_pass() {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
    ]));
    let report = detail.last_report.as_mut().unwrap();
    report.restore_tests = serde_json::from_value(json!([
        { "guest_id": A, "finished_at": "2026-11-21T11:00:00Z", "passed": false,
          "duration_seconds": 38, "outcome": "not_checked", "tier": "local",
          "detail": "booted, not checked: the guest installs no restore check at /etc/bosun/restore-check" },
    ]))
    .unwrap();
    let status = FleetStatus {
        hosts: vec![detail],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now: jiff::Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    let text = lines.join("\n");
    assert!(
        lines.contains(
            &"    restore-test local  booted, NOT CHECKED 1h ago, took 38s: booted, not checked: \
              the guest installs no restore check at /etc/bosun/restore-check; last passed never"
                .to_owned()
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "last restore-test booted, NOT CHECKED at 2026-11-21 11:00:00Z (38s), alpha on local"
        ),
        "{text}"
    );
    assert!(!text.contains("passed 1h ago"), "{text}");
}

#[test]
fn a_host_stopped_on_purpose_shows_stopped() {
    let mut detail = host(json!([]));
    detail.summary.liveness = bosun_proto::admin::Liveness::Stopped;
    detail.summary.stopped_at = detail.summary.last_seen;
    // The hub rolls a stopped host up to a warning (liveness sets its level).
    detail.summary.health = Some(bosun_proto::rollup::HostRollup {
        level: bosun_proto::rollup::HealthLevel::Warning,
        reasons: Vec::new(),
    });
    let mut status = FleetStatus {
        hosts: vec![detail],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let now = "2026-11-21T01:05:00Z".parse().unwrap();
    let lines = render_at(&status, now);
    assert!(lines[0].contains(")  stopped  last seen"), "{}", lines[0]);
    // An active host heard from, rolled up critical, is `critical` in the header, as its
    // health line says: never `active / ok`.
    let host = &mut status.hosts[0];
    host.summary.liveness = bosun_proto::admin::Liveness::Ok;
    host.summary.health = Some(bosun_proto::rollup::HostRollup {
        level: bosun_proto::rollup::HealthLevel::Critical,
        reasons: Vec::new(),
    });
    let lines = render_at(&status, now);
    assert!(lines[0].contains(")  critical  last seen"), "{}", lines[0]);
    assert!(!lines[0].contains("active"), "{}", lines[0]);
}

/// `host` with `edit` applied to its JSON.
fn host_with(edit: impl FnOnce(&mut serde_json::Value)) -> HostDetail {
    let mut value = serde_json::to_value(host(json!([
        { "guest_id": A, "vmid": 101, "hostname": "alpha", "status": "running" },
    ])))
    .unwrap();
    // The base host's newest backup failed: start from a good one.
    value["last_report"]["last_backups"][1]["ok"] = json!(true);
    edit(&mut value);
    serde_json::from_value(value).unwrap()
}

#[test]
fn the_health_line_prints_the_hubs_roll_up_and_says_when_there_is_none() {
    let none = host_with(|_| {});
    assert!(
        health::summary(&none).starts_with("unknown: the hub serves no health roll-up"),
        "{}",
        health::summary(&none)
    );
    let acked = host_with(|v| {
        v["health"] = json!({"level": "warning", "reasons": [
            {"level": "warning", "text": "guest_lost alpha", "alert": "guest_lost", "acknowledged": true},
            {"level": "ok", "text": "guest_orphaned beta", "alert": "guest_orphaned", "silenced": true},
        ]});
    });
    assert_eq!(
        health::summary(&acked),
        "warning: guest_lost alpha (acknowledged); guest_orphaned beta (silenced)"
    );
    let lines = render_at(
        &FleetStatus {
            hosts: vec![acked],
            alerts: Vec::new(),
            open_alerts: Vec::new(),
        },
        jiff::Timestamp::UNIX_EPOCH,
    );
    assert!(
        lines.contains(
            &"  health            warning: guest_lost alpha (acknowledged); guest_orphaned beta (silenced)"
                .to_owned()
        ),
        "{lines:#?}"
    );
}

#[test]
fn the_check_line_names_each_host_in_trouble_and_exits_with_the_worst() {
    let ok = host_with(|v| v["health"] = json!({"level": "ok", "reasons": []}));
    let overdue = host_with(|v| {
        v["hostname"] = json!("pve2");
        v["liveness"] = json!("overdue");
        v["health"] = json!({"level": "critical", "reasons": [
            {"level": "critical", "text": "overdue (silent)", "alert": "host_overdue"},
            {"level": "ok", "text": "guest_orphaned beta", "alert": "guest_orphaned", "silenced": true},
        ]});
    });
    let fleet = |hosts: Vec<HostDetail>| FleetStatus {
        hosts,
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let (exit, line) = check_line(&fleet(vec![ok.clone()]));
    assert_eq!(exit, 0);
    assert_eq!(line, "BOSUN OK - 1 hosts ok | hosts=1 critical=0 warning=0");
    let (exit, line) = check_line(&fleet(vec![ok.clone(), overdue]));
    assert_eq!(exit, 2);
    assert_eq!(
        line,
        "BOSUN CRITICAL - pve2: overdue (silent) | hosts=2 critical=1 warning=0"
    );
    // A hub that serves no roll-up is no OK.
    let (exit, line) = check_line(&fleet(vec![ok, host_with(|_| {})]));
    assert_eq!(exit, health::PLUGIN_UNKNOWN);
    assert!(line.starts_with("BOSUN UNKNOWN - "), "{line}");
}

#[test]
fn only_status_with_check_after_it_is_a_check_request() {
    assert!(check_requested(["bosunctl", "status", "--check"]));
    assert!(check_requested([
        "bosunctl", "--hub", "x", "status", "--bogus", "--check"
    ]));
    assert!(!check_requested(["bosunctl", "status"]));
    assert!(!check_requested(["bosunctl", "--check", "status"]));
    assert_eq!(
        unknown_line("reading the config\n  caused by: no such file"),
        "BOSUN UNKNOWN - reading the config caused by: no such file"
    );
}

#[test]
fn the_rendering_shows_guest_usage_disks_pools_and_sensors() {
    let mut detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
    ]));
    let report = detail.last_report.as_mut().unwrap();
    report.host_health = Some(
        serde_json::from_value(json!({
            "guests": [{ "guest_id": A, "vmid": 100,
                         "cpu": {"usage": 0.97, "high": 0.9, "low": 0.7, "raised": true} }],
            "disks": [{ "device": "/dev/sda", "model": "Samsung SSD", "health": "PASSED",
                        "state": "passed", "wear_used_percent": 85, "worn": true,
                        "checked_at": "2026-11-21T00:59:00Z" }],
            "pools": [{ "name": "pve/data", "kind": "lvmthin", "size": 100, "used": 25,
                        "data": {"usage": 0.25, "high": 0.9, "low": 0.8, "raised": false},
                        "metadata": {"usage": 0.06, "high": 0.9, "low": 0.8, "raised": false} }],
            "temperatures": [{ "sensor": "coretemp/Package id 0", "celsius": 48.0 }]
        }))
        .unwrap(),
    );
    let status = FleetStatus {
        hosts: vec![detail],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let text = render(&status).join("\n");
    for expected in [
        "    usage           cpu 97% (raised at 90%, clears at 70%) RAISED",
        "  disk              /dev/sda Samsung SSD  health PASSED, wear 85% used  WORN",
        "  pool              lvmthin:pve/data  data 25%, metadata 6% (raised at 90%, clears at 80%)  ok",
        "  temperatures      coretemp/Package id 0 48 °C",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
}

#[test]
fn the_tunnel_line_names_what_the_agent_manages() {
    let mut tunnel = bosun_proto::report::TunnelHealth {
        healthy: true,
        detail: "ready (HTTP 200)".into(),
        down_since: None,
        raised: false,
        managed: None,
    };
    assert_eq!(super::tunnel_text(&tunnel), "ready");
    tunnel.managed = Some(bosun_proto::tunnel::TunnelState {
        routes: 2,
        unplaced: 1,
        connections: Some(8),
        version: Some("2025.8.1".into()),
        restarts: 1,
        ..Default::default()
    });
    assert_eq!(
        super::tunnel_text(&tunnel),
        "ready, 2 route(s) (1 not placed), 8 edge connection(s), cloudflared 2025.8.1, 1 restart(s)"
    );
    if let Some(m) = tunnel.managed.as_mut() {
        m.credentials_error = Some("the tunnel credentials were refused".into());
    }
    assert!(
        super::tunnel_text(&tunnel)
            .ends_with(", credentials not written: the tunnel credentials were refused")
    );
}

/// A verification that could not run (its PBS unreachable) is counted as such in the host's
/// summary, never as ok beside its own `could not run` line.
#[test]
fn the_verify_summary_counts_a_verification_that_could_not_run_as_such() {
    let mut detail = host(json!([]));
    let verification = |tier: &str, outcome: bosun_proto::verify::VerifyOutcome| {
        bosun_proto::verify::VerifyReport {
            guest_id: A.parse().unwrap(),
            tier: tier.into(),
            finished_at: "2026-11-21T00:55:00Z".parse().unwrap(),
            outcome,
            duration_ms: 10,
            detail: String::new(),
            last_ok_at: None,
            last_failed_at: None,
            first_at: "2026-11-21T00:40:00Z".parse().unwrap(),
        }
    };
    use bosun_proto::verify::VerifyOutcome::{Error, Failed, Ok as Passed};
    let report = detail.last_report.as_mut().unwrap();
    report.verifications = vec![
        verification("pbs1", Passed),
        verification("pbs2", Passed),
        verification("pbs.demo", Error),
    ];
    assert_eq!(verify::host_summary(&detail), "2 ok, 1 could not run");
    let report = detail.last_report.as_mut().unwrap();
    report.verifications.push(verification("pbs3", Failed));
    assert_eq!(
        verify::host_summary(&detail),
        "2 ok, 1 FAILED, 1 could not run"
    );
}

#[test]
fn a_host_without_an_address_pool_is_warned_of_in_status_and_hosts_show() {
    let now = "2026-11-21T01:00:05Z".parse().unwrap();
    let shown = |pool: Option<bool>| {
        let detail = host_with(|v| {
            v["capabilities"] = json!({ "arch": "x86_64", "cpu_count": 4 });
            if let Some(pool) = pool {
                v["capabilities"]["address_pool"] = json!(pool);
            }
        });
        let status = FleetStatus {
            hosts: vec![detail.clone()],
            alerts: Vec::new(),
            open_alerts: Vec::new(),
        };
        let fields = crate::host_labels::fields(&detail);
        let pool = fields
            .iter()
            .find(|(name, _)| *name == "address pool")
            .map(|(_, text)| text.clone())
            .unwrap_or_default();
        (render_at(&status, now), pool)
    };
    let (lines, pool) = shown(Some(false));
    let warning = lines
        .iter()
        .find(|l| l.starts_with("  WARNING "))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(
        warning.contains("no address pool") && warning.contains("DHCP"),
        "{warning}"
    );
    assert!(pool.starts_with("WARNING: no address pool"), "{pool}");
    for said in [Some(true), None] {
        let (lines, pool) = shown(said);
        assert!(
            !lines.iter().any(|l| l.contains("address pool")),
            "{said:?}: {lines:#?}"
        );
        assert!(!pool.contains("WARNING"), "{said:?}: {pool}");
    }
}
