use super::*;

fn node() -> HostCapabilities {
    HostCapabilities {
        arch: "x86_64".into(),
        cpu_model: Some("AMD EPYC 7302P 16-Core Processor".into()),
        cpu_count: 32,
        cpu_sockets: Some(1),
        pve_version: Some("pve-manager/9.1.1/42db4a6cf33dac83".into()),
        storage_kinds: vec!["dir".into(), "lvmthin".into(), "pbs".into()],
        plan_targets: vec!["offsite-pbs".into()],
        interfaces: vec![
            Interface {
                name: "eno1".into(),
                kind: InterfaceKind::Nic,
                mac: Some("0c:c4:7a:12:34:56".into()),
                state: LinkState::Up,
                speed_mbps: Some(10_000),
            },
            Interface {
                name: "vmbr0".into(),
                kind: InterfaceKind::Bridge,
                mac: None,
                state: LinkState::Up,
                speed_mbps: None,
            },
        ],
        helper: true,
        tunnel: false,
        smart: true,
        address_pool: Some(true),
    }
}

#[test]
fn a_plain_description_passes_and_flattens_to_its_words() {
    let caps = node();
    caps.validate().expect("valid");
    let tags: Vec<String> = caps.tags().into_iter().collect();
    assert_eq!(
        tags,
        [
            "addresses",
            "arch=x86_64",
            "bridge=vmbr0",
            "helper",
            "nic=eno1",
            "pve=9",
            "smart",
            "storage=dir",
            "storage=lvmthin",
            "storage=pbs",
            "target=offsite-pbs",
        ]
    );
    for tag in &tags {
        check_capability("capability", tag).expect("every word is one the filter takes");
    }
}

#[test]
fn hostile_values_are_refused_with_the_field_named() {
    type Edit = Box<dyn Fn(&mut HostCapabilities)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|c| c.cpu_model = Some("Evil\u{1b}]0;pwned\u{7}".into())),
            "capabilities.cpu_model",
        ),
        (
            Box::new(|c| c.pve_version = Some("9\u{9b}2J".into())),
            "capabilities.pve_version",
        ),
        (
            Box::new(|c| c.cpu_model = Some("x".repeat(MAX_CPU_MODEL + 1))),
            "capabilities.cpu_model",
        ),
        (
            Box::new(|c| c.arch = "<b>x86</b>".into()),
            "capabilities.arch",
        ),
        (
            Box::new(|c| c.storage_kinds = vec!["dir".into(); MAX_STORAGE_KINDS + 1]),
            "capabilities.storage_kinds",
        ),
        (
            Box::new(|c| c.storage_kinds = vec!["zfs pool".into()]),
            "capabilities.storage_kinds[0]",
        ),
        (
            Box::new(|c| c.plan_targets = vec!["<script>".into()]),
            "capabilities.plan_targets[0]",
        ),
        (
            Box::new(|c| {
                c.interfaces = (0..=MAX_INTERFACES)
                    .map(|i| Interface {
                        name: format!("eth{i}"),
                        kind: InterfaceKind::Nic,
                        mac: None,
                        state: LinkState::Unknown,
                        speed_mbps: None,
                    })
                    .collect();
            }),
            "capabilities.interfaces",
        ),
        (
            Box::new(|c| c.interfaces[0].name = "eno1<img src=x>".into()),
            "capabilities.interfaces[0].name",
        ),
        (
            Box::new(|c| c.interfaces[0].name = "-eno1".into()),
            "capabilities.interfaces[0].name",
        ),
        (
            Box::new(|c| c.interfaces[0].mac = Some("0C:C4:7A:12:34:56".into())),
            "capabilities.interfaces[0].mac",
        ),
        (
            Box::new(|c| c.interfaces[0].speed_mbps = Some(MAX_SPEED_MBPS + 1)),
            "capabilities.interfaces[0].speed_mbps",
        ),
        (
            Box::new(|c| c.interfaces[1].name = "eno1".into()),
            "capabilities.interfaces",
        ),
    ];
    for (edit, field) in cases {
        let mut caps = node();
        edit(&mut caps);
        let err = caps.validate().expect_err(field);
        assert_eq!(err.field(), field, "{err}");
    }
}

#[test]
fn markup_in_free_text_is_data_not_an_error() {
    let mut caps = node();
    caps.cpu_model = Some("<script>alert(1)</script> & \"co\"".into());
    caps.validate()
        .expect("visible characters are the host's word, escaped where shown");
}

#[test]
fn labels_are_bounded_and_say_their_rule() {
    assert!(parse_label("label", "site=fra-1").is_ok());
    assert!(parse_label("label", "team/owner=ops.core_2").is_ok());
    let err = parse_label("label", "Site=x").expect_err("upper-case key");
    assert!(err.to_string().contains("a-z 0-9"), "{err}");
    let err = parse_label("label", "site=a b").expect_err("space in value");
    assert!(err.to_string().contains("label value"), "{err}");
    // An empty value is the value's fault, not the label's.
    let err = parse_label("label", "site=").expect_err("empty value");
    assert!(
        err.to_string().contains("`site=` gives the label no value"),
        "{err}"
    );
    let err = parse_label("label", "=fra").expect_err("empty key");
    assert!(matches!(err, ValidationError::Empty { .. }), "{err}");
    let err = parse_label("label", "site").expect_err("no =");
    assert!(err.to_string().contains("key=value"), "{err}");
    let long = format!("k={}", "v".repeat(MAX_LABEL_VALUE + 1));
    assert!(matches!(
        parse_label("label", &long),
        Err(ValidationError::TooLong { max: 63, .. })
    ));
    assert!(parse_label("label", "-k=v").is_err());
    assert!(parse_label("label", "k=\u{1b}[2J").is_err());
}

#[test]
fn a_label_change_sets_or_removes_within_bounds() {
    let mut change = LabelChange::default();
    assert!(change.validate().is_err(), "an empty change says nothing");
    change.set.insert("site".into(), "fra".into());
    change.remove.push("rack".into());
    change.validate().expect("valid");
    change.remove.push("site".into());
    assert!(matches!(
        change.validate(),
        Err(ValidationError::Duplicate { .. })
    ));
    let many = LabelChange {
        set: (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), "v".to_owned()))
            .collect(),
        remove: Vec::new(),
    };
    assert!(matches!(
        many.validate(),
        Err(ValidationError::TooLong { .. })
    ));
}

#[test]
fn capability_words_are_checked() {
    for good in [
        "helper",
        "arch=x86_64",
        "bridge=vmbr0",
        "pve=9",
        "target=nas.1",
    ] {
        check_capability("capability", good).expect(good);
    }
    for bad in ["", "Helper", "arch=", "bridge=vm br0", "x=<b>", "a=\u{1b}"] {
        assert!(check_capability("capability", bad).is_err(), "{bad:?}");
    }
}

#[test]
fn an_agent_without_a_pool_says_so_and_one_that_does_not_say_is_read_as_unknown() {
    let mut caps = node();
    caps.address_pool = Some(false);
    assert!(!caps.tags().contains("addresses"));
    let wire = serde_json::to_value(&caps).unwrap();
    assert_eq!(wire["address_pool"], serde_json::json!(false));
    let mut older = wire;
    older.as_object_mut().unwrap().remove("address_pool");
    let read: HostCapabilities = serde_json::from_value(older).unwrap();
    assert_eq!(
        read.address_pool, None,
        "an agent that does not say is not said to lack one"
    );
}
