use super::*;

fn parse(text: &str) -> Result<Request, serde_json::Error> {
    serde_json::from_str(text)
}

#[test]
fn mount_request_round_trips() {
    let text = r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","serial":"WD-WX41A12B3C4D","target_id":"backup-1","fstype":"ext4","class":"data","options":["noatime"]}}"#;
    let req = parse(text).unwrap();
    assert_eq!(req.verb(), VerbName::MountByUuid);
    let again: Request = serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
    assert_eq!(again, req);
}

#[test]
fn unknown_verb_field_fstype_and_option_fail_to_parse() {
    let cases = [
        r#"{"verb":"run_command","args":{"cmd":"/bin/sh"}}"#,
        r#"{"verb":"unmount","args":{"target_id":"a"},"extra":1}"#,
        r#"{"verb":"unmount","args":{"target_id":"a","path":"/"}}"#,
        r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","target_id":"a","fstype":"ext4","class":"data"}}"#,
        r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","serial":"","target_id":"a","fstype":"ext4","class":"data"}}"#,
        r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","serial":"S1","target_id":"a","fstype":"btrfs","class":"data"}}"#,
        r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","target_id":"a","fstype":"ext4","class":"data","options":["suid"]}}"#,
        r#"{"verb":"mount_by_uuid","args":{"uuid":"0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f","target_id":"a","fstype":"ext4","class":"suid"}}"#,
    ];
    for case in cases {
        assert!(parse(case).is_err(), "{case}");
    }
}

#[test]
fn disk_serials() {
    for good in ["WD-WX41A12B3C4D", "0401f2a9c3", "S/N 12:34"] {
        assert!(DiskSerial::new(good).is_ok(), "{good}");
    }
    let long = "A".repeat(129);
    for bad in [
        "",
        " lead",
        "trail ",
        "tab\there",
        "new\nline",
        "é",
        long.as_str(),
    ] {
        assert!(DiskSerial::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn uuids() {
    assert!(FsUuid::new("0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f").is_ok());
    assert!(FsUuid::new("ABCD-12EF").is_ok());
    for bad in [
        "",
        "0B7F8C5E-1D2A-4C3B-9E8F-7A6B5C4D3E2F",
        "0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2",
        "0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2ff",
        "0b7f8c5e1d2a-4c3b-9e8f-7a6b5c4d3e2f-",
        "abcd-12ef",
        "ABCD-12EF\n",
        "../../../etc",
    ] {
        assert!(FsUuid::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn target_ids_are_single_safe_components() {
    assert!(TargetId::new("nas-01").is_ok());
    for bad in [
        "",
        "..",
        ".",
        "a/b",
        "-a",
        "A",
        "a b",
        "a\0",
        &"a".repeat(64),
    ] {
        assert!(TargetId::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn guest_paths() {
    assert!(GuestPath::new("/etc/bosun-bootstrap").is_ok());
    for bad in [
        "/", "relative", "/a/../b", "/a//b", "/a/./b", "/a/", "/a,ro=0", "/a=b", "/a b", "/a\0",
    ] {
        assert!(GuestPath::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn numbers_are_range_checked() {
    assert!(Vmid::new(99).is_err());
    assert!(Vmid::new(100).is_ok());
    assert!(Vmid::new(1_000_000_000).is_err());
    assert!(MountIndex::new(255).is_ok());
    assert!(MountIndex::new(256).is_err());
    let err = serde_json::from_str::<Vmid>("42").unwrap_err();
    assert!(err.to_string().contains("vmid"), "{err}");
}

#[test]
fn other_newtypes() {
    assert!(TemplateVolid::new("local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst").is_ok());
    assert!(TemplateVolid::new("local:iso/x.iso").is_err());
    assert!(TemplateVolid::new("local:vztmpl/../x").is_err());
    assert!(StorageId::new("local-lvm").is_ok());
    assert!(StorageId::new("1local").is_err());
    assert!(ImageRef::new("registry.example/bosun/controller:1.4.2").is_ok());
    assert!(ImageRef::new("Bad Ref").is_err());
    assert!(ImageRef::new("a/../b").is_err());
    assert!(BridgeName::new("vmbr0").is_ok());
    assert!(BridgeName::new("eth0").is_err());
    assert!(BlockDevice::new("/dev/nvme0n1").is_ok());
    assert!(BlockDevice::new("/dev/../etc/shadow").is_err());
    assert!(BlockDevice::new("/dev/disk/by-uuid/x").is_err());
}

/// `docs/proto/bootstrap.json`, a valid `bosun.bootstrap/v1` document.
pub(super) const BOOTSTRAP_EXAMPLE: &str = include_str!("../../../docs/proto/bootstrap.json");

#[test]
fn bootstrap_document_is_redacted_and_checked() {
    let doc = BootstrapDocument::new(BOOTSTRAP_EXAMPLE).unwrap();
    assert!(!format!("{doc:?}").contains("blt_"));
    assert!(BootstrapDocument::new(r#"{"token":"s3cret"}"#).is_err());
    assert!(BootstrapDocument::new("[1]").is_err());
    assert!(BootstrapDocument::new("{").is_err());
    // Strict and validated: an unknown field, another schema, a bad pin.
    let mut value: serde_json::Value = serde_json::from_str(BOOTSTRAP_EXAMPLE).unwrap();
    value["extra"] = serde_json::json!(1);
    assert!(BootstrapDocument::new(value.to_string()).is_err());
    let other = BOOTSTRAP_EXAMPLE.replace("bosun.bootstrap/v1", "bosun.bootstrap/v2");
    assert!(BootstrapDocument::new(other).is_err());
    let bad_pin = BOOTSTRAP_EXAMPLE.replace("c0ffee00", "C0FFEE00");
    let err = BootstrapDocument::new(bad_pin).unwrap_err();
    assert!(!err.to_string().contains("blt_"), "{err}");
    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_BOOTSTRAP_BYTES));
    let err = BootstrapDocument::new(big).unwrap_err();
    assert!(!err.value.contains("xxx"));
}

#[test]
fn verb_names_match_the_wire() {
    for verb in VerbName::ALL {
        let json = serde_json::to_string(&verb).unwrap();
        assert_eq!(json, format!("\"{}\"", verb.as_str()));
        assert_eq!(VerbName::parse(verb.as_str()), Some(verb));
    }
    assert_eq!(VerbName::parse("shell"), None);
    assert_eq!(VerbName::parse("prepare_config_mount"), None);
}

#[test]
fn reset_guest_identity_names_a_vmid_and_nothing_else() {
    let req = parse(r#"{"verb":"reset_guest_identity","args":{"vmid":105}}"#).unwrap();
    assert_eq!(
        req,
        Request::ResetGuestIdentity(ResetGuestIdentity {
            vmid: Vmid::new(105).unwrap()
        })
    );
    for bad in [
        r#"{"verb":"reset_guest_identity","args":{"vmid":99}}"#,
        r#"{"verb":"reset_guest_identity","args":{"vmid":"105; reboot"}}"#,
        r#"{"verb":"reset_guest_identity","args":{"vmid":105,"path":"/etc/shadow"}}"#,
        r#"{"verb":"reset_guest_identity","args":{}}"#,
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    // Fixed commands by absolute path, each touching only the two identity paths.
    for command in RESET_GUEST_IDENTITY_COMMANDS {
        assert!(command[0].starts_with("/usr/bin/"), "{command:?}");
        assert!(!command.contains(&"--"), "{command:?}");
    }
    assert_eq!(
        RESET_GUEST_IDENTITY_COMMANDS.map(|c| c.join(" ")),
        [
            "/usr/bin/find /etc/ssh -maxdepth 1 -name ssh_host_* -delete",
            "/usr/bin/truncate -s 0 /etc/machine-id",
        ]
    );
}

#[test]
fn restore_check_names_a_vmid_and_a_bounded_time_and_nothing_else() {
    let req = parse(r#"{"verb":"restore_check","args":{"vmid":105,"timeout_secs":300}}"#).unwrap();
    assert_eq!(
        req,
        Request::RestoreCheck(RestoreCheck {
            vmid: Vmid::new(105).unwrap(),
            timeout_secs: CheckSeconds::new(300).unwrap(),
        })
    );
    assert_eq!(req.verb().as_str(), "restore_check");
    for bad in [
        r#"{"verb":"restore_check","args":{"vmid":105}}"#,
        r#"{"verb":"restore_check","args":{"vmid":105,"timeout_secs":0}}"#,
        r#"{"verb":"restore_check","args":{"vmid":105,"timeout_secs":1801}}"#,
        r#"{"verb":"restore_check","args":{"vmid":99,"timeout_secs":60}}"#,
        r#"{"verb":"restore_check","args":{"vmid":105,"timeout_secs":60,"path":"/bin/sh"}}"#,
        r#"{"verb":"restore_check","args":{"vmid":105,"timeout_secs":60,"argv":["/bin/sh"]}}"#,
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        RESTORE_CHECK_PROBE.join(" "),
        "/usr/bin/test -x /etc/bosun/restore-check"
    );
}

#[test]
fn restore_check_output_is_cut_to_its_first_lines() {
    let long = "x".repeat(500);
    let text = format!("a\tb\u{1b}[31m\n{long}\n\n{}", "line\n".repeat(100));
    let lines = restore_check_lines(&text);
    assert_eq!(lines.len(), RESTORE_CHECK_MAX_LINES);
    assert_eq!(lines[0], "a b [31m");
    assert_eq!(lines[1].chars().count(), RESTORE_CHECK_MAX_LINE_CHARS);
    assert_eq!(lines[2], "");
    assert_eq!(restore_check_lines("FAILED\n\n  \n"), vec!["FAILED"]);
    assert!(restore_check_lines("").is_empty());
    // An answer without the optional fields (an older helper's) still reads.
    let answer: Output =
        serde_json::from_str(r#"{"kind":"restore_checked","vmid":105,"installed":false}"#).unwrap();
    assert_eq!(
        answer,
        Output::RestoreChecked {
            vmid: Vmid::new(105).unwrap(),
            installed: false,
            exit_code: None,
            timed_out: false,
            output: Vec::new(),
        }
    );
}

#[test]
fn push_bootstrap_parses_and_a_bind_mount_of_a_bootstrap_does_not() {
    let request = |vmid: u64, document: &str| {
        serde_json::json!({"verb": "push_bootstrap", "args": {"vmid": vmid, "document": document}})
            .to_string()
    };
    let text = request(101, BOOTSTRAP_EXAMPLE);
    let Request::PushBootstrap(args) = serde_json::from_str::<Request>(&text).unwrap() else {
        panic!("wrong verb");
    };
    assert_eq!(args.vmid.get(), 101);
    assert_eq!(args.document.len(), BOOTSTRAP_EXAMPLE.len());
    let mut extra: serde_json::Value = serde_json::from_str(&text).unwrap();
    extra["args"]["path"] = serde_json::json!("/etc");
    for bad in [
        request(101, "[1]"),
        request(101, r#"{"token":"x"}"#),
        request(99, BOOTSTRAP_EXAMPLE),
        extra.to_string(),
        // A verb the helper no longer has.
        r#"{"verb":"attach_bind_mount","args":{"vmid":101,"index":9,"source":{"kind":"target","target_id":"nas"},"guest_path":"/etc/bosun","read_only":true}}"#.to_owned(),
    ] {
        assert!(serde_json::from_str::<Request>(&bad).is_err(), "{bad}");
    }
}

#[test]
fn responses_round_trip() {
    let r = Response::Refused {
        reason: Refusal::UnsafePath,
        message: "symlink".into(),
    };
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains(r#""status":"refused""#), "{text}");
    assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r);
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn accepted_target_ids_are_one_safe_component(s in "\\PC{0,70}") {
            if let Ok(id) = TargetId::new(s.clone()) {
                prop_assert!(!id.as_str().contains('/') && !id.as_str().contains(".."));
                prop_assert!(id.as_str().bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
            }
        }

        #[test]
        fn accepted_guest_paths_cannot_change_a_pct_option(s in "[/a-z.,=_ -]{0,40}") {
            if let Ok(p) = GuestPath::new(s.clone()) {
                prop_assert!(!p.as_str().contains(',') && !p.as_str().contains('='));
                prop_assert!(!p.as_str().split('/').any(|c| c == ".."));
            }
        }

        #[test]
        fn requests_round_trip(id in "[a-z0-9][a-z0-9-]{0,20}", vmid in 100u64..1_000_000) {
            for req in [
                Request::Unmount(Unmount { target_id: TargetId::new(id.clone()).unwrap() }),
                Request::RestartController(RestartController { vmid: Vmid::new(vmid).unwrap(), image: None }),
                Request::ResetGuestIdentity(ResetGuestIdentity { vmid: Vmid::new(vmid).unwrap() }),
                Request::RestoreCheck(RestoreCheck {
                    vmid: Vmid::new(vmid).unwrap(),
                    timeout_secs: CheckSeconds::new(vmid % 1800 + 1).unwrap(),
                }),
            ] {
                let text = serde_json::to_string(&req).unwrap();
                prop_assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), req);
            }
        }
    }
}

#[test]
fn archive_names_are_one_vzdump_file_name() {
    for ok in [
        "vzdump-lxc-100-2026_11_21-10_00_00.tar.zst",
        "vzdump-qemu-9001-2026_11_21-10_00_00.vma.zst",
        "vzdump-qemu-100-2026_11_21-10_00_00.vma",
        "vzdump-lxc-999999999-2026_01_01-00_00_00.tar",
        "vzdump-lxc-9000-2026_11_21-10_00_00.tar.gz",
    ] {
        assert!(ArchiveName::new(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "../vzdump-lxc-100-2026_11_21-10_00_00.tar.zst",
        "dump/vzdump-lxc-100-2026_11_21-10_00_00.tar.zst",
        "vzdump-lxc-100-2026_11_21-10_00_00.tar.zst/..",
        "vzdump-qemu-100-2026_11_21-10_00_00.tar.zst",
        "vzdump-lxc-100-2026_11_21-10_00_00.vma.zst",
        "vzdump-qemu-100-2026_11_21-10_00_00.vma.xz",
        "vzdump-lxc-099-2026_11_21-10_00_00.tar.zst",
        "vzdump-lxc-100-2026_11_21-10_00_00.tar.zst.sh",
        "vzdump-lxc-100-2026-11-21-10:00:00.tar.zst",
    ] {
        assert!(ArchiveName::new(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_stamp_verifies_under_its_key_only_and_keeps_its_binding() {
    use super::stamp::{GuestStamp, StampError};
    let key = [7u8; 32];
    let guest = uuid::Uuid::parse_str("0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10").unwrap();
    for bound in [None, Some(guest)] {
        let stamp = GuestStamp::sign(&key, bound, [1; 16]);
        let parsed = GuestStamp::parse(stamp.line().as_bytes()).unwrap();
        assert_eq!(parsed, stamp);
        assert_eq!(parsed.verify(&key), Ok(()));
        assert!(matches!(
            parsed.verify(&[8u8; 32]),
            Err(StampError::OtherKey { .. })
        ));
    }
    // Rebinding the line to another guest (same key id, same MAC) does not verify.
    let line = GuestStamp::sign(&key, Some(guest), [1; 16]).line();
    let other = line.replace(&guest.to_string(), "1b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10");
    let forged = GuestStamp::parse(other.as_bytes()).unwrap();
    assert_eq!(forged.verify(&key), Err(StampError::BadMac));
    let unbound = line.replace(&guest.to_string(), "-");
    let forged = GuestStamp::parse(unbound.as_bytes()).unwrap();
    assert_eq!(forged.verify(&key), Err(StampError::BadMac));
    for bad in ["", "x", &line.replace(' ', "  "), &format!("{line}{line}")] {
        assert!(GuestStamp::parse(bad.as_bytes()).is_err(), "{bad:?}");
    }
}

#[test]
fn loaded_image_takes_docker_loads_last_well_formed_name() {
    let named = "Loaded image: bosun/controller:1.5\n";
    assert_eq!(
        loaded_image(named).unwrap().as_str(),
        "bosun/controller:1.5"
    );
    let id = format!("noise\nLoaded image ID: sha256:{}\n", "a".repeat(64));
    let expected = format!("sha256:{}", "a".repeat(64));
    assert_eq!(loaded_image(&id).unwrap().as_str(), expected);
    // A name that is no image reference (shell syntax, a second word) is none.
    for text in [
        "",
        "no image here\n",
        "Loaded image: x; rm -rf /\n",
        "Loaded image: UPPER:case\n",
    ] {
        assert_eq!(loaded_image(text), None, "{text:?}");
    }
}

#[test]
fn restart_controller_takes_only_a_sha256_to_place() {
    let hex = "b".repeat(64);
    let text = format!(r#"{{"verb":"restart_controller","args":{{"vmid":101,"image":"{hex}"}}}}"#);
    let Request::RestartController(args) = parse(&text).unwrap() else {
        panic!("not restart_controller");
    };
    assert_eq!(args.image.map(String::from), Some(hex));
    for image in ["sha256:bbbb", "../../etc/shadow", "B", ""] {
        let text =
            format!(r#"{{"verb":"restart_controller","args":{{"vmid":101,"image":"{image}"}}}}"#);
        assert!(parse(&text).is_err(), "{image}");
    }
    let path = r#"{"verb":"restart_controller","args":{"vmid":101,"archive":"/tmp/x.tar"}}"#;
    assert!(parse(path).is_err());
}
