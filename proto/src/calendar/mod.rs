//! Proxmox calendar events: `[WEEKDAY] [[YEARS-]MONTHS-DAYS] [HOURS:MINUTES[:SECONDS]]`.
//!
//! The grammar PVE, PBS and systemd share (PVE evaluates it in the node's time zone):
//!
//! - At least one of the three parts; an omitted weekday or date part means "every", an
//!   omitted time part means `00:00:00`, omitted seconds mean `:00`.
//! - Every field is `*` or a comma list of values, ranges `a..b`, and repetitions `a/n`,
//!   `a..b/n` or `*/n` ("from a, every n"). Weekdays are `mon`…`sun`, also as ranges
//!   (`mon..fri`) and lists.
//! - Shorthands: `minutely`, `hourly`, `daily`, `weekly`, `monthly`, `yearly`/`annually`,
//!   `quarterly`, `semiannually`/`semi-annually`.
//!
//! The search for the previous/next occurrence walks at most [`SEARCH_DAYS`] days, long enough
//! for `*-02-29` (a leap day) to be found; an event that never occurs in that window (say
//! `*-02-30`) has no occurrence.

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Why a calendar event cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("calendar event {event:?} is not supported: {reason}")]
pub struct ScheduleError {
    /// The event text.
    pub event: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// How far the occurrence search walks, in days: a little over eight years.
pub const SEARCH_DAYS: i64 = 8 * 366 + 1;

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// The allowed values of one numeric field, as a bit set (bit `v` set = `v` allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bits(u64);

impl Bits {
    fn contains(self, v: i8) -> bool {
        (0..64).contains(&v) && self.0 & (1 << v) != 0
    }

    /// The largest allowed value `<= limit`.
    fn max_at_most(self, limit: i8) -> Option<i8> {
        (0..=limit).rev().find(|&v| self.contains(v))
    }

    /// The smallest allowed value `>= limit`.
    fn min_at_least(self, limit: i8, max: i8) -> Option<i8> {
        (limit..=max).find(|&v| self.contains(v))
    }
}

/// One item of the year list: `start..=end` every `step` years.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct YearRange {
    start: i16,
    end: i16,
    step: i16,
}

/// A parsed calendar event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarEvent {
    weekdays: [bool; 7],
    /// `None` means every year.
    years: Option<Vec<YearRange>>,
    months: Bits,
    days: Bits,
    hours: Bits,
    minutes: Bits,
    seconds: Bits,
}

type Reason = &'static str;

impl CalendarEvent {
    /// Parses a calendar event; anything outside the grammar is refused with a reason.
    pub fn parse(event: &str) -> Result<Self, ScheduleError> {
        Self::parse_text(&event.trim().to_ascii_lowercase()).map_err(|reason| ScheduleError {
            event: event.to_owned(),
            reason,
        })
    }

    fn parse_text(text: &str) -> Result<Self, Reason> {
        let expanded = match text {
            "" => return Err("it is empty"),
            "minutely" => "*-*-* *:*:00",
            "hourly" => "*-*-* *:00:00",
            "daily" => "*-*-* 00:00:00",
            "weekly" => "mon *-*-* 00:00:00",
            "monthly" => "*-*-01 00:00:00",
            "yearly" | "annually" => "*-01-01 00:00:00",
            "quarterly" => "*-01,04,07,10-01 00:00:00",
            "semiannually" | "semi-annually" => "*-01,07-01 00:00:00",
            other => other,
        };
        let mut words = expanded.split_whitespace().peekable();
        let mut event = Self {
            weekdays: [true; 7],
            years: None,
            months: Bits(u64::MAX),
            days: Bits(u64::MAX),
            hours: Bits(1),
            minutes: Bits(1),
            seconds: Bits(1),
        };
        if let Some(word) = words.next_if(|w| w.starts_with(|c: char| c.is_ascii_alphabetic())) {
            event.weekdays = parse_weekdays(word)?;
        }
        if let Some(word) = words.next_if(|w| w.contains('-')) {
            event.parse_date(word)?;
        }
        if let Some(word) = words.next_if(|w| w.contains(':')) {
            event.parse_time(word)?;
        }
        if let Some(extra) = words.next() {
            return Err(
                if extra.starts_with(|c: char| c.is_ascii_alphabetic()) || extra.contains('-') {
                    "the parts must come in the order weekday, date, time"
                } else {
                    "a part is neither a weekday, a date (M-D) nor a time (H:M)"
                },
            );
        }
        Ok(event)
    }

    fn parse_date(&mut self, word: &str) -> Result<(), Reason> {
        let parts: Vec<&str> = word.split('-').collect();
        let (years, months, days) = match parts.as_slice() {
            [m, d] => (None, *m, *d),
            [y, m, d] => (Some(*y), *m, *d),
            _ => return Err("the date part must be MONTHS-DAYS or YEARS-MONTHS-DAYS"),
        };
        if let Some(years) = years.filter(|y| *y != "*") {
            self.years = Some(parse_years(years)?);
        }
        self.months = parse_field(months, 1, 12).ok_or("bad month list")?;
        self.days = parse_field(days, 1, 31).ok_or("bad day list")?;
        Ok(())
    }

    fn parse_time(&mut self, word: &str) -> Result<(), Reason> {
        let parts: Vec<&str> = word.split(':').collect();
        let (h, m, s) = match parts.as_slice() {
            [h, m] => (*h, *m, "0"),
            [h, m, s] => (*h, *m, *s),
            _ => return Err("the time part must be HOURS:MINUTES[:SECONDS]"),
        };
        self.hours = parse_field(h, 0, 23).ok_or("bad hour list")?;
        self.minutes = parse_field(m, 0, 59).ok_or("bad minute list")?;
        self.seconds = parse_field(s, 0, 59).ok_or("bad second list")?;
        Ok(())
    }

    fn runs_on(&self, date: Date) -> bool {
        let weekday = usize::try_from(date.weekday().to_monday_zero_offset()).unwrap_or(0);
        let year_ok = self.years.as_ref().is_none_or(|ranges| {
            ranges.iter().any(|r| {
                let y = date.year();
                (r.start..=r.end).contains(&y) && (y - r.start) % r.step == 0
            })
        });
        self.weekdays[weekday]
            && year_ok
            && self.months.contains(date.month())
            && self.days.contains(date.day())
    }

    /// Whether the event fires at this civil time: the definition the searches must agree with.
    #[cfg(test)]
    fn fires_at(&self, at: jiff::civil::DateTime) -> bool {
        self.runs_on(at.date())
            && self.hours.contains(at.hour())
            && self.minutes.contains(at.minute())
            && self.seconds.contains(at.second())
    }

    /// The latest time of day `<= limit` this event fires at.
    fn latest_at_most(&self, limit: Time) -> Option<Time> {
        let mut h = self.hours.max_at_most(limit.hour())?;
        loop {
            let (m_limit, s_limit) = if h == limit.hour() {
                (limit.minute(), limit.second())
            } else {
                (59, 59)
            };
            let found = self.minutes.max_at_most(m_limit).and_then(|m| {
                let s_limit = if m == m_limit { s_limit } else { 59 };
                match self.seconds.max_at_most(s_limit) {
                    Some(s) => Some((m, s)),
                    // No second fits in the limit minute: the minute before it, any second.
                    None => Some((
                        self.minutes.max_at_most(m.checked_sub(1)?)?,
                        self.seconds.max_at_most(59)?,
                    )),
                }
            });
            if let Some((m, s)) = found {
                return Time::new(h, m, s, 0).ok();
            }
            h = self.hours.max_at_most(h.checked_sub(1)?)?;
        }
    }

    /// The earliest time of day `>= limit` this event fires at.
    fn earliest_at_least(&self, limit: Time) -> Option<Time> {
        let mut h = self.hours.min_at_least(limit.hour(), 23)?;
        loop {
            let (m_limit, s_limit) = if h == limit.hour() {
                (limit.minute(), limit.second())
            } else {
                (0, 0)
            };
            let found = self.minutes.min_at_least(m_limit, 59).and_then(|m| {
                let s_limit = if m == m_limit { s_limit } else { 0 };
                match self.seconds.min_at_least(s_limit, 59) {
                    Some(s) => Some((m, s)),
                    None => Some((
                        self.minutes.min_at_least(m.checked_add(1)?, 59)?,
                        self.seconds.min_at_least(0, 59)?,
                    )),
                }
            });
            if let Some((m, s)) = found {
                return Time::new(h, m, s, 0).ok();
            }
            h = self.hours.min_at_least(h.checked_add(1)?, 23)?;
        }
    }

    /// The latest scheduled time at or before `now`.
    pub fn previous(&self, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = now.to_zoned(tz.clone());
        for back in 0..=SEARCH_DAYS {
            let date = local.date().checked_sub(back.days()).ok()?;
            if !self.runs_on(date) {
                continue;
            }
            let mut limit = if back == 0 { local.time() } else { Time::MAX };
            // A civil time can map past `now` around a DST change: step below it and retry.
            while let Some(time) = self.latest_at_most(limit) {
                let at = tz.to_timestamp(date.to_datetime(time)).ok()?;
                if at <= now {
                    return Some(at);
                }
                let Ok(earlier) = time.checked_sub(1.second()) else {
                    break;
                };
                limit = earlier;
            }
        }
        None
    }

    /// The earliest scheduled time strictly after `now`.
    pub fn next(&self, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = now.to_zoned(tz.clone());
        for ahead in 0..=SEARCH_DAYS {
            let date = local.date().checked_add(ahead.days()).ok()?;
            if !self.runs_on(date) {
                continue;
            }
            let mut limit = if ahead == 0 {
                match local.time().checked_add(1.second()) {
                    Ok(t) if t > local.time() => t,
                    _ => continue,
                }
            } else {
                Time::MIN
            };
            while let Some(time) = self.earliest_at_least(limit) {
                let at = tz.to_timestamp(date.to_datetime(time)).ok()?;
                if at > now {
                    return Some(at);
                }
                let Ok(later) = time.checked_add(1.second()) else {
                    break;
                };
                limit = later;
            }
        }
        None
    }
}

/// The calendar events this grammar accepts, as a regular expression for OpenAPI documents
/// (`pattern`): the shorthands, or weekday, date and time parts in that order, each field a
/// comma list of `*`, values in its range, forward ranges `a..b` and repetitions `/n`. Lower
/// case and single spaces only, which the parser accepts too; the one rule it cannot state is
/// that a range runs forward (`5..1` matches and is refused).
pub fn schema_pattern() -> String {
    let step = r"(/[1-9][0-9]{0,3})?";
    let list = |value: &str| {
        let item = format!(r"(\*|{value}(\.\.{value})?){step}");
        format!("{item}(,{item})*")
    };
    let weekday = "(mon|tue|wed|thu|fri|sat|sun)";
    let weekdays = format!(r"{weekday}(\.\.{weekday})?(,{weekday}(\.\.{weekday})?)*");
    let date = format!(
        "({}-)?{}-{}",
        list("(19[7-9][0-9]|[2-9][0-9]{3})"),
        list("(0?[1-9]|1[0-2])"),
        list("(0?[1-9]|[12][0-9]|3[01])")
    );
    let second = list("[0-5]?[0-9]");
    let time = format!("{}:{second}(:{second})?", list("([01]?[0-9]|2[0-3])"));
    format!(
        "^(minutely|hourly|daily|weekly|monthly|yearly|annually|quarterly|semiannually|\
         semi-annually|{weekdays}( {date})?( {time})?|{date}( {time})?|{time})$"
    )
}

fn parse_weekdays(word: &str) -> Result<[bool; 7], Reason> {
    let index = |name: &str| {
        WEEKDAYS
            .iter()
            .position(|d| *d == name)
            .ok_or("unknown weekday (use mon, tue, wed, thu, fri, sat, sun)")
    };
    let mut set = [false; 7];
    for item in word.split(',') {
        match item.split_once("..") {
            Some((from, to)) => {
                let (from, to) = (index(from)?, index(to)?);
                if from > to {
                    return Err("a weekday range must run forward (mon..fri)");
                }
                set[from..=to].iter_mut().for_each(|d| *d = true);
            }
            None => set[index(item)?] = true,
        }
    }
    Ok(set)
}

/// One list item: `(start, end, step)`; `*` and open repetitions run to `max`.
fn parse_item(item: &str, min: i64, max: i64) -> Option<(i64, i64, i64)> {
    let number = |s: &str| -> Option<i64> {
        if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(number(step).filter(|s| *s > 0)?)),
        None => (item, None),
    };
    let (start, end) = match (range, range.split_once("..")) {
        ("*", _) => (min, max),
        (_, Some((a, b))) => (number(a)?, number(b)?),
        (single, None) => {
            let v = number(single)?;
            (v, if step.is_some() { max } else { v })
        }
    };
    (min <= start && start <= end && end <= max).then_some((start, end, step.unwrap_or(1)))
}

fn parse_field(text: &str, min: i8, max: i8) -> Option<Bits> {
    let mut bits = 0u64;
    for item in text.split(',') {
        let (start, end, step) = parse_item(item, i64::from(min), i64::from(max))?;
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Some(Bits(bits))
}

fn parse_years(text: &str) -> Result<Vec<YearRange>, Reason> {
    text.split(',')
        .map(|item| {
            let (start, end, step) = parse_item(item, 1970, 9999).ok_or("bad year list")?;
            let narrow = |v: i64| i16::try_from(v).map_err(|_| "bad year list");
            Ok(YearRange {
                start: narrow(start)?,
                end: narrow(end)?,
                step: narrow(step)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
