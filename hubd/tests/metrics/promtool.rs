//! `promtool check metrics` over a scrape, shared by the hub's and the agent's metrics tests
//! (`tests/tests/agent_metrics.rs` includes this file). `promtool` comes from Debian's
//! `prometheus` package (`scripts/install-deps`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` on `text`; gives its exit status and everything it printed.
pub fn check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's `prometheus` package; scripts/install-deps installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let mut printed = String::from_utf8_lossy(&out.stdout).into_owned();
    printed.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), printed)
}

/// A text-format 0.0.4 scrape passes `promtool check metrics` without a word.
pub fn assert_clean_text(text: &str) {
    let (ok, printed) = check_metrics(text);
    assert!(
        ok && printed.trim().is_empty(),
        "promtool: {printed}\n{text}"
    );
}

/// An OpenMetrics scrape: `promtool check metrics` parses only the 0.0.4 format, in which an
/// OpenMetrics counter's `# HELP x` names the family, not its `x_total` sample; so the one
/// complaint it may have is "`x_total` no help text" for a counter `x` that has help. Anything
/// else (a parse error, another lint) fails.
pub fn assert_openmetrics_only_counter_naming(text: &str) {
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let helped = |name: &str| {
        text.lines()
            .any(|l| l.starts_with(&format!("# HELP {name} ")))
    };
    let (_, printed) = check_metrics(text);
    for line in printed.lines().filter(|l| !l.trim().is_empty()) {
        let explained = line
            .strip_suffix(" no help text")
            .and_then(|sample| sample.strip_suffix("_total"))
            .is_some_and(|family| counters.contains(&family) && helped(family));
        assert!(
            explained,
            "promtool: {line}\n(all of it: {printed})\n{text}"
        );
    }
}

/// The names of the metric families a scrape exposes (0.0.4: counters end in `_total`).
pub fn family_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The value of the sample `series` (name with its labels, exactly as exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
