//! Correlation ids end to end, through the real `bosunctl` binary: `desired set
//! --correlation-id C --wait` follows the guests until the host applied the generation; C
//! reaches the agent in the poll answer (seen on a TLS wiretap), is recorded on the operations
//! the generation caused in the agent's journal, comes back to the hub in the agent's report
//! of its journal, and `bosunctl explain --host H --correlation-id C` finds them through the
//! hub (and `bosun-agentctl explain` in the host's own journal). `desired diff` shows a change the stopped agent has not applied and nothing once it
//! has; `--wait` gives up with exit 11 and a clear message while the agent is stopped. A
//! refused generation is never reported applied, and an agent restarted while the refusal
//! stands reports the generation it had applied, not none.
//!
//! Needs the workspace's binaries built (`cargo build --workspace --bins`; `make test` does).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use agent_support::tap::HubTap;
use agent_support::*;
use bosun_pvesim::SimConfig;
use serde_json::Value;
use uuid::Uuid;

/// `target/<profile>/bosunctl`, where cargo puts the workspace's binaries.
fn bosunctl_binary() -> PathBuf {
    workspace_binary("bosunctl")
}

/// `target/<profile>/NAME`, one of the workspace's binaries.
fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// Runs the real `bosunctl` against `hub` (its own empty home, the admin token from the
/// environment), bounded to a minute.
async fn bosunctl(hub: &RealHub, home: &Path, args: &[&str]) -> Output {
    let child = tokio::process::Command::new(bosunctl_binary())
        .args(["--hub-url", &hub.url, "--fingerprint", &hub.fingerprint])
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("BOSUN_ADMIN_TOKEN", &hub.admin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("bosunctl finishes within a minute")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `bosunctl` and asserts it succeeded; gives stdout and stderr.
async fn ok(hub: &RealHub, home: &Path, args: &[&str]) -> (String, String) {
    let out = bosunctl(hub, home, args).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "bosunctl {args:?} failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn write_desired(dir: &Path, name: &str, doc: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correlation_id_goes_from_bosunctl_to_the_journal_and_back_through_the_hub() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let tap = HubTap::start(&hub).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &tap.url, &hub.fingerprint, Some(&token));
    let home = tempfile::tempdir().unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let hostname = hub.host(host).await["hostname"]
        .as_str()
        .unwrap()
        .to_owned();
    let host_arg = host.to_string();

    // Generation 1, named by the operator, followed until applied.
    let alpha = Uuid::new_v4();
    let first = desired(&sim, &[(alpha, "alpha")], "running");
    let file = write_desired(files.dir.path(), "desired-1.json", &first);
    let (stdout, stderr) = ok(
        &hub,
        home.path(),
        &[
            "desired",
            "set",
            "--host",
            &hostname,
            &file,
            "--correlation-id",
            "change-1",
            "--wait",
            "--timeout",
            "120",
        ],
    )
    .await;
    assert!(stderr.contains("correlation id: change-1"), "{stderr}");
    assert!(
        stderr.contains(&format!("alpha ({alpha}): applied")),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("host {host} applied generation 1")),
        "{stdout}"
    );

    // The poll answer carried it to the agent.
    let answered = text(&tap.answered());
    assert!(
        answered.contains(r#""correlation_id":"change-1""#),
        "the poll answer names the correlation id"
    );
    // The agent's journal records it on the operation the generation caused.
    let journal = agent.handles.journal.recent_operations(100).await.unwrap();
    let provision = journal
        .iter()
        .map(|(op, _)| op)
        .find(|op| op.kind == "provision" && op.guest_id == Some(alpha.to_string()))
        .expect("alpha was provisioned");
    assert_eq!(provision.correlation_id.as_deref(), Some("change-1"));
    // Its report carried the operation back to the hub.
    eventually(
        Duration::from_secs(30),
        "the provision reported done",
        || {
            let hub = &hub;
            let op_id = provision.op_id;
            async move {
                let (_, records) = hub
                    .admin(
                        reqwest::Method::GET,
                        &format!("/v1/admin/hosts/{host}/operations?op={op_id}"),
                        None,
                    )
                    .await;
                records[0]["status"] == "done"
            }
        },
    )
    .await;
    let sent = text(&tap.received());
    assert!(
        sent.contains(&format!(r#""op_id":"{}""#, provision.op_id)),
        "the agent's poll carried the operation"
    );
    // `explain` through the hub: by correlation id and by operation id.
    let (stdout, _) = ok(
        &hub,
        home.path(),
        &[
            "--output",
            "json",
            "explain",
            "--host",
            &hostname,
            "--correlation-id",
            "change-1",
        ],
    )
    .await;
    let records: Value = serde_json::from_str(&stdout).unwrap();
    let provisioned = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["op_id"] == provision.op_id.to_string())
        .expect("the provision is found by its correlation id");
    assert_eq!(provisioned["kind"], "provision");
    assert_eq!(provisioned["correlation_id"], "change-1");
    assert!(
        provisioned["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "start" && s["state"] == "ok"),
        "{provisioned}"
    );
    let op_arg = provision.op_id.to_string();
    let (stdout, _) = ok(
        &hub,
        home.path(),
        &["explain", "--host", &host_arg, &op_arg],
    )
    .await;
    assert!(
        stdout.contains(&format!("operation {op_arg} (provision) done")),
        "{stdout}"
    );
    assert!(stdout.contains("correlation: change-1"), "{stdout}");
    // The host's own journal file says the same, read on the host by `bosun-agentctl`.
    let state_dir = files.state_dir.display().to_string();
    let out = tokio::process::Command::new(workspace_binary("bosun-agentctl"))
        .args([
            "explain",
            "--correlation-id",
            "change-1",
            "--state-dir",
            &state_dir,
        ])
        .output()
        .await
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains(&op_arg), "{stdout}");

    // `get` by name prints the generation with its correlation id.
    let (stdout, _) = ok(&hub, home.path(), &["desired", "get", &hostname]).await;
    assert!(stdout.contains("generation 1"), "{stdout}");
    assert!(stdout.contains("correlation id: change-1"), "{stdout}");
    let (stdout, _) = ok(&hub, home.path(), &["desired", "diff", &host_arg]).await;
    assert!(stdout.contains("no differences"), "{stdout}");

    // The agent stops: generation 2 cannot be applied, and --wait says so.
    agent.stop().await;
    let mut second = first.clone();
    second["guests"][0]["resources"]["memory_mib"] = 2048.into();
    let file = write_desired(files.dir.path(), "desired-2.json", &second);
    let out = bosunctl(
        &hub,
        home.path(),
        &[
            "desired",
            "set",
            "--host",
            &host_arg,
            &file,
            "--correlation-id",
            "change-2",
            "--wait",
            "--timeout",
            "3",
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(
        stderr.contains("did not apply generation 2: timed out after 3s")
            && stderr.contains("has not fetched it")
            && stderr.contains("alpha pending"),
        "{stderr}"
    );
    // The diff shows the pending change: desired, last applied, current.
    let (stdout, _) = ok(&hub, home.path(), &["desired", "diff", &hostname]).await;
    let row = stdout
        .lines()
        .find(|l| l.contains("memory_mib"))
        .unwrap_or_else(|| panic!("a memory row: {stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["alpha", "memory_mib", "2048", "1024", "1024", "pending"],
        "{stdout}"
    );
    let (stdout, _) = ok(
        &hub,
        home.path(),
        &["--output", "json", "desired", "diff", &host_arg],
    )
    .await;
    let diff: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(diff["in_sync"], false);
    assert_eq!(diff["desired_generation"], 2);
    assert_eq!(diff["applied_generation"], 1);

    // Back up: it applies generation 2, and nothing differs any more.
    let agent = InProcessAgent::start(&files.config_path).await;
    eventually(Duration::from_secs(60), "the diff is empty", || {
        let (hub, home, host_arg) = (&hub, home.path(), &host_arg);
        async move {
            let out = bosunctl(hub, home, &["desired", "diff", host_arg]).await;
            text(&out.stdout).contains("no differences")
        }
    })
    .await;
    let (stdout, _) = ok(
        &hub,
        home.path(),
        &[
            "--output",
            "json",
            "explain",
            "--host",
            &host_arg,
            "--correlation-id",
            "change-2",
        ],
    )
    .await;
    let records: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        records
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "set_spec" && r["status"] == "done"),
        "{records}"
    );

    // Generation 3 asks for a smaller root disk than the guest has: Bosun never shrinks one.
    // The agent refuses the field: --wait fails with why, and the host stays out of sync
    // everywhere (decision 0065).
    let mut third = second.clone();
    third["guests"][0]["resources"]["rootfs_gib"] = 6.into();
    let file = write_desired(files.dir.path(), "desired-3.json", &third);
    let out = bosunctl(
        &hub,
        home.path(),
        &[
            "desired",
            "set",
            "--host",
            &host_arg,
            &file,
            "--wait",
            "--timeout",
            "60",
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(
        stderr.contains("did not apply generation 3: 1 guest cannot be applied")
            && stderr.contains("rootfs_gib: the root disk is 10 GiB and is never shrunk"),
        "{stderr}"
    );
    // The agent reports the refused field with why, and never reports generation 3 applied:
    // the hub, `hosts list`, `status` and the diff all say the host is not in sync.
    eventually(Duration::from_secs(60), "the refusal reported", || {
        let hub = &hub;
        async move {
            let host = hub.host(host).await;
            host["last_report"]["refused"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["field"] == "rootfs_gib"))
        }
    })
    .await;
    // Passes keep running; the applied generation stays where it was.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let detail = hub.host(host).await;
    assert_eq!(detail["applied_generation"], 2, "{detail}");
    let refused = &detail["last_report"]["refused"][0];
    assert_eq!(refused["kind"], "guest_field", "{detail}");
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("never shrunk")),
        "{detail}"
    );
    let (list, _) = ok(&hub, home.path(), &["hosts", "list"]).await;
    let line = list
        .lines()
        .find(|l| l.contains(&host.to_string()[..8]))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.split_whitespace().any(|w| w == "no"), "{list}");
    let (status, _) = ok(&hub, home.path(), &["status"]).await;
    assert!(
        status.contains("NOT IN SYNC: the host refuses 1 part of desired state")
            && status.contains("rootfs_gib: the root disk is 10 GiB and is never shrunk"),
        "{status}"
    );
    let out = bosunctl(
        &hub,
        home.path(),
        &["--output", "json", "desired", "diff", &host_arg],
    )
    .await;
    assert_eq!(out.status.code(), Some(11), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("never shrunk"),
        "{}",
        text(&out.stderr)
    );
    let diff: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(diff["in_sync"], false, "{diff}");
    assert_eq!(diff["refused"][0]["field"], "rootfs_gib", "{diff}");
    let row = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == "rootfs_gib")
        .unwrap_or_else(|| panic!("a rootfs row: {diff}"));
    assert_eq!(
        (row["desired"].as_str(), row["current"].as_str()),
        (Some("6"), Some("10"))
    );
    assert_eq!(row["progress"], "refused");

    // The agent restarts while the refusal stands. It reports the generation it had applied
    // (the journal keeps it), never none: the hub's applied generation does not drop, and
    // every view still says the host refuses generation 3 with generation 2 applied.
    agent.stop().await;
    let restarted = jiff::Timestamp::now();
    let agent = InProcessAgent::start(&files.config_path).await;
    assert_eq!(
        agent.handles.reconcile.borrow().applied_generation,
        2,
        "the restarted agent starts from the generation it had applied"
    );
    // Two polls of the restarted agent, each with the refusal in its report.
    for poll in 1..=2 {
        let since = if poll == 1 {
            restarted
        } else {
            jiff::Timestamp::now()
        };
        eventually(
            Duration::from_secs(60),
            "a poll of the restarted agent, the refusal in its report",
            || {
                let hub = &hub;
                async move {
                    let host = hub.host(host).await;
                    let seen = host["last_seen"]
                        .as_str()
                        .and_then(|s| s.parse::<jiff::Timestamp>().ok());
                    seen.is_some_and(|seen| seen > since)
                        && host["last_report"]["refused"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|r| r["field"] == "rootfs_gib"))
                }
            },
        )
        .await;
        let detail = hub.host(host).await;
        assert_eq!(
            (&detail["desired_generation"], &detail["applied_generation"]),
            (&Value::from(3), &Value::from(2)),
            "after the restart the hub's applied generation stays: {detail}"
        );
    }
    let (status, _) = ok(&hub, home.path(), &["status"]).await;
    assert!(
        status.contains("generation desired 3 applied 2")
            && status.contains("NOT IN SYNC: the host refuses 1 part of desired state"),
        "{status}"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
