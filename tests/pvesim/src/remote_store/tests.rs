use super::*;

fn backup() -> StoredBackup {
    StoredBackup {
        volid: "backup/ct/101/2026-03-01T02:30:00Z".to_owned(),
        content: "backup".to_owned(),
        format: "pbs-ct".to_owned(),
        size: 1 << 20,
        ctime: 1_772_332_200,
        vmid: Some(101),
        notes: Some("web\nsecond line".to_owned()),
        protected: true,
        encrypted: Some("12:34".to_owned()),
        archive: Some(StoredArchive {
            conf: BTreeMap::from([
                ("hostname".to_owned(), "web".to_owned()),
                ("description".to_owned(), "two\nlines".to_owned()),
                ("lxc.apparmor.profile".to_owned(), "unconfined".to_owned()),
            ]),
            files: crate::files::debian_template().entries(),
            unreadable: false,
        }),
    }
}

#[test]
fn a_consistent_backup_becomes_a_volume_and_back() {
    let b = backup();
    let v = volume(b.clone()).expect("valid");
    assert_eq!(v.volid, b.volid);
    assert_eq!(
        v.archive.as_ref().map(|a| a.files.clone()),
        Some(crate::files::debian_template())
    );
    assert_eq!(stored_backup(&v), b);
    let vm = StoredBackup {
        volid: "backup/vm/100/2026-03-01T02:30:00Z".to_owned(),
        format: "pbs-vm".to_owned(),
        vmid: None,
        archive: None,
        ..backup()
    };
    assert!(volume(vm).is_ok());
}

#[test]
fn inconsistent_backups_are_refused_with_the_reason() {
    type Edit = fn(&mut StoredBackup);
    let cases: &[(Edit, &str)] = &[
        (
            |b| b.volid = "offsite:backup/ct/101/2026-03-01T02:30:00Z".to_owned(),
            "the volid is not backup/ct/<vmid>/<YYYY-MM-DDTHH:MM:SSZ>",
        ),
        (
            |b| b.volid = "backup/ct/101/../../etc".to_owned(),
            "the volid is not backup/ct/<vmid>/<YYYY-MM-DDTHH:MM:SSZ>",
        ),
        (
            |b| b.volid = "backup/ct/101/2026-13-45T02:30:00Z".to_owned(),
            "the backup time '2026-13-45T02:30:00Z' is not a time",
        ),
        (
            |b| b.content = "iso".to_owned(),
            "content is 'iso', not 'backup'",
        ),
        (
            |b| b.format = "tar.zst".to_owned(),
            "format is 'tar.zst', not 'pbs-ct'",
        ),
        (
            |b| b.vmid = Some(102),
            "vmid does not match the volid's 101",
        ),
        (
            |b| b.encrypted = Some(String::new()),
            "the encryption key fingerprint is empty or has control characters",
        ),
        (
            |b| {
                if let Some(a) = &mut b.archive {
                    a.conf.insert("host name".to_owned(), "x".to_owned());
                }
            },
            "archive: config key 'host name' is not a name",
        ),
        (
            |b| {
                if let Some(a) = &mut b.archive {
                    a.conf
                        .insert("hostname".to_owned(), "x\nrootfs: evil".to_owned());
                }
            },
            "archive: config value of 'hostname' has control characters",
        ),
        (
            |b| {
                if let Some(a) = &mut b.archive {
                    a.files.retain(|f| f.path != "/etc");
                }
            },
            "archive: the parent of '/etc/apt' is not a directory",
        ),
    ];
    for (edit, expected) in cases {
        let mut b = backup();
        edit(&mut b);
        let err = volume(b.clone()).err().unwrap_or_default();
        assert!(err.starts_with(expected), "{b:?}: {err}");
    }
}

#[test]
fn locations_must_be_names() {
    assert_eq!(check_location("offsite", ""), Ok(()));
    assert_eq!(check_location("offsite", "host-a/sub"), Ok(()));
    for (ds, ns) in [
        ("", ""),
        ("off\nsite", ""),
        ("offsite", "a//b"),
        ("offsite", "/a"),
        ("offsite", "a\tb"),
    ] {
        assert!(check_location(ds, ns).is_err(), "{ds:?} {ns:?}");
    }
}

#[test]
fn the_store_carries_the_password_that_listings_and_debug_leave_out() {
    let spec = RemoteSpec::Pbs {
        fingerprint: "aa:bb".to_owned(),
        datastores: vec!["offsite".to_owned()],
        username: None,
        password: "hunter2".to_owned(),
    };
    let store = RemoteStore {
        spec: Some(spec.clone()),
        namespaces: Vec::new(),
    };
    let json = serde_json::to_value(&store).expect("json");
    assert_eq!(json["spec"]["type"], "pbs");
    assert_eq!(json["spec"]["password"], "hunter2");
    let back: RemoteStore = serde_json::from_value(json).expect("parses");
    assert_eq!(back, store);
    assert!(!format!("{store:?}").contains("hunter2"));
    assert!(
        !serde_json::to_string(&spec)
            .expect("json")
            .contains("hunter2")
    );

    let cifs = RemoteStore {
        spec: Some(RemoteSpec::Cifs {
            shares: vec!["backup".to_owned()],
            username: None,
            password: None,
        }),
        namespaces: Vec::new(),
    };
    let json = serde_json::to_value(&cifs).expect("json");
    assert!(json["spec"].get("password").is_none(), "{json}");
    let implicit = RemoteStore {
        spec: None,
        namespaces: Vec::new(),
    };
    assert_eq!(
        serde_json::to_value(&implicit).expect("json"),
        serde_json::json!({"spec": null, "namespaces": []})
    );
}
