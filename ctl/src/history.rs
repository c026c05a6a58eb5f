//! `bosunctl hosts show HOST --history`: the host's five-minute history as text, what the
//! dashboard's host page draws. Each series is one line: a sparkline of the window (oldest
//! left, one character per stretch of it, the stretch's highest point), then its mean, its
//! highest and its newest value; backups and poll times are summed and averaged.

use bosun_proto::history::{HistoryPoint, HostHistory};

use crate::error::CtlError;
use crate::table;

/// Characters of a sparkline.
pub const WIDTH: usize = 48;

/// Levels of a sparkline, lowest first.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The lines `hosts show --history` prints.
pub fn lines(history: &HostHistory) -> Vec<(&'static str, String)> {
    let hours = history.to.duration_since(history.from).as_hours().max(1);
    if history.points.is_empty() {
        return vec![("history", format!("last {hours}h: no polls in the window"))];
    }
    let mut out = vec![(
        "history",
        format!(
            "last {hours}h in {}-minute points, oldest left: {} with polls",
            history.bucket_seconds / 60,
            history.points.len(),
        ),
    )];
    let points: Vec<&HistoryPoint> = history.points.iter().rev().collect();
    let slots = Slots::of(history);
    let share = |f: fn(&HistoryPoint) -> Option<f64>| slots.place(&points, f);
    let series: [(&'static str, Vec<Option<f64>>); 5] = [
        ("cpu", share(|p| p.cpu)),
        ("cpu peak", share(|p| p.cpu_max)),
        ("memory", share(|p| p.memory)),
        ("root disk", share(|p| p.disk)),
        ("pool fill", share(|p| p.pool_max)),
    ];
    for (name, values) in series {
        out.push((name, share_line(&values)));
    }
    let polls: u64 = points.iter().map(|p| u64::from(p.polls)).sum();
    let poll_ms = slots.place(&points, |p| Some(p.poll_ms));
    let slowest = points.iter().map(|p| p.poll_ms_max).fold(0.0, f64::max);
    out.push((
        "poll time",
        format!(
            "{}  {polls} polls, mean {:.1} ms, slowest {slowest:.1} ms",
            sparkline(&poll_ms, slowest),
            weighted_poll_ms(&points),
        ),
    ));
    let backups: u64 = points.iter().map(|p| u64::from(p.backups)).sum();
    let bytes: u64 = points.iter().map(|p| p.backup_bytes).sum();
    let seconds: u64 = points.iter().map(|p| p.backup_seconds).sum();
    let per = slots.place(&points, |p| Some(f64::from(p.backups)));
    let most = per.iter().flatten().copied().fold(0.0, f64::max);
    out.push((
        "backups",
        format!(
            "{}  {backups} done, {} in all, {} in all",
            sparkline(&per, most),
            size(bytes),
            duration(seconds)
        ),
    ));
    out
}

/// The window's buckets, oldest first: a point goes into the slot of its time, so a line
/// spans the whole window and a stretch without polls is a gap.
struct Slots {
    from_ms: i64,
    bucket_ms: i64,
    count: usize,
}

impl Slots {
    fn of(history: &HostHistory) -> Self {
        let bucket_ms = i64::from(history.bucket_seconds.max(1)) * 1000;
        let from_ms = ms(history.from);
        let span = (ms(history.to) - from_ms).max(0);
        let count = usize::try_from(span / bucket_ms + 1)
            .unwrap_or(1)
            .min(MAX_SLOTS);
        Self {
            from_ms,
            bucket_ms,
            count,
        }
    }

    /// `f` of each point (oldest first) in its slot.
    fn place(
        &self,
        points: &[&HistoryPoint],
        f: fn(&HistoryPoint) -> Option<f64>,
    ) -> Vec<Option<f64>> {
        let mut slots = vec![None; self.count];
        for p in points {
            let index = usize::try_from((ms(p.at) - self.from_ms) / self.bucket_ms).ok();
            if let Some(slot) = index.and_then(|i| slots.get_mut(i)) {
                *slot = f(p);
            }
        }
        slots
    }
}

/// Most slots a window has: fourteen days of five-minute buckets and one more.
const MAX_SLOTS: usize = 14 * 24 * 12 + 1;

fn ms(t: jiff::Timestamp) -> i64 {
    t.as_millisecond()
}

/// Prints the lines.
pub fn print(history: &HostHistory) -> Result<(), CtlError> {
    table::print_fields(&lines(history))
}

fn share_line(values: &[Option<f64>]) -> String {
    let known: Vec<f64> = values.iter().flatten().copied().collect();
    let Some(&last) = known.last() else {
        return "no reading".to_owned();
    };
    #[allow(clippy::cast_precision_loss)] // at most a few thousand points
    let mean = known.iter().sum::<f64>() / known.len() as f64;
    let high = known.iter().copied().fold(0.0, f64::max);
    format!(
        "{}  mean {:.0}%, high {:.0}%, now {:.0}%",
        sparkline(values, 1.0),
        mean * 100.0,
        high * 100.0,
        last * 100.0
    )
}

/// The mean poll time over every poll of the window.
fn weighted_poll_ms(points: &[&HistoryPoint]) -> f64 {
    let polls: f64 = points.iter().map(|p| f64::from(p.polls)).sum();
    if polls == 0.0 {
        return 0.0;
    }
    points
        .iter()
        .map(|p| p.poll_ms * f64::from(p.polls))
        .sum::<f64>()
        / polls
}

/// `values` (oldest first) as at most [`WIDTH`] characters, each the highest value of its
/// stretch against `top`; a stretch without a value is a space.
pub fn sparkline(values: &[Option<f64>], top: f64) -> String {
    if values.is_empty() {
        return String::new();
    }
    let columns = values.len().min(WIDTH);
    (0..columns)
        .map(|c| {
            let start = c * values.len() / columns;
            let end = ((c + 1) * values.len() / columns).max(start + 1);
            let high = values[start..end]
                .iter()
                .flatten()
                .copied()
                .reduce(f64::max);
            match high {
                None => ' ',
                Some(v) => {
                    let ratio = if top > 0.0 {
                        (v / top).clamp(0.0, 1.0)
                    } else {
                        0.0
                    };
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let level = (ratio * 7.0).round() as usize;
                    LEVELS[level.min(7)]
                }
            }
        })
        .collect()
}

fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    #[allow(clippy::cast_precision_loss)]
    match bytes {
        b if b >= GIB => format!("{:.1} GiB", b as f64 / GIB as f64),
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b => format!("{b} B"),
    }
}

fn duration(seconds: u64) -> String {
    match seconds {
        s if s >= 3_600 => format!("{}h {}m", s / 3_600, s % 3_600 / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_draws_the_highest_of_each_stretch_and_gaps_as_spaces() {
        let values = [Some(0.0), Some(1.0), None, Some(0.5)];
        assert_eq!(sparkline(&values, 1.0), "▁█ ▅");
        let long: Vec<Option<f64>> = (0..480).map(|i| Some(f64::from(i % 10) / 9.0)).collect();
        let line = sparkline(&long, 1.0);
        assert_eq!(line.chars().count(), WIDTH);
        assert!(line.chars().all(|c| c == '█'), "{line}");
        assert_eq!(sparkline(&[], 1.0), "");
    }

    #[test]
    fn sizes_and_durations_read_as_people_say_them() {
        assert_eq!(size(3 << 30), "3.0 GiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        assert_eq!(size(12), "12 B");
        assert_eq!(duration(3_725), "1h 2m");
        assert_eq!(duration(125), "2m 5s");
    }
}
