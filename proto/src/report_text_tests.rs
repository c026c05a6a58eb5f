use serde_json::{Value, json};

use crate::delta::ReportDelta;
use crate::inert::has_control;
use crate::poll::PollRequest;
use crate::report::StateReport;

/// A window title, a screen clear, the C1 CSI and a bell: what a compromised host sent.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31mOK\u{7f}";

fn example() -> Value {
    serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap()
}

fn report(value: Value) -> StateReport {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_control_character_in_a_name_refuses_the_report_and_names_the_field() {
    let base = example()["report"].clone();
    report(base.clone()).validate().unwrap();
    for (path, field) in [
        ("/guests/0/hostname", "guests[0].hostname"),
        ("/storage/1/durable_id", "storage[1].durable_id"),
        ("/last_backups/0/target", "last_backups[0].target"),
        ("/versions/pve", "versions.pve"),
        ("/versions/controller", "versions.controller"),
        ("/audit/1/action", "audit[1].action"),
    ] {
        let mut hostile = base.clone();
        *hostile.pointer_mut(path).unwrap() = json!(format!("x{HOSTILE}"));
        let err = report(hostile).validate().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(err.to_string().contains("control characters"), "{err}");
    }
}

#[test]
fn free_form_words_are_kept_with_every_control_character_made_visible() {
    let mut value = example()["report"].clone();
    value["last_restore_test"]["detail"] = json!(format!("check said: {HOSTILE}"));
    value["restore_tests"] = json!([value["last_restore_test"].clone()]);
    value["last_backups"][0]["error"] = json!(HOSTILE);
    value["storage"][1]["detail"] = json!(HOSTILE);
    value["audit"][0]["detail"] = json!({"why": HOSTILE, HOSTILE: [HOSTILE]});
    let mut hostile = report(value);
    // Free-form words do not refuse the heartbeat.
    hostile.validate().unwrap();
    hostile.make_inert();
    let stored = serde_json::to_string(&hostile).unwrap();
    let back: Value = serde_json::from_str(&stored).unwrap();
    assert!(!has_control(&all_strings(&back)), "{stored}");
    assert_eq!(
        hostile.last_restore_test.as_ref().unwrap().detail,
        "check said: \\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31mOK\\x7f"
    );
    assert_eq!(
        hostile.restore_tests[0].detail,
        hostile.last_restore_test.as_ref().unwrap().detail
    );
}

#[test]
fn a_delta_is_held_to_the_same_rules() {
    let mut value: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request-delta.json")).unwrap();
    let delta = value["delta"].clone();
    let mut bad = delta.clone();
    bad["guests"] = json!([{"vmid": 7, "hostname": HOSTILE, "status": "running"}]);
    let err = serde_json::from_value::<ReportDelta>(bad)
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(err.field(), "guests[0].hostname");

    value["delta"]["last_restore_test"] = json!({
        "guest_id": "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10",
        "finished_at": "2026-11-18T03:20:00Z",
        "passed": false,
        "duration_seconds": 3,
        "detail": HOSTILE,
    });
    value["operations"] = json!([{
        "op_id": "0193a0a0-0000-7000-8000-000000000001",
        "kind": "backup",
        "status": "failed",
        "error": HOSTILE,
        "started_at": "2026-11-20T01:00:00Z",
        "steps": [{
            "seq": 1, "name": "vzdump", "state": "failed", "error": HOSTILE,
            "detail": {"said": HOSTILE}, "intent_at": "2026-11-20T01:00:00Z",
        }],
    }]);
    let mut poll: PollRequest = serde_json::from_value(value).unwrap();
    poll.validate().unwrap();
    poll.make_inert();
    let back = serde_json::to_value(&poll).unwrap();
    assert!(!has_control(&all_strings(&back)), "{back}");
}

/// Every string of a JSON value, keys included, joined.
fn all_strings(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(all_strings).collect(),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k}{}", all_strings(v)))
            .collect(),
        _ => String::new(),
    }
}
