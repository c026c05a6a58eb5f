#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

use bosun_proto::protection::{
    GuestProtection, PromisedBy, ProtectionItem, ProtectionKind, ProtectionResult,
};
use jiff::{SignedDuration, Timestamp};

use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn answer() -> GuestProtection {
    let now = at("2026-03-04T10:00:00Z");
    GuestProtection {
        guest_id: uuid::Uuid::from_u128(7),
        vmid: 101,
        at: now,
        plan_serial: Some(4),
        overdue: true,
        items: vec![
            ProtectionItem {
                kind: ProtectionKind::Backup,
                tier: Some(0),
                target: "local".into(),
                promised_by: PromisedBy::SignedPlan,
                interval_s: 86_400,
                last_at: Some(now - SignedDuration::from_mins(125)),
                last_result: Some(ProtectionResult::Ok),
                detail: None,
                last_ok_at: Some(now - SignedDuration::from_mins(125)),
                counted_from: Some(now - SignedDuration::from_mins(125)),
                overdue_at: Some(now + SignedDuration::from_hours(46)),
                overdue: false,
            },
            ProtectionItem {
                kind: ProtectionKind::Verification,
                tier: Some(1),
                // A hostile agent or storage name trying to drive the terminal.
                target: "pbs\u{1b}]0;owned\u{7}".into(),
                promised_by: PromisedBy::SignedPlan,
                interval_s: 3600,
                last_at: Some(now - SignedDuration::from_secs(20)),
                last_result: Some(ProtectionResult::Error),
                detail: Some("no credentials\u{9b}2J".into()),
                last_ok_at: None,
                counted_from: Some(now - SignedDuration::from_hours(3)),
                overdue_at: Some(now - SignedDuration::from_hours(1)),
                overdue: true,
            },
        ],
    }
}

#[test]
fn durations_read_as_their_two_largest_units() {
    assert_eq!(human(SignedDuration::from_secs(0)), "0s");
    assert_eq!(human(SignedDuration::from_secs(42)), "42s");
    assert_eq!(human(SignedDuration::from_mins(125)), "2h 5m");
    assert_eq!(human(SignedDuration::from_hours(24)), "1d");
    assert_eq!(
        human(SignedDuration::from_secs(3 * 86_400 + 4 * 3600 + 59)),
        "3d 4h"
    );
}

#[test]
fn status_names_every_item_and_what_is_overdue() {
    let text = render(&answer());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].contains("signed data plan (serial 4)"), "{text}");
    assert_eq!(lines[1], "OVERDUE: 1 of 2 items");
    assert_eq!(
        lines[2],
        "- backup, tier 0 on local: every 1d (signed plan); last ok 2h 5m ago; overdue in 1d 22h"
    );
    assert!(
        lines[3].starts_with("- verification, tier 1 on pbs\\x1b]0;owned\\x07: every 1h (signed plan); never ok; last run could not run 20s ago: no credentials\\u{9b}2J; OVERDUE since 1h ago"),
        "{}",
        lines[3]
    );
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert_eq!(exit_status(&answer()), EXIT_OVERDUE);
}

#[test]
fn nothing_overdue_exits_zero() {
    let mut p = answer();
    p.items.truncate(1);
    p.overdue = false;
    p.plan_serial = None;
    let text = render(&p);
    assert!(text.contains("no signed data plan"), "{text}");
    assert!(text.contains("nothing overdue (1 items)"), "{text}");
    assert_eq!(exit_status(&p), 0);
}
