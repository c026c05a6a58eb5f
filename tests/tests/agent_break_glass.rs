//! Break-glass end to end: an operator authors `break-glass-enable` with `bosunctl job
//! new|sign` (stock `ssh-keygen -Y sign`), the real hub forwards it, the in-process agent
//! checks it and has the helper's real verb write the expiring line beneath a temp root;
//! the hub raises `break_glass_open`, then `break_glass_closed` after a signed
//! `break-glass-disable`. A job signed by a key the host does not trust is refused and never
//! reaches the helper. What the operator runs through the door, with the real support shell
//! (`bosun-support`), reaches the hub's audit trail naming the door. (Expiry on the clock
//! seam: `agentd/tests/break_glass.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use serde_json::Value;

/// The hub's alerts of `kind`.
async fn alerts(hub: &RealHub, kind: &str) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_job_opens_the_door_the_hub_hears_and_a_signed_disable_closes_it() {
    let (_sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let spool = files.dir.path().join("support-commands.jsonl");
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(&format!(
        "[break_glass]\nspool = {spool:?}\nscan_interval_seconds = 1\n"
    ));
    std::fs::write(&files.config_path, config).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let host_s = host.to_string();
    let door_key = OperatorKey::new("oncall@desk");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let key_param = format!("ssh_public_key={}", public.trim());

    // Signed by a key this host does not trust: refused, nothing written.
    let mallory = OperatorKey::new("mallory@example");
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=let me in",
    ];
    let forged = submit(&hub, &mallory, files.dir.path(), &args).await;
    let result = job_result(&hub, host, forged).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "unknown_signer", "{result}");
    assert!(files.helper.break_glass_keys().is_none());
    assert!(!files.helper.verbs().contains(&"break_glass_open"));

    // The operator's signed job.
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=poll loop wedged",
    ];
    let before = jiff::Timestamp::now();
    let enable = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, enable).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let line = files.helper.break_glass_keys().expect("the door is open");
    let key_blob = public.split_whitespace().nth(1).unwrap();
    assert!(
        line.starts_with("expiry-time=\"")
            && line.contains(&format!(
                ",restrict,pty,command=\"/usr/libexec/bosun/bosun-support --session {enable}\" ssh-ed25519 "
            )),
        "{line}"
    );
    assert!(line.contains(key_blob) && line.ends_with(&format!(" bosun-break-glass {enable}\n")));
    assert!(
        !line.contains("oncall@desk"),
        "the comment is not carried over: {line}"
    );
    // The deadline is the job's duration from when the agent accepted it, in UTC.
    let expiry = result["output"]["expires_at"].as_str().unwrap();
    let expiry: jiff::Timestamp = expiry.parse().unwrap();
    let hour = jiff::SignedDuration::from_hours(1);
    assert!(expiry >= before + hour && expiry <= jiff::Timestamp::now() + hour);
    assert!(line.contains(&format!("\"{}\"", expiry.strftime("%Y%m%d%H%M%SZ"))));

    eventually(
        Duration::from_secs(30),
        "the hub raises break_glass_open",
        || async { !alerts(&hub, "break_glass_open").await.is_empty() },
    )
    .await;
    let open = alerts(&hub, "break_glass_open").await;
    let message = open[0]["message"].as_str().unwrap();
    assert!(
        message.contains("SHA256:") && message.contains("poll loop wedged"),
        "{message}"
    );

    // The operator logs in: sshd runs the line's forced command, the support shell, with
    // what the client asked. One support command runs (through a stand-in for sudo here),
    // anything else is refused; both reach the hub's audit trail, naming the door.
    let session = enable.to_string();
    assert_eq!(support_shell(&files, &session, &spool, "status"), 0);
    assert_eq!(support_shell(&files, &session, &spool, "bash -i"), 2);
    let path = format!("/v1/admin/audit?host={host}&limit=500");
    let commands = || async {
        let (_, page) = hub.admin(reqwest::Method::GET, &path, None).await;
        page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["action"] == "break_glass.command")
            .map(|e| e["detail"].clone())
            .collect::<Vec<Value>>()
    };
    eventually(
        Duration::from_secs(30),
        "the hub's audit trail holds both commands",
        || async { commands().await.len() == 2 },
    )
    .await;
    // Newest first; each names the door it came through.
    let trail = commands().await;
    assert_eq!(trail[0]["detail"]["command"], "refused", "{trail:?}");
    assert_eq!(trail[0]["detail"]["status"], Value::Null, "{trail:?}");
    assert_eq!(trail[1]["detail"]["command"], "status", "{trail:?}");
    assert_eq!(trail[1]["detail"]["status"], 0, "{trail:?}");
    assert!(
        trail.iter().all(|e| e["job_id"] == session.as_str()),
        "each row names the door {session}: {trail:?}"
    );

    // The signed disable closes it early.
    let args = ["--kind", "break-glass-disable", "--host", &host_s];
    let disable = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, disable).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["removed"], true, "{result}");
    assert!(files.helper.break_glass_keys().is_none());
    eventually(
        Duration::from_secs(30),
        "the hub raises break_glass_closed",
        || async { !alerts(&hub, "break_glass_closed").await.is_empty() },
    )
    .await;
    let closed = alerts(&hub, "break_glass_closed").await;
    let message = closed[0]["message"].as_str().unwrap();
    assert!(
        message.contains("a signed break-glass-disable"),
        "{message}"
    );
    assert_eq!(alerts(&hub, "break_glass_open").await.len(), 1);
    agent.stop().await;
}

/// Runs the workspace's `bosun-support` as the door's forced command does: the session the
/// line names, `asked` as the client's command, a stand-in for sudo that succeeds.
fn support_shell(files: &AgentFiles, session: &str, spool: &std::path::Path, asked: &str) -> i32 {
    use std::os::unix::fs::PermissionsExt as _;
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join("bosun-support");
    assert!(
        built.is_file(),
        "{} is missing: build the workspace's binaries first",
        built.display()
    );
    let sudo = files.dir.path().join("sudo");
    std::fs::write(&sudo, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::process::Command::new(built)
        .args(["--session", session, "--spool"])
        .arg(spool)
        .arg("--sudo")
        .arg(&sudo)
        .env("SSH_ORIGINAL_COMMAND", asked)
        .output()
        .unwrap()
        .status
        .code()
        .unwrap()
}
