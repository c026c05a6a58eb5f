//! `bosunctl pve check` and `bosunctl pve setup` as commands: what they print and the exit
//! code they end with. What they do on the node is [`crate::pve_check`]'s and
//! [`crate::pve_setup`]'s.

use std::io::Write as _;

use bosun_pve::{BOSUN_AGENT_TOKEN_ID, RetryPolicy};
use secrecy::ExposeSecret as _;

use crate::error::CtlError;
use crate::pve_check::{PveCheckArgs, exit};
use crate::pve_setup::{Outcome, OutcomeJson, PveSetupArgs};

/// `bosunctl pve check`: runs the checks (Ctrl-C stops the scratch steps and cleans up),
/// prints the report, and fails with the report's exit code when a check did not pass.
pub async fn check(args: &PveCheckArgs, json: bool) -> Result<(), CtlError> {
    let cancel = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handler: never cancel.
            std::future::pending::<()>().await;
        }
    };
    let policy = RetryPolicy {
        // A restore or a backup of the golden image takes minutes on a real node, not hours.
        task_wait_limit: std::time::Duration::from_secs(30 * 60),
        ..RetryPolicy::default()
    };
    let report = crate::pve_check::check(args, policy, cancel).await?;
    // What the node answered is text from elsewhere: escaped as every print of bosunctl is.
    let text = if json || args.json {
        let mut text = serde_json::to_string_pretty(&report)
            .map_err(|e| CtlError::Output(std::io::Error::other(e)))?;
        text.push('\n');
        bosun_proto::inert::escape_json_text(&text).into_owned()
    } else {
        bosun_proto::inert::escape_but_newlines(&report.render_text()).into_owned()
    };
    // A reader that went away (`| head`) does not change the check's outcome or exit code.
    if let Err(err) = std::io::stdout().write_all(text.as_bytes())
        && err.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(CtlError::Output(err));
    }
    match report.exit_code {
        exit::OK => Ok(()),
        code => Err(CtlError::PveCheck {
            exit: code,
            summary: if code == exit::UNREACHABLE {
                "could not reach or authenticate to the node".to_owned()
            } else {
                "a check failed".to_owned()
            },
        }),
    }
}

/// `bosunctl pve setup`: runs setup, prints what it did (as text, or one JSON object with
/// `json`), also when a step failed; fails (exit 12) when something wider than Bosun needs is
/// left on the node.
pub async fn setup(args: &PveSetupArgs, json: bool) -> Result<(), CtlError> {
    let mut outcome = Outcome::default();
    let result = crate::pve_setup::setup(args, RetryPolicy::default(), &mut outcome).await;
    let token = outcome
        .secret
        .as_ref()
        .map(|s| format!("{BOSUN_AGENT_TOKEN_ID}={}", s.expose_secret()));
    let text = if json {
        let doc = OutcomeJson {
            format: 1,
            changed: outcome.changed,
            wider_left: outcome.wider_left,
            lines: &outcome.lines,
            token,
        };
        let mut text = serde_json::to_string_pretty(&doc)
            .map_err(|e| CtlError::Output(std::io::Error::other(e)))?;
        text.push('\n');
        bosun_proto::inert::escape_json_text(&text).into_owned()
    } else {
        let mut text = String::new();
        for line in &outcome.lines {
            text.push_str(&bosun_proto::inert::escape_but_newlines(line));
            text.push('\n');
        }
        if let Some(token) = token {
            text.push_str(&token);
            text.push('\n');
        }
        text
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(CtlError::Output)?;
    out.flush().map_err(CtlError::Output)?;
    result?;
    if outcome.wider_left > 0 {
        return Err(CtlError::PveCheck {
            exit: crate::exit::CHECK_FAILED,
            summary: format!(
                "{} thing(s) wider than Bosun needs left on the node",
                outcome.wider_left
            ),
        });
    }
    Ok(())
}
