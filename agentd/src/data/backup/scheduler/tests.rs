use std::collections::BTreeMap;

use bosun_proto::desired::GuestKind;
use bosun_proto::desired::{
    BackupPolicy, CustomerIdentity, DesiredState, GoldenArchive, GuestResources, GuestSpec, Power,
    RestoreTestPolicy,
};
use bosun_pve::{CtSummary, VmSummary};
use jiff::tz::TimeZone;
use uuid::Uuid;

use super::*;
use crate::data::backup::schedule::{CalendarEvent, evaluate};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// The verdict of an hourly policy with `grace` minutes at `now`, last backed up at `last`.
fn hourly(grace: u32, last: Option<&str>, now: &str) -> DueVerdict {
    let event = CalendarEvent::parse("hourly").unwrap();
    evaluate(&event, grace, last.map(ts), ts(now), &TimeZone::UTC)
}

const STARTED: &str = "2026-03-10T11:00:00Z";

#[test]
fn due_before_the_deadline_waits_for_the_deadline() {
    let v = hourly(30, None, "2026-03-10T12:10:00Z");
    let d = decide(&v, ts("2026-03-10T12:10:00Z"), ts(STARTED), false, None);
    assert_eq!(d, Decision::WaitUntil(ts("2026-03-10T12:30:00Z")));
    assert_eq!(d.wake_at(), Some(ts("2026-03-10T12:30:00Z")));
}

#[test]
fn due_at_or_after_the_deadline_backs_up() {
    for now in ["2026-03-10T12:30:00Z", "2026-03-10T12:59:59Z"] {
        let v = hourly(30, Some("2026-03-10T11:05:00Z"), now);
        assert_eq!(
            decide(&v, ts(now), ts(STARTED), false, None),
            Decision::BackUp,
            "{now}"
        );
    }
}

#[test]
fn a_backup_since_the_scheduled_time_is_not_due_until_the_next_one() {
    let now = "2026-03-10T12:45:00Z";
    let v = hourly(0, Some("2026-03-10T12:01:00Z"), now);
    let d = decide(&v, ts(now), ts(STARTED), false, None);
    assert_eq!(
        d,
        Decision::NotDue {
            next_run: Some(ts("2026-03-10T13:00:00Z"))
        }
    );
    assert_eq!(d.wake_at(), Some(ts("2026-03-10T13:00:00Z")));
}

#[test]
fn a_run_in_progress_gets_no_second_one() {
    let now = "2026-03-10T12:45:00Z";
    let v = hourly(0, None, now);
    let d = decide(&v, ts(now), ts(STARTED), true, None);
    assert_eq!(d, Decision::Busy);
    assert_eq!(d.wake_at(), None);
}

#[test]
fn a_failure_waits_out_its_backoff_then_backs_up() {
    let v = hourly(0, None, "2026-03-10T12:10:00Z");
    let retry_at = ts("2026-03-10T12:15:00Z");
    assert_eq!(
        decide(
            &v,
            ts("2026-03-10T12:10:00Z"),
            ts(STARTED),
            false,
            Some(retry_at)
        ),
        Decision::WaitUntil(retry_at)
    );
    assert_eq!(
        decide(
            &v,
            ts("2026-03-10T12:15:00Z"),
            ts(STARTED),
            false,
            Some(retry_at)
        ),
        Decision::BackUp
    );
    // A backoff that ended before the deadline does not move the deadline forward.
    let v = hourly(30, None, "2026-03-10T12:10:00Z");
    assert_eq!(
        decide(
            &v,
            ts("2026-03-10T12:10:00Z"),
            ts(STARTED),
            false,
            Some(ts("2026-03-10T12:05:00Z"))
        ),
        Decision::WaitUntil(ts("2026-03-10T12:30:00Z"))
    );
}

#[test]
fn a_deadline_passed_before_the_scheduler_started_is_not_caught_up() {
    let now = "2026-03-10T12:40:00Z";
    let v = hourly(30, None, now);
    let d = decide(&v, ts(now), ts("2026-03-10T12:35:00Z"), false, None);
    assert_eq!(
        d,
        Decision::Missed {
            next_run: Some(ts("2026-03-10T13:00:00Z"))
        }
    );
    // A deadline still ahead at the start is acted on.
    let d = decide(&v, ts(now), ts("2026-03-10T12:30:00Z"), false, None);
    assert_eq!(d, Decision::BackUp);
}

#[test]
fn after_a_start_that_missed_the_plans_deadline_an_added_events_deadline_still_counts() {
    let daily = CalendarEvent::parse("02:00").unwrap();
    let often = CalendarEvent::parse("*:0/5").unwrap();
    let now = ts("2026-03-10T05:06:00Z");
    let v = crate::data::backup::schedule::evaluate_all(
        &[daily, often],
        0,
        None,
        None,
        now,
        &TimeZone::UTC,
    );
    // Started at 05:01: the plan's 02:00 deadline was missed, the added 05:05 one was not.
    let d = decide(&v, now, ts("2026-03-10T05:01:00Z"), false, None);
    assert_eq!(d, Decision::BackUp);
    // Started at 05:06: both passed before the start.
    let d = decide(&v, now, ts("2026-03-10T05:06:00Z"), false, None);
    assert_eq!(
        d,
        Decision::Missed {
            next_run: Some(ts("2026-03-10T05:10:00Z"))
        }
    );
}

#[test]
fn backoff_doubles_from_five_minutes_up_to_the_interval() {
    let first = Duration::from_secs(300);
    let daily = Some(SignedDuration::from_hours(24));
    let hour = Some(SignedDuration::from_hours(1));
    assert_eq!(backoff(first, 1, daily), Duration::from_secs(300));
    assert_eq!(backoff(first, 2, daily), Duration::from_secs(600));
    assert_eq!(backoff(first, 3, daily), Duration::from_secs(1200));
    assert_eq!(backoff(first, 4, hour), Duration::from_secs(2400));
    assert_eq!(backoff(first, 5, hour), Duration::from_secs(3600));
    assert_eq!(backoff(first, 40, None), Duration::from_secs(86_400));
    assert_eq!(
        backoff(first, 1, Some(SignedDuration::from_mins(1))),
        Duration::from_secs(60)
    );
}

#[test]
fn a_pass_that_could_not_decide_looks_again_within_seconds_then_backs_off_to_a_minute() {
    let config = SchedulerConfig::default();
    let waits: Vec<u64> = (0..7)
        .map(|unsure| longest_sleep(&config, unsure).as_secs())
        .collect();
    assert_eq!(waits, [60, 5, 10, 20, 40, 60, 60]);
    assert_eq!(longest_sleep(&config, u32::MAX), config.max_sleep);
}

fn spec(n: u128, power: Power) -> GuestSpec {
    GuestSpec {
        guest_id: Uuid::from_u128(n),
        kind: Default::default(),
        hostname: format!("g{n}"),
        vmid: None,
        customer: CustomerIdentity {
            customer_id: "c".into(),
            display_name: "C".into(),
        },
        resources: GuestResources {
            cores: 1,
            memory_mib: 512,
            rootfs_gib: 4,
        },
        power,
        golden: GoldenArchive {
            volid: "local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst".into(),
            sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned(),
            signed: None,
            version: None,
        },
        bulk_volumes: Vec::new(),
        hot_volumes: Vec::new(),
        thresholds: None,
        share_class: None,
        provides: Vec::new(),
        requires: Vec::new(),
        network: None,
    }
}

fn desired(guests: Vec<GuestSpec>) -> DesiredState {
    DesiredState {
        schema: "bosun.desired/v1".into(),
        guests,
        storage: vec![],
        backup_policy: BackupPolicy {
            schedule: "hourly".into(),
            retention: Default::default(),
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: Vec::new(),
            floor: None,
        },
        verify_policy: Default::default(),
        restore_test_policy: RestoreTestPolicy {
            enabled: false,
            interval_days: 7,
            timeout_minutes: 30,
            window: None,
        },
        dr_policy: Default::default(),
        golden_recipe: None,
        data_plan: None,
        tunnel_credentials: None,
        share_classes: Vec::new(),
    }
}

fn ct(vmid: u32, status: &str) -> CtSummary {
    serde_json::from_value(serde_json::json!({"vmid": vmid, "status": status})).unwrap()
}

#[test]
fn only_desired_running_guests_of_this_agent_that_run_now_are_backed_up() {
    let state = desired(vec![
        spec(1, Power::Running),
        spec(2, Power::Running),
        spec(3, Power::Stopped),
        spec(4, Power::Running),
    ]);
    let vmids: BTreeMap<String, (u32, GuestKind)> = [
        (Uuid::from_u128(1).to_string(), (101, GuestKind::Lxc)),
        (Uuid::from_u128(2).to_string(), (102, GuestKind::Lxc)),
        (Uuid::from_u128(3).to_string(), (103, GuestKind::Lxc)),
        // Guest 4 was not created by this agent: no vmid.
    ]
    .into_iter()
    .collect();
    let cts = [
        ct(101, "running"),
        // Desired running, but stopped on the node: not backed up now.
        ct(102, "stopped"),
        ct(103, "running"),
        ct(104, "running"),
    ];
    let (guests, mismatched) = running_guests(&state, &vmids, &cts, &[]);
    assert!(mismatched.is_empty());
    assert_eq!(
        guests,
        vec![GuestRef {
            guest_id: Uuid::from_u128(1).to_string(),
            vmid: bosun_pve::Vmid::new(101).unwrap(),
            kind: GuestKind::Lxc,
        }]
    );
}

fn vm(vmid: u32, status: &str) -> VmSummary {
    serde_json::from_value(serde_json::json!({"vmid": vmid, "status": status})).unwrap()
}

#[test]
fn a_guest_is_backed_up_as_the_kind_the_journal_recorded_whatever_desired_state_says() {
    let vm_spec = |n| GuestSpec {
        kind: GuestKind::Qemu,
        ..spec(n, Power::Running)
    };
    // Guest 4 is a VM the agent created; the hub now calls it a container. Guest 5 is a
    // container the hub calls a VM.
    let state = desired(vec![
        vm_spec(1),
        vm_spec(2),
        spec(3, Power::Running),
        spec(4, Power::Running),
        vm_spec(5),
    ]);
    let recorded: BTreeMap<String, (u32, GuestKind)> = [
        (1, 201, GuestKind::Qemu),
        (2, 202, GuestKind::Qemu),
        (3, 203, GuestKind::Lxc),
        (4, 204, GuestKind::Qemu),
        (5, 205, GuestKind::Lxc),
    ]
    .into_iter()
    .map(|(n, vmid, kind)| (Uuid::from_u128(n).to_string(), (vmid, kind)))
    .collect();
    // 202 runs as a container, 203 as a VM: neither is the guest the journal recorded.
    let cts = [ct(202, "running"), ct(204, "running"), ct(205, "running")];
    let vms = [vm(201, "running"), vm(203, "running"), vm(204, "running")];
    let (running, mismatched) = running_guests(&state, &recorded, &cts, &vms);
    let guest = |n: u128, vmid: u32, kind| GuestRef {
        guest_id: Uuid::from_u128(n).to_string(),
        vmid: bosun_pve::Vmid::new(vmid).unwrap(),
        kind,
    };
    assert_eq!(
        running,
        vec![
            guest(1, 201, GuestKind::Qemu),
            guest(4, 204, GuestKind::Qemu),
            guest(5, 205, GuestKind::Lxc),
        ]
    );
    let mismatch = |n: u128, vmid, desired, recorded| KindMismatch {
        guest_id: Uuid::from_u128(n).to_string(),
        vmid,
        desired,
        recorded,
    };
    assert_eq!(
        mismatched,
        vec![
            mismatch(4, 204, GuestKind::Lxc, GuestKind::Qemu),
            mismatch(5, 205, GuestKind::Qemu, GuestKind::Lxc),
        ]
    );
}
