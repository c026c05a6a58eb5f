use bosun_proto::desired_status::DesiredRevision;
use jiff::Timestamp;

use super::*;

fn document(memory_mib: u32) -> DesiredState {
    let mut doc: DesiredState =
        serde_json::from_str(include_str!("../../docs/proto/desired.json")).unwrap();
    doc.guests[0].resources.memory_mib = memory_mib;
    doc
}

fn revision(generation: u64, doc: DesiredState) -> DesiredRevision {
    DesiredRevision {
        generation,
        correlation_id: None,
        set_by: Some(format!("op-{generation}")),
        stored_at: Timestamp::UNIX_EPOCH,
        document: doc,
    }
}

fn observed(doc: &DesiredState) -> GuestReport {
    let spec = &doc.guests[0];
    GuestReport {
        guest_id: Some(spec.guest_id),
        vmid: 101,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: spec.hostname.clone(),
        status: GuestStatus::Running,
        resources: Some(spec.resources),
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

fn status(desired: DesiredState, applied: DesiredState, applied_generation: u64) -> DesiredStatus {
    let seen = observed(&applied);
    DesiredStatus {
        host_id: Uuid::nil(),
        guests: vec![GuestProgress {
            guest_id: applied.guests[0].guest_id,
            hostname: applied.guests[0].hostname.clone(),
            state: ProgressState::Pending,
            terminal: false,
            reason: None,
            observed: Some(seen),
        }],
        desired: Some(revision(2, desired)),
        applied: Some(revision(applied_generation, applied)),
        known_generation: 2,
        applied_generation,
        last_seen: None,
        unmanaged: Vec::new(),
        operations: Vec::new(),
        refused: Vec::new(),
    }
}

#[test]
fn a_pending_change_shows_desired_applied_and_current() {
    let diff = diff(&status(document(8192), document(4096), 1));
    assert!(!diff.in_sync);
    assert_eq!(diff.changes.len(), 1, "{:?}", diff.changes);
    let change = &diff.changes[0];
    assert_eq!(change.field, "memory_mib");
    assert_eq!(change.desired.as_deref(), Some("8192"));
    assert_eq!(change.applied.as_deref(), Some("4096"));
    assert_eq!(change.current.as_deref(), Some("4096"));
    assert_eq!(change.progress, Some(ProgressState::Pending));
    assert_eq!(diff.desired_set_by.as_deref(), Some("op-2"));
    assert_eq!(diff.applied_set_by.as_deref(), Some("op-1"));
    let json = serde_json::to_value(&diff).unwrap();
    assert_eq!(json["desired_set_by"], "op-2");
}

#[test]
fn nothing_differs_once_applied_and_reported() {
    let diff = diff(&status(document(8192), document(8192), 2));
    assert!(diff.in_sync, "{:?}", diff.changes);
    assert!(diff.changes.is_empty());
}

#[test]
fn a_dropped_guest_shows_as_going_and_host_sections_are_compared() {
    let mut desired = document(4096);
    desired.guests.clear();
    desired.dr_policy = bosun_proto::desired::DrPolicy::Manual;
    let diff = diff(&status(desired, document(4096), 1));
    let fields: Vec<&str> = diff.changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["dr_policy", "present"]);
    let present = &diff.changes[1];
    assert_eq!(
        (
            present.desired.as_deref(),
            present.applied.as_deref(),
            present.current.as_deref()
        ),
        (Some("no"), Some("yes"), Some("yes"))
    );
}

#[test]
fn a_root_disk_larger_than_asked_is_a_difference_with_its_reason() {
    // The host applied generation 2 asking for 4 GiB; the guest's disk is 8 GiB (its golden
    // archive's size) and is never shrunk: not in sync, with the hub's reason.
    let mut asked = document(8192);
    asked.guests[0].resources.rootfs_gib = 4;
    let mut status = status(asked.clone(), asked, 2);
    let guest = &mut status.guests[0];
    guest
        .observed
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .rootfs_gib = 8;
    guest.state = ProgressState::Refused;
    guest.terminal = true;
    guest.reason = Some("rootfs_gib: the root disk is 8 GiB and is never shrunk".into());
    let diff = diff(&status);
    assert!(!diff.in_sync);
    let change = &diff.changes[0];
    assert_eq!(change.field, "rootfs_gib");
    assert_eq!(change.desired.as_deref(), Some("4"));
    assert_eq!(change.current.as_deref(), Some("8"));
    assert_eq!(change.progress, Some(ProgressState::Refused));
    assert!(change.reason.as_deref().unwrap().contains("never shrunk"));
}
