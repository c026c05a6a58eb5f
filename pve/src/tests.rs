//! Unit tests: decoding, UPIDs, property strings, error parsing, validation.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::*;

#[test]
fn lenient_decoding_accepts_perl_forms() {
    let ct: CtSummary = serde_json::from_value(json!({
        "vmid": "101", "status": "running", "name": 123, "maxmem": "536870912",
        "cpus": "2", "template": "0", "uptime": 5
    }))
    .unwrap();
    assert_eq!(ct.vmid.get(), 101);
    assert_eq!(ct.status, GuestStatus::Running);
    assert_eq!(ct.name.as_deref(), Some("123"));
    assert_eq!(ct.maxmem, Some(536_870_912));
    assert_eq!(ct.cpus, Some(2.0));
    assert!(!ct.template);

    let st: StorageInfo = serde_json::from_value(json!({
        "storage": "local", "type": "dir", "content": "backup,vztmpl,iso",
        "active": 1, "enabled": "1", "shared": 0, "total": "1000", "avail": 10
    }))
    .unwrap();
    assert!(st.active && st.enabled && !st.shared);
    assert!(st.allows("backup") && !st.allows("rootdir"));
    assert_eq!(st.total, Some(1000));

    let line: TaskLogLine = serde_json::from_value(json!({"n": "3", "t": "TASK OK"})).unwrap();
    assert_eq!(line.n, 3);
}

#[test]
fn lenient_decoding_rejects_garbage() {
    let bad = [
        json!({"vmid": "abc", "status": "running"}),
        json!({"vmid": 99, "status": "running"}),
        json!({"vmid": 100, "status": "running", "template": 2}),
        json!({"vmid": 100, "status": "running", "maxmem": "-5"}),
    ];
    for v in bad {
        assert!(
            serde_json::from_value::<CtSummary>(v.clone()).is_err(),
            "{v} must not decode"
        );
    }
}

#[test]
fn config_accessors_read_perl_types() {
    let cfg: CtConfig = serde_json::from_value(json!({
        "digest": "0123abcd", "hostname": "web1", "memory": 512, "cpulimit": "1.5",
        "unprivileged": 1, "features": "keyctl=1,nesting=1", "lock": "backup"
    }))
    .unwrap();
    assert_eq!(cfg.digest, "0123abcd");
    assert_eq!(cfg.hostname().as_deref(), Some("web1"));
    assert_eq!(cfg.get_u64("memory"), Some(512));
    assert_eq!(cfg.get_str("cpulimit").as_deref(), Some("1.5"));
    assert!(cfg.unprivileged());
    assert_eq!(cfg.lock().as_deref(), Some("backup"));
    assert_eq!(
        cfg.features(),
        vec![
            ("keyctl".to_owned(), "1".to_owned()),
            ("nesting".to_owned(), "1".to_owned())
        ]
    );
}

#[test]
fn upid_parses_pve_examples() {
    let u =
        Upid::parse("UPID:pve1:0003A1F2:0141B7C9:6650F1A2:vzdump:100:agent@pve!host1:").unwrap();
    assert_eq!(u.node().as_str(), "pve1");
    assert_eq!(u.pid(), 0x0003_A1F2);
    assert_eq!(u.starttime(), 0x6650_F1A2);
    assert_eq!(u.task_type(), "vzdump");
    assert_eq!(u.id(), "100");
    assert_eq!(u.user(), "agent@pve!host1");
    let empty_id = Upid::parse("UPID:pve:00001234:123456789:6650F1A2:imgdel::root@pam:").unwrap();
    assert_eq!(empty_id.id(), "");
    let at_id =
        Upid::parse("UPID:pve:00001234:12345678:6650F1A2:imgdel:100@local:root@pam:").unwrap();
    assert_eq!(at_id.id(), "100@local");
}

#[test]
fn upid_rejects_malformed() {
    for bad in [
        "",
        "UPID:pve:00001234:12345678:6650F1A2:vzdump:100:root@pam",
        "UPID:pve:1234:12345678:6650F1A2:vzdump:100:root@pam:",
        "UPID:-pve:00001234:12345678:6650F1A2:vzdump:100:root@pam:",
        "UPID:pve:00001234:12345678:6650F1A2:vzdump:100::",
        "UPID:pve:0000123G:12345678:6650F1A2:vzdump:100:root@pam:",
        "UPID:pve:00001234:12345678:6650F1A2:vz dump:100:root@pam:",
        "XPID:pve:00001234:12345678:6650F1A2:vzdump:100:root@pam:",
    ] {
        assert!(Upid::parse(bad).is_err(), "{bad:?} must be refused");
    }
}

proptest! {
    #[test]
    fn upid_roundtrips(node in "[a-z][a-z0-9-]{0,10}[a-z0-9]", pid in any::<u32>(), start in 0u32..=u32::MAX,
                       ty in "[a-z]{3,10}", id in "[0-9]{0,6}", user in "[a-z]{1,8}@(pam|pve)(![a-z]{1,8})?") {
        let raw = format!("UPID:{node}:{pid:08X}:{:08X}:{start:08X}:{ty}:{id}:{user}:", 12345);
        let u = Upid::parse(&raw).unwrap();
        prop_assert_eq!(u.as_str(), raw.as_str());
        prop_assert_eq!(u.node().as_str(), node.as_str());
        prop_assert_eq!(u.pid(), pid);
        prop_assert_eq!(u.starttime(), i64::from(start));
        prop_assert_eq!(u.task_type(), ty.as_str());
        prop_assert_eq!(u.id(), id.as_str());
        prop_assert_eq!(u.user(), user.as_str());
    }

    #[test]
    fn vmid_accepts_exactly_pve_range(n in any::<u32>()) {
        prop_assert_eq!(Vmid::new(n).is_ok(), (100..=999_999_999).contains(&n));
    }

    #[test]
    fn property_strings_survive_form_encoding(bridge in "vmbr[0-9]{1,3}", tag in 1u16..=4094) {
        let mut net = NetConfig::new("eth0", bridge.clone());
        net.tag = Some(tag);
        let value = net.to_property_string().unwrap();
        let body = serde_urlencoded::to_string([("net0", value.as_str())]).unwrap();
        prop_assert!(!body[5..].contains('=') && !body[5..].contains(','), "raw = or , in {}", body);
        let back: Vec<(String, String)> = serde_urlencoded::from_str(&body).unwrap();
        prop_assert_eq!(&back[0].1, &value);
    }
}

#[test]
fn identifiers_validate_like_pve() {
    assert!(NodeName::new("pve-1").is_ok());
    assert!(NodeName::new("-pve").is_err());
    assert!(StorageId::new("local-lvm").is_ok());
    assert!(StorageId::new("l").is_err());
    assert!(StorageId::new("9local").is_err());
    assert!(SnapName::new("before-upgrade_1").is_ok());
    for bad in [
        "current",
        "vzdump",
        "1abc",
        "a",
        "has space",
        &"x".repeat(41),
    ] {
        assert!(SnapName::new(bad).is_err(), "{bad:?} must be refused");
    }
    let v = VolumeId::new("local:backup/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst").unwrap();
    assert_eq!(v.storage(), "local");
    assert_eq!(
        v.name(),
        "backup/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst"
    );
    assert!(VolumeId::new("/var/lib/vz/dump/x.tar").is_err());
    assert!(check_dns_name("web-1.example.com").is_ok());
    assert!(check_dns_name("web_1").is_err());
    assert!(check_dns_name("-web").is_err());
    assert!(check_tag("customer-a").is_ok());
    assert!(check_tag("a b").is_err());
}

#[test]
fn property_string_builders() {
    let mut net = NetConfig::new("eth0", "vmbr0");
    net.hwaddr = Some("BC:24:11:00:00:01".into());
    net.ip = Some(Ipv4Config::Static("10.0.0.5/24".into()));
    net.gw = Some("10.0.0.1".parse().unwrap());
    net.firewall = Some(true);
    net.link_down = Some(true);
    assert_eq!(
        net.to_property_string().unwrap(),
        "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=10.0.0.5/24,gw=10.0.0.1,firewall=1,link_down=1"
    );
    for ip in ["10.0.0.5", "10.0.0.256/24", "10.0.0.5/33", "a.b.c.d/8"] {
        let mut n = NetConfig::new("eth0", "vmbr0");
        n.ip = Some(Ipv4Config::Static(ip.into()));
        assert!(n.to_property_string().is_err(), "{ip} must be refused");
    }
    assert!(
        NetConfig::new("eth0", "vmbr0,tag=5")
            .to_property_string()
            .is_err()
    );
    let mut n = NetConfig::new("eth0", "vmbr0");
    n.tag = Some(0);
    assert!(n.to_property_string().is_err());

    let keep = PruneBackups {
        keep_last: Some(3),
        keep_daily: Some(7),
        ..Default::default()
    };
    assert_eq!(
        keep.to_property_string().unwrap(),
        "keep-daily=7,keep-last=3"
    );
    assert_eq!(
        PruneBackups {
            keep_all: true,
            ..Default::default()
        }
        .to_property_string()
        .unwrap(),
        "keep-all=1"
    );
    assert!(PruneBackups::default().to_property_string().is_err());
    assert!(
        PruneBackups {
            keep_all: true,
            keep_last: Some(1),
            ..Default::default()
        }
        .to_property_string()
        .is_err()
    );

    assert_eq!(DiskSize::Grow(2, SizeUnit::G).to_param().unwrap(), "+2G");
    assert_eq!(
        DiskSize::Absolute(10, SizeUnit::T).to_param().unwrap(),
        "10T"
    );
    assert!(DiskSize::Grow(0, SizeUnit::G).to_param().is_err());
    assert_eq!(CtDisk::MountPoint(3).to_string(), "mp3");
}

fn answer(status: u16, reason: &str, body: &str) -> PveError {
    PveError::from_answer(
        Op::StartCt,
        Some(Vmid::new(100).unwrap()),
        status,
        reason,
        body.as_bytes(),
    )
}

#[test]
fn error_answers_are_classified() {
    assert!(matches!(
        answer(401, "Authentication failed!", ""),
        PveError::Unauthorized { .. }
    ));

    let e = answer(
        403,
        "Permission check failed (/vms/100, VM.PowerMgmt)",
        r#"{"data":null,"message":"Permission check failed (/vms/100, VM.PowerMgmt)\n"}"#,
    );
    match e {
        PveError::Forbidden {
            path,
            privilege,
            message,
            ..
        } => {
            assert_eq!(path.as_deref(), Some("/vms/100"));
            assert_eq!(privilege.as_deref(), Some("VM.PowerMgmt"));
            assert_eq!(message, "Permission check failed (/vms/100, VM.PowerMgmt)");
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    let root_only = answer(
        403,
        "x",
        r#"{"data":null,"message":"Permission check failed (changing feature flags (except nesting) is only allowed for root@pam)\n"}"#,
    );
    assert!(
        matches!(
            root_only,
            PveError::Forbidden {
                path: None,
                privilege: None,
                ..
            }
        ),
        "{root_only:?}"
    );

    let e = answer(
        400,
        "Parameter verification failed.",
        r#"{"data":null,"errors":{"storage":"storage 'local' does not support container directories\n"},"message":"Parameter verification failed.\n"}"#,
    );
    match e {
        PveError::BadRequest {
            errors, message, ..
        } => {
            assert_eq!(message, "Parameter verification failed.");
            assert_eq!(
                errors["storage"],
                "storage 'local' does not support container directories"
            );
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }

    let e = answer(
        500,
        "CT is locked (backup)",
        r#"{"data":null,"message":"CT is locked (backup)\n"}"#,
    );
    assert!(
        matches!(&e, PveError::Locked { lock: Some(l), .. } if l == "backup"),
        "{e:?}"
    );
    assert!(e.is_lock_contention());
    let e = answer(
        500,
        "x",
        r#"{"data":null,"message":"can't lock file '/run/lock/lxc/pve-config-100.lock' - got timeout\n"}"#,
    );
    assert!(matches!(e, PveError::Locked { lock: None, .. }), "{e:?}");
    let e = answer(
        500,
        "CT 100 already running",
        r#"{"data":null,"message":"CT 100 already running\n"}"#,
    );
    assert!(
        matches!(&e, PveError::Api { status: 500, message, .. } if message == "CT 100 already running")
    );
    let shown = answer(
        500,
        "x",
        r#"{"data":null,"message":"CT 100 already running\n"}"#,
    )
    .to_string();
    assert!(
        shown.contains("StartCt")
            && shown.contains("for guest 100")
            && shown.contains("already running"),
        "{shown}"
    );
    let e = answer(500, "CT 100 already running", "");
    assert!(
        matches!(&e, PveError::Api { message, .. } if message == "CT 100 already running"),
        "reason phrase used"
    );
    let e = answer(596, "Broken pipe", "");
    assert!(matches!(e, PveError::Busy { status: 596, .. }));
    assert!(!e.is_retry_safe(), "a busy POST may have been handled");
    let busy_read = PveError::from_answer(Op::Version, None, 596, "", b"");
    assert!(busy_read.is_retry_safe());
    assert!(busy_read.is_worth_asking_again());
}

/// A read a handler failed is asked again unless it says the object is missing; a mutation's
/// failure never is, whatever its status.
#[test]
fn which_failures_are_asked_again() {
    let ct = Some(Vmid::new(100).unwrap());
    let read =
        |status, body: &str| PveError::from_answer(Op::GetConfig, ct, status, "", body.as_bytes());
    assert!(
        read(500, r#"{"data":null,"message":"got unexpected error\n"}"#).is_worth_asking_again()
    );
    let missing = read(
        500,
        r#"{"data":null,"message":"Configuration file 'nodes/pve/lxc/100.conf' does not exist\n"}"#,
    );
    assert!(
        !missing.is_worth_asking_again(),
        "a missing guest is an answer"
    );
    assert!(
        !read(403, r#"{"data":null,"message":"Permission check failed"}"#).is_worth_asking_again()
    );
    assert!(!read(400, r#"{"data":null,"errors":{"x":"y"}}"#).is_worth_asking_again());
    assert!(!answer(500, "", r#"{"data":null,"message":"x\n"}"#).is_worth_asking_again());
    assert!(!answer(596, "Broken pipe", "").is_worth_asking_again());
    assert!(matches!(
        answer(
            501,
            "x",
            r#"{"data":null,"message":"Method 'POST /x' not implemented"}"#
        ),
        PveError::NotImplemented { .. }
    ));
}

#[test]
fn task_states_follow_exitstatus() {
    assert_eq!(TaskState::from_status("running", None), TaskState::Running);
    assert_eq!(TaskState::from_status("stopped", Some("OK")), TaskState::Ok);
    assert_eq!(
        TaskState::from_status("stopped", Some("WARNINGS: 3")),
        TaskState::Warnings(3)
    );
    assert_eq!(
        TaskState::from_status("stopped", Some("job errors")),
        TaskState::Failed("job errors".into())
    );
    assert_eq!(
        TaskState::from_status("stopped", Some("WARNINGS: x")),
        TaskState::Failed("WARNINGS: x".into())
    );
    assert_eq!(
        TaskState::from_status("stopped", None),
        TaskState::Failed("unexpected status".into())
    );
}

#[test]
fn archive_volid_is_found_in_vzdump_logs() {
    let dir = [
        "INFO: starting new backup job: vzdump 100 --storage local",
        "INFO: creating vzdump archive '/var/lib/vz/dump/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst'",
    ];
    assert_eq!(
        archive_volid_from_log(dir, "local").as_deref(),
        Some("local:backup/vzdump-lxc-100-2026_05_01-10_00_00.tar.zst")
    );
    let tmp =
        ["INFO: creating vzdump archive '/mnt/b/dump/vzdump-lxc-100-2026_05_01-10_00_00.tar.dat'"];
    assert_eq!(
        archive_volid_from_log(tmp, "b").as_deref(),
        Some("b:backup/vzdump-lxc-100-2026_05_01-10_00_00.tar")
    );
    let pbs = ["INFO: creating Proxmox Backup Server archive 'ct/100/2026-05-01T10:00:00Z'"];
    assert_eq!(
        archive_volid_from_log(pbs, "pbs1").as_deref(),
        Some("pbs1:backup/ct/100/2026-05-01T10:00:00Z")
    );
    assert_eq!(
        archive_volid_from_log(["INFO: status = running"], "local"),
        None
    );
}

#[test]
fn a_share_is_sent_as_proxmox_types_it_and_bounded_first() {
    let mut update = ConfigUpdate::default();
    update.set.cpuunits = Some(250);
    update.set.cpulimit = Some(crate::Thousandths(1_500));
    let mut net = NetConfig::new("eth0", "vmbr0");
    net.rate = Some(crate::Thousandths(12_500));
    update.set.net.insert(0, net);
    let params = update.params(Op::UpdateConfig).expect("valid");
    let get = |k: &str| {
        params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("cpuunits"), Some("250"));
    assert_eq!(get("cpulimit"), Some("1.5"));
    assert_eq!(get("net0"), Some("name=eth0,bridge=vmbr0,rate=12.5"));
    for (units, limit, field) in [
        (Some(500_001), None, "cpuunits"),
        (None, Some(crate::Thousandths(8_192_001)), "cpulimit"),
    ] {
        let bad = ConfigUpdate {
            set: CtOptions {
                cpuunits: units,
                cpulimit: limit,
                ..CtOptions::default()
            },
            ..ConfigUpdate::default()
        };
        assert!(
            matches!(bad.params(Op::UpdateConfig), Err(PveError::InvalidRequest { field: f, .. }) if f == field),
            "{field}"
        );
    }
}

#[test]
fn requests_refuse_bad_values_before_sending() {
    let empty = ConfigUpdate::default();
    assert!(matches!(
        empty.params(Op::UpdateConfig),
        Err(PveError::InvalidRequest { field: "set", .. })
    ));
    let bad_digest = ConfigUpdate {
        delete: vec!["net1".into()],
        digest: Some("zz".into()),
        ..Default::default()
    };
    assert!(matches!(
        bad_digest.params(Op::UpdateConfig),
        Err(PveError::InvalidRequest {
            field: "digest",
            ..
        })
    ));
    let mut dump = VzdumpRequest::new(Vmid::new(100).unwrap(), StorageId::new("local").unwrap());
    for bad in ["{{unknown}}", "two\nlines", "bad \\t escape", "{{vmid"] {
        dump.notes_template = Some(bad.into());
        assert!(dump.params(Op::Vzdump).is_err(), "{bad:?} must be refused");
    }
    dump.notes_template = Some("{{guestname}} on {{node}}\\n\\\\".into());
    assert!(dump.params(Op::Vzdump).is_ok());
    let mut restore = RestoreRequest::new(
        Vmid::new(100).unwrap(),
        VolumeId::new("local:backup/a.tar").unwrap(),
        StorageId::new("local-lvm").unwrap(),
    );
    restore.options.memory = Some(8);
    assert!(matches!(
        restore.params(Op::RestoreCt, false),
        Err(PveError::InvalidRequest {
            field: "memory",
            ..
        })
    ));
    restore.options.memory = None;
    let p = restore.params(Op::RestoreCt, false).unwrap();
    assert!(
        !p.iter().any(|(k, _)| k == "force"),
        "a plain restore never sends force"
    );
    let p = restore.params(Op::RestoreCtOverwrite, true).unwrap();
    assert!(p.contains(&("force".into(), "1".into())));
}

#[test]
fn fingerprints_parse_and_format() {
    let fp = "AB:".repeat(31) + "CD";
    let bytes = parse_fingerprint(&fp).unwrap();
    assert_eq!(format_fingerprint(&bytes), fp);
    assert_eq!(parse_fingerprint(&fp.to_lowercase()).unwrap(), bytes);
    assert!(parse_fingerprint("AB:CD").is_err());
    assert!(parse_fingerprint(&"ZZ:".repeat(32)).is_err());
}

#[test]
fn client_debug_never_shows_the_secret() {
    let secret = "5f2c3a9e-secret-value-0000";
    let client = PveClient::new(PveConfig {
        base_url: "https://127.0.0.1:8006/api2/json".parse().unwrap(),
        node: NodeName::new("pve").unwrap(),
        token_id: "bosun@pve!agent".into(),
        token_secret: secrecy::SecretString::from(secret),
        trust: TlsTrust::PinnedSha256("AB:".repeat(31) + "CD"),
        policy: RetryPolicy::fast(),
    })
    .unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains(secret), "secret leaked: {shown}");
}

#[test]
fn client_setup_refuses_bad_configs() {
    let base = || PveConfig {
        base_url: "https://127.0.0.1:8006/api2/json".parse().unwrap(),
        node: NodeName::new("pve").unwrap(),
        token_id: "bosun@pve!agent".into(),
        token_secret: secrecy::SecretString::from("s"),
        trust: TlsTrust::PinnedSha256("AB:".repeat(31) + "CD"),
        policy: RetryPolicy::fast(),
    };
    let mut c = base();
    c.token_id = "bosun@pve".into();
    assert!(matches!(PveClient::new(c), Err(PveError::Setup { .. })));
    let mut c = base();
    c.base_url = "http://127.0.0.1:8006/api2/json".parse().unwrap();
    assert!(matches!(PveClient::new(c), Err(PveError::Setup { .. })));
    let mut c = base();
    c.trust = TlsTrust::CaFile("/nonexistent/ca.pem".into());
    assert!(matches!(PveClient::new(c), Err(PveError::Setup { .. })));
}

#[test]
fn catalogue_lists_every_operation_once() {
    assert_eq!(CATALOGUE.len(), Op::ALL.len());
    for (op, e) in Op::ALL.iter().zip(CATALOGUE) {
        assert_eq!(op.endpoint(), *e);
        assert!(e.path.starts_with('/'));
    }
}

#[test]
fn an_empty_lock_is_no_lock() {
    let ct: CtSummary =
        serde_json::from_value(json!({ "vmid": 101, "status": "stopped", "lock": "" })).unwrap();
    assert_eq!(ct.lock, None);
    let st: CtStatus =
        serde_json::from_value(json!({ "vmid": 101, "status": "running", "lock": " " })).unwrap();
    assert_eq!(st.lock, None);
    let st: CtStatus =
        serde_json::from_value(json!({ "vmid": 101, "status": "running", "lock": "backup" }))
            .unwrap();
    assert_eq!(st.lock.as_deref(), Some("backup"));
    let conf: CtConfig =
        serde_json::from_value(json!({ "digest": "d", "hostname": "a", "lock": "" })).unwrap();
    assert_eq!(conf.lock(), None);
    let conf: CtConfig =
        serde_json::from_value(json!({ "digest": "d", "hostname": "a", "lock": "snapshot" }))
            .unwrap();
    assert_eq!(conf.lock().as_deref(), Some("snapshot"));
}

#[test]
fn content_filter_drops_what_the_server_should_have_left_out() {
    let item = |volid: &str, content: Option<&str>, vmid: Option<u64>| ContentItem {
        volid: volid.to_owned(),
        content: content.map(str::to_owned),
        format: None,
        size: None,
        ctime: None,
        vmid,
        subtype: None,
        notes: None,
        protected: false,
        encrypted: None,
    };
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Some(Vmid::new(101).unwrap()),
    };
    assert!(filter.matches(&item("local:backup/a", Some("backup"), Some(101))));
    assert!(!filter.matches(&item("local:vztmpl/b", Some("vztmpl"), Some(101))));
    assert!(!filter.matches(&item("local:backup/c", Some("backup"), Some(102))));
    assert!(!filter.matches(&item("local:backup/d", None, Some(101))));
    assert!(!filter.matches(&item("local:backup/e", Some("backup"), None)));
    let open = ContentFilter {
        content: None,
        vmid: None,
    };
    assert!(open.matches(&item("local:iso/f", None, None)));
}

#[test]
fn net_loses_its_mac_and_keeps_the_rest() {
    let net = net_without_hwaddr(
        "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,firewall=1,type=veth",
    )
    .expect("parses");
    assert_eq!(net.hwaddr, None);
    assert_eq!(
        net.to_property_string().expect("renders"),
        "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1"
    );
    assert!(net_without_hwaddr("bridge=vmbr0").is_err());
    assert!(net_without_hwaddr("name=eth0,bridge=vmbr0,mtu=1400").is_err());
    // A rate limit is modelled (decision 0100) and kept.
    let rated = net_without_hwaddr("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,rate=12.5")
        .expect("a rate is modelled");
    assert_eq!(
        rated.to_property_string().expect("renders"),
        "name=eth0,bridge=vmbr0,rate=12.5"
    );
    assert!(net_without_hwaddr("name=eth0,bridge=vmbr0,rate=fast").is_err());
}

/// Remembers every request a client reports.
#[derive(Debug, Default)]
struct Recorder(parking_lot::Mutex<Vec<(Endpoint, RequestOutcome)>>);

impl RequestObserver for Recorder {
    fn request(&self, endpoint: Endpoint, outcome: RequestOutcome, _elapsed: Duration) {
        self.0.lock().push((endpoint, outcome));
    }
}

#[tokio::test]
async fn an_observer_hears_of_every_attempt() {
    // A port nothing listens on: every attempt is refused before it is sent.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let recorder = Arc::new(Recorder::default());
    let client = PveClient::new(PveConfig {
        base_url: format!("https://{closed}/api2/json").parse().unwrap(),
        node: NodeName::new("pve").unwrap(),
        token_id: "bosun@pve!agent".into(),
        token_secret: secrecy::SecretString::from("s"),
        trust: TlsTrust::PinnedSha256("AB:".repeat(31) + "CD"),
        policy: RetryPolicy::fast(),
    })
    .unwrap()
    .observed_by(Arc::clone(&recorder) as Arc<dyn RequestObserver>);
    assert!(matches!(
        client.version().await,
        Err(PveError::NotSent { .. })
    ));
    let heard = recorder.0.lock().clone();
    assert!(!heard.is_empty());
    assert!(
        heard
            .iter()
            .all(|&(e, o)| e == Op::Version.endpoint() && o == RequestOutcome::NotSent),
        "{heard:?}"
    );
}

#[test]
fn a_vms_lock_is_recognised_like_a_containers() {
    use crate::parse_lock_message;
    assert_eq!(
        parse_lock_message("VM is locked (backup)"),
        Some(Some("backup".to_owned()))
    );
    assert_eq!(
        parse_lock_message("can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"),
        Some(None)
    );
    assert_eq!(parse_lock_message("VM 101 not running"), None);
}
