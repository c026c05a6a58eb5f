//! A VM's archive (decision 0118), against the simulator's vzdump of a QEMU guest and the
//! helper's own hashing verb: a backup freezes the guest through its agent, tags the VM's
//! config with its guest, and is proven as a container's is; the archive then verifies for
//! its own VM alone — never for another guest, never for a restore into a container — and a
//! container's archive never verifies for a VM, whatever proof comes with it.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;
use crate::two_tiers;

use bosun_agentd::data::backup::ProofError;
use bosun_agentd::data::backup::content::{ContentError, guest_tag, mark};
use bosun_agentd::ops::journal::ArchiveProof;
use bosun_proto::desired::GuestKind;
use bosun_pve::{
    ContentFilter, ContentItem, ContentType, Op, Pve, PveOps, PveQemu, StorageId, VmRestoreRequest,
    Vmid, VolumeId, VzdumpRequest,
};
use localapi_support::Harness;
use uuid::Uuid;

const VM: u32 = 700;

/// Restores the simulator's VM golden archive as `vmid` into Bosun's pool and starts it.
async fn running_vm(h: &Harness, vmid: u32) {
    let archive = h.sim.add_vm_golden();
    let mut request = VmRestoreRequest::new(
        Vmid::new(vmid).unwrap(),
        VolumeId::new(archive).unwrap(),
        StorageId::new("local-lvm").unwrap(),
    );
    request.pool = Some(bosun_pve::PoolId::new("bosun").unwrap());
    request.start = true;
    let upid = h.pve.restore_vm(&request).await.unwrap();
    h.pve.wait_task(Op::RestoreVm, &upid).await.unwrap();
    assert_eq!(h.sim.vm_running(vmid), Some(true));
}

/// Backs VM `vmid` up to `storage` as the agent does (its config tagged first) and proves the
/// archive for `guest_id`: the listing entry and the proof.
async fn vm_backup(
    h: &Harness,
    guest_id: &str,
    vmid: u32,
    storage: &str,
) -> (ContentItem, ArchiveProof) {
    let ops = PveOps::shared(h.pve.clone());
    let vmid = Vmid::new(vmid).unwrap();
    mark(ops.as_ref(), guest_id, vmid, GuestKind::Qemu)
        .await
        .expect("the VM's config is tagged");
    let storage = StorageId::new(storage).unwrap();
    let outcome = h
        .pve
        .backup_ct(&VzdumpRequest::new(vmid, storage.clone()))
        .await
        .unwrap();
    let item = listed(h, &storage, &outcome.volid).await;
    let proof = h
        .prover
        .prove(guest_id, vmid, &outcome.volid, Some(&item))
        .await
        .expect("the VM's archive is proven");
    // As a restore lists it: with the notes the proof wrote.
    (listed(h, &storage, &outcome.volid).await, proof)
}

async fn listed(h: &Harness, storage: &StorageId, volid: &str) -> ContentItem {
    h.pve
        .list_content(
            storage,
            ContentFilter {
                content: Some(ContentType::Backup),
                vmid: None,
            },
        )
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.volid == volid)
        .unwrap_or_else(|| panic!("{volid} is not listed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_archive_verifies_for_its_own_vm_alone_and_a_containers_never_does() {
    let h = Harness::start().await;
    let pbs = two_tiers::register_pbs_with(&h.sim, &*h.pve, Some(&h.pbs_key)).await;
    running_vm(&h, VM).await;
    let vm_guest = Uuid::new_v4().to_string();
    localapi_support::record_own_guest(&h.journal, &vm_guest, VM).await;
    let ct_guest = h.guest(0).guest_id.clone();

    // A backup to each tier: the VM's filesystems frozen through its agent for each, its
    // config tagged with its guest, and each archive proven.
    let (file, file_proof) = vm_backup(&h, &vm_guest, VM, "local").await;
    let (snap, snap_proof) = vm_backup(&h, &vm_guest, VM, pbs.as_str()).await;
    assert!(
        file.volid
            .starts_with(&format!("local:backup/vzdump-qemu-{VM}-")),
        "{}",
        file.volid
    );
    assert!(
        snap.volid.contains(&format!(":backup/vm/{VM}/")),
        "{}",
        snap.volid
    );
    assert!(matches!(file_proof, ArchiveProof::File { .. }));
    assert!(matches!(snap_proof, ArchiveProof::Pbs { .. }));
    let freezes = h.sim.vm_backup_freezes(VM);
    assert_eq!(freezes.len(), 2, "one freeze per backup: {freezes:?}");
    assert_eq!(h.sim.vm_frozen(VM), Some(false), "thawed after each");
    let tags = h.sim.vm_config(VM).unwrap()["tags"].clone();
    assert!(tags.contains(&guest_tag(&vm_guest).unwrap()), "{tags}");

    // Its own archives verify for it, as a VM.
    for (item, proof) in [(&file, &file_proof), (&snap, &snap_proof)] {
        h.prover
            .check_as(&vm_guest, GuestKind::Qemu, item, Some(proof))
            .await
            .unwrap_or_else(|e| panic!("{} refused for its own VM: {e}", item.volid));
    }

    // Named for another guest (with the VM's own proof, which is all such a hub could pass):
    // the PBS archive's binding and config name the VM's guest, not the other.
    let other = h
        .prover
        .check_as(&ct_guest, GuestKind::Qemu, &snap, Some(&snap_proof))
        .await;
    assert!(other.is_err(), "another guest's archive verified");

    // Named for a restore into a container: refused by its name, before anything is read.
    for (item, proof) in [(&file, &file_proof), (&snap, &snap_proof)] {
        let refused = h
            .prover
            .check(&vm_guest, item, Some(proof))
            .await
            .unwrap_err();
        assert!(
            matches!(
                refused,
                ProofError::Content(ContentError::WrongKind {
                    archive: GuestKind::Qemu,
                    guest: GuestKind::Lxc,
                    ..
                })
            ),
            "{refused}"
        );
    }

    // A container's archive, proven for its container, named for the VM: refused as a
    // container's, on either tier, whatever proof comes with it.
    let ct_file = localapi_support::journaled_backup(
        &h.pve,
        &h.journal,
        &h.prover,
        &ct_guest,
        h.guest(0).vmid,
        "local",
    )
    .await;
    let ct_item = listed(&h, &StorageId::new("local").unwrap(), &ct_file).await;
    for proof in [&file_proof, &snap_proof] {
        let refused = h
            .prover
            .check_as(&vm_guest, GuestKind::Qemu, &ct_item, Some(proof))
            .await
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "it is a container's backup (by its name), not a VM's",
            "{ct_file}"
        );
    }

    // A VM archive whose bytes changed on the share no longer verifies (0026, for VMs).
    let path = h
        .sim
        .archive_path(&file.volid)
        .expect("a file archive is a file");
    std::fs::write(&path, b"replaced").unwrap();
    let changed = h
        .prover
        .check_as(&vm_guest, GuestKind::Qemu, &file, Some(&file_proof))
        .await
        .unwrap_err();
    assert!(
        matches!(changed, ProofError::BytesChanged { .. }),
        "{changed}"
    );
    h.shutdown().await;
}
