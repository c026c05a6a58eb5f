//! Reading one disk's SMART status through the helper (`smart_status`, which runs
//! `smartctl --json --all`) and judging it.
//!
//! smartctl's exit status is a bit mask (smartctl(8), "RETURN VALUES"): bit 3 "SMART status
//! check returned DISK FAILING", bit 4 "prefail attributes <= threshold"; the JSON carries
//! `smart_status.passed`. A disk is `failing` when either bit is set or `passed` is false,
//! `passed` when `passed` is true, and `unreadable` when there is no verdict at all (the helper
//! refused or failed, or smartctl gave no `smart_status`).

use bosun_errchain::error_chain;
use bosun_proto::health::{MAX_DETAIL_LEN, SmartReading, SmartState};
use bosun_proto::helper::{BlockDevice, Output, Request, SmartStatus};
use jiff::Timestamp;

use crate::links::helper::HelperClient;

/// Exit-status bit: the health self-assessment says the disk is failing.
const DISK_FAILING: i32 = 1 << 3;
/// Exit-status bit: a pre-failure attribute is at or below its threshold.
const PREFAIL_AT_THRESHOLD: i32 = 1 << 4;

/// Reads `device` through `helper` and judges the answer.
pub async fn read(helper: &HelperClient, device: &BlockDevice, now: Timestamp) -> SmartReading {
    let request = Request::SmartStatus(SmartStatus {
        device: device.clone(),
    });
    let (state, detail) = match helper.call(&request).await {
        Ok(Output::Smart {
            report,
            exit_status,
            ..
        }) => judge(&report, exit_status),
        Ok(other) => (
            SmartState::Unreadable,
            format!("the helper answered smart_status with {other:?}"),
        ),
        Err(e) => (
            SmartState::Unreadable,
            format!("reading SMART through the helper: {}", error_chain(&e)),
        ),
    };
    SmartReading {
        device: device.as_str().to_owned(),
        state,
        detail: clean(&detail),
        checked_at: now,
    }
}

/// The verdict of `smartctl --json --all` output and its exit status.
pub fn judge(report: &serde_json::Value, exit_status: i32) -> (SmartState, String) {
    let passed = report
        .get("smart_status")
        .and_then(|s| s.get("passed"))
        .and_then(serde_json::Value::as_bool);
    let model = report
        .get("model_name")
        .and_then(serde_json::Value::as_str)
        .map_or_else(String::new, |m| format!("{m}: "));
    let mut failing = Vec::new();
    if passed == Some(false) || exit_status & DISK_FAILING != 0 {
        failing.push("the SMART health self-assessment says FAILED".to_owned());
    }
    if exit_status & PREFAIL_AT_THRESHOLD != 0 {
        failing.push("a pre-failure attribute is at or below its threshold".to_owned());
    }
    if !failing.is_empty() {
        return (
            SmartState::Failing,
            format!("{model}{}", failing.join("; ")),
        );
    }
    match passed {
        Some(true) => (SmartState::Passed, format!("{model}PASSED")),
        _ => {
            let messages = smartctl_messages(report);
            (
                SmartState::Unreadable,
                format!(
                    "{model}smartctl gave no health verdict (exit status {exit_status}){messages}"
                ),
            )
        }
    }
}

/// smartctl's own error messages (`smartctl.messages[].string`), a few of them.
fn smartctl_messages(report: &serde_json::Value) -> String {
    let texts: Vec<&str> = report
        .pointer("/smartctl/messages")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("string").and_then(serde_json::Value::as_str))
        .take(3)
        .collect();
    if texts.is_empty() {
        String::new()
    } else {
        format!(": {}", texts.join("; "))
    }
}

/// `text` without control characters, at most [`MAX_DETAIL_LEN`] bytes.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_DETAIL_LEN));
    for c in text.chars().map(|c| {
        if bosun_proto::inert::is_control(c) {
            ' '
        } else {
            c
        }
    }) {
        if out.len() + c.len_utf8() > MAX_DETAIL_LEN {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn verdicts_from_the_json_and_the_exit_bits() {
        let passed = json!({"model_name": "WDC WD40", "smart_status": {"passed": true}});
        let failed = json!({"smart_status": {"passed": false}});
        let none = json!({"smartctl": {"messages": [{"string": "Read Device Identity failed", "severity": "error"}]}});
        let table: &[(&serde_json::Value, i32, SmartState)] = &[
            (&passed, 0, SmartState::Passed),
            // Bits 5–7 (past threshold crossings, error logs) are informative only.
            (&passed, 0b1110_0000, SmartState::Passed),
            // A SMART command failed (bit 2) but the verdict came through.
            (&passed, 0b100, SmartState::Passed),
            (&failed, 0, SmartState::Failing),
            (&passed, DISK_FAILING, SmartState::Failing),
            (&passed, PREFAIL_AT_THRESHOLD, SmartState::Failing),
            (&none, 0b100, SmartState::Unreadable),
            (&json!({}), 0, SmartState::Unreadable),
            (
                &json!({"smart_status": {"passed": "yes"}}),
                0,
                SmartState::Unreadable,
            ),
        ];
        for (report, exit, expected) in table {
            assert_eq!(judge(report, *exit).0, *expected, "{report} exit {exit}");
        }
        assert_eq!(judge(&passed, 0).1, "WDC WD40: PASSED");
        assert!(judge(&none, 4).1.contains("Read Device Identity failed"));
    }

    #[test]
    fn details_are_cleaned_and_bounded() {
        assert_eq!(clean("a\nb\u{1b}c"), "a b c");
        let long = "é".repeat(MAX_DETAIL_LEN);
        let cleaned = clean(&long);
        assert!(cleaned.len() <= MAX_DETAIL_LEN);
        assert!(cleaned.chars().all(|c| c == 'é'));
    }
}
