//! `fleet rollout --dry-run` against a real hub: the plan and its table count a host's jobs
//! from one source (a controller update gets a job for each running guest), and an agent
//! update naming a binary the hub does not hold is refused before anything is planned.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use serde_json::{Value, json};

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

/// A digest no guest's controller runs yet.
const DIGEST: &str = "sha256:4b1e3a4c3e0b5a2f9d6e8c7b1a0f2e3d4c5b6a7980f1e2d3c4b5a69788f9e0d1";

/// Enrolls `pve-fleet`, labelled `ring=canary`, and reports it with two running guests and a
/// helper.
async fn host_with_two_guests(hub: &Fixture) {
    let (host, key) = hub.enroll("pve-fleet").await;
    let mut body: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    body["report"]["seq"] = json!(jiff::Timestamp::now().as_millisecond());
    let guests = body["report"]["guests"].as_array_mut().unwrap();
    // Each runs a controller (a controller update goes only to guests that do).
    guests[0]["controller_digest"] = json!(format!("sha256:{}", "1".repeat(64)));
    let mut second = guests[0].clone();
    second["guest_id"] = json!("6d2b1f0e-4c3a-4b5d-8e9f-0a1b2c3d4e5f");
    second["hostname"] = json!("acme-db");
    second["vmid"] = json!(102);
    guests.push(second);
    body["capabilities"] = json!({ "arch": "x86_64", "cpu_count": 8, "helper": true });
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let out = hub
        .run(&["hosts", "label", "pve-fleet", "ring=canary"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
}

/// The JOBS cell of `hostname`'s row in the report table.
fn jobs_cell(table: &str, hostname: &str) -> Option<String> {
    let header = table.lines().find(|l| l.starts_with("HOSTNAME"))?;
    let column = header.split_whitespace().position(|w| w == "JOBS")?;
    // "HOST ID" is two words in the header, one in a row.
    let row = table.lines().find(|l| l.starts_with(hostname))?;
    row.split_whitespace().nth(column - 1).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_counts_jobs_once_and_checks_the_agent_binary_is_at_the_hub() {
    let hub = start_hub().await;
    host_with_two_guests(&hub).await;
    let rollout = |extra: &[&str]| {
        let mut args = vec![
            "fleet",
            "rollout",
            "--label",
            "ring=canary",
            "--dry-run",
            "--max-hosts",
            "1",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };

    // A controller update: one job for each running guest, in the plan and in the table.
    let param = format!("digest={DIGEST}");
    let args = rollout(&["--kind", "controller-update", "--param", &param]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = hub.run(&args).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[ring=canary], 2 jobs"), "{stdout}");
    assert_eq!(
        jobs_cell(&stdout, "pve-fleet").as_deref(),
        Some("2"),
        "{stdout}"
    );
    let mut json_args = args.clone();
    json_args.push("--json");
    let report: Value = serde_json::from_slice(&hub.run(&json_args).await.stdout).unwrap();
    assert_eq!(report["hosts"][0]["job_count"], 2, "{report}");
    assert_eq!(report["hosts"][0]["outcome"], "planned", "{report}");

    // An agent update naming a binary the hub does not hold is refused before any plan.
    let zeros = format!("sha256={}", "0".repeat(64));
    let args = rollout(&[
        "--kind",
        "agent-update",
        "--param",
        "version=0.2.0",
        "--param",
        &zeros,
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = hub.run(&args).await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("holds no artifact") && stderr.contains("artifact upload"),
        "{stderr}"
    );

    // Uploaded, the same binary's digest plans one job.
    let file = hub.dir.path().join("bosun-agentd");
    std::fs::write(&file, b"the next agent").unwrap();
    let out = hub
        .run(&["--json", "artifact", "upload", file.to_str().unwrap()])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let uploaded: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sha = format!("sha256={}", uploaded["sha256"].as_str().unwrap());
    let args = rollout(&[
        "--kind",
        "agent-update",
        "--param",
        "version=0.2.0",
        "--param",
        &sha,
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = hub.run(&args).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        jobs_cell(&stdout, "pve-fleet").as_deref(),
        Some("1"),
        "{stdout}"
    );
}
