use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn an_event_that_never_occurs_has_no_occurrence() {
    let ev = CalendarEvent::parse("*-02-30").unwrap();
    let now = ts("2026-05-17T13:45:10Z");
    assert_eq!(ev.previous(now, &TimeZone::UTC), None);
    assert_eq!(ev.next(now, &TimeZone::UTC), None);
    let v = evaluate(&ev, 0, None, now, &TimeZone::UTC);
    assert!(!v.due);
}

#[test]
fn monthly_interval_is_the_month_just_gone() {
    let ev = CalendarEvent::parse("monthly").unwrap();
    let v = evaluate(&ev, 0, None, ts("2026-03-14T12:34:00Z"), &TimeZone::UTC);
    assert_eq!(v.due_since, Some(ts("2026-03-01T00:00:00Z")));
    assert_eq!(v.interval, Some(SignedDuration::from_hours(24 * 28)));
}

#[test]
fn daily_is_due_once_the_time_passed_without_a_backup() {
    let tz = TimeZone::UTC;
    let ev = CalendarEvent::parse("02:00").unwrap();
    let now = ts("2026-03-10T05:00:00Z");
    let v = evaluate(&ev, 30, Some(ts("2026-03-09T02:10:00Z")), now, &tz);
    assert!(v.due);
    assert_eq!(v.due_since, Some(ts("2026-03-10T02:00:00Z")));
    assert_eq!(v.deadline, Some(ts("2026-03-10T02:30:00Z")));
    assert_eq!(v.next_run, Some(ts("2026-03-11T02:00:00Z")));
    assert_eq!(v.interval, Some(SignedDuration::from_hours(24)));

    let fresh = evaluate(&ev, 30, Some(ts("2026-03-10T02:05:00Z")), now, &tz);
    assert!(!fresh.due);
    assert_eq!(fresh.deadline, None);

    let never = evaluate(&ev, 0, None, now, &tz);
    assert!(never.due);
}

#[test]
fn hourly_interval_is_an_hour() {
    let tz = TimeZone::UTC;
    let ev = CalendarEvent::parse("hourly").unwrap();
    let v = evaluate(&ev, 0, None, ts("2026-03-14T12:34:00Z"), &tz);
    assert_eq!(v.due_since, Some(ts("2026-03-14T12:00:00Z")));
    assert_eq!(v.interval, Some(SignedDuration::from_hours(1)));
}

#[test]
fn a_second_event_adds_runs_and_the_least_interval_spaces_them() {
    let tz = TimeZone::UTC;
    let daily = CalendarEvent::parse("02:00").unwrap();
    let often = CalendarEvent::parse("*:0/5").unwrap();
    let now = ts("2026-03-10T05:07:00Z");
    let last = Some(ts("2026-03-10T05:01:00Z"));
    // The plan's daily run alone: not due (backed up since 02:00).
    let alone = evaluate_all(std::slice::from_ref(&daily), 0, None, last, now, &tz);
    assert!(!alone.due);
    assert_eq!(alone.next_run, Some(ts("2026-03-11T02:00:00Z")));
    // Every five minutes besides: due since 05:05, next at 05:10.
    let both = [daily.clone(), often.clone()];
    let v = evaluate_all(&both, 0, None, last, now, &tz);
    assert!(v.due);
    assert_eq!(v.due_since, Some(ts("2026-03-10T05:05:00Z")));
    assert_eq!(v.deadline, Some(ts("2026-03-10T05:05:00Z")));
    assert_eq!(v.next_run, Some(ts("2026-03-10T05:10:00Z")));
    assert_eq!(v.interval, Some(SignedDuration::from_mins(5)));
    // The least interval of an hour holds the deadline an hour after the last success.
    let held = evaluate_all(
        &both,
        0,
        Some(SignedDuration::from_hours(1)),
        last,
        now,
        &tz,
    );
    assert!(held.due);
    assert_eq!(held.deadline, Some(ts("2026-03-10T06:01:00Z")));
    // Never backed up: nothing to space from.
    let first = evaluate_all(
        &both,
        0,
        Some(SignedDuration::from_hours(1)),
        None,
        now,
        &tz,
    );
    // Never backed up: nothing to space from; overdue since the plan's 02:00, and the
    // added event's own deadline is the latest.
    assert_eq!(first.deadline, Some(ts("2026-03-10T02:00:00Z")));
    assert_eq!(first.latest_deadline, Some(ts("2026-03-10T05:05:00Z")));
}

#[test]
fn the_grace_never_outlasts_half_the_signed_interval() {
    let tz = TimeZone::UTC;
    let quarter_minute = CalendarEvent::parse("*:*:0/15").unwrap();
    let now = ts("2026-03-10T05:07:20Z");
    let last = Some(ts("2026-03-10T05:07:01Z"));
    // The largest grace desired state may set (a day) on a 15 s schedule: 7.5 s.
    let v = evaluate(&quarter_minute, 1440, last, now, &tz);
    assert!(v.due);
    assert_eq!(v.grace, SignedDuration::from_millis(7_500));
    assert_eq!(v.due_since, Some(ts("2026-03-10T05:07:15Z")));
    assert_eq!(v.deadline, Some(ts("2026-03-10T05:07:22.5Z")));
    assert!(
        v.deadline < v.next_run,
        "the deadline comes before the next scheduled time"
    );
    // A daily schedule keeps a 30-minute grace, and at most 12 hours of a larger one.
    let daily = CalendarEvent::parse("02:00").unwrap();
    let now = ts("2026-03-10T05:00:00Z");
    let kept = evaluate(&daily, 30, None, now, &tz);
    assert_eq!(kept.deadline, Some(ts("2026-03-10T02:30:00Z")));
    let held = evaluate(&daily, 1440, None, now, &tz);
    assert_eq!(held.deadline, Some(ts("2026-03-10T14:00:00Z")));
}

#[test]
fn an_added_event_never_moves_the_signed_deadline_back() {
    let tz = TimeZone::UTC;
    let daily = CalendarEvent::parse("02:00").unwrap();
    let every_minute = CalendarEvent::parse("minutely").unwrap();
    let last = Some(ts("2026-03-09T02:00:05Z"));
    // Desired state adds a schedule whose latest time moves every minute, with the largest
    // grace: the daily run's deadline (02:00 + 12 h at most) still comes.
    for now in [
        "2026-03-10T13:59:00Z",
        "2026-03-10T14:00:00Z",
        "2026-03-10T20:00:00Z",
    ] {
        let v = evaluate_all(
            &[daily.clone(), every_minute.clone()],
            1440,
            None,
            last,
            ts(now),
            &tz,
        );
        assert!(v.due, "{now}");
        assert_eq!(v.deadline, Some(ts("2026-03-10T14:00:00Z")), "{now}");
    }
}
