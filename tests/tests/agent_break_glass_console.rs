//! Break-glass from the node's console (DESIGN §12, decision 0104): the real
//! `bosun-agentctl break-glass open --file JOB` hands the operator's signed
//! `break-glass-enable` to the agent's own job runner beside the running agent, with the helper's
//! real verb writing the door beneath a temp root. A job signed by a key the host does not
//! trust, an expired one, one for another host and a second run of the same job (or its nonce)
//! are refused, audited, and never reach the helper; another kind of job is refused outright.
//! The door the console opened is journaled and audited as the hub-delivered one is: the hub
//! raises `break_glass_open` from the agent's audit tail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::escrow_support::{Run, agentctl};

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::signing::OperatorKey;
use agent_support::*;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use uuid::Uuid;

/// A `break-glass-enable` document for `host`, valid from `from` to `until` (relative to now).
fn door_doc(host: Uuid, key: &str, from: SignedDuration, until: SignedDuration) -> Value {
    let now = Timestamp::now();
    json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::new_v4(),
        "kind": "break-glass-enable",
        "target": { "host_id": host },
        "params": {
            "ssh_public_key": key,
            "duration_seconds": 3600,
            "reason": "poll loop wedged",
        },
        "nonce": format!("n-{}", Uuid::new_v4().simple()),
        "not_before": now + from,
        "expires_at": now + until,
    })
}

/// Writes `doc` to `dir` and `signer`'s signature beside it (`JOB.sig`); gives the job file.
fn signed_file(dir: &Path, signer: &OperatorKey, doc: &Value) -> PathBuf {
    let file = dir.join(format!("door-{}.json", Uuid::new_v4().simple()));
    let bytes = serde_json::to_vec_pretty(doc).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    let signature = signer.sign(&bytes, "bosun-job@v1");
    let mut sig = file.clone().into_os_string();
    sig.push(".sig");
    std::fs::write(PathBuf::from(sig), signature).unwrap();
    file
}

async fn open(config: &Path, file: &Path) -> Run {
    let file = file.display().to_string();
    agentctl(config, &["break-glass", "open", "--file", &file], None).await
}

/// The hub's alerts of `kind` for `host`.
async fn alerts(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    agent_support::storage::alerts(hub, host, kind).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_opens_a_signed_door_and_refuses_unsigned_expired_replayed_and_other_hosts() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let config = files.config_path.clone();
    let dir = files.dir.path();
    let door_key = OperatorKey::new("oncall@console");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let public = public.trim();
    let valid = (
        SignedDuration::from_secs(-60),
        SignedDuration::from_hours(1),
    );
    let no_door = |files: &AgentFiles| {
        assert!(files.helper.break_glass_keys().is_none(), "no door written");
        assert!(!files.helper.verbs().contains(&"break_glass_open"));
    };

    // Signed by a key the host does not trust.
    let mallory = OperatorKey::new("mallory@example");
    let forged = signed_file(dir, &mallory, &door_doc(host, public, valid.0, valid.1));
    let run = open(&config, &forged).await;
    assert_eq!(run.code, Some(77), "{run}");
    assert!(run.stderr.contains("unknown_signer"), "{run}");
    no_door(&files);

    // A signature that is not one (the file's bytes changed after signing).
    let tampered = signed_file(dir, &operator, &door_doc(host, public, valid.0, valid.1));
    let text = std::fs::read_to_string(&tampered).unwrap();
    std::fs::write(&tampered, text.replace("3600", "86400")).unwrap();
    let run = open(&config, &tampered).await;
    assert_eq!(run.code, Some(77), "{run}");
    no_door(&files);

    // Expired an hour ago.
    let expired = door_doc(
        host,
        public,
        SignedDuration::from_hours(-3),
        SignedDuration::from_hours(-1),
    );
    let run = open(&config, &signed_file(dir, &operator, &expired)).await;
    assert_eq!(run.code, Some(77), "{run}");
    assert!(run.stderr.contains("expired"), "{run}");
    no_door(&files);

    // For another host.
    let elsewhere = door_doc(Uuid::new_v4(), public, valid.0, valid.1);
    let run = open(&config, &signed_file(dir, &operator, &elsewhere)).await;
    assert_eq!(run.code, Some(77), "{run}");
    assert!(run.stderr.contains("other_host"), "{run}");
    no_door(&files);

    // Another kind of job, signed and valid: the console opens break-glass and nothing else.
    let mut decommission = door_doc(host, public, valid.0, valid.1);
    decommission["kind"] = json!("decommission");
    let run = open(&config, &signed_file(dir, &operator, &decommission)).await;
    assert_eq!(run.code, Some(64), "{run}");
    assert!(run.stderr.contains("\"decommission\""), "{run}");
    no_door(&files);

    // The operator's signed job: the door opens.
    let doc = door_doc(host, public, valid.0, valid.1);
    let job = doc["job_id"].as_str().unwrap().to_owned();
    let file = signed_file(dir, &operator, &doc);
    let run = open(&config, &file).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout
            .contains(&format!("break-glass door open for job {job}")),
        "{run}"
    );
    assert!(run.stdout.contains("account: bosun-breakglass"), "{run}");
    let line = files.helper.break_glass_keys().expect("the door is open");
    let blob = public.split_whitespace().nth(1).unwrap();
    assert!(
        line.starts_with("expiry-time=\"") && line.contains(blob),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(" bosun-break-glass {job}\n")),
        "{line}"
    );

    // The same job again, and a new job spending the same nonce: refused, the door unchanged.
    let run = open(&config, &file).await;
    assert_eq!(run.code, Some(77), "{run}");
    assert!(run.stderr.contains("already_run"), "{run}");
    let mut again = door_doc(host, public, valid.0, valid.1);
    again["nonce"] = doc["nonce"].clone();
    let run = open(&config, &signed_file(dir, &operator, &again)).await;
    assert_eq!(run.code, Some(77), "{run}");
    assert!(run.stderr.contains("nonce_reused"), "{run}");
    assert_eq!(
        files.helper.break_glass_keys().as_deref(),
        Some(line.as_str())
    );
    let opened = files
        .helper
        .verbs()
        .iter()
        .filter(|v| **v == "break_glass_open")
        .count();
    assert_eq!(
        opened, 1,
        "only the operator's valid job reached the helper"
    );

    // Audited in the agent's journal as the hub-delivered door is: the hub raises the alert.
    eventually(
        Duration::from_secs(30),
        "the hub raises break_glass_open",
        || async { !alerts(&hub, host, "break_glass_open").await.is_empty() },
    )
    .await;
    let alert = &alerts(&hub, host, "break_glass_open").await[0];
    assert!(
        alert["message"].as_str().unwrap_or_default().contains(&job)
            || alert["subject"].as_str().unwrap_or_default().contains(&job),
        "{alert}"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
