//! Break-glass crash safety: the agent runs as a child process with a failpoint armed at one
//! journal step of a signed `break-glass-enable` (or at the queued result); the failpoint
//! aborts the process on the spot. After a restart the job has run once and succeeded, the
//! door holds exactly that job's line, and the journal audited its opening exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::signing::{OperatorKey, envelope};
use agent_support::*;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const POINTS: &[&str] = &[
    "break_glass_job.accepted.intent",
    "break_glass_job.accepted.done",
    "break_glass_job.helper.open.intent",
    "break_glass_job.helper.open.done",
    "job.result.queued",
];

fn enable_doc(host: Uuid, key: &str) -> Value {
    let now = jiff::Timestamp::now();
    json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::new_v4(),
        "kind": "break-glass-enable",
        "target": { "host_id": host },
        "params": { "ssh_public_key": key, "duration_seconds": 3600, "reason": "crash drill" },
        "nonce": format!("n-{}", Uuid::new_v4().simple()),
        "not_before": now - jiff::SignedDuration::from_secs(60),
        "expires_at": now + jiff::SignedDuration::from_hours(1),
    })
}

async fn outcome(hub: &RealHub, host: Uuid, job: &str) -> Option<String> {
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    jobs.as_array()?
        .iter()
        .find(|j| j["job_id"] == job)
        .and_then(|j| j["result"]["outcome"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_break_glass_step_the_door_opens_once() {
    let (_sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let door_key = OperatorKey::new("oncall@desk");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    for point in POINTS {
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let doc = enable_doc(host, public.trim());
        let job = doc["job_id"].as_str().unwrap().to_owned();
        let bytes = serde_json::to_vec(&doc).unwrap();
        let sig = operator.sign(&bytes, "bosun-job@v1");
        let (status, body) = hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/jobs"),
                Some(envelope(&bytes, &sig)),
            )
            .await;
        assert!((200..300).contains(&status), "{status} {body}");
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let reported = tokio::time::timeout(Duration::from_secs(60), async {
            while outcome(&hub, host, &job).await.is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(
            reported.is_ok(),
            "{point}: no outcome reached the hub; the agent's log ends:\n{}",
            log_tail(&files.config_path, 80)
        );
        assert_eq!(
            outcome(&hub, host, &job).await.as_deref(),
            Some("succeeded"),
            "{point}"
        );
        journal_settles(&files.state_dir).await;
        let line = files.helper.break_glass_keys().expect("the door is open");
        assert!(
            line.ends_with(&format!(" bosun-break-glass {job}\n")),
            "{point}: {line}"
        );
        assert_eq!(line.lines().count(), 1, "{point}");
        let store = journal(&files.state_dir);
        let opened = store
            .audit_since(0, 10_000)
            .unwrap()
            .into_iter()
            .filter(|e| {
                e.event.event == "break_glass.opened" && e.event.job_id.as_deref() == Some(&job)
            })
            .count();
        assert_eq!(opened, 1, "{point}: the door's opening is audited once");
        let door = store.open_door().unwrap().expect("journaled open");
        assert_eq!(door.job_id, job, "{point}");
    }
    kill(&mut child);
    hub.stop().await;
}
