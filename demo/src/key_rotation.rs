//! Keys rotate while the agent keeps polling.
//!
//! The hub's key: the operator stages a new key and signs the pin set naming it (the hub cannot:
//! a pin set is the operator's decision), the agent learns it from its next poll answer and
//! says so, the operator activates it once
//! `bosun-hubd cert status` shows every live host holds it, the hub serves it without a
//! restart, the agent carries on under it, and the old key is retired. `bosunctl` is then
//! pointed at the new key pin, as an operator would.
//!
//! The host's key: the operator asks for a new one after a suspected leak
//! (`bosunctl hosts rotate-key`); the agent makes it, sends the hub its hash, presents it, and
//! the old key stops working.

use std::path::Path;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::narrate::Narrator;
use super::scenario::check;
use super::stack::{self, HubInfo};
use super::{DemoError, children::Children};

/// Runs `bosun-hubd cert …` with `args` and `--data out/hub`; gives what it printed.
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
) -> Result<HubInfo, DemoError> {
    let document = out.join("hub-pins.json");
    let document_arg = document.display().to_string();
    let staged = cert(
        bins,
        out,
        &[
            "rotate",
            "stage",
            "--name",
            "hub.demo",
            "--document",
            &document_arg,
        ],
    )
    .await?;
    let next = line_value(&staged, "staged:")
        .ok_or_else(|| DemoError::Check(format!("cert rotate stage printed no pin: {staged}")))?
        .to_owned();
    n.detail(format!(
        "$ bosun-hubd cert rotate stage --document hub-pins.json → staged {next}"
    ));
    sign_and_publish(bins, out, &document).await?;
    n.detail("$ ssh-keygen -Y sign -n bosun-policy@v1 hub-pins.json; bosun-hubd cert rotate publish --document hub-pins.json → the signed pin set goes out in poll answers");

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
    let held = status
        .lines()
        .find(|l| l.starts_with("staged"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    n.detail(format!("$ bosun-hubd cert status → {held}"));

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
    let rotated = HubInfo {
        fingerprint: next.clone(),
        ..hub.clone()
    };
    stack::ctl_hub_init(bins, out, &rotated).await?;
    polls_on(
        children,
        (bins, out),
        host_id,
        "the agent to poll under the new key",
    )
    .await?;
    n.detail("$ bosunctl --fingerprint spki:… hosts show → the agent polls on under the new key");

    let retired = cert(
        bins,
        out,
        &["rotate", "retire", "--document", &document_arg],
    )
    .await?;
    check(!retired.contains("enroll them again"), || {
        format!("a host missed the rotation: {retired}")
    })?;
    sign_and_publish(bins, out, &document).await?;
    n.detail("$ bosun-hubd cert rotate retire → the old key is announced no more; every host holds the new one");
    Ok(rotated)
}

/// The operator signs the pin set at `document` with their own key
/// (`ssh-keygen -Y sign -n bosun-policy@v1`) and the hub publishes the signed bytes.
async fn sign_and_publish(bins: &Path, out: &Path, document: &Path) -> Result<(), DemoError> {
    let key = out.join("operator/id_ed25519").display().to_string();
    let document_arg = document.display().to_string();
    let _ = std::fs::remove_file(out.join("hub-pins.json.sig"));
    stack::run_captured(
        Path::new("ssh-keygen"),
        &[
            "-q",
            "-Y",
            "sign",
            "-f",
            &key,
            "-n",
            "bosun-policy@v1",
            &document_arg,
        ],
        &[],
        None,
    )
    .await?;
    let published = cert(
        bins,
        out,
        &["rotate", "publish", "--document", &document_arg],
    )
    .await?;
    check(published.contains("published:"), || {
        format!("cert rotate publish printed: {published}")
    })
}

/// Waits until the hub saw the host poll again (`bosunctl hosts show`'s `last_seen` moves).
async fn polls_on(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    host_id: Uuid,
    what: &str,
) -> Result<(), DemoError> {
    let limit = Duration::from_secs(30);
    let host = host_id.to_string();
    let seen = |detail: &serde_json::Value| detail["last_seen"].as_str().map(str::to_owned);
    let before = seen(&stack::ctl(bins, out, &["hosts", "show", &host]).await?);
    let deadline = Instant::now() + limit;
    loop {
        let now = seen(&stack::ctl(bins, out, &["hosts", "show", &host]).await?);
        if now.is_some() && now != before {
            return Ok(());
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: what.to_owned(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The host key `host.json` in `state_dir` holds.
fn host_key_in(state_dir: &Path) -> Result<String, DemoError> {
    let path = state_dir.join("host.json");
    let text = std::fs::read_to_string(&path).map_err(|source| DemoError::Artifact {
        path: path.clone(),
        source,
    })?;
    let identity: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| DemoError::Check(format!("{} is not JSON: {e}", path.display())))?;
    identity["host_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| DemoError::Check(format!("{} holds no host key", path.display())))
}

/// The hub's answer to `key` on the host's escrow endpoint, which changes nothing: 404 (no
/// blob kept) for a key it accepts, 401 for one it refuses.
async fn escrow_status(hub: &HubInfo, host_id: Uuid, key: &str) -> Result<u16, DemoError> {
    let tls = bosunctl::tls::pinned(&hub.fingerprint).map_err(|e| DemoError::Hub(Box::new(e)))?;
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| DemoError::Http {
            what: "a client pinned to the hub",
            source,
        })?;
    let response = client
        .get(format!("{}/v1/hosts/{host_id}/escrow", hub.url))
        .bearer_auth(key)
        .send()
        .await
        .map_err(|source| DemoError::Http {
            what: "the host's escrow endpoint",
            source,
        })?;
    Ok(response.status().as_u16())
}

/// An operator rotates the host's key after a suspected leak: `bosunctl hosts rotate-key`; the
/// agent makes a new key, sends the hub its hash, presents it, and the old key stops working —
/// the agent never stops polling.
pub(super) async fn host_key(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    hub: &HubInfo,
    state_dir: &Path,
    host_id: Uuid,
) -> Result<(), DemoError> {
    let host = host_id.to_string();
    let old = host_key_in(state_dir)?;
    // The operator names the host as the hub knows it.
    let shown = stack::ctl(bins, out, &["hosts", "show", &host]).await?;
    let hostname = shown["hostname"]
        .as_str()
        .ok_or_else(|| DemoError::Check(format!("hosts show answered {shown}")))?
        .to_owned();
    let asked = stack::ctl(bins, out, &["hosts", "rotate-key", &hostname]).await?;
    check(asked["result"] == "key_rotation_requested", || {
        format!("hosts rotate-key answered {asked}")
    })?;
    n.detail(format!(
        "$ bosunctl hosts rotate-key {hostname} → {}: the agent's next poll answer asks for a new key",
        asked["result"].as_str().unwrap_or_default()
    ));

    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    while host_key_in(state_dir)? == old || state_dir.join("host-key-next.json").exists() {
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the agent to replace its host key".to_owned(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new = host_key_in(state_dir)?;
    let events = stack::ctl(bins, out, &["events", "--host", &host]).await?;
    // Listed newest first; told in the order they happened.
    let mut rotation: Vec<(u64, &str)> = events
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| Some((e["seq"].as_u64()?, e["kind"].as_str()?)))
                .filter(|(_, kind)| kind.starts_with("host.key"))
                .collect()
        })
        .unwrap_or_default();
    rotation.sort_unstable();
    let kinds: Vec<&str> = rotation.into_iter().map(|(_, kind)| kind).collect();
    check(kinds.contains(&"host.key_rotated"), || {
        format!("the hub recorded no host.key_rotated event: {events}")
    })?;
    n.detail(format!(
        "the agent made a key, sent the hub its SHA-256 only, then presented it: events {}",
        kinds.join(", ")
    ));
    let (old_status, new_status) = (
        escrow_status(hub, host_id, &old).await?,
        escrow_status(hub, host_id, &new).await?,
    );
    check(old_status == 401 && new_status != 401, || {
        format!("the hub answers the old key {old_status}, the new one {new_status}")
    })?;
    polls_on(
        children,
        (bins, out),
        host_id,
        "the agent to poll with its new key",
    )
    .await?;
    n.detail("the old key is refused (401), the new one in host.json accepted; the agent polls on");
    Ok(())
}
