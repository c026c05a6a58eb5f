//! The restore-test lines of `bosunctl status`: under each guest, the last restore test from
//! each tier it was tested on (outcome, age, duration, and for one that did not pass its detail
//! and the last pass), and for the host the newest of them. They come from the report's
//! `restore_tests`, or its `last_restore_test` from an agent that sends no list
//! ([`host_view::restore_tests`]); each verdict is [`RestoreVerdict`]'s, as in every view.

use bosun_proto::admin::HostDetail;
use bosun_proto::host_view::{self, RestoreVerdict};
use bosun_proto::report::RestoreTestReport;
use jiff::Timestamp;
use uuid::Uuid;

use crate::table;
use bosun_proto::host_view::guest_name;

/// The host's newest restore test: `passed at <when> (41s), <guest> on <tier>`, or `never`.
pub fn last_restore_test(host: &HostDetail) -> String {
    let Some(report) = &host.last_report else {
        return "never".to_owned();
    };
    host_view::newest_restore_test(report).map_or_else(
        || "never".to_owned(),
        |t| {
            format!(
                "{} at {} ({}), {} on {}",
                outcome(t),
                table::when(Some(t.finished_at)),
                took(t.duration_seconds),
                guest_name(host, t.guest_id),
                tier(t)
            )
        },
    )
}

/// One line per tier `guest_id` was restore-tested from, by tier name:
/// `restore-test <tier>  passed 3h ago, took 41s`, or for a test that did not pass
/// `restore-test <tier>  FAILED 20m ago, took 2m 5s: <detail>; last passed 8d ago` (or
/// `booted, NOT CHECKED …` for one whose guest's data was not verified).
pub fn guest_lines(host: &HostDetail, guest_id: Uuid, now: Timestamp) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    let mut tests: Vec<&RestoreTestReport> = host_view::restore_tests(report)
        .iter()
        .filter(|t| t.guest_id == guest_id)
        .collect();
    tests.sort_by(|a, b| tier(a).cmp(tier(b)));
    tests
        .into_iter()
        .map(|t| format!("    restore-test {}  {}", tier(t), summary(t, now)))
        .collect()
}

/// Restore tests of guests `listed` leaves out (gone from desired state and the report), one
/// line each: `restore-test of <guest> from <tier>  …`.
pub fn stray_lines(host: &HostDetail, listed: &[Option<Uuid>], now: Timestamp) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    host_view::restore_tests(report)
        .iter()
        .filter(|t| !listed.contains(&Some(t.guest_id)))
        .map(|t| {
            format!(
                "  restore-test of {} from {}  {}",
                guest_name(host, t.guest_id),
                tier(t),
                summary(t, now)
            )
        })
        .collect()
}

/// `passed 3h ago, took 41s`, with `: <detail>; last passed <age>` when it did not pass.
fn summary(t: &RestoreTestReport, now: Timestamp) -> String {
    let mut text = format!(
        "{} {}, took {}",
        outcome(t),
        table::ago(t.finished_at, now),
        took(t.duration_seconds)
    );
    if !passed(t) {
        if !t.detail.trim().is_empty() {
            text.push_str(&format!(": {}", t.detail.trim()));
        }
        let last = t
            .last_passed_at
            .map_or_else(|| "never".to_owned(), |at| table::ago(at, now));
        text.push_str(&format!("; last passed {last}"));
    }
    text
}

/// Whether it passed ([`RestoreVerdict`]): booted but not checked is no pass.
fn passed(t: &RestoreTestReport) -> bool {
    RestoreVerdict::of(t).passed()
}

/// `passed`, `FAILED`, `INTERRUPTED` or `booted, NOT CHECKED` ([`RestoreVerdict::word`]).
pub(crate) fn outcome(t: &RestoreTestReport) -> &'static str {
    RestoreVerdict::of(t).word()
}

/// The tier's storage, or `-` from an agent that names none.
fn tier(t: &RestoreTestReport) -> &str {
    t.tier.as_deref().unwrap_or("-")
}

/// `41s`, `2m 5s`, `1h 2m`.
pub(crate) fn took(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 && s % 60 == 0 => format!("{}m", s / 60),
        s if s < 3_600 => format!("{}m {}s", s / 60, s % 60),
        s if s % 3_600 < 60 => format!("{}h", s / 3_600),
        s => format!("{}h {}m", s / 3_600, s % 3_600 / 60),
    }
}
