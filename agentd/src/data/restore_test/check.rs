//! The restore check (DESIGN §8, decision 0032): once the scratch guest has stayed up, with
//! every link still down, the guest's own check — the fixed path
//! [`RESTORE_CHECK_PATH`](bosun_proto::helper::RESTORE_CHECK_PATH) its controller installs —
//! runs inside it through the helper's `restore_check`, bounded in time and output. A guest
//! that boots proves the archive restores; only the guest knows whether its data is whole.
//!
//! | the helper's answer                         | the test                              |
//! |---------------------------------------------|---------------------------------------|
//! | the check exited 0                          | `passed`                              |
//! | another exit status, a signal, its limit    | `failed`, with its first lines        |
//! | no check installed                          | `not_checked` (booted, not checked)   |
//! | no `[helper]` configured                    | `not_checked`                         |
//! | the helper refused or failed                | `failed`, with its words              |

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::helper::{
    CheckSeconds, Output, RESTORE_CHECK_PATH, Request, RestoreCheck, Vmid as HelperVmid,
    restore_check_lines,
};
use bosun_pve::Vmid;
use serde_json::json;

use crate::links::helper::HelperClient;
use crate::ops::journal::TestOutcome;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// How long the helper call may take beyond the check's own limit.
const HELPER_SLACK: Duration = Duration::from_secs(60);

/// How a test ends once its scratch guest stayed up, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    /// `Passed`, `Failed` or `NotChecked`.
    pub(super) outcome: TestOutcome,
    /// Why it failed or was not checked.
    pub(super) detail: Option<String>,
}

/// Runs the guest's restore check in scratch guest `vmid` for at most `limit`, as the journaled
/// step `restore_check`; `Err` when the helper could not run it (the test then fails).
pub(super) async fn run(
    op: &OpJournal,
    helper: Option<&HelperClient>,
    vmid: Vmid,
    limit: Duration,
) -> Result<Verdict, StepError> {
    let Some(helper) = helper else {
        return Ok(Verdict {
            outcome: TestOutcome::NotChecked,
            detail: Some(format!(
                "booted, not checked: no [helper] is configured to run the guest's restore check ({RESTORE_CHECK_PATH})"
            )),
        });
    };
    let seconds = limit
        .as_secs()
        .clamp(u64::from(CheckSeconds::MIN), u64::from(CheckSeconds::MAX));
    let request = HelperVmid::new(u64::from(vmid.get()))
        .and_then(|guest| {
            Ok(Request::RestoreCheck(RestoreCheck {
                vmid: guest,
                timeout_secs: CheckSeconds::new(seconds)?,
            }))
        })
        .map_err(|e| StepError::Other {
            op_id: op.op_id(),
            step: "restore_check".into(),
            reason: e.to_string(),
        })?;
    let helper = helper
        .clone()
        .with_timeout(Duration::from_secs(seconds).saturating_add(HELPER_SLACK));
    let answer = op
        .local(
            StepName::RestoreCheck,
            json!({ "vmid": vmid.get(), "path": RESTORE_CHECK_PATH, "timeout_secs": seconds }),
            async {
                helper.call(&request).await.map_err(|e| {
                    format!(
                        "the helper could not run the restore check: {}",
                        error_chain(&e)
                    )
                })
            },
        )
        .await?;
    Ok(judge(&answer, seconds))
}

/// The verdict on the helper's answer (see the module docs).
pub(super) fn judge(answer: &Output, seconds: u64) -> Verdict {
    let Output::RestoreChecked {
        installed,
        exit_code,
        timed_out,
        output,
        ..
    } = answer
    else {
        return Verdict {
            outcome: TestOutcome::Failed,
            detail: Some("the helper answered the restore check with another verb's output".into()),
        };
    };
    if !installed {
        return Verdict {
            outcome: TestOutcome::NotChecked,
            detail: Some(format!(
                "booted, not checked: the guest installs no restore check at {RESTORE_CHECK_PATH}"
            )),
        };
    }
    // The helper bounds what it answers; so does the agent, whatever it is sent.
    let lines = restore_check_lines(&output.join("\n"));
    let said = if lines.is_empty() {
        "no output".to_owned()
    } else {
        lines.join(" | ")
    };
    let failed = |why: String| Verdict {
        outcome: TestOutcome::Failed,
        detail: Some(format!("{why}: {said}")),
    };
    match (exit_code, timed_out) {
        (Some(0), false) => Verdict {
            outcome: TestOutcome::Passed,
            detail: None,
        },
        (_, true) => failed(format!(
            "the guest's restore check did not finish within {seconds} s and was killed"
        )),
        (Some(code), false) => failed(format!(
            "the guest's restore check exited with status {code}"
        )),
        (None, false) => failed("the guest's restore check was killed by a signal".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(installed: bool, exit_code: Option<i32>, timed_out: bool, output: &[&str]) -> Output {
        Output::RestoreChecked {
            vmid: HelperVmid::new(105).unwrap(),
            installed,
            exit_code,
            timed_out,
            output: output.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn only_a_check_that_exits_zero_passes() {
        let passed = judge(&answer(true, Some(0), false, &["ok"]), 300);
        assert_eq!(passed.outcome, TestOutcome::Passed);
        let failed = judge(
            &answer(
                true,
                Some(1),
                false,
                &[
                    "/srv/shop/orders.db: FAILED",
                    "sha256sum: WARNING: 1 computed checksum did NOT match",
                ],
            ),
            300,
        );
        assert_eq!(failed.outcome, TestOutcome::Failed);
        assert_eq!(
            failed.detail.as_deref(),
            Some(
                "the guest's restore check exited with status 1: /srv/shop/orders.db: FAILED | sha256sum: WARNING: 1 computed checksum did NOT match"
            )
        );
        let slow = judge(&answer(true, None, true, &[]), 30);
        assert_eq!(slow.outcome, TestOutcome::Failed);
        assert_eq!(
            slow.detail.as_deref(),
            Some("the guest's restore check did not finish within 30 s and was killed: no output")
        );
        // Exit 0 at the limit is still a kill.
        assert_eq!(
            judge(&answer(true, Some(0), true, &[]), 30).outcome,
            TestOutcome::Failed
        );
        assert_eq!(
            judge(&answer(true, None, false, &[]), 30).outcome,
            TestOutcome::Failed
        );
        let none = judge(&answer(false, None, false, &[]), 300);
        assert_eq!(none.outcome, TestOutcome::NotChecked);
        assert!(none.detail.unwrap().starts_with("booted, not checked"));
        let other = judge(
            &Output::GuestIdentityReset {
                vmid: HelperVmid::new(105).unwrap(),
            },
            1,
        );
        assert_eq!(other.outcome, TestOutcome::Failed);
    }

    #[test]
    fn a_flood_of_output_is_cut_to_its_first_lines() {
        let long = "x".repeat(10_000);
        let lines: Vec<&str> = std::iter::repeat_n(long.as_str(), 500).collect();
        let verdict = judge(&answer(true, Some(2), false, &lines), 300);
        let detail = verdict.detail.unwrap();
        assert!(
            detail.len()
                < bosun_proto::helper::RESTORE_CHECK_MAX_LINES
                    * (bosun_proto::helper::RESTORE_CHECK_MAX_LINE_CHARS + 3)
                    + 100,
            "{}",
            detail.len()
        );
    }
}
