//! Desired state (idempotent puts), byte-exact signed jobs, job results, escrow.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use base64::Engine as _;
use common::{SIGNATURE, TestHub, desired, error_code, job_bytes, signed_job};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

async fn put_desired(
    hub: &TestHub,
    host: Uuid,
    key: Option<&str>,
    doc: &Value,
) -> reqwest::Response {
    let mut req = hub
        .client
        .put(format!("{}/v1/admin/hosts/{host}/desired", hub.url))
        .bearer_auth(&hub.admin)
        .body(doc.to_string());
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn desired_puts_honour_idempotency_keys() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-desired").await;
    let doc = desired();

    let first: Value = put_desired(&hub, host, Some("change-1"), &doc)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        first,
        json!({ "host_id": host, "generation": 1, "created": true })
    );
    // A retry of the same request (reformatted JSON, same document) is a replay.
    let pretty = serde_json::to_string_pretty(&doc).unwrap();
    let replay = hub
        .client
        .put(format!("{}/v1/admin/hosts/{host}/desired", hub.url))
        .bearer_auth(&hub.admin)
        .header("Idempotency-Key", "change-1")
        .body(pretty)
        .send()
        .await
        .unwrap();
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(
        replay,
        json!({ "host_id": host, "generation": 1, "created": false })
    );

    // Same key, different document: refused, nothing changes.
    let mut other = doc.clone();
    other["dr_policy"] = "manual".into();
    let resp = put_desired(&hub, host, Some("change-1"), &other).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::CONFLICT, "idempotency_conflict".into())
    );

    // A key that cannot be one is refused.
    let resp = put_desired(&hub, host, Some(&"k".repeat(129)), &doc).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_idempotency_key".into())
    );

    // No key: every put is a new generation.
    let second: Value = put_desired(&hub, host, None, &other)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(second["generation"], 2);
    let third: Value = put_desired(&hub, host, None, &other)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(third["generation"], 3);

    let poll = hub.poll_json(host, &key, 1).await;
    assert_eq!(poll["generation"], 3);
    assert_eq!(poll["desired"]["dr_policy"], "manual");
    // The agent already holds 3: no document is resent.
    let poll = hub.poll_json(host, &key, 3).await;
    assert!(poll["desired"].is_null());

    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["desired_generation"], 3);
    assert_eq!(detail["known_generation"], 3);
    assert_eq!(detail["applied_generation"], 3);
    assert_eq!(detail["last_report"]["versions"]["agent"], "0.1.0");
}

#[tokio::test]
async fn invalid_desired_state_is_refused_and_nothing_changes() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-invalid").await;
    let mut bad = desired();
    bad["guests"][0]["resources"]["cores"] = 0.into();
    let resp = put_desired(&hub, host, None, &bad).await;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("guests[0].resources.cores"),
        "{body}"
    );

    let mut unknown = desired();
    unknown["delete_everything"] = true.into();
    let resp = put_desired(&hub, host, None, &unknown).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "malformed_json".into())
    );

    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["desired_generation"], 0);
    assert!(detail["desired"].is_null());
}

#[tokio::test]
async fn jobs_are_forwarded_byte_exact_until_acked_and_results_recorded() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-jobs").await;
    let job = Uuid::new_v4();
    let path = format!("/v1/admin/hosts/{host}/jobs");
    let resp = hub
        .admin(Method::POST, &path, Some(signed_job(host, job)))
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    // Resubmitting the identical job is idempotent.
    let resp = hub
        .admin(Method::POST, &path, Some(signed_job(host, job)))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<Value>().await.unwrap()["created"], false);
    // Same id, different bytes: refused.
    let mut altered = signed_job(host, job);
    let mut bytes = job_bytes(host, job);
    bytes.push(b' ');
    altered["document"] = base64::engine::general_purpose::STANDARD
        .encode(&bytes)
        .into();
    let resp = hub.admin(Method::POST, &path, Some(altered)).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::CONFLICT, "job_conflict".into())
    );

    let poll = hub.poll_json(host, &key, 0).await;
    let jobs = poll["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    let forwarded = base64::engine::general_purpose::STANDARD
        .decode(jobs[0]["document"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        forwarded,
        job_bytes(host, job),
        "signed bytes arrive unchanged"
    );
    assert_eq!(jobs[0]["signature"], SIGNATURE);

    // Acked: no longer sent.
    let resp = hub.poll(host, &key, 0, &[job], 0).await;
    let body: Value = resp.json().await.unwrap();
    assert!(body["jobs"].as_array().unwrap().is_empty());

    let result = json!({
        "schema": "bosun.job-result/v1", "job_id": job, "outcome": "succeeded",
        "finished_at": "2026-11-21T00:00:00Z", "detail": "backup done", "extra": "tolerated"
    });
    let result_path = format!("/v1/hosts/{host}/jobs/{job}/result");
    let resp = hub
        .request(
            Method::POST,
            &result_path,
            Some(&key),
            Some(result.to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let mut different = result.clone();
    different["outcome"] = "failed".into();
    let resp = hub
        .request(
            Method::POST,
            &result_path,
            Some(&key),
            Some(different.to_string().into_bytes()),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::CONFLICT, "job_finished".into())
    );

    let jobs: Vec<Value> = hub
        .admin(Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["state"], "succeeded");
    assert_eq!(jobs[0]["kind"], "force-backup");
    assert_eq!(jobs[0]["result"]["detail"], "backup done");

    let events: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in ["job_queued", "job_acked", "job_finished"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
}

/// A queued job can be cancelled: the next poll no longer carries it, cancelling again
/// changes nothing, and a job the agent acknowledged is refused (`job_not_queued`). A result
/// for a cancelled job the agent had already received replaces `cancelled`: it ran.
#[tokio::test]
async fn a_queued_job_can_be_cancelled_and_an_acknowledged_one_cannot() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-cancel").await;
    let path = format!("/v1/admin/hosts/{host}/jobs");
    let (queued, acked) = (Uuid::new_v4(), Uuid::new_v4());
    for job in [queued, acked] {
        let resp = hub
            .admin(Method::POST, &path, Some(signed_job(host, job)))
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    // The agent receives both and acknowledges one.
    let poll = hub.poll_json(host, &key, 0).await;
    assert_eq!(poll["jobs"].as_array().unwrap().len(), 2);
    let resp = hub.poll(host, &key, 0, &[acked], 0).await;
    assert_eq!(resp.status(), StatusCode::OK);

    let cancel = |job: Uuid| format!("/v1/admin/hosts/{host}/jobs/{job}/cancel");
    let resp = hub.admin(Method::POST, &cancel(queued), None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        (body["job_id"].clone(), body["state"].clone()),
        (json!(queued), json!("cancelled"))
    );
    let again = hub.admin(Method::POST, &cancel(queued), None).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "cancelling twice changes nothing"
    );
    assert_eq!(
        error_code(hub.admin(Method::POST, &cancel(acked), None).await).await,
        (StatusCode::CONFLICT, "job_not_queued".into())
    );
    assert_eq!(
        error_code(hub.admin(Method::POST, &cancel(Uuid::new_v4()), None).await).await,
        (StatusCode::NOT_FOUND, "unknown_job".into())
    );
    assert_eq!(
        error_code(
            hub.admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/jobs/nope/cancel"),
                None
            )
            .await
        )
        .await,
        (StatusCode::BAD_REQUEST, "bad_job_id".into())
    );
    let poll = hub.poll_json(host, &key, 0).await;
    assert!(
        poll["jobs"].as_array().unwrap().is_empty(),
        "the cancelled job is no longer handed out: {poll}"
    );
    let states = |jobs: Vec<Value>| -> Vec<(String, String)> {
        jobs.iter()
            .map(|j| {
                (
                    j["job_id"].as_str().unwrap().to_owned(),
                    j["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let jobs: Vec<Value> = hub
        .admin(Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    assert!(states(jobs).contains(&(queued.to_string(), "cancelled".to_owned())));

    // The agent had received it before the cancel and ran it: its result is recorded.
    let result = json!({
        "schema": "bosun.job-result/v1", "job_id": queued, "outcome": "succeeded",
        "finished_at": "2026-11-21T00:00:00Z", "detail": "ran before the cancel reached it"
    });
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/jobs/{queued}/result"),
            Some(&key),
            Some(result.to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let jobs: Vec<Value> = hub
        .admin(Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    assert!(states(jobs).contains(&(queued.to_string(), "succeeded".to_owned())));
    let events: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["kind"] == "job_cancelled")
            .count(),
        1,
        "{events:?}"
    );
}

#[tokio::test]
async fn jobs_for_another_host_or_unsigned_are_refused() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-a").await;
    let (other, _) = hub.enroll("pve-b").await;
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(signed_job(other, Uuid::new_v4())),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "job_target_mismatch".into())
    );
    // Expired by the hub's clock: the agent would refuse it on arrival, so the hub does now.
    let mut stale: Value = serde_json::from_slice(&job_bytes(host, Uuid::new_v4())).unwrap();
    stale["not_before"] = "2020-01-01T00:00:00Z".into();
    stale["expires_at"] = "2020-01-02T00:00:00Z".into();
    let stale = serde_json::to_vec(&stale).unwrap();
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(
                serde_json::to_value(bosun_proto::job::SignedJob::new(&stale, SIGNATURE)).unwrap(),
            ),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "job_expired".into())
    );
    let mut unsigned = signed_job(host, Uuid::new_v4());
    unsigned["signature"] = "trust me".into();
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(unsigned),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field".into())
    );
    let jobs: Vec<Value> = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await
        .json()
        .await
        .unwrap();
    assert!(jobs.is_empty());
}

#[tokio::test]
async fn escrow_is_stored_opaque_last_write_wins() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-escrow").await;
    let get = format!("/v1/admin/hosts/{host}/escrow");
    assert_eq!(
        error_code(hub.admin(Method::GET, &get, None).await).await,
        (StatusCode::NOT_FOUND, "no_escrow".into())
    );
    let example = include_str!("../../docs/proto/escrow.json");
    for (n, text) in [
        example.to_owned(),
        example.replace("2026-11-20", "2026-11-21"),
    ]
    .iter()
    .enumerate()
    {
        let resp = hub
            .request(
                Method::PUT,
                &format!("/v1/hosts/{host}/escrow"),
                Some(&key),
                Some(text.clone().into_bytes()),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::NO_CONTENT, "write {n}");
    }
    let stored = hub
        .admin(Method::GET, &get, None)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(stored, example.replace("2026-11-20", "2026-11-21"));
}

/// A poll answer carries at most `MAX_JOBS_PER_POLL` jobs, the oldest first; the rest
/// follow once those are acknowledged.
#[tokio::test]
async fn a_poll_answer_carries_at_most_one_batch_of_jobs() {
    let max = bosun_proto::poll::MAX_JOBS_PER_POLL;
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-many-jobs").await;
    let path = format!("/v1/admin/hosts/{host}/jobs");
    let ids: Vec<Uuid> = (0..max + 3).map(|_| Uuid::new_v4()).collect();
    for id in &ids {
        let resp = hub
            .admin(Method::POST, &path, Some(signed_job(host, *id)))
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let poll = hub.poll_json(host, &key, 0).await;
    assert_eq!(poll["jobs"].as_array().unwrap().len(), max);
    let resp = hub.poll(host, &key, 0, &ids[..max], 0).await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["jobs"].as_array().unwrap().len(), 3, "the rest follow");
}

/// A signed job with `priority` in its document (the test signature is not checked here: the
/// agent checks it).
fn prioritised_job(host: Uuid, job: Uuid, priority: i32) -> Value {
    let bytes = String::from_utf8(job_bytes(host, job)).unwrap().replace(
        "\"params\":{}",
        &format!("\"params\":{{}},\"priority\":{priority}"),
    );
    serde_json::to_value(bosun_proto::job::SignedJob::new(
        bytes.as_bytes(),
        SIGNATURE,
    ))
    .unwrap()
}

/// Queued jobs go out highest priority first, equal ones oldest first, and `job list` says
/// each one's priority.
#[tokio::test]
async fn queued_jobs_go_out_highest_priority_first() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-priority").await;
    let path = format!("/v1/admin/hosts/{host}/jobs");
    let jobs: Vec<(Uuid, i32)> = [0, 5, -3, 5]
        .into_iter()
        .map(|p| (Uuid::new_v4(), p))
        .collect();
    for (job, priority) in &jobs {
        let resp = hub
            .admin(
                Method::POST,
                &path,
                Some(prioritised_job(host, *job, *priority)),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let poll = hub.poll_json(host, &key, 0).await;
    let order: Vec<Uuid> = poll["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let signed: bosun_proto::job::SignedJob = serde_json::from_value(j.clone()).unwrap();
            signed.parse_document().unwrap().job_id
        })
        .collect();
    assert_eq!(order, [jobs[1].0, jobs[3].0, jobs[0].0, jobs[2].0]);
    let listed: Vec<Value> = hub
        .admin(Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    let priority_of = |job: Uuid| {
        listed
            .iter()
            .find(|j| j["job_id"] == job.to_string())
            .unwrap()["priority"]
            .clone()
    };
    assert_eq!(priority_of(jobs[2].0), -3);
    assert_eq!(priority_of(jobs[1].0), 5);
}

/// The hub does not trust the agent's sizes: a result's log tail is cut to its bounds,
/// escaped and redacted, its reason cut, its duration the hub's own sum; the same result sent
/// again is the same result.
#[tokio::test]
async fn a_job_result_is_bounded_again_by_the_hub() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-results").await;
    let job = Uuid::new_v4();
    let path = format!("/v1/admin/hosts/{host}/jobs");
    let resp = hub
        .admin(Method::POST, &path, Some(signed_job(host, job)))
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let tail: Vec<String> = (0..500)
        .map(|i| {
            format!(
                "{i} step destroy failed: password=hunter2 \u{1b}[2J {}",
                "x".repeat(600)
            )
        })
        .collect();
    let result = json!({
        "schema": "bosun.job-result/v1", "job_id": job, "outcome": "failed",
        "finished_at": "2026-11-21T00:01:00Z", "started_at": "2026-11-21T00:00:00Z",
        "duration_ms": 1, "detail": "timed out", "retriable": true,
        "retriable_reason": format!("\u{9b}31m{}", "r".repeat(4000)), "timed_out": true,
        "log_tail": tail,
    });
    let result_path = format!("/v1/hosts/{host}/jobs/{job}/result");
    for _ in 0..2 {
        let resp = hub
            .request(
                Method::POST,
                &result_path,
                Some(&key),
                Some(result.to_string().into_bytes()),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    }
    let jobs: Vec<Value> = hub
        .admin(Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    let stored = &jobs[0]["result"];
    assert_eq!(stored["duration_ms"], 60_000);
    assert_eq!(stored["timed_out"], true);
    assert_eq!(stored["retriable"], true);
    let lines = stored["log_tail"].as_array().unwrap();
    assert!(
        lines.len() <= bosun_proto::job_log::MAX_LINES,
        "{}",
        lines.len()
    );
    let text = stored["log_tail"].to_string();
    assert!(
        text.len() < 2 * bosun_proto::job_log::MAX_TAIL_BYTES,
        "{}",
        text.len()
    );
    assert!(
        !text.contains("hunter2") && !text.contains('\u{1b}'),
        "{text}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with("499 step destroy")
    );
    let reason = stored["retriable_reason"].as_str().unwrap();
    assert!(reason.len() <= bosun_proto::job::MAX_RETRIABLE_REASON);
    assert!(!reason.contains('\u{9b}'));
}
