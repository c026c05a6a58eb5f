//! `bosunctl tokens` against a real hub on loopback: an admin makes named tokens with roles,
//! lists them (never a secret), rotates and revokes them; each token can do what its role
//! allows and is refused the rest (exit 6), a revoked or rotated-away one is refused (exit 7),
//! and `desired diff` says who set a generation.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;

use common::hub::{Fixture, start_hub};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Fixture {
    /// Runs bosunctl with `token` instead of the admin token.
    async fn run_as(&self, token: &str, args: &[&str]) -> Output {
        self.run_with(
            &[
                ("BOSUN_HUB_URL", &self.url),
                ("BOSUN_HUB_FINGERPRINT", &self.fingerprint),
                ("BOSUN_ADMIN_TOKEN", token),
            ],
            args,
        )
        .await
    }

    /// `tokens create --json`: the new token's secret.
    async fn create_token(&self, name: &str, role: &str) -> String {
        let out = self
            .run(&["tokens", "create", "--name", name, "--role", role, "--json"])
            .await;
        assert_exit(&out, 0);
        let created: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(created["name"], name);
        created["token"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_made_listed_rotated_and_revoked() {
    let hub = start_hub().await;

    // Text output: the secret once, on stdout, with the reminder on stderr.
    let out = hub
        .run(&[
            "tokens",
            "create",
            "--name",
            "noc",
            "--role",
            "viewer",
            "--expires-in",
            "30d",
        ])
        .await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let secret = text
        .lines()
        .find_map(|line| line.strip_prefix("token:"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(secret.starts_with("bsa_"), "{text}");
    assert!(text.contains("role:") && text.contains("viewer"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("shown once"));
    let alice = hub.create_token("alice", "operator").await;

    let out = hub.run(&["tokens", "list"]).await;
    assert_exit(&out, 0);
    let table = stdout(&out);
    assert!(table.starts_with("NAME"), "{table}");
    for want in ["admin", "alice", "operator", "noc", "viewer", "never"] {
        assert!(table.contains(want), "{want}: {table}");
    }
    assert!(!table.contains(&secret) && !table.contains(&alice) && !table.contains(&hub.admin));
    let out = hub.run(&["tokens", "list", "--json"]).await;
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["admin", "alice", "noc"]);

    // A viewer reads and is refused a change (403: exit 6), naming the role it lacks.
    assert_exit(&hub.run_as(&secret, &["hosts", "list"]).await, 0);
    let out = hub
        .run_as(&secret, &["enroll-token", "create", "--ttl", "10m"])
        .await;
    assert_exit(&out, 6);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("operator"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An operator may not manage tokens.
    assert_exit(&hub.run_as(&alice, &["tokens", "list"]).await, 6);

    // The operator sets desired state; the diff says who.
    let host = hub.enroll_agent("pve-tok-01").await;
    let desired = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/proto/desired.json");
    let out = hub
        .run_as(
            &alice,
            &[
                "desired",
                "set",
                "--host",
                &host.to_string(),
                desired.to_str().unwrap(),
            ],
        )
        .await;
    assert_exit(&out, 0);
    let out = hub.run(&["desired", "diff", "--host", "pve-tok-01"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("desired generation 1 (set by alice)"),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["desired", "get", "--host", "pve-tok-01"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("set by:         alice"),
        "{}",
        stdout(&out)
    );
    let out = hub
        .run(&["desired", "diff", "--host", "pve-tok-01", "--json"])
        .await;
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(diff["desired_set_by"], "alice");
    let out = hub
        .run(&["events", "--host", &host.to_string(), "--json"])
        .await;
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let change = events
        .iter()
        .find(|e| e["kind"] == "desired_changed")
        .unwrap();
    assert_eq!(change["detail"]["by"], "alice");

    // Rotating: the old secret is refused (401: exit 7), the new one works.
    let out = hub.run(&["tokens", "rotate", "alice", "--json"]).await;
    assert_exit(&out, 0);
    let rotated: Value = serde_json::from_slice(&out.stdout).unwrap();
    let new_alice = rotated["token"].as_str().unwrap().to_owned();
    assert_exit(&hub.run_as(&alice, &["hosts", "list"]).await, 7);
    assert_exit(&hub.run_as(&new_alice, &["hosts", "list"]).await, 0);

    // Revoking.
    let out = hub.run(&["tokens", "revoke", "noc"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("revoked"), "{}", stdout(&out));
    assert_exit(&hub.run_as(&secret, &["hosts", "list"]).await, 7);
    assert_exit(&hub.run(&["tokens", "revoke", "noc"]).await, 8);

    // The last admin token stays; bad names and roles never reach the hub.
    let out = hub.run(&["tokens", "revoke", "admin"]).await;
    assert_exit(&out, 6);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("last unexpired admin token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_exit(&hub.run(&["tokens", "revoke", "No Such"]).await, 4);
    assert_exit(
        &hub.run(&["tokens", "create", "--name", "x", "--role", "root"])
            .await,
        2,
    );
    assert_exit(
        &hub.run(&[
            "tokens",
            "create",
            "--name",
            "x",
            "--role",
            "viewer",
            "--expires-in",
            "10s",
        ])
        .await,
        4,
    );
}
