//! `bosunctl` against a real hub on loopback: every admin command, tables and `--json`,
//! pinning, and exit codes.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};

impl Fixture {
    fn config_path(&self) -> PathBuf {
        self.dir.path().join("ctl/ctl.json")
    }

    /// `bosunctl job submit [options] DOCUMENT SIGNATURE`.
    async fn submit_job(&self, options: &[&str], document: &Path, signature: &Path) -> Output {
        let mut args = vec!["job", "submit"];
        args.extend_from_slice(options);
        args.extend([document.to_str().unwrap(), signature.to_str().unwrap()]);
        self.run(&args).await
    }

    /// Enrolls a host that reports `audit` (its agent's audit entries) in one full report.
    async fn enroll_reporting(&self, hostname: &str, audit: Value) -> Uuid {
        self.enroll_with_report(hostname, serde_json::json!({ "audit": audit }))
            .await
    }

    /// Enrolls a host whose one full report carries `fields` (e.g. `audit`, `guests`).
    async fn enroll_with_report(&self, hostname: &str, fields: Value) -> Uuid {
        let (host, host_key) = self.enroll(hostname).await;
        let mut report = serde_json::json!({
            "schema": "bosun.report/v1", "seq": 1, "versions": { "agent": "0.1.0" }
        });
        for (key, value) in fields.as_object().unwrap() {
            report[key] = value.clone();
        }
        let resp = self
            .pinned_client()
            .post(format!("{}/v1/hosts/{host}/poll?wait=0", self.url))
            .bearer_auth(&host_key)
            .json(&serde_json::json!({ "schema": "bosun.poll/v1", "report": report }))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{:?}", resp.text().await);
        host
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// Makes `dir/NAME` (and `NAME.pub`), an ed25519 key, unless it exists.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    if !key.exists() {
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
    }
    key
}

/// An `allowed_signers` file `dir/NAME` listing `key`'s public half for `principal`.
fn signers_file(dir: &Path, name: &str, principal: &str, key: &Path) -> PathBuf {
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, format!("{principal} {public}")).unwrap();
    file
}

/// Signs `document` with the operator's key (`dir/operator_key`, made on first use).
fn sign(dir: &Path, document: &Path) -> PathBuf {
    let key = keygen(dir, "operator_key");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "bosun-job@v1", "-f"])
        .arg(&key)
        .arg(document)
        .status()
        .unwrap();
    assert!(status.success());
    document.with_extension("json.sig")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_work_end_to_end() {
    let hub = start_hub().await;
    let host = hub.enroll_agent("pve-ctl-01").await;

    let out = hub.run(&["hosts", "list"]).await;
    assert_ok(&out);
    let table = stdout(&out);
    assert!(table.starts_with("HOST ID"), "{table}");
    assert!(
        table.contains("pve-ctl-01") && table.contains("active") && table.contains("never"),
        "{table}"
    );

    let out = hub.run(&["hosts", "list", "--json"]).await;
    let hosts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hosts[0]["host_id"], host.to_string());

    // Desired state from a file.
    let desired = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/proto/desired.json");
    let out = hub
        .run(&[
            "desired",
            "set",
            "--host",
            &host.to_string(),
            desired.to_str().unwrap(),
            "--idempotency-key",
            "k1",
        ])
        .await;
    assert_ok(&out);
    assert!(stdout(&out).contains("generation 1"), "{}", stdout(&out));
    let out = hub
        .run(&[
            "desired",
            "set",
            "--host",
            &host.to_string(),
            desired.to_str().unwrap(),
            "--idempotency-key",
            "k1",
        ])
        .await;
    assert!(
        stdout(&out).contains("idempotent replay"),
        "{}",
        stdout(&out)
    );

    // A signed job: the exact file bytes and the ssh-keygen signature.
    let job_id = Uuid::new_v4();
    let job = hub.dir.path().join("job.json");
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(5),
    );
    std::fs::write(
        &job,
        format!(
            "{{\"schema\":\"bosun.job/v1\",\"job_id\":\"{job_id}\",\"kind\":\"break-glass-disable\",\
             \"target\":{{\"host_id\":\"{host}\"}},\"params\":{{}},\"nonce\":\"abcdefghijklmnop\",\
             \"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n"
        ),
    )
    .unwrap();
    let sig = sign(hub.dir.path(), &job);
    let out = hub
        .run(&[
            "job",
            "submit",
            job.to_str().unwrap(),
            sig.to_str().unwrap(),
        ])
        .await;
    assert_ok(&out);
    assert!(
        stdout(&out).contains(&format!("job {job_id} (break-glass-disable) queued")),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["job", "list", "--host", &host.to_string()]).await;
    assert!(stdout(&out).contains("queued"), "{}", stdout(&out));

    // A host is named the same way in every command: `--host`, or the argument.
    let by_flag = hub.run(&["hosts", "show", "--host", "pve-ctl-01"]).await;
    assert_ok(&by_flag);
    let out = hub.run(&["hosts", "show", &host.to_string()]).await;
    assert_ok(&out);
    assert_eq!(stdout(&by_flag), stdout(&out));
    let both = hub
        .run(&["hosts", "show", "pve-ctl-01", "--host", "pve-ctl-01"])
        .await;
    assert_exit(&both, 2);
    let out = hub.run(&["desired", "diff", "--host", "pve-ctl-01"]).await;
    assert_ok(&out);
    let out = hub.run(&["hosts", "show", &host.to_string()]).await;
    assert_ok(&out);
    let shown = stdout(&out);
    assert!(shown.contains("desired 1 / known 0 / applied 0"), "{shown}");
    assert!(shown.contains("pending jobs:  1"), "{shown}");

    let out = hub.run(&["events", "--host", &host.to_string()]).await;
    assert_ok(&out);
    for kind in ["enrolled", "desired_changed", "job_queued"] {
        assert!(stdout(&out).contains(kind), "{kind}: {}", stdout(&out));
    }
    let out = hub.run(&["alerts", "--json"]).await;
    assert_ok(&out);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        serde_json::json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_init_saves_a_private_config_that_later_commands_use() {
    let hub = start_hub().await;
    let config = hub.config_path();
    let token_file = hub.dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{}\n", hub.admin)).unwrap();
    // Only its owner may read a file holding the admin token.
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = hub
        .run_with(
            &[],
            &[
                "hub",
                "init",
                "--hub-url",
                &hub.url,
                "--fingerprint",
                &hub.fingerprint.to_uppercase(),
                "--admin-token-file",
                token_file.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
        )
        .await;
    assert_ok(&out);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let saved: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(
        saved["fingerprint"], hub.fingerprint,
        "normalized to lowercase hex"
    );

    let out = hub
        .run_with(
            &[("BOSUN_CTL_CONFIG", config.to_str().unwrap())],
            &["hosts", "list"],
        )
        .await;
    assert_ok(&out);
    assert!(!stdout(&out).contains(&hub.admin) && !stderr(&out).contains(&hub.admin));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_have_clear_messages_and_exit_codes() {
    let hub = start_hub().await;
    // Nothing configured.
    let out = hub.run_with(&[], &["hosts", "list"]).await;
    assert_exit(&out, 3);
    assert!(
        stderr(&out).contains("no hub URL configured"),
        "{}",
        stderr(&out)
    );
    // Reading this host's own journal is bosun-agentctl's now: the old form says where it went.
    for args in [
        &["explain", "0190a6b2-5c1e-7cc2-9d3a-6b1f0e2a4c11"][..],
        &[
            "explain",
            "0190a6b2-5c1e-7cc2-9d3a-6b1f0e2a4c11",
            "--state-dir",
            "/var/lib/bosun",
        ],
    ] {
        let out = hub.run_with(&[], args).await;
        assert_exit(&out, 4);
        assert!(
            stderr(&out).contains("`bosun-agentctl explain`"),
            "{}",
            stderr(&out)
        );
    }
    // Wrong pin: the TLS handshake is refused before any token is sent.
    let out = hub
        .run_with(
            &[
                ("BOSUN_HUB_URL", &hub.url),
                ("BOSUN_HUB_FINGERPRINT", &"ab".repeat(32)),
                ("BOSUN_ADMIN_TOKEN", &hub.admin),
            ],
            &["hosts", "list"],
        )
        .await;
    assert_exit(&out, 5);
    assert!(
        stderr(&out).contains("matches none of the pinned"),
        "{}",
        stderr(&out)
    );
    // Wrong token.
    let out = hub
        .run_with(
            &[
                ("BOSUN_HUB_URL", &hub.url),
                ("BOSUN_HUB_FINGERPRINT", &hub.fingerprint),
                ("BOSUN_ADMIN_TOKEN", "bsa_wrong"),
            ],
            &["hosts", "list"],
        )
        .await;
    assert_exit(&out, 7);
    assert!(
        stderr(&out).contains("401 unauthorized"),
        "{}",
        stderr(&out)
    );
    // Unknown host.
    let out = hub
        .run(&["hosts", "show", &Uuid::new_v4().to_string()])
        .await;
    assert_exit(&out, 8);
    assert!(
        stderr(&out).contains("unknown_host") && stderr(&out).contains("[request "),
        "{}",
        stderr(&out)
    );
    // Invalid desired file: refused locally, naming the field.
    let bad = hub.dir.path().join("bad.json");
    let mut doc: Value =
        serde_json::from_str(include_str!("../../docs/proto/desired.json")).unwrap();
    doc["guests"][0]["resources"]["memory_mib"] = 1.into();
    std::fs::write(&bad, doc.to_string()).unwrap();
    let out = hub
        .run(&[
            "desired",
            "set",
            "--host",
            &Uuid::new_v4().to_string(),
            bad.to_str().unwrap(),
        ])
        .await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("guests[0].resources.memory_mib"),
        "{}",
        stderr(&out)
    );
    // Unsigned job.
    let job = hub.dir.path().join("job.json");
    std::fs::write(&job, include_str!("../../docs/proto/job.json")).unwrap();
    let sig = hub.dir.path().join("job.json.sig");
    std::fs::write(&sig, "not a signature").unwrap();
    let out = hub
        .run(&[
            "job",
            "submit",
            job.to_str().unwrap(),
            sig.to_str().unwrap(),
        ])
        .await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("armored SSH signature"),
        "{}",
        stderr(&out)
    );
    // Usage error.
    let out = hub.run(&["hosts", "explode"]).await;
    assert_exit(&out, 2);
}

/// Writes a `kind` job for `host`, valid from two hours ago until `hours` from now.
fn write_job(dir: &Path, host: Uuid, kind: &str, hours: i64) -> (PathBuf, Uuid) {
    let guest = if kind == "break-glass-disable" {
        String::new()
    } else {
        format!(",\"guest_id\":\"{}\",\"vmid\":101", Uuid::new_v4())
    };
    let job_id = Uuid::new_v4();
    let file = dir.join(format!("job-{}.json", job_id.simple()));
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(2),
        now + jiff::SignedDuration::from_hours(hours),
    );
    std::fs::write(
        &file,
        format!(
            "{{\"schema\":\"bosun.job/v1\",\"job_id\":\"{job_id}\",\"kind\":\"{kind}\",\
             \"target\":{{\"host_id\":\"{host}\"{guest}}},\"params\":{{}},\"nonce\":\"{}\",\
             \"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n",
            job_id.simple()
        ),
    )
    .unwrap();
    (file, job_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_agent_would_refuse_is_refused_before_it_is_queued() {
    let hub = start_hub().await;
    let host = hub.enroll_agent("pve-submit-01").await;
    let dir = hub.dir.path();
    let pending = |out: &Output| stdout(out).matches("queued").count();

    // Expired an hour ago (signed while still valid, submitted too late).
    let (expired, _) = write_job(dir, host, "break-glass-disable", -1);
    let sig = sign(dir, &expired);
    let out = hub.submit_job(&[], &expired, &sig).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("job not submitted (expired)"),
        "{}",
        stderr(&out)
    );

    // Edited after signing (the kind changed): the signature no longer covers the bytes.
    let (edited, _) = write_job(dir, host, "force-backup", 5);
    let sig = sign(dir, &edited);
    let text = std::fs::read_to_string(&edited)
        .unwrap()
        .replace("force-backup", "decommission");
    std::fs::write(&edited, text).unwrap();
    let out = hub.submit_job(&[], &edited, &sig).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("job not submitted (signature)"),
        "{}",
        stderr(&out)
    );

    // A host the hub never enrolled.
    let (stranger, _) = write_job(dir, Uuid::new_v4(), "break-glass-disable", 5);
    let sig = sign(dir, &stranger);
    let out = hub.submit_job(&[], &stranger, &sig).await;
    assert_exit(&out, 8);

    // With an allowed_signers file configured, a key it does not list is refused.
    let (good, job_id) = write_job(dir, host, "break-glass-disable", 5);
    let sig = sign(dir, &good);
    let stranger = keygen(dir, "stranger_key");
    let other = signers_file(dir, "other_signers", "someone@example.com", &stranger);
    let out = hub
        .submit_job(&["--allowed-signers", other.to_str().unwrap()], &good, &sig)
        .await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("job not submitted (signature)"),
        "{}",
        stderr(&out)
    );

    // Nothing reached the hub's queue so far.
    let out = hub.run(&["job", "list", "--host", &host.to_string()]).await;
    assert_ok(&out);
    assert_eq!(pending(&out), 0, "{}", stdout(&out));

    let signers = signers_file(
        dir,
        "allowed_signers",
        "ops@example.com",
        &dir.join("operator_key"),
    );
    let out = hub
        .submit_job(
            &["--allowed-signers", signers.to_str().unwrap()],
            &good,
            &sig,
        )
        .await;
    assert_ok(&out);
    assert!(
        stdout(&out).contains(&format!("job {job_id} (break-glass-disable) queued"))
            && stdout(&out).contains("signed by ops@example.com"),
        "{}",
        stdout(&out)
    );

    // `job new` fills the vmid from the guest the host reports, and refuses another one.
    let guest = Uuid::new_v4();
    let reporting = hub
        .enroll_with_report(
            "pve-submit-02",
            serde_json::json!({ "guests": [
                { "guest_id": guest, "vmid": 123, "hostname": "web", "status": "running" }
            ] }),
        )
        .await;
    let doc = dir.join("backup-web.json");
    let backup_web = [
        "job",
        "new",
        "--kind",
        "force-backup",
        "--host",
        "pve-submit-02",
        "--guest",
        "web",
        "-o",
        doc.to_str().unwrap(),
    ];
    let out = hub.run(&backup_web).await;
    assert_ok(&out);
    let written: Value = serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
    assert_eq!(written["target"]["host_id"], reporting.to_string());
    assert_eq!(written["target"]["guest_id"], guest.to_string());
    assert_eq!(written["target"]["vmid"], 123);
    let out = hub
        .run(&[&backup_web[..], &["--vmid", "124"]].concat())
        .await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).contains("runs as vmid 123"),
        "{}",
        stderr(&out)
    );

    // `restore-bulk` names the volume and the archive; no other kind takes them.
    let doc = dir.join("restore-bulk.json");
    let restore_bulk = [
        "job",
        "new",
        "--kind",
        "restore-bulk",
        "--host",
        "pve-submit-02",
        "--guest",
        "web",
        "--volume",
        "media",
        "--archive",
        "bulk-media-2026_02_03-04_05_06.tar",
        "-o",
        doc.to_str().unwrap(),
    ];
    assert_ok(&hub.run(&restore_bulk).await);
    let written: Value = serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
    assert_eq!(written["kind"], "restore-bulk");
    assert_eq!(
        written["params"],
        serde_json::json!({"volume": "media", "archive": "bulk-media-2026_02_03-04_05_06.tar"})
    );
    assert_eq!(written["target"]["vmid"], 123);
    let mut other_volume = restore_bulk;
    other_volume[11] = "bulk-photos-2026_02_03-04_05_06.tar";
    assert_exit(&hub.run(&other_volume).await, 4);
    let out = hub
        .run(&[&backup_web[..], &["--volume", "media"]].concat())
        .await;
    assert_exit(&out, 4);
    assert!(stderr(&out).contains("restore-bulk"), "{}", stderr(&out));

    // `job new` with a mistyped kind lists the kinds.
    let out = hub
        .run(&[
            "job",
            "new",
            "--kind",
            "restore-naw",
            "--host",
            &host.to_string(),
            "-o",
            "x.json",
        ])
        .await;
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("[possible values: restore-now, decommission")
            && stderr(&out).contains("'restore-now'"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_check_answers_as_a_monitoring_plugin() {
    let hub = start_hub().await;
    let out = hub.run(&["status", "--check"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "BOSUN OK - 0 hosts ok | hosts=0 critical=0 warning=0\n"
    );

    // Enrolled, never polled: someone has to look, nothing is lost yet.
    hub.enroll_agent("pve-quiet").await;
    let out = hub.run(&["status", "--check"]).await;
    assert_exit(&out, 1);
    assert!(
        stdout(&out).starts_with("BOSUN WARNING - pve-quiet: never polled"),
        "{}",
        stdout(&out)
    );
    assert_eq!(stderr(&out), "", "the line on stdout is the whole answer");

    // A host reporting a lost guest is critical, whatever the others are.
    hub.enroll_with_report(
        "pve-lost",
        serde_json::json!({ "guests": [
            { "guest_id": Uuid::new_v4(), "vmid": 101, "hostname": "shop", "status": "lost" }
        ] }),
    )
    .await;
    let out = hub.run(&["status", "--check"]).await;
    assert_exit(&out, 2);
    assert!(
        stdout(&out)
            .starts_with("BOSUN CRITICAL - pve-lost: guest_lost shop; pve-quiet: never polled"),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["status"]).await;
    assert_ok(&out);
    assert!(
        stdout(&out).contains("health            critical: guest_lost shop"),
        "{}",
        stdout(&out)
    );
    // The lost guest is an open alert: listed by `alerts` and under `status`; the history
    // (`--all`) holds it too.
    let open_line = |text: &str| {
        text.lines()
            .any(|l| l.contains("guest_lost") && l.contains("pve-lost"))
    };
    assert!(stdout(&out).contains("open alerts:\n"), "{}", stdout(&out));
    let out = hub.run(&["alerts"]).await;
    assert_ok(&out);
    assert!(stdout(&out).starts_with("SINCE"), "{}", stdout(&out));
    assert!(open_line(&stdout(&out)), "{}", stdout(&out));
    // Its subject reads as the guest's name, with the start of its id to type back.
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.contains("guest_lost") && l.contains("shop (")),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["alerts", "--host", "pve-quiet"]).await;
    assert_ok(&out);
    assert!(
        stdout(&out).starts_with("no open alerts"),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["alerts", "--all", "--json"]).await;
    let history: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        history.iter().any(|a| a["kind"] == "guest_lost"),
        "{history:?}"
    );

    // The operator acknowledges it (one open guest_lost: no subject needed) and silences the
    // host's orphan alerts for a week; both show, and the event log has them.
    let out = hub
        .run(&[
            "alerts",
            "ack",
            "--host",
            "pve-lost",
            "--kind",
            "guest_lost",
            "--note",
            "restoring from PBS",
        ])
        .await;
    assert_ok(&out);
    assert!(
        stdout(&out).starts_with("acknowledged guest_lost on pve-lost"),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["alerts"]).await;
    assert!(
        stdout(&out).contains("restoring from PBS"),
        "{}",
        stdout(&out)
    );
    // Acknowledged, the lost guest no longer pages: the check is a WARNING, as the dashboard
    // and `hosts list` say.
    let out = hub.run(&["status", "--check"]).await;
    assert_exit(&out, 1);
    assert!(
        stdout(&out).starts_with("BOSUN WARNING - pve-lost: guest_lost shop"),
        "{}",
        stdout(&out)
    );
    let out = hub.run(&["hosts", "list"]).await;
    let row = stdout(&out)
        .lines()
        .find(|l| l.contains("pve-lost"))
        .unwrap_or_default()
        .to_owned();
    assert!(row.contains(" warning "), "{}", stdout(&out));
    let out = hub
        .run(&[
            "alerts",
            "silence",
            "--host",
            "pve-lost",
            "--kind",
            "guest_orphaned",
            "--for",
            "7d",
            "--reason",
            "own containers",
        ])
        .await;
    assert_ok(&out);
    let out = hub.run(&["alerts", "silences", "--json"]).await;
    let silences: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(silences.len(), 1, "{silences:?}");
    assert_eq!(silences[0]["kind"], "guest_orphaned");
    let id = silences[0]["id"].to_string();
    let out = hub
        .run(&[
            "alerts", "silence", "--host", "pve-lost", "--for", "31d", "--reason", "too long",
        ])
        .await;
    // Refused in the units typed, before the hub is asked.
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`31d` is outside 1m to 30d"),
        "{}",
        stderr(&out)
    );
    let out = hub.run(&["alerts", "unsilence", &id]).await;
    assert_ok(&out);
    let out = hub.run(&["alerts", "unsilence", &id]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown_silence") || stderr(&out).contains("no silence"),
        "{}",
        stderr(&out)
    );
    let out = hub.run(&["events", "--host", "pve-lost"]).await;
    for kind in ["alert_acknowledged", "alert_silenced", "alert_unsilenced"] {
        assert!(stdout(&out).contains(kind), "{kind}: {}", stdout(&out));
    }

    // A hub that cannot be read is UNKNOWN, never OK.
    let out = hub
        .run_with(
            &[
                ("BOSUN_HUB_URL", "https://127.0.0.1:9"),
                ("BOSUN_HUB_FINGERPRINT", &hub.fingerprint),
                ("BOSUN_ADMIN_TOKEN", &hub.admin),
            ],
            &["status", "--check"],
        )
        .await;
    assert_exit(&out, 3);
    assert!(
        stdout(&out).starts_with("BOSUN UNKNOWN - could not reach the hub"),
        "{}",
        stdout(&out)
    );

    // A usage error and a config error are UNKNOWN too, with exactly one line on stdout.
    let out = hub.run(&["status", "--check", "--bogus"]).await;
    assert_exit(&out, 3);
    assert!(
        stdout(&out).starts_with("BOSUN UNKNOWN - usage: ") && stdout(&out).lines().count() == 1,
        "{}",
        stdout(&out)
    );
    let out = hub
        .run_with(
            &[
                ("BOSUN_HUB_URL", "https://127.0.0.1:9"),
                ("BOSUN_HUB_FINGERPRINT", "not-a-fingerprint"),
                ("BOSUN_ADMIN_TOKEN", &hub.admin),
            ],
            &["status", "--check"],
        )
        .await;
    assert_exit(&out, 3);
    assert!(
        stdout(&out).starts_with("BOSUN UNKNOWN - ") && stdout(&out).lines().count() == 1,
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reads_the_trail_by_host_guest_and_time() {
    const WEB: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";
    const DB: &str = "5d1c2a7e-93b4-4f60-8e2d-7a9c0b1f3e42";
    let hub = start_hub().await;
    let now = jiff::Timestamp::now();
    let at = |hours_ago: i64| (now - jiff::SignedDuration::from_hours(hours_ago)).to_string();
    let a = hub
        .enroll_reporting(
            "pve-audit-a",
            serde_json::json!([
                { "seq": 1, "at": at(48), "action": "guest.created",
                  "detail": { "guest_id": WEB, "vmid": 101, "detail": { "name": "web" } } },
                { "seq": 2, "at": at(3), "action": "backup.finished",
                  "detail": { "guest_id": DB, "vmid": 102, "detail": { "tier": "local" } } },
                { "seq": 3, "at": at(1), "action": "snapshot.taken",
                  "detail": { "guest_id": WEB, "vmid": 101, "detail": { "snapshot": "pre-upgrade" } } },
            ]),
        )
        .await;
    hub.enroll_reporting(
        "pve-audit-b",
        serde_json::json!([
            { "seq": 1, "at": at(2), "action": "job.rejected", "detail": { "detail": "expired" } },
        ]),
    )
    .await;

    // Everything, newest first, as readable lines (no raw JSON).
    let out = hub.run(&["audit"]).await;
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("AT"), "{text}");
    assert!(
        lines[1].contains("pve-audit-a") && lines[1].contains("snapshot.taken"),
        "{text}"
    );
    assert!(
        lines[1].contains("vm 101 guest 0b6f4f2e snapshot=pre-upgrade"),
        "{text}"
    );
    assert!(
        lines[2].contains("pve-audit-b") && lines[2].contains("expired"),
        "{text}"
    );
    assert!(lines[4].contains("guest.created"), "{text}");
    assert!(!text.contains('{'), "{text}");

    // By host name, by guest, since a duration ago.
    let out = hub.run(&["audit", "--host", "pve-audit-b"]).await;
    assert_ok(&out);
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
    let out = hub
        .run(&["audit", "--host", "pve-audit-a", "--guest", WEB, "--json"])
        .await;
    assert_ok(&out);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seqs: Vec<u64> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 1]);
    assert_eq!(page["entries"][0]["host_id"], a.to_string());
    let out = hub.run(&["audit", "--since", "150m", "--json"]).await;
    assert_ok(&out);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["snapshot.taken", "job.rejected"]);

    // Paging: the cursor printed under a page reads the older ones.
    let out = hub.run(&["audit", "--limit", "3"]).await;
    assert_ok(&out);
    let text = stdout(&out);
    let cursor = text
        .lines()
        .find_map(|l| l.strip_prefix("older entries: --before "))
        .unwrap_or_else(|| panic!("no cursor: {text}"))
        .to_owned();
    let out = hub
        .run(&["audit", "--limit", "3", "--before", &cursor])
        .await;
    assert_ok(&out);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("guest.created") && !text.contains("older entries"),
        "{text}"
    );

    // Refused before the hub is asked: a guest without its host, a bad duration or limit;
    // an unknown host by name.
    for args in [
        &["audit", "--guest", WEB][..],
        &["audit", "--since", "yesterday"][..],
        &["audit", "--limit", "0"][..],
        &["audit", "--limit", "501"][..],
        &["audit", "--before", "1 OR 1"][..],
    ] {
        let out = hub.run(args).await;
        assert!(!out.status.success(), "{args:?}: {}", stdout(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = hub.run(&["audit", "--host", "pve-nowhere"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("pve-nowhere"), "{}", stderr(&out));
}

impl Fixture {
    /// What bash offers for `WORDS… <Tab>` (the last word is the one being completed) with
    /// `bosunctl completions bash` loaded, `bosunctl` on `PATH` and this hub in the
    /// environment, or `hub_url` in its place.
    async fn bash_offers(&self, hub_url: &str, words: &[&str]) -> Vec<String> {
        let out = self.run(&["completions", "bash"]).await;
        assert_ok(&out);
        let script = self.dir.path().join("bosunctl.bash");
        std::fs::write(&script, &out.stdout).unwrap();
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_bosunctl")).parent().unwrap();
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let call = format!(
            "source '{}' && COMP_WORDS=({}) && COMP_CWORD={} && COMP_LINE='{}' && \
             COMP_POINT=${{#COMP_LINE}} && _bosunctl_hosts bosunctl \"${{COMP_WORDS[-1]}}\" \
             \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            quoted.join(" "),
            words.len() - 1,
            words.join(" "),
        );
        let mut bash = tokio::process::Command::new("bash");
        bash.env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
            .env("BOSUN_HUB_URL", hub_url)
            .env("BOSUN_HUB_FINGERPRINT", &self.fingerprint)
            .env("BOSUN_ADMIN_TOKEN", &self.admin)
            .args(["--noprofile", "--norc", "-c", &call]);
        let out = tokio::time::timeout(Duration::from_secs(30), bash.output())
            .await
            .expect("bash finishes")
            .unwrap();
        assert_ok(&out);
        let mut offered: Vec<String> = stdout(&out)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        offered.sort();
        offered
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_job_kinds_and_the_hubs_host_names() {
    let hub = start_hub().await;
    hub.enroll_agent("pve-tab-01").await;
    hub.enroll_agent("pve-tab-02").await;
    hub.enroll_agent("edge-07").await;

    // A closed list from the command line itself.
    let mut kinds: Vec<String> = bosun_proto::job::JobKind::ALL
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect();
    kinds.sort();
    let offered = hub
        .bash_offers(&hub.url, &["bosunctl", "job", "new", "--kind", ""])
        .await;
    assert_eq!(offered, kinds);
    let offered = hub
        .bash_offers(&hub.url, &["bosunctl", "job", "new", "--kind", "deco"])
        .await;
    assert_eq!(offered, ["decommission"]);

    // Host names from the hub, after a host option and as a host argument.
    let offered = hub
        .bash_offers(&hub.url, &["bosunctl", "job", "list", "--host", "pve"])
        .await;
    assert_eq!(offered, ["pve-tab-01", "pve-tab-02"]);
    let offered = hub
        .bash_offers(&hub.url, &["bosunctl", "hosts", "show", ""])
        .await;
    assert_eq!(offered, ["edge-07", "pve-tab-01", "pve-tab-02"]);
    // Elsewhere clap's own completion answers: subcommands, not hosts.
    let offered = hub
        .bash_offers(&hub.url, &["bosunctl", "hosts", "sh"])
        .await;
    assert_eq!(offered, ["show"]);

    // A hub that does not answer offers nothing, promptly, and prints no error into the line.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("https://{}", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let offered = hub
        .bash_offers(&nowhere, &["bosunctl", "hosts", "show", ""])
        .await;
    assert!(offered.is_empty(), "{offered:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let out = hub
        .run_with(&[("BOSUN_HUB_URL", &nowhere)], &["complete-hosts"])
        .await;
    assert_ok(&out);
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

/// Ids as the views print them are accepted back: a host by its listed prefix, a job by the
/// prefix `job list` shows; a prefix of nothing is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_prefix_a_view_prints_is_accepted_back() {
    let hub = start_hub().await;
    let host = hub.enroll_agent("pve-prefix-01").await;
    let _other = hub.enroll_agent("pve-prefix-02").await;
    let full = host.to_string();

    // `hosts list` prints the shortest prefix that tells the hosts apart, at least 8.
    let out = hub.run(&["hosts", "list"]).await;
    assert_ok(&out);
    let table = stdout(&out);
    let row = table
        .lines()
        .find(|l| l.contains("pve-prefix-01"))
        .unwrap_or_else(|| panic!("{table}"));
    let shown = row.split_whitespace().next().unwrap();
    assert!(
        shown.len() >= 8 && full.starts_with(shown),
        "{shown} of {full}: {table}"
    );
    assert!(!table.contains(&full), "{table}");

    // What was printed names the host in every command.
    let by_prefix = hub.run(&["--json", "hosts", "show", shown]).await;
    assert_ok(&by_prefix);
    let detail: Value = serde_json::from_slice(&by_prefix.stdout).unwrap();
    assert_eq!(detail["host_id"], full);
    let out = hub.run(&["desired", "diff", "--host", &full[..8]]).await;
    assert_ok(&out);
    // A prefix of no host: not found (exit 8), like an unknown name.
    let first = full.chars().next().unwrap();
    let none = format!("{}{}", if first == 'f' { '0' } else { 'f' }, &full[1..8]);
    assert_exit(&hub.run(&["hosts", "show", &none]).await, 8);

    // A job, cancelled by the prefix `job list` prints.
    let job_id = Uuid::new_v4();
    let job = hub.dir.path().join("job.json");
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(5),
    );
    std::fs::write(
        &job,
        format!(
            "{{\"schema\":\"bosun.job/v1\",\"job_id\":\"{job_id}\",\"kind\":\"break-glass-disable\",\
             \"target\":{{\"host_id\":\"{host}\"}},\"params\":{{}},\"nonce\":\"abcdefghijklmnop\",\
             \"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n"
        ),
    )
    .unwrap();
    let sig = sign(hub.dir.path(), &job);
    assert_ok(
        &hub.run(&[
            "job",
            "submit",
            job.to_str().unwrap(),
            sig.to_str().unwrap(),
        ])
        .await,
    );
    let out = hub.run(&["job", "list", "--host", shown]).await;
    assert_ok(&out);
    let listed = stdout(&out);
    let job_shown = listed
        .lines()
        .find(|l| l.contains("break-glass-disable"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{listed}"))
        .to_owned();
    assert!(
        job_id.to_string().starts_with(&job_shown) && job_shown.len() >= 8,
        "{listed}"
    );
    let out = hub
        .run(&["job", "cancel", "--host", "pve-prefix-01", &job_shown])
        .await;
    assert_ok(&out);
    assert!(
        stdout(&out).contains(&format!("job {job_id} cancelled")),
        "{}",
        stdout(&out)
    );
}
