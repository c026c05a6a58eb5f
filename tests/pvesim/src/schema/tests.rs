use super::*;

fn one(s: &str) -> RawValue {
    RawValue::One(s.to_owned())
}

#[test]
fn vmid_below_100_fails_with_the_format_message_not_the_minimum() {
    let err = check_value(&ParamKind::VmId, &one("99")).expect_err("99 is invalid");
    assert_eq!(
        err,
        "invalid format - value does not look like a valid VM ID\n"
    );
    assert_eq!(
        check_value(&ParamKind::VmId, &one("100")).as_deref(),
        Ok("100")
    );
}

#[test]
fn booleans_are_only_0_or_1_at_the_top_level() {
    let err = check_value(&BOOL, &one("true")).expect_err("true is rejected");
    assert_eq!(err, "type check ('boolean') failed - got 'true'\n");
    assert_eq!(
        check_value(&BOOL, &RawValue::JsonBool(true)).as_deref(),
        Ok("1")
    );
}

#[test]
fn booleans_inside_property_strings_accept_yes_on_true() {
    let parsed = parse_prop_string(&FEATURES, "nesting=yes,keyctl=on").expect("valid");
    assert_eq!(parsed.get("nesting").map(String::as_str), Some("1"));
    let err = parse_prop_string(&FEATURES, "bogus=1").expect_err("unknown key");
    assert_eq!(err, "invalid key in comma-separated list property: bogus");
    let err = parse_prop_string(&FEATURES, "nesting=1,nesting=0").expect_err("dup");
    assert_eq!(
        err,
        "duplicate key in comma-separated list property: nesting"
    );
}

#[test]
fn enum_and_range_messages_match_pve() {
    let err = check_value(
        &ParamKind::Enum(&["snapshot", "suspend", "stop"]),
        &one("x"),
    )
    .expect_err("not in enum");
    assert_eq!(
        err,
        "value 'x' does not have a value in the enumeration 'snapshot, suspend, stop'\n"
    );
    let mem = ParamKind::Int {
        min: Some(16),
        max: None,
    };
    assert_eq!(
        check_value(&mem, &one("8")).expect_err("below min"),
        "value must have a minimum value of 16\n"
    );
    assert_eq!(
        check_value(&mem, &one("abc")).expect_err("not int"),
        "type check ('integer') failed - got 'abc'\n"
    );
}

#[test]
fn storage_and_config_ids() {
    assert_eq!(
        check_value(&ParamKind::StorageId, &one("a")).expect_err("short"),
        "invalid format - storage ID 'a' cannot be shorter than 2 characters\n"
    );
    assert_eq!(
        check_value(&ParamKind::ConfigId { max_len: 40 }, &one("1abc")).expect_err("bad"),
        "invalid format - invalid configuration ID '1abc'\n"
    );
    let long = "a".repeat(41);
    assert_eq!(
        check_value(&ParamKind::ConfigId { max_len: 40 }, &one(&long)).expect_err("long"),
        "value may only be 40 characters long\n"
    );
}

#[test]
fn indexed_names_match_within_their_range() {
    let spec = opt("net[n]", STR);
    assert!(spec.matches("net0"));
    assert!(spec.matches("net31"));
    assert!(!spec.matches("net32"));
    assert!(!spec.matches("net"));
    assert!(!spec.matches("netx"));
}

#[test]
fn sizes_parse_base_1024_and_bare_numbers_are_bytes() {
    assert_eq!(parse_size("8G"), Some(8 << 30));
    assert_eq!(parse_size("512M"), Some(512 << 20));
    assert_eq!(parse_size("1024"), Some(1024));
    assert_eq!(parse_size("1.5K"), Some(1536));
    assert_eq!(parse_size("3X"), None);
    assert_eq!(format_size(8 << 30), "8G");
    assert_eq!(format_size(1536), "1536");
}

#[test]
fn startup_takes_what_pve_parses_and_refuses_the_rest_with_its_message() {
    for ok in [
        "order=1,up=0,down=60",
        "3",
        "down=60,up=5,order=2",
        "up=5",
        "order=1,",
    ] {
        assert!(
            check_value(&ParamKind::StartupOrder, &one(ok)).is_ok(),
            "{ok:?}"
        );
    }
    for bad in ["order=x", "order=1,sideways=2", "up=-1", "order=1;up=2"] {
        assert_eq!(
            check_value(&ParamKind::StartupOrder, &one(bad)).expect_err(bad),
            "invalid format - unable to parse startup options\n"
        );
    }
}
