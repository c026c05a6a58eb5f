//! The backup policy's schedule (a Proxmox calendar event) and whether a backup is due.
//!
//! The schedule is a Proxmox calendar event ([`CalendarEvent`], the whole grammar PVE
//! accepts, parsed in `bosun-proto` so the hub refuses a bad one when it is set), evaluated in the node's time zone as PVE does. Anything outside the grammar is
//! refused with a reason rather than guessed at.
//!
//! A backup is **due** when no successful backup happened since the most recent scheduled
//! time. The **deadline** is that time plus the policy's quiesce grace: the moment the agent
//! backs up without waiting for the controller.
//!
//! The grace comes from unsigned desired state, so it never outlasts half the interval of
//! the schedule it delays ([`applied_grace`]; under a data plan, the plan's tier-0 schedule):
//! a grace at least the interval would move every deadline past the next scheduled time and
//! so postpone every backup for ever (decision 0051).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

pub use bosun_proto::calendar::{CalendarEvent, SEARCH_DAYS, ScheduleError};

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
    /// The quiesce grace applied: the policy's, at most half of `interval` (of the first,
    /// signed, schedule when several are evaluated together).
    pub grace: SignedDuration,
    /// The latest deadline any due event sets (`deadline` is the earliest): after a restart
    /// that missed the earliest one, the run still due is this one's.
    pub latest_deadline: Option<Timestamp>,
}

/// The quiesce grace applied for `grace_minutes` on a schedule whose scheduled times are
/// `interval` apart: never more than half the interval, so the deadline of one scheduled
/// time always falls before the next one and every interval gets its backup. An unknown
/// interval (an event with no earlier occurrence) allows no grace.
pub fn applied_grace(grace_minutes: u32, interval: Option<SignedDuration>) -> SignedDuration {
    let asked = SignedDuration::from_mins(i64::from(grace_minutes));
    let cap = interval.map_or(SignedDuration::ZERO, |i| i / 2);
    asked.min(cap).max(SignedDuration::ZERO)
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
    let grace = applied_grace(grace_minutes, interval);
    let deadline = previous
        .filter(|_| due)
        .and_then(|p| p.checked_add(grace).ok());
    DueVerdict {
        due,
        due_since: previous.filter(|_| due),
        deadline,
        next_run: event.next(now, tz),
        interval,
        grace,
        latest_deadline: deadline,
    }
}

/// When a tier is due under several calendar events at once (the signed plan's cadence
/// first, then a more frequent one desired state adds), never sooner than `min_interval`
/// after the last successful backup: the most recent scheduled time of any event counts for
/// `due_since`, the next is the earliest of any, and the deadline is the earliest any due
/// event sets (so an added event whose scheduled times keep moving never pushes the signed
/// one's deadline back); a deadline closer than `min_interval` to the last success waits
/// for it. The grace is held to half the first event's interval ([`applied_grace`]). With
/// one event and no interval this is [`evaluate`].
pub fn evaluate_all(
    events: &[CalendarEvent],
    grace_minutes: u32,
    min_interval: Option<SignedDuration>,
    last_success: Option<Timestamp>,
    now: Timestamp,
    tz: &TimeZone,
) -> DueVerdict {
    let mut verdicts: Vec<DueVerdict> = events
        .iter()
        .map(|event| evaluate(event, grace_minutes, last_success, now, tz))
        .collect();
    // The first event is the signed cadence: its interval bounds the grace for all of them.
    let grace = applied_grace(grace_minutes, verdicts.first().and_then(|v| v.interval));
    for v in &mut verdicts {
        v.deadline = v.due_since.and_then(|p| p.checked_add(grace).ok());
    }
    let earliest = |f: fn(&DueVerdict) -> Option<Timestamp>| verdicts.iter().filter_map(f).min();
    // Due since the latest scheduled time any event passed without a backup after it.
    let due_since = verdicts.iter().filter_map(|v| v.due_since).max();
    let mut deadline = earliest(|v| v.deadline);
    let mut latest_deadline = verdicts.iter().filter_map(|v| v.deadline).max();
    if let (Some(at), Some(last), Some(min)) = (deadline, last_success, min_interval)
        && let Ok(allowed) = last.checked_add(min)
        && allowed > at
    {
        deadline = Some(allowed);
    }
    // The least interval holds the latest deadline too.
    latest_deadline = latest_deadline.max(deadline);
    DueVerdict {
        due: due_since.is_some(),
        due_since,
        deadline,
        next_run: earliest(|v| v.next_run),
        interval: verdicts.iter().filter_map(|v| v.interval).min(),
        grace,
        latest_deadline,
    }
}

#[cfg(test)]
mod tests;
