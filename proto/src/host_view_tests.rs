#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;

const GUEST: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";

/// A host that applied generation 4 of 5, with `report` as its last report.
fn host(report: Value) -> HostDetail {
    let mut poll: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    let mut last = poll["report"].take();
    if let (Value::Object(last), Value::Object(edits)) = (&mut last, report) {
        last.extend(edits);
    }
    serde_json::from_value(json!({
        "host_id": "6f1c2a8e-0000-4000-8000-000000000001", "hostname": "pve1",
        "status": "active", "liveness": "ok", "last_seen": null, "agent_version": null,
        "controller_version": null, "desired_generation": 5, "known_generation": 5,
        "applied_generation": 4, "pending_jobs": 0,
        "enrolled_at": "2026-11-20T00:00:00Z", "poll_interval_seconds": 30,
        "desired": null, "last_report": last, "escrow_updated_at": null,
        "capabilities": { "arch": "x86_64", "cpu_count": 4, "plan_targets": ["stale"] },
    }))
    .unwrap()
}

#[test]
fn a_refusal_puts_a_host_out_of_sync_whatever_it_applied() {
    let converging = SyncView::of(&host(json!({})));
    assert_eq!(converging.state, SyncState::Converging);
    assert_eq!(
        converging.sentence(),
        "converging: generation 5 not applied yet (last applied 4)"
    );
    let refused = SyncView::of(&host(json!({"refused": [{
        "kind": "guest_field", "name": "acme-app", "guest_id": GUEST, "field": "rootfs_gib",
        "reason": "the root disk is 32 GiB and is never shrunk",
    }]})));
    assert_eq!(refused.state, SyncState::NotInSync);
    assert_eq!(refused.word, "NOT IN SYNC");
    assert!(
        refused
            .sentence()
            .starts_with("NOT IN SYNC: the host refuses 1 part of desired state"),
        "{}",
        refused.sentence()
    );
    let mut applied = host(json!({}));
    applied.summary.applied_generation = 5;
    assert_eq!(SyncView::of(&applied).word, "in sync");
    // A fleet list sees the summary only: the hub counts the refusals for it.
    assert_eq!(
        SyncView::of_summary(&applied.summary).state,
        SyncState::InSync
    );
    applied.summary.refused = 1;
    assert_eq!(
        SyncView::of_summary(&applied.summary).state,
        SyncState::NotInSync
    );
}

#[test]
fn booted_but_not_checked_is_neither_a_pass_nor_a_failure() {
    let table = [
        (json!({"passed": true}), RestoreVerdict::Passed),
        (json!({"passed": false}), RestoreVerdict::Failed),
        (
            json!({"passed": false, "outcome": "not_checked"}),
            RestoreVerdict::NotChecked,
        ),
        (
            json!({"passed": false, "outcome": "interrupted"}),
            RestoreVerdict::Interrupted,
        ),
        (
            json!({"passed": true, "outcome": "something_new"}),
            RestoreVerdict::Passed,
        ),
        (
            json!({"passed": false, "outcome": "something_new"}),
            RestoreVerdict::Failed,
        ),
    ];
    for (edit, want) in table {
        let mut test = json!({
            "guest_id": GUEST, "finished_at": "2026-11-18T03:20:00Z", "duration_seconds": 4,
            "detail": "",
        });
        if let (Value::Object(t), Value::Object(e)) = (&mut test, edit.clone()) {
            t.extend(e);
        }
        let test: RestoreTestReport = serde_json::from_value(test).unwrap();
        assert_eq!(RestoreVerdict::of(&test), want, "{edit}");
    }
    assert_eq!(RestoreVerdict::NotChecked.word(), "booted, NOT CHECKED");
}

#[test]
fn plan_targets_are_the_reports_and_guests_are_named_by_their_hostname() {
    let planned = host(json!({"data_plan": {
        "serial": 2, "issued_at": "2026-11-18T03:20:00Z", "signer": "SHA256:x",
        "targets": ["backup@pbs@pbs.example.net:store1", "usb-1"], "min_interval_seconds": 3600,
    }}));
    assert_eq!(
        plan_targets(&planned),
        ["backup@pbs@pbs.example.net:store1", "usb-1"]
    );
    // A report without a plan names none, whatever the host described earlier.
    assert!(plan_targets(&host(json!({}))).is_empty());
    let mut unreported = host(json!({}));
    unreported.last_report = None;
    assert_eq!(plan_targets(&unreported), ["stale"]);

    let guest: Uuid = GUEST.parse().unwrap();
    assert_eq!(guest_name(&planned, guest), "acme-app");
    let other = Uuid::nil();
    assert_eq!(guest_name(&planned, other), other.to_string());
}

#[test]
fn the_state_word_is_the_roll_up_unless_liveness_tells_more() {
    let mut h = host(json!({})).summary;
    assert_eq!(state_word(&h), ("ok", Some(HealthLevel::Ok)));
    h.health = Some(crate::rollup::HostRollup {
        level: HealthLevel::Critical,
        reasons: Vec::new(),
    });
    assert_eq!(state_word(&h).0, "critical");
    h.liveness = Liveness::Overdue;
    assert_eq!(state_word(&h).0, "overdue");
    h.status = HostStatus::Revoked;
    assert_eq!(state_word(&h), ("revoked", None));
}

#[test]
fn a_host_without_an_address_pool_is_warned_of_and_one_that_does_not_say_is_not() {
    let mut without = host(json!({}));
    assert_eq!(
        address_pool_warning(&without),
        None,
        "an agent that does not say"
    );
    without.capabilities.as_mut().unwrap().address_pool = Some(false);
    let warning = address_pool_warning(&without).expect("a warning");
    assert!(
        warning.contains("DHCP") && warning.contains("[addresses]"),
        "{warning}"
    );
    without.capabilities.as_mut().unwrap().address_pool = Some(true);
    assert_eq!(address_pool_warning(&without), None);
}

#[test]
fn a_guests_kind_is_what_its_host_reports_else_what_desired_state_asks() {
    let guest: Uuid = GUEST.parse().unwrap();
    let mut desired: Value =
        serde_json::from_str(include_str!("../../docs/proto/desired.json")).unwrap();
    desired["guests"][0]["kind"] = "qemu".into();
    let desired: crate::desired::DesiredState = serde_json::from_value(desired).unwrap();

    // Reported as a container, with no desired state: a container.
    let mut seen = host(json!({}));
    assert_eq!(guest_kind(&seen, guest), GuestKind::Lxc);
    // Reported as a VM.
    let mut report = seen.last_report.take().unwrap();
    report.guests[0].kind = GuestKind::Qemu;
    seen.last_report = Some(report.clone());
    assert_eq!(guest_kind(&seen, guest), GuestKind::Qemu);
    // Not reported yet: what desired state asks for.
    report.guests.retain(|g| g.guest_id != Some(guest));
    seen.last_report = Some(report.clone());
    assert_eq!(guest_kind(&seen, guest), GuestKind::Lxc);
    seen.desired = Some(desired.clone());
    assert_eq!(guest_kind(&seen, guest), GuestKind::Qemu);
    // Reported: what the host observes wins over what desired state says.
    let mut container = host(json!({}));
    container.desired = Some(desired);
    assert_eq!(guest_kind(&container, guest), GuestKind::Lxc);
    // Unknown to both: a container.
    assert_eq!(guest_kind(&seen, Uuid::nil()), GuestKind::Lxc);
}
