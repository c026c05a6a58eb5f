//! The QEMU requests' bounds and forms.

use super::*;

#[test]
fn file_write_is_bounded_and_base64_with_encode_off() {
    let op = Op::AgentFileWrite;
    let w = AgentFileWrite {
        path: "/etc/bosun/bootstrap.json".into(),
        content: b"{\"a\":1}\n".to_vec(),
    };
    let p = w.params(op).expect("fits");
    assert!(p.contains(&("encode".into(), "0".into())), "{p:?}");
    assert!(
        p.contains(&("content".into(), "eyJhIjoxfQo=".into())),
        "{p:?}"
    );
    let big = AgentFileWrite {
        path: "/x".into(),
        content: vec![0; FILE_WRITE_MAX + 1],
    };
    assert!(big.params(op).is_err());
    let exact = AgentFileWrite {
        path: "/x".into(),
        content: vec![0; FILE_WRITE_MAX],
    };
    let p = exact.params(op).expect("the maximum fits");
    assert_eq!(p[1].1.len(), 61_440, "base64 of the maximum is PVE's limit");
    let relative = AgentFileWrite {
        path: "etc/passwd".into(),
        content: Vec::new(),
    };
    assert!(relative.params(op).is_err());
}

#[test]
fn exec_sends_the_argv_as_a_repeated_array_and_refuses_what_is_unbounded() {
    let op = Op::AgentExec;
    let e = AgentExec {
        argv: vec!["/usr/lib/bosun/check".into(), "--quick".into()],
        input: None,
    };
    let p = e.params(op).expect("fits");
    assert_eq!(
        p,
        vec![
            ("command".to_owned(), "/usr/lib/bosun/check".to_owned()),
            ("command".to_owned(), "--quick".to_owned())
        ]
    );
    for bad in [
        AgentExec {
            argv: vec![],
            input: None,
        },
        AgentExec {
            argv: vec!["sh".into()],
            input: None,
        },
        AgentExec {
            argv: vec!["/bin/true".into(); EXEC_MAX_ARGS + 1],
            input: None,
        },
        AgentExec {
            argv: vec!["/bin/cat".into()],
            input: Some("x".repeat(EXEC_MAX_INPUT + 1)),
        },
    ] {
        assert!(bad.params(op).is_err(), "{:?}", bad.argv.first());
    }
}

#[test]
fn file_read_names_an_absolute_path_only() {
    let op = Op::AgentFileRead;
    assert_eq!(
        file_read_params(op, "/etc/hostname").expect("valid"),
        vec![("file".to_owned(), "/etc/hostname".to_owned())]
    );
    assert!(file_read_params(op, "etc/hostname").is_err());
    assert!(file_read_params(op, "/etc/\0").is_err());
}

#[test]
fn cloud_init_identity_is_sent_in_pves_forms() {
    let mut o = VmOptions {
        ciuser: Some("bosun".into()),
        sshkeys: vec!["ssh-ed25519 AAAAC3Nza key@host".into()],
        ..VmOptions::default()
    };
    o.ipconfig.insert(
        0,
        IpConfig::Static {
            address: Ipv4Addr::new(10, 0, 0, 5),
            prefix: 24,
            gateway: Some(Ipv4Addr::new(10, 0, 0, 1)),
        },
    );
    let mut net = VmNet::new("vmbr0");
    net.firewall = Some(true);
    o.net.insert(0, net);
    let mut p = Params::new();
    o.push_params(Op::RestoreVm, &mut p).expect("valid");
    assert!(p.contains(&("ipconfig0".into(), "ip=10.0.0.5/24,gw=10.0.0.1".into())));
    assert!(p.contains(&(
        "sshkeys".into(),
        "ssh-ed25519%20AAAAC3Nza%20key%40host".into()
    )));
    assert!(p.contains(&("net0".into(), "virtio,bridge=vmbr0,firewall=1".into())));
    let two_lines = VmOptions {
        sshkeys: vec!["ssh-ed25519 A\nssh-rsa B".into()],
        ..VmOptions::default()
    };
    assert!(two_lines.push_params(Op::RestoreVm, &mut p).is_err());
}

#[test]
fn pool_ids_and_macs_are_checked() {
    assert!(PoolId::new("bosun").is_ok());
    assert!(PoolId::new("bo/sun").is_err());
    assert!(PoolId::new("").is_err());
    assert!(check_mac("BC:24:11:00:00:01").is_ok());
    assert!(check_mac("01:24:11:00:00:01").is_err(), "multicast");
}

#[test]
fn a_vm_config_update_takes_the_schemas_sha1_digest_and_clean_keys_only() {
    let op = Op::UpdateVmConfig;
    let update = |delete: &[&str], digest: &str| VmConfigUpdate {
        set: VmOptions::default(),
        delete: delete.iter().map(|k| (*k).to_owned()).collect(),
        digest: Some(digest.to_owned()),
    };
    let sha1 = "a".repeat(40);
    let p = update(&["net1", "ipconfig1"], &sha1)
        .params(op)
        .expect("a SHA-1 digest and two keys");
    assert!(
        p.contains(&("delete".into(), "net1,ipconfig1".into())),
        "{p:?}"
    );
    assert!(p.contains(&("digest".into(), sha1.clone())), "{p:?}");
    // PUT …/qemu/{vmid}/config's digest is at most 40 characters in both schemas.
    assert!(update(&["net1"], &"a".repeat(41)).params(op).is_err());
    assert!(update(&["net1"], &"a".repeat(64)).params(op).is_err());
    assert!(update(&["net1,net2"], &sha1).params(op).is_err());
    assert!(update(&[""], &sha1).params(op).is_err());
    let nothing = VmConfigUpdate::default();
    assert!(
        nothing.params(op).is_err(),
        "an update that changes nothing"
    );
}

#[test]
fn a_fresh_smbios_uuid_is_sent_as_smbios1() {
    let uuid = uuid::Uuid::parse_str("0b7e3c52-1f0a-4c2e-9d5b-6a7f8e9d0c1b").expect("uuid");
    let options = VmOptions {
        smbios_uuid: Some(uuid),
        ..VmOptions::default()
    };
    let mut p = Params::new();
    options
        .push_params(Op::RestoreVm, &mut p)
        .expect("a uuid is valid");
    assert_eq!(
        p,
        vec![(
            "smbios1".to_owned(),
            "uuid=0b7e3c52-1f0a-4c2e-9d5b-6a7f8e9d0c1b".to_owned()
        )]
    );
}

#[test]
fn a_vms_share_and_order_are_sent_in_pves_forms_within_the_qemu_schemas_ranges() {
    let op = Op::UpdateVmConfig;
    let mut net = VmNet::new("vmbr0");
    net.macaddr = Some("BC:24:11:5E:A1:08".into());
    net.firewall = Some(true);
    net.rate = Some(Thousandths(12_500));
    let options = VmOptions {
        cpuunits: Some(250),
        cpulimit: Some(Thousandths(1_500)),
        startup: Some(crate::StartupOrder {
            order: 2,
            up: Some(0),
            down: Some(60),
        }),
        net: [(0, net)].into_iter().collect(),
        ..VmOptions::default()
    };
    let mut p = Params::new();
    options.push_params(op, &mut p).expect("valid");
    for want in [
        ("cpuunits", "250"),
        ("cpulimit", "1.5"),
        ("startup", "order=2,up=0,down=60"),
        (
            "net0",
            "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1,rate=12.5",
        ),
    ] {
        assert!(
            p.contains(&(want.0.into(), want.1.into())),
            "{want:?} in {p:?}"
        );
    }
    // The qemu schema's ranges, narrower than a container's: weight 1..=262144, limit
    // 0..=128 cores (8.4 and 9.1 alike).
    let with = |cpuunits, cpulimit| VmOptions {
        cpuunits,
        cpulimit,
        ..VmOptions::default()
    };
    for ok in [
        with(Some(1), None),
        with(Some(262_144), None),
        with(None, Some(Thousandths(0))),
        with(None, Some(VM_CPULIMIT_MAX)),
    ] {
        assert!(ok.push_params(op, &mut Params::new()).is_ok(), "{ok:?}");
    }
    for bad in [
        with(Some(0), None),
        with(Some(262_145), None),
        with(None, Some(Thousandths(128_001))),
        with(None, Some(Thousandths::whole(8192))),
    ] {
        let error = bad.push_params(op, &mut Params::new()).unwrap_err();
        assert!(
            matches!(
                error,
                PveError::InvalidRequest {
                    field: "cpuunits" | "cpulimit",
                    ..
                }
            ),
            "{bad:?}: {error:?}"
        );
    }
}
