use jiff::tz::TimeZone;
use proptest::prelude::*;

use super::*;

// A fixed ed25519 public key (from ssh-key's documentation example).
const ED: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti";

fn parse(text: &str) -> Result<AllowedSigners, AllowedSignersError> {
    AllowedSigners::parse_in(text, &TimeZone::UTC)
}

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn parses_principals_options_key_and_comment() {
    let text = format!(
        "# header\n\n   \n\"a@x.org,b@x.org\" namespaces=\"bosun-job@v1,file\",VALID-AFTER=\"20260102\",valid-before=\"202701021530Z\" {ED} laptop key\nc@x.org {ED}\n"
    );
    let list = parse(&text).unwrap();
    assert_eq!(list.entries().len(), 2);
    let first = &list.entries()[0];
    assert_eq!(first.line(), 4);
    assert_eq!(first.principals(), "a@x.org,b@x.org");
    assert_eq!(first.namespaces(), Some("bosun-job@v1,file"));
    assert_eq!(first.valid_after(), Some(ts("2026-01-02T00:00:00Z")));
    assert_eq!(first.valid_before(), Some(ts("2027-01-02T15:30:00Z")));
    assert_eq!(first.key().comment(), "laptop key");
    assert!(first.fingerprint().starts_with("SHA256:"));
    let second = &list.entries()[1];
    assert_eq!(
        (second.line(), second.principals(), second.namespaces()),
        (5, "c@x.org", None)
    );
    assert!(second.allows_namespace("anything"));
}

#[test]
fn local_times_use_the_given_zone() {
    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    let list = AllowedSigners::parse_in(&format!("a valid-after=\"20260601120000\" {ED}"), &berlin)
        .unwrap();
    assert_eq!(
        list.entries()[0].valid_after(),
        Some(ts("2026-06-01T10:00:00Z"))
    );
}

#[test]
fn refuses_bad_lines_with_their_number() {
    type Case = (String, fn(&AllowedSignersError) -> bool);
    let cases: Vec<Case> = vec![
        ("a".into(), |e| {
            matches!(e, AllowedSignersError::MissingKey { line: 1 })
        }),
        ("a namespaces=\"x\"".into(), |e| {
            matches!(e, AllowedSignersError::MissingKey { line: 1 })
        }),
        (format!("\"a {ED}"), |e| {
            matches!(e, AllowedSignersError::UnterminatedQuote { line: 1 })
        }),
        (format!("a cert-authority {ED}"), |e| {
            matches!(e, AllowedSignersError::CertAuthorityUnsupported { line: 1 })
        }),
        (format!("a Cert-Authority,namespaces=\"x\" {ED}"), |e| {
            matches!(e, AllowedSignersError::CertAuthorityUnsupported { .. })
        }),
        (format!("a no-touch-required {ED}"), |e| {
            matches!(e, AllowedSignersError::UnknownOption { .. })
        }),
        (format!("a namespaces=\"x\",namespaces=\"y\" {ED}"), |e| {
            matches!(
                e,
                AllowedSignersError::DuplicateOption {
                    option: "namespaces",
                    ..
                }
            )
        }),
        (format!("a namespaces=\"\" {ED}"), |e| {
            matches!(
                e,
                AllowedSignersError::MissingOptionValue {
                    option: "namespaces",
                    ..
                }
            )
        }),
        (format!("a valid-after {ED}"), |e| {
            matches!(
                e,
                AllowedSignersError::MissingOptionValue {
                    option: "valid-after",
                    ..
                }
            )
        }),
        (format!("a valid-after=\"2026\" {ED}"), |e| {
            matches!(
                e,
                AllowedSignersError::BadTime {
                    option: "valid-after",
                    ..
                }
            )
        }),
        (format!("a valid-before=\"20261332\" {ED}"), |e| {
            matches!(e, AllowedSignersError::BadTime { .. })
        }),
        (format!("a valid-before=\"2026010112:0\" {ED}"), |e| {
            matches!(e, AllowedSignersError::BadTime { .. })
        }),
        ("a ssh-ed25519 AAAA!!".into(), |e| {
            matches!(e, AllowedSignersError::InvalidKey { line: 1, .. })
        }),
        ("a ssh-ed25519-cert-v01@openssh.com AAAA".into(), |e| {
            matches!(e, AllowedSignersError::UnsupportedKeyType { .. })
        }),
        ("a ssh-foo AAAA".into(), |e| {
            matches!(
                e,
                AllowedSignersError::UnsupportedKeyType { .. }
                    | AllowedSignersError::InvalidKey { .. }
            )
        }),
        (format!("ok {ED}\n# c\nb x y"), |e| {
            matches!(
                e,
                AllowedSignersError::InvalidKey { line: 3, .. }
                    | AllowedSignersError::UnsupportedKeyType { line: 3, .. }
                    | AllowedSignersError::UnknownOption { line: 3, .. }
            )
        }),
    ];
    for (text, expected) in cases {
        let err = parse(&text).unwrap_err();
        assert!(expected(&err), "{text:?} gave {err:?}");
        assert!(err.to_string().contains("line"), "{err}");
    }
}

#[test]
fn pattern_matching_follows_openssh() {
    assert!(match_pattern("bosun-job@v1", "bosun-job@v1"));
    assert!(match_pattern("bosun-job@v1", "bosun-*"));
    assert!(match_pattern("bosun-job@v1", "*@v?"));
    assert!(match_pattern("", "*"));
    assert!(!match_pattern("bosun-job@v1", "bosun-job@v"));
    assert!(!match_pattern("bosun-job@v1", "?"));
    assert!(match_pattern("aXbXc", "a*b*c"));
    assert!(!match_pattern("abc", "a*d"));
    assert!(match_pattern_list("file", "git,file"));
    assert!(!match_pattern_list("ssh", "git,file"));
    assert!(!match_pattern_list("bosun-job@v1", "*,!bosun-*"));
    assert!(
        !match_pattern_list("x", "!y"),
        "a list of only negations matches nothing"
    );
    assert!(!match_pattern_list("x", ""));
}

proptest! {
    #[test]
    fn parser_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn parser_never_panics_on_near_valid_lines(
        principals in "[a-z@.,\"*]{0,12}",
        options in "[a-zA-Z=\",\\-0-9Z]{0,40}",
    ) {
        let _ = parse(&format!("{principals} {options} {ED}"));
    }

    #[test]
    fn star_matches_everything(text in "\\PC{0,40}") {
        prop_assert!(match_pattern(&text, "*"));
        prop_assert!(match_pattern(&text, &text.replace(['*', '?'], "?")));
    }
}
