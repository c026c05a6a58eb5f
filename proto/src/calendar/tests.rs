use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn parses_the_grammar_and_refuses_the_rest() {
    for ok in [
        "daily",
        "hourly",
        "weekly",
        "monthly",
        "yearly",
        "annually",
        "quarterly",
        "semiannually",
        "semi-annually",
        "minutely",
        "02:30",
        "2,14:30",
        "*:15",
        "*:0/15",
        "*:*/20",
        "8..17/2:00",
        "*-*-* 01:00",
        "mon..fri 22:00",
        "sat,sun 03:00",
        "sat",
        "*-*-01",
        "2026-01-01 00:00",
        "2026..2030/2-06-15 12:00",
        "01:00:00",
        "01:00:30",
        "mon *-1..6-1,15 04:00",
        "FRI 23:59",
    ] {
        CalendarEvent::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for (bad, reason) in [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("25:00", "bad hour list"),
        ("12:60", "bad minute list"),
        ("12:00:60", "bad second list"),
        (
            "fri..mon 01:00",
            "a weekday range must run forward (mon..fri)",
        ),
        (
            "01:00 mon",
            "the parts must come in the order weekday, date, time",
        ),
        (
            "01:00 *-*-*",
            "the parts must come in the order weekday, date, time",
        ),
        (
            "funday 01:00",
            "unknown weekday (use mon, tue, wed, thu, fri, sat, sun)",
        ),
        ("1:2:3:4", "the time part must be HOURS:MINUTES[:SECONDS]"),
        ("*-13-01", "bad month list"),
        ("*-*-32", "bad day list"),
        ("*-*-0", "bad day list"),
        ("1969-01-01", "bad year list"),
        (
            "1-2-3-4",
            "the date part must be MONTHS-DAYS or YEARS-MONTHS-DAYS",
        ),
        ("*:00/0", "bad minute list"),
        ("10..8:00", "bad hour list"),
        ("*:,", "bad minute list"),
        (
            "01:00 02:00",
            "a part is neither a weekday, a date (M-D) nor a time (H:M)",
        ),
    ] {
        let err = CalendarEvent::parse(bad).expect_err(bad);
        assert_eq!(err.reason, reason, "{bad}");
        assert_eq!(err.event, bad);
    }
}

#[test]
fn shorthands_fire_where_pve_says() {
    let tz = TimeZone::UTC;
    let now = ts("2026-05-17T13:45:10Z");
    for (event, previous, next) in [
        ("minutely", "2026-05-17T13:45:00Z", "2026-05-17T13:46:00Z"),
        ("hourly", "2026-05-17T13:00:00Z", "2026-05-17T14:00:00Z"),
        ("daily", "2026-05-17T00:00:00Z", "2026-05-18T00:00:00Z"),
        // 2026-05-17 is a Sunday.
        ("weekly", "2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z"),
        ("monthly", "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z"),
        ("quarterly", "2026-04-01T00:00:00Z", "2026-07-01T00:00:00Z"),
        (
            "semiannually",
            "2026-01-01T00:00:00Z",
            "2026-07-01T00:00:00Z",
        ),
        ("yearly", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
        ("*:0/20", "2026-05-17T13:40:00Z", "2026-05-17T14:00:00Z"),
        ("8..17/4:30", "2026-05-17T12:30:00Z", "2026-05-17T16:30:00Z"),
        ("*:*:0/15", "2026-05-17T13:45:00Z", "2026-05-17T13:45:15Z"),
        ("sat 06:00", "2026-05-16T06:00:00Z", "2026-05-23T06:00:00Z"),
        ("*-02-29", "2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"),
        ("2026-12-24 18:00", "", "2026-12-24T18:00:00Z"),
    ] {
        let ev = CalendarEvent::parse(event).unwrap();
        let expect = |s: &str| (!s.is_empty()).then(|| ts(s));
        assert_eq!(
            ev.previous(now, &tz),
            expect(previous),
            "previous of {event}"
        );
        assert_eq!(ev.next(now, &tz), expect(next), "next of {event}");
    }
}

#[test]
fn an_occurrence_exactly_now_is_previous_not_next() {
    let ev = CalendarEvent::parse("13:45").unwrap();
    let now = ts("2026-05-17T13:45:00Z");
    assert_eq!(ev.previous(now, &TimeZone::UTC), Some(now));
    assert_eq!(
        ev.next(now, &TimeZone::UTC),
        Some(ts("2026-05-18T13:45:00Z"))
    );
}

#[test]
fn daylight_saving_gaps_and_folds_keep_the_order() {
    // Central European rules, spelled out so the test needs no tzdata on the machine.
    let tz = TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap();
    // 2026-03-29 02:30 does not exist in Berlin (clocks jump 02:00 -> 03:00).
    let ev = CalendarEvent::parse("02:30").unwrap();
    let after_gap = ts("2026-03-29T02:00:00Z");
    let previous = ev.previous(after_gap, &tz).unwrap();
    assert!(previous <= after_gap);
    let next = ev.next(ts("2026-03-28T12:00:00Z"), &tz).unwrap();
    assert!(next > ts("2026-03-28T12:00:00Z"));
    assert!(next <= ts("2026-03-29T02:00:00Z"), "{next}");
}

#[test]
fn weekdays_skip_the_weekend() {
    let tz = TimeZone::UTC;
    let ev = CalendarEvent::parse("mon..fri 22:00").unwrap();
    // 2026-03-14 is a Saturday: the latest run was Friday 22:00.
    let now = ts("2026-03-14T12:00:00Z");
    assert_eq!(ev.previous(now, &tz), Some(ts("2026-03-13T22:00:00Z")));
    assert_eq!(ev.next(now, &tz), Some(ts("2026-03-16T22:00:00Z")));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// `previous` and `next` agree with a minute-by-minute scan of the same two days.
    #[test]
    fn occurrences_match_a_brute_force_scan(
        event in proptest::sample::select(vec![
            "hourly", "daily", "*:0/7", "3..20/5:10,40", "mon,thu 06:15", "*-*-1..3 23:59",
            "sat..sun *:30", "12:00", "*-5,6-* 0/9:05",
        ]),
        offset_min in 0i64..(60 * 24 * 40),
    ) {
        let tz = TimeZone::UTC;
        let ev = CalendarEvent::parse(event).unwrap();
        let now = ts("2026-04-20T00:00:30Z")
            .checked_add(SignedDuration::from_mins(offset_min))
            .unwrap();
        let fires = |t: Timestamp| ev.fires_at(tz.to_datetime(t));
        let floor = Timestamp::from_second(now.as_second().div_euclid(60) * 60).unwrap();
        let scan_back = (0..60 * 48)
            .map(|m| floor.checked_sub(SignedDuration::from_mins(m)).unwrap())
            .find(|t| fires(*t));
        let scan_ahead = (1..60 * 48)
            .map(|m| floor.checked_add(SignedDuration::from_mins(m)).unwrap())
            .find(|t| fires(*t));
        if let Some(expected) = scan_back {
            proptest::prop_assert_eq!(ev.previous(now, &tz), Some(expected));
        }
        if let Some(expected) = scan_ahead {
            proptest::prop_assert_eq!(ev.next(now, &tz), Some(expected));
        }
    }
}

/// Whether every `a..b` in `event` runs forward (the one rule [`schema_pattern`] cannot state).
fn ranges_run_forward(event: &str) -> bool {
    let rank = |s: &str| -> Option<i64> {
        WEEKDAYS
            .iter()
            .position(|d| *d == s)
            .and_then(|i| i64::try_from(i).ok())
            .or_else(|| s.parse().ok())
    };
    event
        .split([' ', ',', ':', '/'])
        .flat_map(|word| {
            // A date's `-` separates fields; a range never spans one.
            word.split('-')
        })
        .filter_map(|item| item.split_once(".."))
        .all(|(a, b)| matches!((rank(a), rank(b)), (Some(a), Some(b)) if a <= b))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 1_000,
        max_global_rejects: 100_000,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever the OpenAPI documents' pattern lets through (with its ranges forward), the
    /// parser accepts: a fuzzer that follows the document sends no event the hub refuses.
    #[test]
    fn what_the_schema_pattern_matches_the_grammar_accepts(
        event in proptest::string::string_regex(
            schema_pattern().trim_start_matches('^').trim_end_matches('$'),
        ).unwrap()
    ) {
        proptest::prop_assume!(ranges_run_forward(&event));
        proptest::prop_assert!(
            CalendarEvent::parse(&event).is_ok(),
            "{event:?}: {:?}",
            CalendarEvent::parse(&event)
        );
    }
}
