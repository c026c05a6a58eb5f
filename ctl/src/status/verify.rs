//! The verification lines of `bosunctl status` and `bosunctl hosts show`: under each guest,
//! the newest verification of its backups on each tier (decisions 0079, 0103), from the
//! report's `verifications`.

use bosun_proto::admin::HostDetail;
use bosun_proto::verify::{VerifyOutcome, VerifyReport};
use jiff::Timestamp;
use uuid::Uuid;

use crate::table;

/// One line per tier `guest_id`'s backups were verified on:
/// `verify <tier>  ok 3m ago, took 420ms`, `verify <tier>  FAILED 2m ago: <detail>; last ok 1h
/// ago`, or `verify <tier>  could not run 1m ago: <detail>; last ok never`.
pub fn guest_lines(host: &HostDetail, guest_id: Uuid, now: Timestamp) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    let mut rows: Vec<&VerifyReport> = report
        .verifications
        .iter()
        .filter(|v| v.guest_id == guest_id)
        .collect();
    rows.sort_by(|a, b| a.tier.cmp(&b.tier));
    rows.into_iter()
        .map(|v| format!("    verify {}  {}", v.tier, summary(v, now)))
        .collect()
}

/// The host's verification count by judgment: `3 ok, 1 FAILED, 1 could not run` (`none`
/// without any). A verification counts `ok` only when it ran and passed: one that could not
/// run (`error`) or whose outcome is unknown is counted as such, never as ok, so the summary
/// agrees with the per-tier lines under it.
pub fn host_summary(host: &HostDetail) -> String {
    let Some(report) = host
        .last_report
        .as_ref()
        .filter(|r| !r.verifications.is_empty())
    else {
        return "none".to_owned();
    };
    let (mut ok, mut failed, mut error, mut unknown) = (0, 0, 0, 0);
    for v in &report.verifications {
        let counter = if v.judged_failed() {
            &mut failed
        } else {
            match v.outcome {
                VerifyOutcome::Ok => &mut ok,
                VerifyOutcome::Failed => &mut failed,
                VerifyOutcome::Error => &mut error,
                VerifyOutcome::Unknown => &mut unknown,
            }
        };
        *counter += 1;
    }
    let mut parts = vec![format!("{ok} ok")];
    for (count, word) in [
        (failed, "FAILED"),
        (error, "could not run"),
        (unknown, "unknown"),
    ] {
        if count > 0 {
            parts.push(format!("{count} {word}"));
        }
    }
    parts.join(", ")
}

/// `ok 3m ago, took 420ms`, with `: <detail>; last ok <age>` otherwise.
fn summary(v: &VerifyReport, now: Timestamp) -> String {
    let word = match v.outcome {
        VerifyOutcome::Ok => "ok",
        VerifyOutcome::Failed => "FAILED",
        VerifyOutcome::Error => "could not run",
        VerifyOutcome::Unknown => "unknown",
    };
    let mut text = format!(
        "{word} {}, took {}ms",
        table::ago(v.finished_at, now),
        v.duration_ms
    );
    if v.outcome != VerifyOutcome::Ok {
        let detail: String = v
            .detail
            .chars()
            .map(|c| {
                if bosun_proto::inert::is_control(c) {
                    ' '
                } else {
                    c
                }
            })
            .take(200)
            .collect();
        if !detail.trim().is_empty() {
            text.push_str(&format!(": {}", detail.trim()));
        }
        let last = v
            .last_ok_at
            .map_or_else(|| "never".to_owned(), |at| table::ago(at, now));
        text.push_str(&format!("; last ok {last}"));
        if v.outcome == VerifyOutcome::Error && v.judged_failed() {
            text.push_str(" (the last verification that ran FAILED)");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: VerifyOutcome) -> VerifyReport {
        VerifyReport {
            guest_id: Uuid::nil(),
            tier: "pbs1".into(),
            finished_at: "2026-11-20T03:00:00Z".parse().unwrap(),
            outcome,
            duration_ms: 420,
            detail: "verification failed - please check the log for details\u{1b}[2J".into(),
            last_ok_at: None,
            last_failed_at: None,
            first_at: "2026-11-19T03:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_failure_says_so_with_its_detail_and_last_ok() {
        let now = "2026-11-20T03:02:00Z".parse().unwrap();
        assert_eq!(
            summary(&report(VerifyOutcome::Ok), now),
            "ok 2m ago, took 420ms"
        );
        let text = summary(&report(VerifyOutcome::Failed), now);
        assert!(
            text.starts_with("FAILED 2m ago, took 420ms: verification failed"),
            "{text}"
        );
        assert!(text.ends_with("; last ok never"), "{text}");
        assert!(
            !text.contains('\u{1b}'),
            "control characters are blanked: {text:?}"
        );
    }
}
