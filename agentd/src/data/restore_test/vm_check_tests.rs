#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

use super::*;
use crate::clock::SystemClock;
use crate::ops::journal::NewOperation;
use bosun_proto::desired::GuestKind;

async fn journal() -> (tempfile::TempDir, JournalHandle) {
    let dir = tempfile::tempdir().unwrap();
    let journal = JournalHandle::open(&dir.path().join("journal.sqlite"), SystemClock::shared())
        .await
        .unwrap();
    (dir, journal)
}

async fn begin(journal: &JournalHandle, kind: OpKind) -> OpId {
    journal
        .begin_operation(NewOperation {
            kind,
            guest_id: None,
            vmid: None,
            job_id: None,
            request_id: None,
        })
        .await
        .unwrap()
}

fn vmid(n: u32) -> Vmid {
    Vmid::new(n).unwrap()
}

#[tokio::test]
async fn an_exec_is_admitted_only_in_the_running_tests_own_scratch_vm() {
    let (_dir, journal) = journal().await;
    let test = begin(&journal, OpKind::RestoreTest).await;
    journal
        .record_scratch(test, 900, GuestKind::Qemu)
        .await
        .unwrap();
    // The guest whose archive the test restores, at its own vmid.
    let provision = begin(&journal, OpKind::Provision).await;
    let guest = uuid::Uuid::new_v4().to_string();
    journal
        .record_created(provision, 100, Some(guest), GuestKind::Qemu)
        .await
        .unwrap();
    // Another restore test's scratch guest, and a golden boot test's.
    let other = begin(&journal, OpKind::RestoreTest).await;
    journal
        .record_scratch(other, 901, GuestKind::Qemu)
        .await
        .unwrap();
    let golden = begin(&journal, OpKind::GoldenVerify).await;
    journal
        .record_scratch(golden, 902, GuestKind::Lxc)
        .await
        .unwrap();

    admit_journal(&journal, test, vmid(900)).await.unwrap();
    let refused = |r: Result<(), ExecRefused>| r.unwrap_err();
    assert!(matches!(
        refused(admit_journal(&journal, test, vmid(100)).await),
        ExecRefused::NotScratch { vmid: 100 }
    ));
    assert!(matches!(
        refused(admit_journal(&journal, test, vmid(555)).await),
        ExecRefused::NotJournaled { vmid: 555 }
    ));
    let wrong = refused(admit_journal(&journal, test, vmid(901)).await);
    assert!(
        matches!(wrong, ExecRefused::OtherOperation { vmid: 901, owner, op_id } if owner == other && op_id == test),
        "{wrong:?}"
    );
    // A scratch guest of an operation that is no restore test.
    assert!(matches!(
        refused(admit_journal(&journal, golden, vmid(902)).await),
        ExecRefused::NotRunningTest { .. }
    ));
    // Once the test has ended, its own scratch guest is refused too.
    journal
        .finish_operation(test, OpStatus::Done, None)
        .await
        .unwrap();
    assert!(matches!(
        refused(admit_journal(&journal, test, vmid(900)).await),
        ExecRefused::NotRunningTest { .. }
    ));
}

fn config(values: serde_json::Value) -> VmConfig {
    let mut values = values;
    values["digest"] = json!("0");
    serde_json::from_value(values).unwrap()
}

#[test]
fn a_vm_is_isolated_only_with_the_tests_tag_and_every_link_down() {
    let op = OpId::new();
    let tag = identity_tag(op);
    let down = config(json!({
        "tags": format!("web;{tag}"),
        "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,link_down=1",
        "net1": "e1000,bridge=vmbr1,link_down=1",
        "netmask": "ignored: not a netN key",
    }));
    isolated(&down, op).unwrap();
    let one_up = config(json!({
        "tags": tag,
        "net0": "virtio,bridge=vmbr0,link_down=1",
        "net1": "virtio,bridge=vmbr0,link_down=0",
        "net2": "virtio,bridge=vmbr0",
    }));
    assert_eq!(isolated(&one_up, op).unwrap_err(), "link up on net1, net2");
    let untagged = config(json!({ "net0": "virtio,bridge=vmbr0,link_down=1" }));
    assert!(isolated(&untagged, op).is_err());
    let another_test = config(json!({
        "tags": identity_tag(OpId::new()),
        "net0": "virtio,bridge=vmbr0,link_down=1",
    }));
    assert!(isolated(&another_test, op).is_err());
}

#[test]
fn a_flood_of_output_is_read_to_its_bound() {
    let line = format!("{}\n", "x".repeat(1000));
    let status = ExecStatus {
        exited: true,
        exitcode: Some(1),
        out_data: Some(line.repeat(10_000)),
        err_data: Some("sha256sum: WARNING: 1 computed checksum did NOT match\n".into()),
        ..ExecStatus::default()
    };
    let kept = kept_output(&status);
    assert!(kept.len() <= bosun_proto::helper::RESTORE_CHECK_MAX_LINES);
    assert!(kept.iter().map(String::len).sum::<usize>() <= RESTORE_CHECK_MAX_BYTES);
    // Multi-byte text is cut on a character boundary.
    let status = ExecStatus {
        exited: true,
        out_data: Some("é".repeat(RESTORE_CHECK_MAX_BYTES)),
        ..ExecStatus::default()
    };
    assert!(!kept_output(&status).is_empty());
    let both = ExecStatus {
        exited: true,
        out_data: Some("checked 3 files\n".into()),
        err_data: Some("orders.db: FAILED\n".into()),
        ..ExecStatus::default()
    };
    assert_eq!(
        kept_output(&both),
        vec!["checked 3 files".to_owned(), "orders.db: FAILED".to_owned()]
    );
}

#[test]
fn only_a_netn_key_with_link_down_counts() {
    assert_eq!(net_index("net0"), Some(0));
    assert_eq!(net_index("net31"), Some(31));
    assert_eq!(net_index("net"), None);
    assert_eq!(net_index("netmask"), None);
    assert!(link_is_down("virtio,bridge=vmbr0,link_down=1"));
    assert!(!link_is_down("virtio,bridge=vmbr0,link_down=0"));
    assert!(!link_is_down("virtio,bridge=vmbr0"));
}
