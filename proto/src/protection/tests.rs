use jiff::{SignedDuration, Timestamp};

use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn hours(h: i64) -> SignedDuration {
    SignedDuration::from_hours(h)
}

#[test]
fn overdue_is_twice_the_interval_after_the_newest_success() {
    let ok = at("2026-01-01T00:00:00Z");
    let j = judge(Some(ok), Some(at("2025-01-01T00:00:00Z")), hours(1), ok);
    assert_eq!(
        j.counted_from,
        Some(ok),
        "the success wins over first expected"
    );
    assert_eq!(j.overdue_at, Some(at("2026-01-01T02:00:00Z")));
    assert!(!j.overdue);
    // Exactly at the limit is not overdue yet; a moment after it is.
    assert!(!judge(Some(ok), None, hours(1), at("2026-01-01T02:00:00Z")).overdue);
    assert!(judge(Some(ok), None, hours(1), at("2026-01-01T02:00:01Z")).overdue);
    // One missed run is the grace: an interval and a half later is not overdue.
    assert!(!judge(Some(ok), None, hours(24), at("2026-01-02T12:00:00Z")).overdue);
}

#[test]
fn without_a_success_it_counts_from_when_it_was_first_expected() {
    let since = at("2026-01-01T00:00:00Z");
    assert!(!judge(None, Some(since), hours(1), at("2026-01-01T01:59:59Z")).overdue);
    let j = judge(None, Some(since), hours(1), at("2026-01-01T02:00:01Z"));
    assert!(j.overdue);
    assert_eq!(j.counted_from, Some(since));
    // Nothing known: never overdue, nothing to count from.
    let j = judge(None, None, hours(1), at("2030-01-01T00:00:00Z"));
    assert_eq!(
        j,
        Judgment {
            counted_from: None,
            overdue_at: None,
            overdue: false
        }
    );
}

#[test]
fn huge_intervals_saturate_instead_of_wrapping() {
    let ok = at("2026-01-01T00:00:00Z");
    assert_eq!(overdue_limit(SignedDuration::MAX), SignedDuration::MAX);
    assert_eq!(overdue_at(ok, SignedDuration::MAX), Timestamp::MAX);
    assert!(!judge(Some(ok), None, SignedDuration::MAX, Timestamp::MAX).overdue);
}

#[test]
fn the_cadence_is_the_longest_gap_between_occurrences() {
    let now = at("2026-03-04T10:00:00Z");
    assert_eq!(cadence("daily", now), Some(hours(24)));
    assert_eq!(cadence("hourly", now), Some(hours(1)));
    assert_eq!(cadence("mon..fri 02:00", now), Some(hours(72)));
    assert_eq!(cadence("not a schedule", now), None);
}

fn item(overdue: bool) -> ProtectionItem {
    ProtectionItem {
        kind: ProtectionKind::Verification,
        tier: Some(1),
        target: "backup@pbs!bosun@pbs.example:8007:store1".to_owned(),
        promised_by: PromisedBy::SignedPlan,
        interval_s: 3600,
        last_at: None,
        last_result: Some(ProtectionResult::Error),
        detail: Some("the target's sealed credentials are not at hand".to_owned()),
        last_ok_at: None,
        counted_from: None,
        overdue_at: None,
        overdue,
    }
}

fn protection(items: Vec<ProtectionItem>) -> GuestProtection {
    GuestProtection {
        guest_id: uuid::Uuid::nil(),
        vmid: 101,
        at: at("2026-01-01T00:00:00Z"),
        plan_serial: Some(3),
        overdue: items.iter().any(|i| i.overdue),
        items,
    }
}

#[test]
fn an_answer_is_bounded_printable_and_consistent() {
    protection(vec![item(true), item(false)])
        .validate()
        .unwrap();
    let too_many = protection((0..=MAX_ITEMS).map(|_| item(false)).collect());
    assert!(too_many.validate().is_err());
    let mut hiding = protection(vec![item(true)]);
    hiding.overdue = false;
    assert!(hiding.validate().is_err(), "overdue must follow the items");
    let mut control = item(false);
    control.detail = Some("ok\u{1b}[2J".to_owned());
    assert!(protection(vec![control]).validate().is_err());
    let mut long = item(false);
    long.detail = Some("é".repeat(MAX_DETAIL_CHARS + 1));
    assert!(protection(vec![long]).validate().is_err());
    let mut target = item(false);
    target.target = "t".repeat(MAX_TARGET_BYTES + 1);
    assert!(protection(vec![target]).validate().is_err());
    let mut zero = item(false);
    zero.interval_s = 0;
    assert!(protection(vec![zero]).validate().is_err());
}

#[test]
fn details_are_kept_printable_and_short() {
    assert_eq!(bounded_detail("a\nb"), Some("a b".to_owned()));
    assert_eq!(bounded_detail("  \n"), None);
    let long = bounded_detail(&"x".repeat(500)).unwrap();
    assert_eq!(long.chars().count(), MAX_DETAIL_CHARS);
}

#[test]
fn an_unknown_result_from_a_newer_agent_still_reads() {
    let text = r#"{"kind":"backup","target":"local","promised_by":"signed_plan","interval_s":60,"last_result":"exploded","overdue":false}"#;
    let item: ProtectionItem = serde_json::from_str(text).unwrap();
    assert_eq!(item.last_result, Some(ProtectionResult::Unknown));
}
