use super::*;

#[test]
fn a_retired_guest_leaves_a_tombstone_and_identities_survive_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    store
        .record_created(op, 101, Some("g-1"), bosun_proto::desired::GuestKind::Lxc)
        .unwrap();
    let row = store.provenance(101).unwrap().unwrap();
    assert_eq!(row.identity(), identity_tag(op));
    assert!(row.identity().starts_with("bosun-op-"));

    // A journal written before version 6 gets the same identity from `created_by_op`.
    crate::ops::journal::schema::rewind(&store.conn, 5).unwrap();
    drop(store);
    let (mut store, _) = open(&dir);
    assert_eq!(
        store.provenance(101).unwrap().unwrap().identity(),
        identity_tag(op)
    );

    assert!(store.tombstones().unwrap().is_empty());
    let decommission = store
        .begin_operation(&NewOperation {
            kind: OpKind::DecommissionJob,
            ..provision()
        })
        .unwrap();
    assert!(store.retire_guest(decommission, 101).unwrap());
    assert!(store.provenance(101).unwrap().is_none());
    let tombstones = store.tombstones().unwrap();
    assert_eq!(tombstones.len(), 1);
    assert_eq!(
        (
            tombstones[0].guest_id.as_str(),
            tombstones[0].vmid,
            tombstones[0].op_id
        ),
        ("g-1", 101, decommission)
    );
    // Retiring again (a resumed job) keeps the one tombstone.
    assert!(!store.retire_guest(decommission, 101).unwrap());
    assert_eq!(store.tombstones().unwrap().len(), 1);
}

/// An adopted container is recorded like a created guest (its identity is the adopting
/// operation's), remembers whether its job asked for a bootstrap, and a failed adoption takes
/// both back.
#[test]
fn an_adoption_is_recorded_with_its_bootstrap_choice_and_taken_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let adopt = |store: &mut Store| {
        store
            .begin_operation(&NewOperation {
                kind: OpKind::AdoptJob,
                ..provision()
            })
            .unwrap()
    };
    let op = adopt(&mut store);
    store
        .record_adopted(
            op,
            120,
            "g-adopted",
            AdoptedAs::WithoutBootstrap,
            bosun_proto::desired::GuestKind::Lxc,
        )
        .unwrap();
    let row = store.provenance(120).unwrap().unwrap();
    assert_eq!(row.identity(), identity_tag(op));
    assert_eq!(row.guest_id(), Some("g-adopted"));
    assert_eq!(row.adopted(), Some(AdoptedAs::WithoutBootstrap));
    assert!(!row.is_scratch());
    assert_eq!(
        store.adopted_without_bootstrap().unwrap(),
        ["g-adopted".to_owned()].into()
    );

    // The vmid or the guest id again: refused.
    let again = adopt(&mut store);
    assert!(matches!(
        store.record_adopted(again, 120, "g-other", AdoptedAs::WithBootstrap, bosun_proto::desired::GuestKind::Lxc),
        Err(JournalError::VmidAlreadyRecorded { created_by_op, .. }) if created_by_op == op
    ));
    assert!(matches!(
        store.record_adopted(
            again,
            121,
            "g-adopted",
            AdoptedAs::WithBootstrap,
            bosun_proto::desired::GuestKind::Lxc
        ),
        Err(JournalError::GuestIdAlreadyRecorded { vmid: 120, .. })
    ));

    // A created guest is not adopted; a failed adoption leaves nothing behind.
    let created = store.begin_operation(&provision()).unwrap();
    store
        .record_created(
            created,
            101,
            Some("g-1"),
            bosun_proto::desired::GuestKind::Lxc,
        )
        .unwrap();
    assert_eq!(store.provenance(101).unwrap().unwrap().adopted(), None);
    store
        .record_adopted(
            again,
            122,
            "g-with",
            AdoptedAs::WithBootstrap,
            bosun_proto::desired::GuestKind::Lxc,
        )
        .unwrap();
    assert_eq!(
        store.provenance(122).unwrap().unwrap().adopted(),
        Some(AdoptedAs::WithBootstrap)
    );
    assert!(store.forget_guest(again, 122).unwrap());
    assert!(store.provenance(122).unwrap().is_none());
    let fresh = adopt(&mut store);
    store
        .record_adopted(
            fresh,
            123,
            "g-with",
            AdoptedAs::WithoutBootstrap,
            bosun_proto::desired::GuestKind::Lxc,
        )
        .unwrap();
    assert_eq!(
        store.provenance(123).unwrap().unwrap().adopted(),
        Some(AdoptedAs::WithoutBootstrap),
        "the taken-back adoption left no row behind"
    );
}

/// A guest's kind is the one recorded when it was created; journals from before version 33
/// get it from the creating operation (`provision_vm`) or its own steps (`check_golden` with
/// `"kind": "qemu"`, `restore_vm`); every other row is a container.
#[test]
fn a_guests_kind_is_recorded_and_older_journals_get_it_from_their_steps() {
    use bosun_proto::desired::GuestKind;
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let vm_op = store
        .begin_operation(&NewOperation {
            kind: OpKind::ProvisionVm,
            ..provision()
        })
        .unwrap();
    store
        .step_intent(vm_op, "check_golden", &json!({"kind": "qemu"}))
        .unwrap();
    store
        .record_created(vm_op, 201, Some("g-vm"), GuestKind::Qemu)
        .unwrap();
    // A VM whose provisioning was interrupted after its `restore_vm` intent only.
    let late_op = store.begin_operation(&provision()).unwrap();
    store
        .record_created(late_op, 202, Some("g-vm-2"), GuestKind::Qemu)
        .unwrap();
    store
        .step_intent(late_op, "restore_vm", &json!({"vmid": 202}))
        .unwrap();
    let ct_op = store.begin_operation(&provision()).unwrap();
    store
        .step_intent(ct_op, "check_golden", &json!({"volid": "local:x"}))
        .unwrap();
    store
        .record_created(ct_op, 101, Some("g-ct"), GuestKind::Lxc)
        .unwrap();
    let kinds = |store: &Store| {
        store
            .all_provenance()
            .unwrap()
            .iter()
            .map(|p| (p.vmid(), p.kind()))
            .collect::<Vec<_>>()
    };
    let recorded = vec![
        (101, GuestKind::Lxc),
        (201, GuestKind::Qemu),
        (202, GuestKind::Qemu),
    ];
    assert_eq!(kinds(&store), recorded);
    // Its audit row names the kind.
    let rows = store.audit_since(0, 100).unwrap();
    assert!(
        rows.iter()
            .any(|r| r.event.event == "guest.create_recorded" && r.event.detail["kind"] == "qemu"),
        "{rows:?}"
    );

    crate::ops::journal::schema::rewind(&store.conn, 32).unwrap();
    drop(store);
    let (store, _) = open(&dir);
    assert_eq!(kinds(&store), recorded);
}

/// A lost guest is never recorded again as the other kind by a DR restore.
#[test]
fn a_lost_guest_is_recovered_only_as_its_own_kind() {
    use bosun_proto::desired::GuestKind;
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    store
        .record_created(op, 201, Some("g-1"), GuestKind::Qemu)
        .unwrap();
    let dr = store
        .begin_operation(&NewOperation {
            kind: OpKind::Recover,
            ..provision()
        })
        .unwrap();
    let err = store
        .record_recovered(dr, "g-1", 201, 301, GuestKind::Lxc)
        .unwrap_err();
    assert!(matches!(err, JournalError::KindChanged { .. }), "{err:?}");
    assert_eq!(
        store.provenance(201).unwrap().unwrap().kind(),
        GuestKind::Qemu
    );
    assert!(store.provenance(301).unwrap().is_none());
    store
        .record_recovered(dr, "g-1", 201, 301, GuestKind::Qemu)
        .unwrap();
    assert_eq!(
        store.provenance(301).unwrap().unwrap().kind(),
        GuestKind::Qemu
    );
}
