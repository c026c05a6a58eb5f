//! Every read command's text fits a terminal. A real hub holds what the demo leaves in it: a
//! PBS target whose id carries its certificate's 32-byte fingerprint, its password sealed into
//! desired state (an armored age ciphertext), a report that refuses a second target and whose
//! verification of a guest on the PBS target failed, the alerts that raises (one acknowledged
//! with a long note, one silenced with a long reason), a job with a long result, an artifact
//! and an enrollment token. Then every read command `bosunctl` has is run through the real
//! binary: each line of its text is at most 100 columns, `status --check`'s one line at most
//! 254; with `--wide` the same commands print lines far wider (so the fixture is wide), and
//! `--output json` keeps the ciphertext whole.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

/// The demo's PBS target: a token, a server, a datastore and the certificate's fingerprint.
const PBS: &str = "backup@pbs!bosun@pbs.demo:store1#AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";
/// A target the signed plan does not name: refused.
const NFS: &str = "nas.hub.example:/exfil";
const GUEST: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";
/// The columns a line may take, and the monitoring line.
const COLUMNS: usize = 100;
const CHECK: usize = 254;
/// A long operator text (a note, a reason).
const LONG: &str = "the PBS at the second site answers its certificate but refuses the token; \
    the storage team rotates the datastore's credentials tonight, ticket OPS-4711, and the \
    verification is expected back tomorrow morning after the maintenance window closes";

async fn ctl(hub: &Fixture, args: &[&str]) -> std::process::Output {
    hub.run(args).await
}

async fn ok(hub: &Fixture, args: &[&str]) -> String {
    let out = ctl(hub, args).await;
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn operator_key(dir: &Path) -> String {
    let key = dir.join("id_ed25519");
    if !key.exists() {
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op@example", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success());
    }
    key.display().to_string()
}

/// The PBS password sealed for the PBS target to a fresh recipient: the armored ciphertext.
async fn sealed(hub: &Fixture) -> String {
    let dir = hub.dir.path();
    let secret = dir.join("pbs-password");
    std::fs::write(&secret, "pbs-6d1c0a0f2b7e4e49a1d2\n").unwrap();
    let recipient = age::x25519::Identity::generate().to_public().to_string();
    let args = [
        "secret",
        "seal",
        "--host",
        "pve-width",
        "--type",
        "pbs",
        "--durable-id",
        PBS,
        "--file",
        secret.to_str().unwrap(),
        "--key",
        &operator_key(dir),
        "--recipient",
        &recipient,
    ];
    let out = ok(hub, &args).await;
    let start = out.find("-----BEGIN AGE ENCRYPTED FILE-----").unwrap();
    let end = out.find("-----END AGE ENCRYPTED FILE-----").unwrap();
    out[start..end + "-----END AGE ENCRYPTED FILE-----".len()].to_owned()
}

/// The example desired state with the PBS target (its password sealed) and the refused NFS
/// share as tiers.
fn desired(ciphertext: &str) -> Value {
    let mut doc: Value =
        serde_json::from_str(include_str!("../../docs/proto/desired.json")).unwrap();
    doc["storage"] = json!([
        {
            "type": "pbs", "durable_id": PBS, "class": "slow", "role": "pbs-offsite",
            "label": "offsite PBS", "state": "attached", "credentials": ciphertext,
            "policy": {"schedule": "hourly", "retention": {"keep_last": 3}},
        },
        {
            "type": "nfs", "durable_id": NFS, "class": "slow", "role": "vzdump-target",
            "state": "attached", "policy": {"schedule": "hourly", "retention": {"keep_last": 3}},
        },
    ]);
    doc["backup_policy"] = json!({
        "schedule": "01:00", "retention": {"keep_last": 2}, "further_tiers": [PBS, NFS],
    });
    doc
}

/// The example poll with a report that refuses the NFS share and whose verification of the
/// guest on the PBS target failed.
fn poll_body() -> Value {
    let mut body: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    let now = jiff::Timestamp::now();
    let at = |minutes: i64| (now - jiff::SignedDuration::from_mins(minutes)).to_string();
    let r = &mut body["report"];
    r["seq"] = json!(now.as_millisecond());
    r["refused"] = json!([{
        "kind": "storage_target", "name": NFS,
        "reason": "the signed data plan does not name this target: it is never registered, mounted, written or read (sign a plan that names it: `bosunctl policy sign-plan`)",
    }]);
    r["storage"] = json!([
        {"durable_id": PBS, "status": "unreachable"},
        {"durable_id": NFS, "status": "refused", "reason": "not_in_plan"},
    ]);
    r["verifications"] = json!([{
        "guest_id": GUEST, "tier": PBS, "finished_at": at(2), "outcome": "failed",
        "duration_ms": 251, "detail": "verification failed - please check the log for details",
        "first_at": at(600),
    }]);
    r["data_plan"] = json!({
        "serial": 4, "issued_at": at(600), "signer": "SHA256:HXZ7awmk5RlIxUjCAIAxmio/9jJ7Nw79pX7xWCGbWMo",
        "targets": [PBS], "min_interval_seconds": 10,
    });
    body
}

/// Queues a signed `break-glass-disable` job and answers it as the agent would, failed with
/// a long detail; gives its id.
async fn failed_job(hub: &Fixture, host: Uuid, key: &str) -> Uuid {
    let dir = hub.dir.path();
    let job_id = Uuid::new_v4();
    let file = dir.join("job.json");
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(5),
    );
    std::fs::write(
        &file,
        json!({
            "schema": "bosun.job/v1", "job_id": job_id, "kind": "break-glass-disable",
            "target": {"host_id": host}, "params": {}, "nonce": job_id.simple().to_string(),
            "not_before": not_before, "expires_at": expires_at,
        })
        .to_string(),
    )
    .unwrap();
    let signed = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "bosun-job@v1", "-f"])
        .arg(operator_key(dir))
        .arg(&file)
        .status()
        .unwrap();
    assert!(signed.success());
    let sig = file.with_extension("json.sig");
    ok(
        hub,
        &[
            "job",
            "submit",
            file.to_str().unwrap(),
            sig.to_str().unwrap(),
            "--skip-checks",
        ],
    )
    .await;
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/jobs/{job_id}/result", hub.url))
        .bearer_auth(key)
        .json(&json!({
            "schema": "bosun.job-result/v1", "job_id": job_id, "outcome": "rejected",
            "finished_at": jiff::Timestamp::now(),
            "detail": "unknown_signer: the job signature was refused: the document was signed by key SHA256:8FTpi/98VyJFVATdNTnMcfRF1Qt6T9qflRrk46SVqM0, which is not an allowed signer of this host",
        }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    job_id
}

/// The widest line of `out`, in columns (characters), and the line.
fn widest(out: &str) -> (usize, String) {
    out.lines()
        .map(|l| (l.chars().count(), l.to_owned()))
        .max_by_key(|(n, _)| *n)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_command_fits_a_terminal_and_wide_and_json_keep_everything() {
    let hub = start_hub().await;
    let (host, key) = hub.enroll("pve-width").await;
    let ciphertext = sealed(&hub).await;
    let file = hub.dir.path().join("desired.json");
    std::fs::write(&file, desired(&ciphertext).to_string()).unwrap();
    ok(
        &hub,
        &[
            "desired",
            "set",
            "--host",
            "pve-width",
            file.to_str().unwrap(),
        ],
    )
    .await;
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(&key)
        .json(&poll_body())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let job = failed_job(&hub, host, &key).await.to_string();
    let open: Vec<Value> = serde_json::from_str(&ok(&hub, &["--json", "alerts"]).await).unwrap();
    let kinds: Vec<&str> = open.iter().filter_map(|a| a["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"verify_failed") && kinds.contains(&"storage_refused"),
        "{open:?}"
    );
    let refused = ["--kind", "storage_refused", "--note", LONG];
    let mut ack = vec!["alerts", "ack", "--host", "pve-width"];
    ack.extend(refused);
    ok(&hub, &ack).await;
    ok(
        &hub,
        &[
            "alerts",
            "silence",
            "--host",
            "pve-width",
            "--kind",
            "verify_failed",
            "--for",
            "7d",
            "--reason",
            LONG,
        ],
    )
    .await;
    let artifact = hub.dir.path().join("bosun-agentd");
    std::fs::write(&artifact, b"a new agent").unwrap();
    ok(&hub, &["artifact", "upload", artifact.to_str().unwrap()]).await;
    ok(
        &hub,
        &[
            "enroll-token",
            "create",
            "--ttl",
            "1h",
            "--note",
            &LONG[..120],
        ],
    )
    .await;

    ok(&hub, &["hosts", "label", "pve-width", "ring=canary"]).await;
    let digest = format!("digest=sha256:{}", "4b".repeat(32));
    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("status", vec!["status"]),
        ("hosts list", vec!["hosts", "list"]),
        ("hosts show", vec!["hosts", "show", "pve-width"]),
        (
            "hosts show --history",
            vec!["hosts", "show", "pve-width", "--history"],
        ),
        ("desired get", vec!["desired", "get", "pve-width"]),
        ("desired diff", vec!["desired", "diff", "pve-width"]),
        ("job list", vec!["job", "list", "--host", "pve-width"]),
        ("job show", vec!["job", "show", "--host", "pve-width", &job]),
        ("alerts", vec!["alerts"]),
        ("alerts --all", vec!["alerts", "--all"]),
        ("alerts silences", vec!["alerts", "silences"]),
        ("events", vec!["events"]),
        ("audit", vec!["audit", "--host", "pve-width"]),
        (
            "explain --order",
            vec!["explain", "--host", "pve-width", "--order"],
        ),
        ("enroll-token list", vec!["enroll-token", "list"]),
        ("tokens list", vec!["tokens", "list"]),
        ("artifact list", vec!["artifact", "list"]),
        (
            "fleet rollout --dry-run",
            vec![
                "fleet",
                "rollout",
                "--kind",
                "controller-update",
                "--label",
                "ring=canary",
                "--param",
                &digest,
                "--dry-run",
                "--max-hosts",
                "1",
            ],
        ),
    ];
    let mut too_wide = Vec::new();
    let mut widths = Vec::new();
    for (name, args) in &commands {
        // `desired diff` exits 11 (the host refuses part of it) after printing the diff.
        let out = ctl(&hub, args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!stdout.trim().is_empty(), "{name}: {}", text(&out));
        let (narrow, line) = widest(&stdout);
        let mut wide_args = vec!["--wide"];
        wide_args.extend(args);
        let (wide, _) = widest(&String::from_utf8_lossy(
            &ctl(&hub, &wide_args).await.stdout,
        ));
        widths.push(format!("{name:<24} {narrow:>5} {wide:>6}"));
        if narrow > COLUMNS {
            too_wide.push(format!("{name}: {narrow} columns: {line}"));
        }
    }
    let out = ctl(&hub, &["status", "--check"]).await;
    let check = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(check.lines().count(), 1, "{check}");
    let (check_width, _) = widest(&check);
    widths.push(format!("{:<24} {check_width:>5}", "status --check"));
    // What the closing note quotes: each command's widest line, and under --wide.
    println!(
        "widest text line per command (default, --wide):\n{}",
        widths.join("\n")
    );
    assert!(
        too_wide.is_empty(),
        "lines wider than {COLUMNS}:\n{}",
        too_wide.join("\n")
    );
    assert!(check_width <= CHECK, "{check_width}: {check}");
    assert!(check.starts_with("BOSUN CRITICAL - pve-width: "), "{check}");

    // The fixture is as wide as the demo's: under --wide the ciphertext and the fingerprints
    // print whole.
    let wide_diff = String::from_utf8_lossy(
        &ctl(&hub, &["--wide", "desired", "diff", "pve-width"])
            .await
            .stdout,
    )
    .into_owned();
    assert!(
        wide_diff.contains("-----BEGIN AGE ENCRYPTED FILE-----"),
        "{wide_diff}"
    );
    assert!(widest(&wide_diff).0 > 1000, "{wide_diff}");
    let wide_status = ok(&hub, &["--wide", "status"]).await;
    assert!(wide_status.contains(PBS), "{wide_status}");
    // Text shows the ciphertext as its size and fingerprint, and the target by a prefix.
    let diff = String::from_utf8_lossy(&ctl(&hub, &["desired", "diff", "pve-width"]).await.stdout)
        .into_owned();
    assert!(!diff.contains("BEGIN AGE"), "{diff}");
    assert!(
        diff.contains(&format!("age, {} bytes, sha256 ", ciphertext.len())),
        "{diff}"
    );
    assert!(diff.contains("pbs.demo:store1#AA:BB:CC:DD…"), "{diff}");
    // JSON keeps everything.
    let json: Value = serde_json::from_slice(
        &ctl(&hub, &["--json", "desired", "diff", "pve-width"])
            .await
            .stdout,
    )
    .unwrap();
    let changes = json["changes"].as_array().unwrap();
    assert!(
        changes.iter().any(|c| c["desired"].as_str().is_some_and(
            |d| d.contains(&ciphertext) || d.contains(&ciphertext.replace('\n', "\\n"))
        )),
        "{json}"
    );
    let alerts = ok(&hub, &["--json", "alerts"]).await;
    assert!(alerts.contains(PBS), "{alerts}");
    // A long note is wrapped, not cut.
    let shown = ok(&hub, &["alerts"]).await;
    assert!(shown.replace("\n    ", " ").contains(LONG), "{shown}");
}
