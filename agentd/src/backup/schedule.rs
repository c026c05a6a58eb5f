//! The backup policy's schedule (a Proxmox calendar event) and whether a backup is due.
//!
//! Supported forms, evaluated in the node's time zone as PVE does:
//! `hourly`, `daily`, `weekly`, `HH:MM[,HH:MM…]` (hours and minutes may be lists: `2,14:30`),
//! `*:MM` (every hour), an optional `*-*-*` date part, and a leading weekday set
//! (`mon`, `sat,sun`, `mon..fri`). Anything else is refused with a reason rather than
//! guessed at.
//!
//! A backup is **due** when no successful backup happened since the most recent scheduled
//! time. The **deadline** is that time plus the policy's quiesce grace: the moment the agent
//! backs up without waiting for the controller.

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

/// Why a schedule cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("calendar event {event:?} is not supported: {reason}")]
pub struct ScheduleError {
    /// The event text.
    pub event: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed calendar event: on these weekdays, at every listed hour and minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarEvent {
    weekdays: [bool; 7],
    hours: Vec<i8>,
    minutes: Vec<i8>,
}

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

impl CalendarEvent {
    /// Parses the supported subset of PVE calendar events.
    pub fn parse(event: &str) -> Result<Self, ScheduleError> {
        let err = |reason| ScheduleError {
            event: event.to_owned(),
            reason,
        };
        let text = event.trim().to_ascii_lowercase();
        match text.as_str() {
            "hourly" => return Self::parse("*:00"),
            "daily" => return Self::parse("00:00"),
            "weekly" => return Self::parse("mon 00:00"),
            "" => return Err(err("it is empty")),
            _ => {}
        }
        let mut weekdays = [true; 7];
        let mut time_part = None;
        for word in text.split_whitespace() {
            if word.starts_with(|c: char| c.is_ascii_alphabetic()) {
                if time_part.is_some() {
                    return Err(err("weekdays must come first"));
                }
                weekdays = parse_weekdays(word).ok_or_else(|| err("unknown weekday"))?;
            } else if word == "*-*-*" {
                continue;
            } else if word.contains('-') {
                return Err(err("only the date part *-*-* is supported"));
            } else if time_part.replace(word).is_some() {
                return Err(err("more than one time part"));
            }
        }
        let time = time_part.ok_or_else(|| err("no time part"))?;
        let (h, m) = time
            .split_once(':')
            .ok_or_else(|| err("the time part must be HH:MM"))?;
        if m.contains(':') {
            return Err(err("seconds are not supported"));
        }
        let hours = if h == "*" {
            (0..24).collect()
        } else {
            parse_list(h, 23).ok_or_else(|| err("bad hour list"))?
        };
        let minutes = parse_list(m, 59).ok_or_else(|| err("bad minute list"))?;
        Ok(Self {
            weekdays,
            hours,
            minutes,
        })
    }

    fn runs_on(&self, weekday: Weekday) -> bool {
        self.weekdays[usize::try_from(weekday.to_monday_zero_offset()).unwrap_or(0)]
    }

    /// The latest scheduled time at or before `now`.
    pub fn previous(&self, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = now.to_zoned(tz.clone());
        for back in 0..=8i64 {
            let date = local.date().checked_sub(back.days()).ok()?;
            if !self.runs_on(date.weekday()) {
                continue;
            }
            for &h in self.hours.iter().rev() {
                for &m in self.minutes.iter().rev() {
                    let at = at(date, h, m, tz)?;
                    if at <= now {
                        return Some(at);
                    }
                }
            }
        }
        None
    }

    /// The earliest scheduled time strictly after `now`.
    pub fn next(&self, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = now.to_zoned(tz.clone());
        for ahead in 0..=8i64 {
            let date = local.date().checked_add(ahead.days()).ok()?;
            if !self.runs_on(date.weekday()) {
                continue;
            }
            for &h in &self.hours {
                for &m in &self.minutes {
                    let at = at(date, h, m, tz)?;
                    if at > now {
                        return Some(at);
                    }
                }
            }
        }
        None
    }
}

fn at(date: Date, h: i8, m: i8, tz: &TimeZone) -> Option<Timestamp> {
    let time = Time::new(h, m, 0, 0).ok()?;
    tz.to_timestamp(date.to_datetime(time)).ok()
}

fn parse_weekdays(word: &str) -> Option<[bool; 7]> {
    let mut set = [false; 7];
    for item in word.split(',') {
        let index = |name: &str| WEEKDAYS.iter().position(|d| *d == name);
        match item.split_once("..") {
            Some((from, to)) => {
                let (from, to) = (index(from)?, index(to)?);
                if from > to {
                    return None;
                }
                set[from..=to].iter_mut().for_each(|d| *d = true);
            }
            None => set[index(item)?] = true,
        }
    }
    Some(set)
}

fn parse_list(text: &str, max: i8) -> Option<Vec<i8>> {
    let mut values = Vec::new();
    for item in text.split(',') {
        if item.is_empty() || item.len() > 2 || !item.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: i8 = item.parse().ok()?;
        if v > max {
            return None;
        }
        values.push(v);
    }
    values.sort_unstable();
    values.dedup();
    Some(values)
}

/// Whether a policy backup is due, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueVerdict {
    /// No successful backup since the most recent scheduled time.
    pub due: bool,
    /// The scheduled time the backup is due for (when due).
    pub due_since: Option<Timestamp>,
    /// When the agent backs up without waiting for the controller (when due).
    pub deadline: Option<Timestamp>,
    /// The next scheduled time after now.
    pub next_run: Option<Timestamp>,
    /// The gap between the last two scheduled times.
    pub interval: Option<SignedDuration>,
}

/// Evaluates `event` at `now` for a guest whose last successful backup ended at `last_success`.
pub fn evaluate(
    event: &CalendarEvent,
    grace_minutes: u32,
    last_success: Option<Timestamp>,
    now: Timestamp,
    tz: &TimeZone,
) -> DueVerdict {
    let previous = event.previous(now, tz);
    let interval = previous.and_then(|p| {
        let before = event.previous(p.checked_sub(SignedDuration::from_secs(1)).ok()?, tz)?;
        Some(p.duration_since(before))
    });
    let due = match (previous, last_success) {
        (Some(p), Some(last)) => last < p,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let grace = SignedDuration::from_mins(i64::from(grace_minutes));
    DueVerdict {
        due,
        due_since: previous.filter(|_| due),
        deadline: previous
            .filter(|_| due)
            .and_then(|p| p.checked_add(grace).ok()),
        next_run: event.next(now, tz),
        interval,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_supported_forms() {
        for ok in [
            "daily",
            "hourly",
            "weekly",
            "02:30",
            "2,14:30",
            "*:15",
            "*-*-* 01:00",
            "mon..fri 22:00",
            "sat,sun 03:00",
        ] {
            CalendarEvent::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "monthly",
            "25:00",
            "12:60",
            "fri..mon 01:00",
            "2026-01-01 00:00",
            "01:00:00",
            "01:00 mon",
            "funday 01:00",
            "1:2:3",
        ] {
            assert!(CalendarEvent::parse(bad).is_err(), "{bad} should fail");
        }
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
    fn weekdays_skip_the_weekend() {
        let tz = TimeZone::UTC;
        let ev = CalendarEvent::parse("mon..fri 22:00").unwrap();
        // 2026-03-14 is a Saturday: the latest run was Friday 22:00.
        let now = ts("2026-03-14T12:00:00Z");
        assert_eq!(ev.previous(now, &tz), Some(ts("2026-03-13T22:00:00Z")));
        assert_eq!(ev.next(now, &tz), Some(ts("2026-03-16T22:00:00Z")));
        let v = evaluate(&ev, 0, Some(ts("2026-03-13T22:30:00Z")), now, &tz);
        assert!(!v.due);
    }

    #[test]
    fn hourly_interval_is_an_hour() {
        let tz = TimeZone::UTC;
        let ev = CalendarEvent::parse("hourly").unwrap();
        let v = evaluate(&ev, 0, None, ts("2026-03-14T12:34:00Z"), &tz);
        assert_eq!(v.due_since, Some(ts("2026-03-14T12:00:00Z")));
        assert_eq!(v.interval, Some(SignedDuration::from_hours(1)));
    }
}
