//! The host page's history: one small inline SVG chart per series (CPU mean and peak, memory,
//! root disk, pool fill, poll time, backups) over the last day, drawn on the server: no
//! script, no external image, and each chart scales to the width it has, so a phone shows it
//! whole. A stretch without polls is a gap in the line; a point with no neighbour, and each of
//! a few points, is drawn as a dot inside the chart. Each chart's caption says in words what it draws (mean, high, and
//! the newest bucket's figure, named as a bucket: a peak series' newest point is the highest
//! reading of the last minutes, never the CPU now), or that it holds one sample so far; its
//! title names it for a screen reader.

use std::fmt::Write as _;

use bosun_proto::history::{HistoryPoint, HostHistory};
use maud::{Markup, html};

/// Below this many points each is drawn as a dot as well as joined by the line.
const FEW: usize = 12;

/// Width and height of a chart's drawing, in its own units (it is scaled to fit).
const W: f64 = 288.0;
const H: f64 = 48.0;

/// One series: its name, its values oldest first with their times, the top of its scale,
/// how a value reads, and whether each point is a bucket's highest reading or its mean.
struct Series<'a> {
    name: &'static str,
    id: &'static str,
    values: Vec<(i64, f64)>,
    top: f64,
    unit: &'a dyn Fn(f64) -> String,
    peak: bool,
}

fn percent(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

fn millis(v: f64) -> String {
    format!("{v:.1} ms")
}

fn count(v: f64) -> String {
    format!("{v:.0}")
}

fn at_ms(p: &HistoryPoint) -> i64 {
    p.at.as_millisecond()
}

/// The section: the charts, or a line saying there is no history yet.
pub(crate) fn section(history: &HostHistory) -> Markup {
    if history.points.is_empty() {
        return html! { p class="empty" id="history" { "No history in the last day yet." } };
    }
    let oldest_first: Vec<&HistoryPoint> = history.points.iter().rev().collect();
    let pick = |f: fn(&HistoryPoint) -> Option<f64>| -> Vec<(i64, f64)> {
        oldest_first
            .iter()
            .filter_map(|p| f(p).map(|v| (at_ms(p), v)))
            .collect()
    };
    let poll = pick(|p| Some(p.poll_ms));
    let poll_top = poll.iter().map(|(_, v)| *v).fold(1.0, f64::max);
    let backups = pick(|p| Some(f64::from(p.backups)));
    let backups_top = backups.iter().map(|(_, v)| *v).fold(1.0, f64::max);
    let series = [
        Series {
            name: "CPU",
            peak: false,
            id: "cpu",
            values: pick(|p| p.cpu),
            top: 1.0,
            unit: &percent,
        },
        Series {
            name: "CPU peak",
            peak: true,
            id: "cpu-peak",
            values: pick(|p| p.cpu_max),
            top: 1.0,
            unit: &percent,
        },
        Series {
            name: "Memory",
            peak: false,
            id: "memory",
            values: pick(|p| p.memory),
            top: 1.0,
            unit: &percent,
        },
        Series {
            name: "Root disk",
            peak: false,
            id: "disk",
            values: pick(|p| p.disk),
            top: 1.0,
            unit: &percent,
        },
        Series {
            name: "Pool fill",
            peak: true,
            id: "pool",
            values: pick(|p| p.pool_max),
            top: 1.0,
            unit: &percent,
        },
        Series {
            name: "Poll time",
            peak: false,
            id: "poll",
            values: poll,
            top: poll_top,
            unit: &millis,
        },
        Series {
            name: "Backups",
            peak: false,
            id: "backups",
            values: backups,
            top: backups_top,
            unit: &count,
        },
    ];
    let from = history.from.as_millisecond();
    let to = history.to.as_millisecond();
    let gap = i64::from(history.bucket_seconds) * 1000;
    html! {
        div class="charts" id="history" {
            @for s in series.iter().filter(|s| !s.values.is_empty()) {
                (chart(s, from, to.max(from + 1), gap))
            }
        }
    }
}

/// A chart's caption: `1 sample: 3% (last 5 min)` until there are two; then the mean (of a
/// mean series), the high, and the newest bucket's figure named as the bucket it is
/// (`last 5 min 97%`), never "now": a bucket's peak is no reading of the CPU now.
fn caption(s: &Series<'_>, gap: i64) -> String {
    let vals: Vec<f64> = s.values.iter().map(|(_, v)| *v).collect();
    let newest = vals.last().copied().unwrap_or(0.0);
    let bucket = format!("last {} min", gap / 60_000);
    if vals.len() == 1 {
        return format!("1 sample: {} ({bucket})", (s.unit)(newest));
    }
    #[allow(clippy::cast_precision_loss)]
    let mean = vals.iter().sum::<f64>() / vals.len().max(1) as f64;
    let high = vals.iter().copied().fold(0.0, f64::max);
    if s.peak {
        format!("high {}, {bucket} {}", (s.unit)(high), (s.unit)(newest))
    } else {
        format!(
            "mean {}, high {}, {bucket} {}",
            (s.unit)(mean),
            (s.unit)(high),
            (s.unit)(newest)
        )
    }
}

/// One chart: the line (broken where buckets are missing, a lone point a dot) over a
/// baseline, and its caption.
fn chart(s: &Series<'_>, from: i64, to: i64, gap: i64) -> Markup {
    #[allow(clippy::cast_precision_loss)] // ms within a fortnight
    let x = |at: i64| ((at - from) as f64 / (to - from) as f64 * W).clamp(0.0, W);
    let y = |v: f64| H - (v / s.top).clamp(0.0, 1.0) * (H - 2.0) - 1.0;
    let joined = |a: i64, b: i64| b - a <= gap;
    let few = s.values.len() < FEW;
    let mut d = String::new();
    let mut dots = String::new();
    for (i, &(at, v)) in s.values.iter().enumerate() {
        let after_previous = i > 0 && joined(s.values[i - 1].0, at);
        let before_next = s
            .values
            .get(i + 1)
            .is_some_and(|&(next, _)| joined(at, next));
        if after_previous {
            let _ = write!(d, "L{:.1} {:.1} ", x(at), y(v));
        } else if before_next {
            let _ = write!(d, "M{:.1} {:.1} ", x(at), y(v));
        }
        // A point with no neighbour is a dot where it stands, never a stroke off the edge; so
        // is each of a few points, whose line across a day's width is a pixel or two long.
        if few || !(after_previous || before_next) {
            let _ = write!(dots, "M{:.1} {:.1} l0 0 ", x(at), y(v));
        }
    }
    let caption = caption(s, gap);
    html! {
        figure class="chart" id={ "chart-" (s.id) } {
            figcaption { strong { (s.name) } " " span class="muted" { (caption) } }
            svg viewBox={ "0 0 " (W) " " (H) } preserveAspectRatio="none" role="img"
                aria-label={ (s.name) ": " (caption) } {
                title { (s.name) ": " (caption) }
                line class="base" x1="0" y1={ (H - 0.5) } x2=(W) y2={ (H - 0.5) } {}
                @if !d.is_empty() { path class="line" d=(d.trim_end()) {} }
                @if !dots.is_empty() { path class="dot" d=(dots.trim_end()) {} }
            }
            div class="axis" aria-hidden="true" {
                span { ((to - from + 1_800_000) / 3_600_000) "h ago" } span { "now" }
            }
        }
    }
}
