//! The PVE client against the simulator: every operation, with its typed results.

use crate::pve_support;

use bosun_pve::{
    ConfigUpdate, ContentFilter, ContentType, CtDisk, CtOptions, DiskSize, GuestStatus, Op, Pve,
    PveClient, PveError, RestoreRequest, RetryPolicy, SizeUnit, SnapName, StorageCreate, StorageId,
    StorageKind, TlsTrust, VolumeId, VzdumpRequest, read_log,
};
use pve_support::{
    bounded, config_for, fast_sim, golden, local, local_lvm, restore_golden, start, vmid,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_nodes_and_storage_answer_typed() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let c = &rig.client;
        let v = c.version().await.unwrap();
        assert!(v.version.starts_with(&v.release), "{v:?}");
        let nodes = c.nodes().await.unwrap();
        assert!(
            nodes.iter().any(|n| n.node == rig.sim.endpoint().node),
            "{nodes:?}"
        );
        let id = c.next_id().await.unwrap();
        assert!(id.get() >= 100);
        let storages = c.list_storage().await.unwrap();
        let local_info = storages
            .iter()
            .find(|s| s.storage.as_deref() == Some("local"))
            .expect("local listed");
        assert_eq!(local_info.storage_type, "dir");
        assert!(local_info.allows("backup") && !local_info.allows("rootdir"));
        let lvm = c.storage_status(&local_lvm()).await.unwrap();
        assert_eq!(lvm.storage_type, "lvmthin");
        assert!(lvm.allows("rootdir"));
        let backups = c
            .list_content(
                &local(),
                ContentFilter {
                    content: Some(ContentType::Backup),
                    vmid: None,
                },
            )
            .await
            .unwrap();
        assert!(
            backups
                .iter()
                .any(|b| b.volid == rig.sim.endpoint().golden_volid),
            "{backups:?}"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_start_snapshot_backup_rollback_destroy() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let c = &rig.client;
        let mut req = RestoreRequest::new(vmid(100), golden(&rig.sim), local_lvm());
        req.options.hostname = Some("shop-7".into());
        req.options.memory = Some(768);
        let (id, upid) = c.restore_ct_next_id(&req).await.unwrap();
        assert_eq!(upid.task_type(), "vzrestore");
        assert_eq!(upid.user(), "bosun@pve!agent");
        c.wait_task(Op::RestoreCt, &upid).await.unwrap();

        let cfg = c.ct_config(id).await.unwrap();
        assert_eq!(cfg.hostname().as_deref(), Some("shop-7"));
        assert_eq!(cfg.get_u64("memory"), Some(768));
        assert!(cfg.unprivileged());
        assert!(
            cfg.features()
                .iter()
                .any(|(k, v)| k == "keyctl" && v == "1"),
            "a token restore keeps keyctl from the archive: {:?}",
            cfg.features()
        );
        assert_eq!(cfg.digest.len(), 40, "sha1 digest");

        let listed = c.list_cts().await.unwrap();
        assert!(
            listed
                .iter()
                .any(|ct| ct.vmid == id && ct.status == GuestStatus::Stopped)
        );

        let up = c.start_ct(id).await.unwrap();
        assert_eq!(c.wait_task(Op::StartCt, &up).await.unwrap().warnings, 0);
        let st = c.ct_status(id).await.unwrap();
        assert_eq!(st.status, GuestStatus::Running);
        assert_eq!(st.vmid, id);

        let snap = SnapName::new("pre-update").unwrap();
        let up = c
            .create_snapshot(id, &snap, Some("before the update"))
            .await
            .unwrap();
        c.wait_task(Op::CreateSnapshot, &up).await.unwrap();
        let snaps = c.list_snapshots(id).await.unwrap();
        assert!(
            snaps
                .iter()
                .any(|s| s.name == "pre-update" && !s.is_current())
        );
        let current = snaps
            .iter()
            .find(|s| s.is_current())
            .expect("current entry");
        assert_eq!(current.parent.as_deref(), Some("pre-update"));

        let backup = c.backup_ct(&VzdumpRequest::new(id, local())).await.unwrap();
        let volid = VolumeId::new(backup.volid.clone()).unwrap();
        assert_eq!(volid.storage(), "local");
        assert!(
            volid
                .name()
                .starts_with(&format!("backup/vzdump-lxc-{id}-")),
            "{volid}"
        );
        let mine = c
            .list_content(
                &local(),
                ContentFilter {
                    content: Some(ContentType::Backup),
                    vmid: Some(id),
                },
            )
            .await
            .unwrap();
        assert!(
            mine.iter().any(|i| i.volid == backup.volid),
            "archive listed: {mine:?}"
        );
        assert!(
            !rig.sim
                .snapshot_names(id.get())
                .iter()
                .any(|s| s == "vzdump"),
            "the temporary vzdump snapshot is gone"
        );

        let up = c.rollback_snapshot(id, &snap, true).await.unwrap();
        c.wait_task(Op::RollbackSnapshot, &up).await.unwrap();
        let up = c.delete_snapshot(id, &snap).await.unwrap();
        c.wait_task(Op::DeleteSnapshot, &up).await.unwrap();
        assert!(rig.sim.snapshot_names(id.get()).is_empty());

        let up = c.stop_ct(id).await.unwrap();
        c.wait_task(Op::StopCt, &up).await.unwrap();
        assert_eq!(rig.sim.guest_running(id.get()), Some(false));
        let up = c.destroy_ct(id, true).await.unwrap();
        c.wait_task(Op::DestroyCt, &up).await.unwrap();
        assert!(!rig.sim.guest_ids().contains(&id.get()));

        if let Some(up) = c.delete_volume(&volid).await.unwrap() {
            c.wait_task(Op::DeleteVolume, &up).await.unwrap();
        }
        assert!(!rig.sim.storage_volumes("local").contains(&backup.volid));
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_update_with_a_stale_digest_is_refused() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 120).await;
        let c = &rig.client;
        let id = vmid(120);
        let before = c.ct_config(id).await.unwrap();
        let update = ConfigUpdate {
            set: CtOptions {
                cores: Some(3),
                ..Default::default()
            },
            delete: vec![],
            digest: Some(before.digest.clone()),
        };
        c.update_ct_config(id, &update).await.unwrap();
        let after = c.ct_config(id).await.unwrap();
        assert_eq!(after.get_u64("cores"), Some(3));
        assert_ne!(after.digest, before.digest);

        let stale = ConfigUpdate {
            set: CtOptions {
                cores: Some(4),
                ..Default::default()
            },
            ..update
        };
        match c.update_ct_config(id, &stale).await {
            Err(PveError::Api {
                message,
                vmid: Some(v),
                ..
            }) => {
                assert!(
                    message.contains("detected modified configuration"),
                    "{message}"
                );
                assert_eq!(v, id);
            }
            other => panic!("expected a digest refusal, got {other:?}"),
        }
        assert_eq!(c.ct_config(id).await.unwrap().get_u64("cores"), Some(3));
        rig.sim.shutdown().await;
    })
    .await;
}

/// The client's change mark (decision 0110) stays put over reads and moves when a request
/// that may change the node is sent and again when it ends, refused or not; a task's status
/// read counts as a change (the task changes the node while it runs). Clones share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_mark_moves_with_what_may_change_the_node() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 121).await;
        let c = &rig.client;
        let id = vmid(121);
        let mark = || c.change_mark().unwrap();
        let before = mark();
        let config = c.ct_config(id).await.unwrap();
        c.list_cts().await.unwrap();
        c.ct_firewall(id).await.unwrap();
        c.node_status().await.unwrap();
        assert_eq!(mark(), before, "reads change nothing");
        let update = ConfigUpdate {
            set: CtOptions {
                cores: Some(3),
                ..Default::default()
            },
            delete: vec![],
            digest: Some(config.digest.clone()),
        };
        c.update_ct_config(id, &update).await.unwrap();
        assert_eq!(mark(), before + 2, "a write, sent and ended");
        // The same digest again: refused, and still counted.
        assert!(c.update_ct_config(id, &update).await.is_err());
        assert_eq!(mark(), before + 4);
        let upid = c.start_ct(id).await.unwrap();
        assert_eq!(mark(), before + 6);
        c.task_status(&upid).await.unwrap();
        assert_eq!(mark(), before + 8, "a task's status read");
        assert_eq!(c.clone().change_mark(), Some(before + 8), "clones share it");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_grows_the_root_volume() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 130).await;
        let c = &rig.client;
        let id = vmid(130);
        let before = c.ct_config(id).await.unwrap().get_str("rootfs").unwrap();
        let up = c
            .resize_disk(id, CtDisk::RootFs, DiskSize::Grow(2, SizeUnit::G))
            .await
            .unwrap();
        assert_eq!(up.task_type(), "resize");
        c.wait_task(Op::ResizeDisk, &up).await.unwrap();
        let after = c.ct_config(id).await.unwrap().get_str("rootfs").unwrap();
        assert_ne!(before, after, "rootfs size= changed");
        let err = c
            .resize_disk(id, CtDisk::RootFs, DiskSize::Absolute(1, SizeUnit::M))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PveError::Api { message, .. } if message.contains("shrink")),
            "{err:?}"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_onto_a_dir_storage_gives_the_parameter_errors_map() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let req = RestoreRequest::new(vmid(140), golden(&rig.sim), local());
        match rig.client.restore_ct(&req).await {
            Err(PveError::BadRequest {
                errors, message, ..
            }) => {
                assert_eq!(message, "Parameter verification failed.");
                let e = errors.get("storage").expect("errors.storage");
                assert!(e.contains("does not support container directories"), "{e}");
            }
            other => panic!("expected 400 with errors map, got {other:?}"),
        }
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precondition_failures_are_500_with_the_message() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 150).await;
        let c = &rig.client;
        let id = vmid(150);
        let err = c.stop_ct(id).await.unwrap_err();
        assert!(matches!(&err, PveError::Api { status: 500, message, .. } if message == "CT 150 not running"), "{err:?}");
        let up = c.start_ct(id).await.unwrap();
        c.wait_task(Op::StartCt, &up).await.unwrap();
        let err = c.start_ct(id).await.unwrap_err();
        assert!(matches!(&err, PveError::Api { status: 500, message, .. } if message == "CT 150 already running"), "{err:?}");
        assert!(!err.is_retry_safe() && !err.is_outcome_unknown());
        let dup = RestoreRequest::new(id, golden(&rig.sim), local_lvm());
        let err = c.restore_ct(&dup).await.unwrap_err();
        assert!(matches!(&err, PveError::Api { message, .. } if message.contains("already exists")), "{err:?}");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_restore_is_a_separate_call_that_sends_force() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 160).await;
        rig.sim.clear_requests();
        let req = RestoreRequest::new(vmid(160), golden(&rig.sim), local_lvm());
        let up = rig.client.restore_ct_overwrite(&req).await.unwrap();
        rig.client
            .wait_task(Op::RestoreCtOverwrite, &up)
            .await
            .unwrap();
        let posts: Vec<_> = rig
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .collect();
        assert_eq!(posts.len(), 1);
        assert!(
            posts[0]
                .params
                .contains(&("force".to_owned(), "1".to_owned()))
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_never_reach_the_server() {
    bounded(async {
        let rig = start(fast_sim()).await;
        rig.sim.clear_requests();
        let err = rig
            .client
            .update_ct_config(vmid(100), &ConfigUpdate::default())
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            PveError::InvalidRequest {
                op: Op::UpdateConfig,
                ..
            }
        ));
        let mut dump = VzdumpRequest::new(vmid(100), local());
        dump.notes_template = Some("{{password}}".into());
        assert!(matches!(
            rig.client.vzdump(&dump).await,
            Err(PveError::InvalidRequest {
                field: "notes-template",
                ..
            })
        ));
        assert!(rig.sim.requests().is_empty(), "nothing was sent");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_create_then_status_and_task_logs() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let c = &rig.client;
        let id = StorageId::new("backup2").unwrap();
        c.create_storage(&StorageCreate {
            storage: id.clone(),
            kind: StorageKind::Dir {
                path: "/mnt/backup2".into(),
                content: vec![ContentType::Backup],
                is_mountpoint: false,
            },
        })
        .await
        .unwrap();
        let st = c.storage_status(&id).await.unwrap();
        assert_eq!(st.storage_type, "dir");
        assert!(
            c.list_storage()
                .await
                .unwrap()
                .iter()
                .any(|s| s.storage.as_deref() == Some("backup2"))
        );

        let upid = restore_golden(&rig, 170).await;
        let log = read_log(c, &upid).await.unwrap();
        assert!(log.len() >= 2, "{log:?}");
        assert_eq!(log.last().unwrap().t, "TASK OK");
        assert!(
            log.iter()
                .enumerate()
                .all(|(i, l)| l.n == u64::try_from(i).unwrap() + 1)
        );
        let page = c.task_log(&upid, 1, 1).await.unwrap();
        assert_eq!(page.lines.len(), 1);
        assert_eq!(page.lines[0].n, 2);
        assert_eq!(page.total, u64::try_from(log.len()).unwrap());
        let status = c.task_status(&upid).await.unwrap();
        assert_eq!(status.status, "stopped");
        assert_eq!(status.exitstatus.as_deref(), Some("OK"));
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_can_replace_the_fingerprint_pin() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("pve-ca.pem");
        std::fs::write(&ca, rig.sim.certificate_pem()).unwrap();
        let mut cfg = config_for(
            &rig.sim,
            &rig.sim.endpoint().tokens.agent.clone(),
            RetryPolicy::fast(),
        );
        cfg.trust = TlsTrust::CaFile(ca);
        let client = PveClient::new(cfg).unwrap();
        client.version().await.unwrap();
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_to_pbs_is_found_under_its_pbs_volid() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 180).await;
        let c = &rig.client;
        let pbs = StorageId::new("pbs-offsite").unwrap();
        let secret = "pbs-token-secret-0000";
        c.create_storage(&StorageCreate {
            storage: pbs.clone(),
            kind: StorageKind::Pbs {
                server: "192.0.2.10".into(),
                datastore: "customers".into(),
                username: "bosun@pbs!agent".into(),
                password: secrecy::SecretString::from(secret),
                fingerprint: Some("AB:".repeat(31) + "CD"),
                namespace: None,
                port: None,
                encryption_key: None,
            },
        })
        .await
        .unwrap();
        let st = c.storage_status(&pbs).await.unwrap();
        assert_eq!(st.storage_type, "pbs");
        assert!(st.allows("backup"));

        let out = c
            .backup_ct(&VzdumpRequest::new(vmid(180), pbs.clone()))
            .await
            .unwrap();
        let volid = VolumeId::new(out.volid.clone()).unwrap();
        assert_eq!(volid.storage(), "pbs-offsite");
        assert!(
            volid.name().starts_with("backup/ct/180/") && volid.name().ends_with('Z'),
            "{volid}"
        );
        let listed = c
            .list_content(
                &pbs,
                ContentFilter {
                    content: Some(ContentType::Backup),
                    vmid: Some(vmid(180)),
                },
            )
            .await
            .unwrap();
        let item = listed
            .iter()
            .find(|i| i.volid == out.volid)
            .expect("archive listed");
        assert_eq!(item.format.as_deref(), Some("pbs-ct"));
        let logged = format!("{:?}", rig.sim.requests());
        assert!(
            !logged.contains(secret),
            "the PBS secret is not in the request log"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

/// A guest's firewall options: read with `VM.Audit`, set with `VM.Config.Network` on the guest
/// (a token without it gets PVE's 403 naming the path and the privilege, and nothing changes);
/// gone with the guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_firewall_options_need_vm_config_network() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 130).await;
        let id = vmid(130);
        let c = &rig.client;
        let fw = c.ct_firewall(id).await.unwrap();
        assert!(!fw.enable && !fw.ipfilter && fw.macfilter(), "{fw:?}");
        let on = bosun_pve::FirewallUpdate {
            enable: true,
            ipfilter: true,
        };

        let privileges: Vec<&str> = bosun_pve::BOSUN_AGENT_PRIVILEGES
            .iter()
            .copied()
            .filter(|p| *p != "VM.Config.Network")
            .collect();
        rig.sim.add_role("NoNetwork", &privileges).unwrap();
        let narrow = rig.sim.create_token("bosun@pve", "nonet", true).unwrap();
        rig.sim.grant("/", &narrow.id, "NoNetwork", true).unwrap();
        let narrow = pve_support::client_for(&rig.sim, &narrow, RetryPolicy::fast());
        assert!(!narrow.ct_firewall(id).await.unwrap().enable);
        match narrow.set_ct_firewall(id, &on).await {
            Err(PveError::Forbidden {
                path, privilege, ..
            }) => {
                assert_eq!(
                    (path.as_deref(), privilege.as_deref()),
                    (Some("/vms/130"), Some("VM.Config.Network"))
                );
            }
            other => panic!("expected a permission refusal, got {other:?}"),
        }
        assert_eq!(rig.sim.guest_firewall(130), Some(Default::default()));

        c.set_ct_firewall(id, &on).await.unwrap();
        let fw = c.ct_firewall(id).await.unwrap();
        assert!(fw.enable && fw.ipfilter, "{fw:?}");
        let upid = c.destroy_ct(id, true).await.unwrap();
        c.wait_task(Op::DestroyCt, &upid).await.unwrap();
        assert_eq!(rig.sim.guest_firewall(130), None);
        assert!(c.ct_firewall(id).await.is_err(), "no guest, no options");
        rig.sim.shutdown().await;
    })
    .await;
}
