//! A job's result as the host page shows it: its outcome and when it ended, how long it ran,
//! whether its timeout ended it, whether signing it again may help (with why, on hover), its
//! detail, and the tail of its steps folded away (`<details>`, no script). Every text came
//! from the host; maud escapes it for HTML and the page is made inert as a whole
//! (`layout::inert`); the hub bounded the log tail when it stored the result.

use bosun_proto::job::JobResult;
use jiff::Timestamp;
use maud::{Markup, html};

use super::layout;

/// The result cell of one job.
pub(super) fn cell(result: &JobResult, now: Timestamp) -> Markup {
    html! {
        (layout::wire(Some(&result.outcome))) " "
        (layout::moment(Some(result.finished_at), now))
        @if let Some(ms) = result.duration_ms {
            " " span class="muted" { "took " (layout::took(ms / 1000)) }
        }
        @if result.timed_out {
            " " (layout::badge("timed out", "danger"))
        }
        @if result.outcome != bosun_proto::job::JobOutcome::Succeeded {
            " " span title=(result.retriable_reason) {
                (layout::badge(if result.retriable { "retriable" } else { "not retriable" },
                    if result.retriable { "warn" } else { "danger" }))
            }
        }
        @if !result.detail.trim().is_empty() { ": " (result.detail) }
        @if !result.log_tail.is_empty() {
            details class="log-tail" {
                summary { "Log tail (" (result.log_tail.len()) " lines)" }
                pre class="mono" {
                    @for line in &result.log_tail { (line) "\n" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_result_shows_its_reason_and_an_escaped_tail() {
        let result: JobResult = serde_json::from_value(serde_json::json!({
            "schema": "bosun.job-result/v1", "job_id": uuid::Uuid::nil(), "outcome": "failed",
            "finished_at": "2026-11-20T00:01:05Z", "detail": "timed out",
            "started_at": "2026-11-20T00:00:00Z", "duration_ms": 65_000,
            "retriable": true, "retriable_reason": "timed out: sign it again",
            "timed_out": true, "log_tail": ["step stop ok", "<script>alert(1)</script>"],
        }))
        .unwrap();
        let now: Timestamp = "2026-11-20T00:02:00Z".parse().unwrap();
        let html = cell(&result, now).into_string();
        assert!(html.contains("took 1m 5s"), "{html}");
        assert!(
            html.contains("timed out") && html.contains(">retriable<"),
            "{html}"
        );
        assert!(
            html.contains("title=\"timed out: sign it again\""),
            "{html}"
        );
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<script>"),
            "{html}"
        );
        assert!(html.contains("Log tail (2 lines)"), "{html}");
    }
}
