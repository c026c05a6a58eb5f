use serde_json::{Value, json};

use super::*;

fn document() -> Value {
    serde_json::from_str(include_str!("../../docs/proto/desired.json")).expect("the example")
}

/// The example's guest, renamed, with `kind` set (or left out when `None`).
fn guest(base: &Value, id: u128, hostname: &str, kind: Option<Value>) -> Value {
    let mut g = base["guests"][0].clone();
    g["guest_id"] = json!(Uuid::from_u128(id));
    g["hostname"] = json!(hostname);
    g.as_object_mut().expect("a guest").remove("vmid");
    if let Some(kind) = kind {
        g["kind"] = kind;
    }
    g
}

#[test]
fn an_unknown_kind_refuses_that_guest_and_the_others_still_decode() {
    let mut doc = document();
    doc["guests"] = json!([
        guest(&doc, 1, "web", None),
        guest(&doc, 2, "vm-odd", Some(json!("bhyve"))),
        guest(&doc, 3, "vm-shop", Some(json!("qemu"))),
        guest(&doc, 4, "db", Some(json!("lxc"))),
    ]);
    // Today's decoder refuses the whole document.
    assert!(serde_json::from_value::<DesiredState>(doc.clone()).is_err());

    let parsed = parse(doc).expect("the rest decodes");
    parsed.state.validate().expect("the rest is valid");
    let names: Vec<_> = parsed
        .state
        .guests
        .iter()
        .map(|g| (g.hostname.as_str(), g.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("web", GuestKind::Lxc),
            ("vm-shop", GuestKind::Qemu),
            ("db", GuestKind::Lxc)
        ]
    );
    assert_eq!(parsed.refused.len(), 1);
    let r = &parsed.refused[0];
    assert_eq!(r.kind, RefusedKind::GuestField);
    assert_eq!(r.name, "vm-odd");
    assert_eq!(r.guest_id, Some(Uuid::from_u128(2)));
    assert_eq!(r.field.as_deref(), Some("kind"));
    assert!(r.reason.contains("\"bhyve\""), "{}", r.reason);
    assert!(r.reason.contains("lxc, qemu"), "{}", r.reason);
    crate::refused::check("refused", &parsed.refused).expect("a report may carry it");
}

#[test]
fn a_document_of_known_kinds_decodes_as_before() {
    let mut doc = document();
    doc["guests"] = json!([
        guest(&doc, 1, "web", None),
        guest(&doc, 3, "vm-shop", Some(json!("qemu"))),
    ]);
    let before = serde_json::from_value::<DesiredState>(doc.clone()).expect("decodes");
    let parsed = parse(doc).expect("decodes");
    assert_eq!(parsed.state, before);
    assert!(parsed.refused.is_empty());
}

#[test]
fn a_kind_that_is_no_string_or_hostile_text_is_refused_and_quoted_inert() {
    let mut doc = document();
    let long = format!("\u{1b}[2J{}", "é".repeat(40));
    doc["guests"] = json!([
        guest(&doc, 1, "web", Some(json!(7))),
        guest(&doc, 2, "bad host\u{7}", Some(json!(null))),
        guest(&doc, 3, "shop", Some(json!(long))),
        guest(&doc, 4, "db", Some(json!("LXC"))),
    ]);
    doc["guests"][1]["guest_id"] = json!("not a uuid");
    let parsed = parse(doc).expect("decodes");
    assert!(parsed.state.guests.is_empty());
    let names: Vec<_> = parsed.refused.iter().map(|r| r.name.as_str()).collect();
    // A hostname that is no hostname and an id that is no id leave the guest's place.
    assert_eq!(names, ["web", "guests[1]", "shop", "db"]);
    assert!(parsed.refused[0].reason.contains("\"7\""));
    assert!(parsed.refused[1].reason.contains("\"null\""));
    let shop = &parsed.refused[2].reason;
    assert!(!crate::inert::has_control(shop), "{shop:?}");
    assert!(shop.len() < 200, "the kind is cut: {shop}");
    crate::refused::check("refused", &parsed.refused).expect("a report may carry them");
}

#[test]
fn refusals_are_bounded_but_every_unknown_guest_is_taken_out() {
    let mut doc = document();
    let many: Vec<Value> = (0..MAX_REFUSED as u128 + 10)
        .map(|i| guest(&doc, i + 1, &format!("g{i}"), Some(json!("bhyve"))))
        .collect();
    doc["guests"] = json!(many);
    let parsed = parse(doc).expect("decodes");
    assert!(parsed.state.guests.is_empty());
    assert_eq!(parsed.refused.len(), MAX_REFUSED);
}

#[test]
fn a_document_that_is_no_desired_state_is_still_an_error() {
    assert!(parse(json!({ "guests": "none" })).is_err());
    assert!(parse(json!([])).is_err());
}
