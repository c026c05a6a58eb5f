//! `bosunctl job show --host HOST JOB` and the columns `job list` adds from a job's result:
//! what an operator acts on (when it began, how long it ran, whether it timed out, whether
//! signing it again may help and why, the tail of its steps). Every value came from the host
//! through the hub and is printed escaped (`table`).

use bosun_proto::admin::JobRecord;
use bosun_proto::job::JobResult;

use crate::error::CtlError;
use crate::table;

/// A duration in milliseconds as `1.2s`, `3m04s` or `2h05m`.
pub fn duration(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "-".to_owned();
    };
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{}.{}s", secs, (ms % 1000) / 100),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// `yes`, `no` or `-` (no result yet) for the `RETRY` column.
pub fn retriable(result: Option<&JobResult>) -> String {
    match result {
        None => "-".to_owned(),
        Some(r) if r.retriable => "yes".to_owned(),
        Some(_) => "no".to_owned(),
    }
}

/// The outcome as shown: `failed (timed out)` for a job its timeout ended.
fn outcome(result: &JobResult) -> String {
    let outcome = serde_json::to_value(result.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    if result.timed_out {
        format!("{outcome} (timed out)")
    } else {
        outcome
    }
}

/// Prints one job as `key: value` lines, then its log tail, one step a line.
pub fn print(job: &JobRecord) -> Result<(), CtlError> {
    let mut fields = vec![
        ("job", job.job_id.to_string()),
        ("host", job.host_id.to_string()),
        ("kind", job.kind.clone()),
        ("state", job.state.as_str().to_owned()),
        ("priority", job.priority.to_string()),
        ("submitted", table::when(Some(job.submitted_at))),
        ("acked", table::when(job.acked_at)),
    ];
    let Some(result) = &job.result else {
        fields.push(("result", "- (not reported yet)".to_owned()));
        return table::print_fields(&fields);
    };
    fields.extend([
        ("outcome", outcome(result)),
        ("started", table::when(result.started_at)),
        ("finished", table::when(Some(result.finished_at))),
        ("duration", duration(result.duration_ms)),
        ("retriable", retriable(Some(result))),
        (
            "retry reason",
            table::or_dash(
                Some(&result.retriable_reason)
                    .filter(|r| !r.is_empty())
                    .map(String::as_str),
            ),
        ),
        ("detail", result.detail.clone()),
    ]);
    if !result.output.is_null() {
        fields.push(("output", result.output.to_string()));
    }
    table::print_fields(&fields)?;
    if result.log_tail.is_empty() {
        return Ok(());
    }
    crate::outln!("log tail:")?;
    for line in &result.log_tail {
        crate::outln!("  {line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(None), "-");
        assert_eq!(duration(Some(1_250)), "1.2s");
        assert_eq!(duration(Some(184_000)), "3m04s");
        assert_eq!(duration(Some(7_500_000)), "2h05m");
    }
}
