use serde_json::json;

use super::*;
use crate::data::storage::naming::storage_id_of;

const FP: &str = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";

fn target(kind: StorageType, durable_id: &str, role: StorageRole) -> StorageTarget {
    test_target(kind, durable_id, role)
}

#[test]
fn pbs_repositories_parse_with_token_port_and_fingerprint() {
    let r = parse_pbs(&format!("bosun@pbs!host1@pbs.example:8008:store1#{FP}")).unwrap();
    assert_eq!(r.username, "bosun@pbs!host1");
    assert_eq!(r.server, "pbs.example");
    assert_eq!(r.port, Some(8008));
    assert_eq!(r.datastore, "store1");
    assert_eq!(
        r.fingerprint.as_deref(),
        Some(FP.to_ascii_uppercase().as_str())
    );
    let r = parse_pbs("root@pam@10.0.0.5:8007:ds").unwrap();
    assert_eq!((r.server.as_str(), r.port), ("10.0.0.5", None));
    for (bad, why) in [
        ("pbs.example:store1", TargetError::NoPbsUser),
        ("root@10.0.0.5:ds", TargetError::NoRealm),
        ("root@pam@host:ds#zz", TargetError::BadFingerprint),
        ("root@pam@host:", TargetError::NotPlainNames),
        ("root@pam@ho st:ds", TargetError::NotPlainNames),
        ("root@pam@hostds", TargetError::NoDatastore),
        (
            "root@pam@host:port:ds",
            TargetError::BadPort {
                port: "port".into(),
            },
        ),
    ] {
        assert_eq!(parse_pbs(bad), Err(why), "{bad}");
    }
}

#[test]
fn registrations_carry_what_each_kind_needs_and_never_a_missing_secret() {
    let root = Path::new("/var/lib/bosun-helper/mnt");
    let usb = target(StorageType::Usb, "2f1c-77aa", StorageRole::VzdumpTarget);
    let id = storage_id_of(usb.kind, &usb.durable_id);
    let req = create_request(&usb, &id, root, Secrets::default()).unwrap();
    let StorageKind::Dir {
        path,
        is_mountpoint,
        content,
    } = &req.kind
    else {
        panic!("{req:?}")
    };
    assert_eq!(path, &format!("/var/lib/bosun-helper/mnt/{id}"));
    assert!(*is_mountpoint);
    assert_eq!(content, &vec![ContentType::Backup]);

    let pbs = target(
        StorageType::Pbs,
        "backup@pbs@pbs.example:store1",
        StorageRole::PbsOffsite,
    );
    let id = storage_id_of(pbs.kind, &pbs.durable_id);
    // The watcher reports this one as `credentials_missing`, by its variant.
    assert_eq!(
        create_request(&pbs, &id, root, Secrets::default()).err(),
        Some(TargetError::NoCredentials { kind: "pbs" })
    );
    let secrets = Secrets {
        password: Some(SecretString::from("pw".to_owned())),
        pbs_key: Some(SecretString::from("{}".to_owned())),
    };
    let req = create_request(&pbs, &id, root, secrets).unwrap();
    assert!(matches!(
        &req.kind,
        StorageKind::Pbs { datastore, encryption_key: Some(_), .. } if datastore == "store1"
    ));

    let mut cifs = target(StorageType::Cifs, "nas:/backups", StorageRole::VzdumpTarget);
    let id = storage_id_of(cifs.kind, &cifs.durable_id);
    let with_pw = || Secrets {
        password: Some(SecretString::from("pw".to_owned())),
        pbs_key: None,
    };
    assert_eq!(
        create_request(&cifs, &id, root, with_pw()).err(),
        Some(TargetError::NoUsername { kind: "cifs" }),
        "no user"
    );
    cifs.username = Some("bosun".into());
    let req = create_request(&cifs, &id, root, with_pw()).unwrap();
    assert!(matches!(&req.kind, StorageKind::Cifs { share, .. } if share == "backups"));
}

#[test]
fn drift_corrects_what_may_change_and_reports_what_may_not() {
    let root = Path::new("/mnt/x");
    let mut pbs = target(
        StorageType::Pbs,
        &format!("backup@pbs@pbs.example:store1#{FP}"),
        StorageRole::PbsOffsite,
    );
    pbs.namespace = Some("host-1".into());
    let id = storage_id_of(pbs.kind, &pbs.durable_id);
    let config = |v: serde_json::Value| v.as_object().unwrap().clone();
    let same = config(json!({
        "type": "pbs", "server": "pbs.example", "datastore": "store1",
        "content": "backup", "fingerprint": FP.to_ascii_uppercase(), "namespace": "host-1",
    }));
    let d = drift(&pbs, &id, root, &same);
    assert!(d.update.is_empty() && d.fixed.is_empty(), "{d:?}");

    let drifted = config(json!({
        "type": "pbs", "server": "other.example", "datastore": "store1",
        "content": "backup,iso", "fingerprint": "00", "disable": 1,
    }));
    let d = drift(&pbs, &id, root, &drifted);
    assert_eq!(d.update.content, Some(vec![ContentType::Backup]));
    assert_eq!(d.update.namespace.as_deref(), Some("host-1"));
    assert!(d.update.fingerprint.is_some());
    assert!(d.update.enable);
    assert_eq!(d.fixed.len(), 1, "{:?}", d.fixed);
    assert!(d.fixed[0].starts_with("server"));

    let usb = target(StorageType::Usb, "2f1c", StorageRole::VzdumpTarget);
    let id = storage_id_of(usb.kind, &usb.durable_id);
    let plain_dir = config(json!({
        "type": "dir", "path": format!("/mnt/x/{id}"), "content": "backup",
    }));
    assert_eq!(
        drift(&usb, &id, root, &plain_dir).update.is_mountpoint,
        Some(true)
    );
}

#[test]
fn network_mounts_are_registered_soft_with_timeouts() {
    let root = Path::new("/mnt/x");
    let nfs = target(
        StorageType::Nfs,
        "nfs.example:/srv/backup",
        StorageRole::VzdumpTarget,
    );
    let id = storage_id_of(nfs.kind, &nfs.durable_id);
    let req = create_request(&nfs, &id, root, Secrets::default()).unwrap();
    let StorageKind::Nfs { options, .. } = &req.kind else {
        panic!("{req:?}")
    };
    assert_eq!(options.as_deref(), Some(NFS_MOUNT_OPTIONS));
    let params = req.params(bosun_pve::Op::CreateStorage).unwrap();
    assert!(
        params
            .iter()
            .any(|(k, v)| k == "options" && v == "soft,timeo=30,retrans=2"),
        "{params:?}"
    );

    let mut cifs = target(
        StorageType::Cifs,
        "smb.example:/backups",
        StorageRole::VzdumpTarget,
    );
    cifs.username = Some("bosun".into());
    let id = storage_id_of(cifs.kind, &cifs.durable_id);
    let secrets = Secrets {
        password: Some(SecretString::from("pw".to_owned())),
        pbs_key: None,
    };
    let req = create_request(&cifs, &id, root, secrets).unwrap();
    let StorageKind::Cifs { options, .. } = &req.kind else {
        panic!("{req:?}")
    };
    assert_eq!(options.as_deref(), Some("soft,echo_interval=5"));

    // Each option a soft mount needs, and nothing that would make it hard.
    for (kind, opts) in [
        (StorageType::Nfs, NFS_MOUNT_OPTIONS),
        (StorageType::Cifs, CIFS_MOUNT_OPTIONS),
    ] {
        let list: Vec<&str> = opts.split(',').collect();
        assert!(list.contains(&"soft"), "{kind:?}");
        assert!(!list.contains(&"hard"), "{kind:?}");
        assert_eq!(mount_options(kind), Some(opts));
    }
    for kind in [StorageType::LocalDir, StorageType::Usb, StorageType::Pbs] {
        assert_eq!(mount_options(kind), None);
    }
}

#[test]
fn drift_restores_the_soft_mount_options() {
    let root = Path::new("/mnt/x");
    let nfs = target(
        StorageType::Nfs,
        "nfs.example:/srv/backup",
        StorageRole::VzdumpTarget,
    );
    let id = storage_id_of(nfs.kind, &nfs.durable_id);
    let config = |v: serde_json::Value| v.as_object().unwrap().clone();
    let same = config(json!({
        "type": "nfs", "server": "nfs.example", "export": "/srv/backup",
        "content": "backup", "options": NFS_MOUNT_OPTIONS,
    }));
    let d = drift(&nfs, &id, root, &same);
    assert!(d.update.is_empty() && d.fixed.is_empty(), "{d:?}");
    for found in [None, Some("hard"), Some("soft,timeo=600,retrans=20")] {
        let mut c = same.clone();
        match found {
            Some(o) => c.insert("options".into(), json!(o)),
            None => c.remove("options"),
        };
        let d = drift(&nfs, &id, root, &c);
        assert_eq!(
            d.update.options.as_deref(),
            Some(NFS_MOUNT_OPTIONS),
            "{found:?}"
        );
        assert!(d.fixed.is_empty());
        let params = d.update.params(bosun_pve::Op::UpdateStorage).unwrap();
        assert!(
            params
                .iter()
                .any(|(k, v)| k == "options" && v == NFS_MOUNT_OPTIONS)
        );
    }
    // PBS and directories have no mount options to restore.
    let pbs = target(
        StorageType::Pbs,
        "backup@pbs@pbs.example:store1",
        StorageRole::PbsOffsite,
    );
    let id = storage_id_of(pbs.kind, &pbs.durable_id);
    let c = config(json!({
        "type": "pbs", "server": "pbs.example", "datastore": "store1", "content": "backup",
    }));
    assert!(drift(&pbs, &id, root, &c).update.options.is_none());
}
