//! Drives every QEMU operation of the client once against the simulator (the conformance
//! test holds the requests to both schemas): a VM restored from the VM golden archive into
//! Bosun's pool with its cloud-init identity, its config and cloud-init drive, power, the guest
//! agent (ping, interfaces, file write and read, exec, freeze), a disk grown, snapshots,
//! destroy.

use bosun_pve::{
    AgentExec, AgentFileWrite, DiskSize, FirewallUpdate, FreezeStatus, GuestStatus, IpConfig, Op,
    PoolId, Pve, PveQemu, SizeUnit, SnapName, StartupOrder, Thousandths, VmConfigUpdate, VmDisk,
    VmNet, VmOptions, VmRestoreRequest, VolumeId,
};

use super::{Rig, local_lvm, vmid};

pub async fn exercise_qemu(rig: &Rig) {
    let c = &rig.client;
    let golden = VolumeId::new(rig.sim.add_vm_golden()).expect("volid");
    let id = vmid(300);
    let mut req = VmRestoreRequest::new(id, golden, local_lvm());
    req.pool = Some(PoolId::new(bosun_pve::BOSUN_POOL).expect("valid"));
    let mut net = VmNet::new("vmbr0");
    net.firewall = Some(true);
    net.rate = Some(Thousandths(12_500));
    req.options = VmOptions {
        name: Some("vm1.example.com".into()),
        cores: Some(2),
        memory: Some(2048),
        cpuunits: Some(250),
        cpulimit: Some(Thousandths(1_500)),
        startup: Some(StartupOrder {
            order: 1,
            up: Some(0),
            down: Some(60),
        }),
        ciuser: Some("bosun".into()),
        sshkeys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBosunTestKey operator@example".into()],
        agent: Some(true),
        onboot: Some(true),
        tags: vec!["bosun".into()],
        description: Some("restored by the conformance test".into()),
        smbios_uuid: Some(uuid::Uuid::from_u128(0x5eed_0001)),
        ..VmOptions::default()
    };
    req.options.net.insert(0, net);
    req.options.ipconfig.insert(
        0,
        IpConfig::Static {
            address: "10.0.0.5".parse().expect("ip"),
            prefix: 24,
            gateway: Some("10.0.0.1".parse().expect("ip")),
        },
    );
    let up = c.restore_vm(&req).await.expect("vm restore");
    c.wait_task(Op::RestoreVm, &up)
        .await
        .expect("vm restore task");
    assert_eq!(
        rig.sim.pool_members(bosun_pve::BOSUN_POOL),
        [300].into_iter().collect(),
        "the restored VM joined Bosun's pool"
    );

    let vms = c.list_vms().await.expect("vm list");
    assert!(vms.iter().any(|v| v.vmid == id), "{vms:?}");
    let config = c.vm_config(id).await.expect("vm config");
    assert_eq!(config.get_str("ciuser").as_deref(), Some("bosun"));
    assert_eq!(config.get_u64("cpuunits"), Some(250));
    assert_eq!(config.get_str("cpulimit").as_deref(), Some("1.5"));
    assert_eq!(
        config.get_str("startup").as_deref(),
        Some("order=1,up=0,down=60")
    );
    assert!(
        config
            .get_str("net0")
            .is_some_and(|n| n.ends_with(",firewall=1,rate=12.5")),
        "{config:?}"
    );
    assert_eq!(
        config.get_str("smbios1").as_deref(),
        Some("uuid=00000000-0000-0000-0000-00005eed0001")
    );
    let guard = FirewallUpdate {
        enable: true,
        ipfilter: true,
    };
    c.set_vm_firewall(id, &guard).await.expect("vm firewall");
    let firewall = c.vm_firewall(id).await.expect("vm firewall options");
    assert!(firewall.enable && firewall.ipfilter, "{firewall:?}");
    let update = VmConfigUpdate {
        set: VmOptions {
            memory: Some(4096),
            cpuunits: Some(1),
            cpulimit: Some(bosun_pve::VM_CPULIMIT_MAX),
            ..VmOptions::default()
        },
        delete: vec!["description".into(), "startup".into()],
        digest: Some(config.digest.clone()),
    };
    c.update_vm_config(id, &update)
        .await
        .expect("vm config update");
    let grown = c
        .resize_vm_disk(
            id,
            &VmDisk::new("scsi0").expect("a disk"),
            DiskSize::Absolute(12, SizeUnit::G),
            None,
        )
        .await
        .expect("vm disk resize");
    c.wait_task(Op::ResizeVmDisk, &grown)
        .await
        .expect("vm disk resize task");
    let resized = c.vm_config(id).await.expect("vm config");
    assert!(
        resized
            .get_str("scsi0")
            .is_some_and(|d| d.ends_with(",size=12G")),
        "{resized:?}"
    );
    let pending = c.vm_cloudinit(id).await.expect("cloudinit");
    assert!(
        pending
            .iter()
            .any(|i| i.key == "ipconfig0" && i.is_pending()),
        "the drive is not built yet: {pending:?}"
    );
    c.regenerate_cloudinit(id)
        .await
        .expect("cloudinit regenerate");
    let built = c.vm_cloudinit(id).await.expect("cloudinit");
    assert!(built.iter().all(|i| !i.is_pending()), "{built:?}");

    let up = c.start_vm(id).await.expect("vm start");
    c.wait_task(Op::StartVm, &up).await.expect("vm start task");
    let status = c.vm_status(id).await.expect("vm status");
    assert!(
        status.status == GuestStatus::Running && status.agent,
        "{status:?}"
    );
    c.agent_ping(id).await.expect("agent ping");
    let interfaces = c.agent_network_interfaces(id).await.expect("interfaces");
    assert!(
        interfaces
            .iter()
            .any(|i| i.addresses.iter().any(|a| a.address == "10.0.0.5")),
        "cloud-init gave the address: {interfaces:?}"
    );
    let bytes = b"{\"schema\":\"bosun.bootstrap/v1\"}\n\x00\xff".to_vec();
    c.agent_file_write(
        id,
        &AgentFileWrite {
            path: "/etc/bosun-bootstrap.json".into(),
            content: bytes.clone(),
        },
    )
    .await
    .expect("file write");
    let read = c
        .agent_file_read(id, "/etc/bosun-bootstrap.json")
        .await
        .expect("file read");
    let as_text: String = bytes.iter().map(|b| char::from(*b)).collect();
    assert_eq!(read.content, as_text, "PVE gives each byte as a character");
    assert!(!read.truncated);
    let started = c
        .agent_exec(
            id,
            &AgentExec {
                argv: vec![
                    "/usr/bin/test".into(),
                    "-f".into(),
                    "/etc/bosun-bootstrap.json".into(),
                ],
                input: None,
            },
        )
        .await
        .expect("exec");
    let done = c
        .agent_exec_status(id, started.pid)
        .await
        .expect("exec status");
    assert!(done.exited && done.exitcode == Some(0), "{done:?}");
    assert_eq!(c.agent_fsfreeze(id).await.expect("freeze"), 1);
    assert_eq!(
        c.agent_fsfreeze_status(id).await.expect("freeze status"),
        FreezeStatus::Frozen
    );
    assert_eq!(c.agent_fsthaw(id).await.expect("thaw"), 1);

    let snap = SnapName::new("before-update").expect("valid");
    let up = c
        .create_vm_snapshot(id, &snap, Some("conformance"))
        .await
        .expect("vm snapshot");
    c.wait_task(Op::CreateVmSnapshot, &up)
        .await
        .expect("vm snapshot task");
    let snaps = c.list_vm_snapshots(id).await.expect("vm snapshots");
    assert!(snaps.iter().any(|s| s.name == "before-update"), "{snaps:?}");
    let up = c
        .rollback_vm_snapshot(id, &snap, true)
        .await
        .expect("vm rollback");
    c.wait_task(Op::RollbackVmSnapshot, &up)
        .await
        .expect("vm rollback task");
    let up = c
        .delete_vm_snapshot(id, &snap)
        .await
        .expect("vm snapshot delete");
    c.wait_task(Op::DeleteVmSnapshot, &up)
        .await
        .expect("vm snapshot delete task");
    let up = c
        .shutdown_vm(id, Some(60), true)
        .await
        .expect("vm shutdown");
    c.wait_task(Op::ShutdownVm, &up)
        .await
        .expect("vm shutdown task");
    let up = c.stop_vm(id).await.expect("vm stop");
    c.wait_task(Op::StopVm, &up).await.expect("vm stop task");
    let up = c.destroy_vm(id, true).await.expect("vm destroy");
    c.wait_task(Op::DestroyVm, &up)
        .await
        .expect("vm destroy task");
    assert!(
        rig.sim.pool_members(bosun_pve::BOSUN_POOL).is_empty(),
        "a destroyed VM leaves its pool"
    );
}
