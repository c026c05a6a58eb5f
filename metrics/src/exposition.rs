//! The two text formats a Prometheus server scrapes, chosen by the request's `Accept` header.
//!
//! [`prometheus_client`] encodes OpenMetrics 1.0 only. Prometheus asks for OpenMetrics first,
//! but `curl`, older servers and most other tools send `*/*` or `text/plain; version=0.0.4`
//! and expect the older format, which differs in a few places that [`to_text_004`] rewrites:
//!
//! | OpenMetrics | Prometheus text 0.0.4 |
//! |---|---|
//! | `# TYPE x counter`, samples `x_total` (and `x_created`) | `# TYPE x_total counter`, samples `x_total` |
//! | `# TYPE x info`, sample `x_info{…} 1` | `# TYPE x_info gauge` |
//! | `stateset`, `unknown`, `gaugehistogram` | `gauge`, `untyped`, `untyped` |
//! | `# UNIT x seconds` | dropped |
//! | exemplars (`… # {trace_id="…"} 1.0`) | dropped |
//! | timestamps in seconds | milliseconds |
//! | `# EOF` | dropped |

use std::fmt::Write as _;

use prometheus_client::registry::Registry;

/// The content type of an OpenMetrics answer.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of a Prometheus text format 0.0.4 answer.
pub const TEXT_004_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// At most this many media ranges of an `Accept` header are looked at.
const MAX_MEDIA_RANGES: usize = 32;

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`application/openmetrics-text`).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Text004,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a quality above zero and at least that of any
    /// `text/plain`, `text/*` or `*/*` range; the 0.0.4 text format otherwise (no header,
    /// `*/*`, `text/plain`, anything unparsable or unknown).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Text004;
        };
        let mut openmetrics: Option<f32> = None;
        let mut text: Option<f32> = None;
        for range in accept.split(',').take(MAX_MEDIA_RANGES) {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut quality = Some(1.0_f32);
            for param in parts {
                if let Some((key, value)) = param.split_once('=')
                    && key.trim().eq_ignore_ascii_case("q")
                {
                    quality = value
                        .trim()
                        .parse::<f32>()
                        .ok()
                        .filter(|q| (0.0..=1.0).contains(q));
                }
            }
            // A range with a malformed quality is ignored, as RFC 9110 lets a server do.
            let Some(quality) = quality else { continue };
            let slot = match media.as_str() {
                "application/openmetrics-text" => &mut openmetrics,
                "text/plain" | "text/*" | "*/*" => &mut text,
                _ => continue,
            };
            *slot = Some(slot.map_or(quality, |q| q.max(quality)));
        }
        match (openmetrics, text) {
            (Some(om), text) if om > 0.0 && om >= text.unwrap_or(0.0) => Self::OpenMetrics,
            _ => Self::Text004,
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Self::Text004 => TEXT_004_CONTENT_TYPE,
        }
    }
}

/// Encodes `registry` in `format`.
pub fn render(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut openmetrics = String::new();
    prometheus_client::encoding::text::encode(&mut openmetrics, registry)?;
    Ok(match format {
        Format::OpenMetrics => openmetrics,
        Format::Text004 => to_text_004(&openmetrics),
    })
}

/// What a family's `# TYPE` line said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Info,
    Histogram,
    Summary,
    Other,
}

/// The family being rewritten: its OpenMetrics name and type.
#[derive(Debug, Clone, Copy)]
struct Current<'a> {
    name: &'a str,
    kind: Kind,
}

/// Rewrites an OpenMetrics exposition in the Prometheus text format 0.0.4 (see the module
/// docs for the differences).
pub fn to_text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    let mut current: Option<Current<'_>> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (text_name, text_type, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter", Kind::Counter),
                "info" => (format!("{name}_info"), "gauge", Kind::Info),
                "gauge" | "stateset" => (name.to_owned(), "gauge", Kind::Other),
                "histogram" => (name.to_owned(), "histogram", Kind::Histogram),
                "summary" => (name.to_owned(), "summary", Kind::Summary),
                _ => (name.to_owned(), "untyped", Kind::Other),
            };
            match help.take() {
                Some((help_name, text)) if help_name == name => {
                    let _ = writeln!(out, "# HELP {text_name} {}", help_text_004(text));
                }
                other => flush_help(&mut out, other),
            }
            let _ = writeln!(out, "# TYPE {text_name} {text_type}");
            current = Some(Current { name, kind });
            continue;
        }
        // `# UNIT` and any other comment have no 0.0.4 form.
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        flush_help(&mut out, help.take());
        let Some(sample) = Sample::parse(line) else {
            continue;
        };
        if let Some(family) = current
            && matches!(family.kind, Kind::Counter | Kind::Histogram | Kind::Summary)
            && sample
                .name
                .strip_prefix(family.name)
                .is_some_and(|suffix| suffix == "_created")
        {
            // Creation times have no place in 0.0.4.
            continue;
        }
        sample.write_004(&mut out);
    }
    flush_help(&mut out, help);
    out
}

/// A `# HELP` line whose `# TYPE` never came: kept under its own name.
fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        let _ = writeln!(out, "# HELP {name} {}", help_text_004(text));
    }
}

/// 0.0.4 help text escapes only `\` and line feeds; OpenMetrics also escapes `"`.
fn help_text_004(text: &str) -> String {
    text.replace("\\\"", "\"")
}

/// One sample line, split into its parts.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    /// The sample's name.
    name: &'a str,
    /// `{…}` including the braces, or empty.
    labels: &'a str,
    /// The value as written.
    value: &'a str,
    /// The OpenMetrics timestamp (seconds), if any.
    timestamp: Option<&'a str>,
}

impl<'a> Sample<'a> {
    /// Splits a sample line; `None` when it is not one (then it is left out).
    fn parse(line: &'a str) -> Option<Self> {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if name.is_empty() {
            return None;
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            let close = name_end + label_set_end(&line[name_end..])?;
            (&line[name_end..=close], &line[close + 1..])
        } else {
            ("", &line[name_end..])
        };
        // An exemplar follows ` # ` after the value (and timestamp).
        let rest = rest.split_once(" # ").map_or(rest, |(sample, _)| sample);
        let mut fields = rest.split_whitespace();
        let value = fields.next()?;
        let timestamp = fields.next();
        Some(Self {
            name,
            labels,
            value,
            timestamp,
        })
    }

    fn write_004(&self, out: &mut String) {
        let _ = write!(out, "{}{} {}", self.name, self.labels, self.value);
        // 0.0.4 timestamps are integer milliseconds.
        if let Some(millis) = self
            .timestamp
            .and_then(|t| t.parse::<f64>().ok())
            .map(|seconds| (seconds * 1000.0).round())
            .filter(|ms| ms.is_finite() && ms.abs() < 9.0e15)
        {
            let _ = write!(out, " {millis:.0}");
        }
        out.push('\n');
    }
}

/// The index of the `}` closing the label set `text` starts with, skipping quoted values
/// and their escapes.
fn label_set_end(text: &str) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::metrics::info::Info;
    use prometheus_client::registry::Unit;

    use super::*;

    #[test]
    fn prometheus_scrapers_get_openmetrics_and_everyone_else_the_old_text() {
        let table = [
            (None, Format::Text004),
            (Some("*/*"), Format::Text004),
            (Some("text/plain; version=0.0.4"), Format::Text004),
            (Some("application/json"), Format::Text004),
            (Some(""), Format::Text004),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            // Prometheus 2.43 and later.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                Format::OpenMetrics,
            ),
            // Prometheus 2.42 and earlier.
            (
                Some(
                    "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,\
                     */*;q=0.1",
                ),
                Format::OpenMetrics,
            ),
            // A server configured to prefer the old format.
            (
                Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"),
                Format::Text004,
            ),
            (Some("application/openmetrics-text;q=0"), Format::Text004),
            (Some("application/openmetrics-text;q=abc"), Format::Text004),
            (Some("APPLICATION/OpenMetrics-Text"), Format::OpenMetrics),
        ];
        for (accept, want) in table {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn a_huge_accept_header_is_read_only_in_part() {
        let mut accept = "text/plain,".repeat(MAX_MEDIA_RANGES);
        accept.push_str("application/openmetrics-text");
        assert_eq!(Format::negotiate(Some(&accept)), Format::Text004);
    }

    fn sample_registry() -> Registry {
        let mut registry = Registry::with_prefix("demo");
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("requests", "Requests handled", requests.clone());
        requests
            .get_or_create(&vec![("path".to_owned(), "a\"b\\c\nd}".to_owned())])
            .inc();
        let latency = Histogram::new([0.1, 1.0]);
        registry.register_with_unit(
            "latency",
            "Time per request",
            Unit::Seconds,
            latency.clone(),
        );
        latency.observe(0.5);
        registry.register(
            "build",
            "Build facts",
            Info::new(vec![("version".to_owned(), "1.2.3".to_owned())]),
        );
        let depth = Gauge::<i64>::default();
        registry.register("depth", "Queue depth", depth.clone());
        depth.set(-3);
        registry
    }

    #[test]
    fn the_old_text_format_renames_counters_and_info_and_drops_what_it_lacks() {
        let registry = sample_registry();
        let om = render(&registry, Format::OpenMetrics).expect("encode");
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE demo_requests counter\n"), "{om}");
        assert!(om.contains("# UNIT demo_latency_seconds seconds\n"), "{om}");
        let text = render(&registry, Format::Text004).expect("encode");
        let want = "\
# HELP demo_requests_total Requests handled.
# TYPE demo_requests_total counter
demo_requests_total{path=\"a\\\"b\\\\c\\nd}\"} 1
# HELP demo_latency_seconds Time per request.
# TYPE demo_latency_seconds histogram
demo_latency_seconds_sum 0.5
demo_latency_seconds_count 1
demo_latency_seconds_bucket{le=\"0.1\"} 0
demo_latency_seconds_bucket{le=\"1.0\"} 1
demo_latency_seconds_bucket{le=\"+Inf\"} 1
# HELP demo_build_info Build facts.
# TYPE demo_build_info gauge
demo_build_info{version=\"1.2.3\"} 1
# HELP demo_depth Queue depth.
# TYPE demo_depth gauge
demo_depth -3
";
        assert_eq!(text, want);
    }

    #[test]
    fn exemplars_created_samples_and_timestamps_are_rewritten() {
        let om = "\
# HELP x Things.
# TYPE x counter
x_total{a=\"1 # {not an exemplar}\"} 3 # {trace_id=\"abc\"} 1.0 1700000000.5
x_created 1700000000.0
y 2 1700000000.25
# HELP z Orphan help.
# EOF
ignored 1
";
        let text = to_text_004(om);
        assert_eq!(
            text,
            "# HELP x_total Things.\n# TYPE x_total counter\n\
             x_total{a=\"1 # {not an exemplar}\"} 3\n\
             y 2 1700000000250\n\
             # HELP z Orphan help.\n"
        );
    }

    #[test]
    fn malformed_lines_are_dropped_not_echoed() {
        let text = to_text_004("{a=\"1\"} 2\nx{a=\"unterminated 1\nname_only\n");
        assert_eq!(text, "");
    }

    proptest::proptest! {
        #[test]
        fn any_label_value_survives_the_rewrite(value in "\\PC{0,40}") {
            let mut registry = Registry::default();
            let family = Family::<Vec<(String, String)>, Gauge>::default();
            registry.register("g", "A gauge", family.clone());
            family.get_or_create(&vec![("v".to_owned(), value.clone())]).set(7);
            let text = render(&registry, Format::Text004).expect("encode");
            let sample = text.lines().find(|l| l.starts_with("g{")).expect("sample line");
            proptest::prop_assert!(sample.ends_with("} 7"), "{}", sample);
        }
    }
}
