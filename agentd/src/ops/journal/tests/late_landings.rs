use super::*;

fn late(store: &mut Store, vmid: u32) -> OpId {
    let op = store.begin_operation(&provision()).unwrap();
    store
        .record_created(op, vmid, Some("g-1"), bosun_proto::desired::GuestKind::Lxc)
        .unwrap();
    let until = start() + jiff::SignedDuration::from_hours(1);
    store
        .watch_late_landing(op, vmid, Some("g-1"), start(), until)
        .unwrap();
    assert!(store.forget_guest(op, vmid).unwrap());
    store
        .finish_operation(op, OpStatus::Compensated, None)
        .unwrap();
    op
}

#[test]
fn a_watch_names_its_sender_and_ends_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let sender = late(&mut store, 9001);
    let watched = store.late_landings().unwrap();
    assert_eq!(watched.len(), 1);
    assert_eq!(watched[0].op_id, sender);
    assert_eq!(watched[0].guest_id.as_deref(), Some("g-1"));
    assert_eq!(watched[0].tag(), identity_tag(sender));

    let next = store.begin_operation(&provision()).unwrap();
    assert!(
        !store.end_late_landing(next, 9001, "expired").unwrap(),
        "another operation's watch"
    );
    assert!(store.end_late_landing(sender, 9001, "expired").unwrap());
    assert!(
        !store.end_late_landing(sender, 9001, "expired").unwrap(),
        "ended once"
    );
    assert!(store.late_landings().unwrap().is_empty());
}

#[test]
fn only_a_running_operation_starts_a_watch_and_each_step_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let sender = late(&mut store, 9002);
    let until = start() + jiff::SignedDuration::from_hours(1);
    let err = store
        .watch_late_landing(sender, 9003, None, start(), until)
        .unwrap_err();
    assert!(
        matches!(err, JournalError::OperationEnded { .. }),
        "{err:?}"
    );
    store.end_late_landing(sender, 9002, "destroyed").unwrap();
    let events: Vec<(String, serde_json::Value)> = store
        .audit_since(0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event.starts_with("restore.late_landing"))
        .map(|e| (e.event.event, e.event.detail))
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "restore.late_landing_watched");
    assert_eq!(events[1].0, "restore.late_landing_ended");
    assert_eq!(events[1].1["outcome"], "destroyed");
}
