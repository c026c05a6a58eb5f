//! The hub's key rotates while the agent keeps polling: the operator stages a new key, the
//! agent learns it from its next poll answer and says so, the operator activates it once
//! `bosun-hubd cert status` shows every live host holds it, the hub serves it without a
//! restart, the agent carries on under it, and the old key is retired. `bosunctl` is then
//! pointed at the new key pin, as an operator would.

use std::path::Path;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::narrate::Narrator;
use super::scenario::check;
use super::stack::{self, HubInfo};
use super::{DemoError, children::Children};

/// Runs `bosun-hubd cert ARGS --data out/hub`; gives what it printed.
async fn cert(bins: &Path, out: &Path, args: &[&str]) -> Result<String, DemoError> {
    let data = out.join("hub").display().to_string();
    let mut full: Vec<&str> = vec!["cert"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--data", &data]);
    stack::run_captured(&stack::program(bins, "bosun-hubd")?, &full, &[], None).await
}

/// The value after `label` on the line of `text` that starts with it.
fn line_value<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
}

pub(super) async fn rotate(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    hub: &HubInfo,
    host_id: Uuid,
) -> Result<(), DemoError> {
    let staged = cert(bins, out, &["rotate", "stage", "--name", "hub.demo"]).await?;
    let next = line_value(&staged, "staged:")
        .ok_or_else(|| DemoError::Check(format!("cert rotate stage printed no pin: {staged}")))?
        .to_owned();
    n.detail(format!("$ bosun-hubd cert rotate stage → staged {next}"));

    // The agent learns the key from its next poll answer and says so in the one after.
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    let status = loop {
        let status = cert(bins, out, &["status"]).await?;
        if status
            .lines()
            .any(|l| l.starts_with("staged") && l.contains("held by 1 of 1 live hosts"))
        {
            break status;
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("the agent to hold the staged key ({status})"),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    n.detail("$ bosun-hubd cert status → the staged key is held by 1 of 1 live hosts");
    let _ = status;

    let activated = cert(bins, out, &["rotate", "activate"]).await?;
    check(
        line_value(&activated, "active:") == Some(next.as_str()),
        || format!("cert rotate activate made another key active: {activated}"),
    )?;
    let served = stack::wait_for_log_field(
        &out.join("logs/hubd.log"),
        "serving the hub's new key",
        "key_pin=",
        children,
    )
    .await?;
    check(served == next, || {
        format!("the hub serves {served}, not the activated {next}")
    })?;
    n.detail("$ bosun-hubd cert rotate activate → the hub serves the new key, no restart");

    // bosunctl is pointed at the new key pin; the agent keeps polling under the new key.
    stack::ctl_hub_init(
        bins,
        out,
        &HubInfo {
            fingerprint: next.clone(),
            ..hub.clone()
        },
    )
    .await?;
    let host = host_id.to_string();
    let seen = |detail: &serde_json::Value| detail["last_seen"].as_str().map(str::to_owned);
    let before = seen(&stack::ctl(bins, out, &["hosts", "show", &host]).await?);
    let deadline = Instant::now() + limit;
    loop {
        let now = seen(&stack::ctl(bins, out, &["hosts", "show", &host]).await?);
        if now.is_some() && now != before {
            break;
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the agent to poll under the new key".to_owned(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    n.detail("$ bosunctl --fingerprint spki:… hosts show → the agent polls on under the new key");

    let retired = cert(bins, out, &["rotate", "retire"]).await?;
    check(!retired.contains("enroll them again"), || {
        format!("a host missed the rotation: {retired}")
    })?;
    n.detail("$ bosun-hubd cert rotate retire → the old key is announced no more; every host holds the new one");
    Ok(())
}
