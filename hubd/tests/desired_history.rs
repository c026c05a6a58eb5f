//! The hub keeps the documents behind generations (current and last applied), the operator's
//! correlation id travels with the generation to the agent, and the operation-journal records
//! agents report are stored, bounded and listed for `bosunctl explain`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::store::sqlite::SqliteStore;
use bosun_hubd::store::{JobStore as _, PollStore as _};
use bosun_proto::desired_status::{DesiredStatus, DesiredView, ProgressState};
use bosun_proto::oplog::{MAX_DETAIL_BYTES, MAX_PER_POLL, MAX_STORED_PER_HOST, OperationRecord};
use bosun_proto::report::{GuestReport, GuestStatus};
use common::{TestHub, desired, error_code, poll_with, report};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

async fn put(hub: &TestHub, host: Uuid, correlation: Option<&str>, doc: &Value) -> Value {
    let mut req = hub
        .client
        .put(format!("{}/v1/admin/hosts/{host}/desired", hub.url))
        .bearer_auth(&hub.admin)
        .body(doc.to_string());
    if let Some(id) = correlation {
        req = req.header("X-Correlation-Id", id);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

async fn get<T: serde::de::DeserializeOwned>(hub: &TestHub, path: &str) -> T {
    let resp = hub.admin(Method::GET, path, None).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.json().await.unwrap()
}

/// A poll holding `known`, converged to `applied`, reporting `guests`, carrying `ops`.
fn poll(known: u64, applied: u64, guests: Vec<GuestReport>, ops: &[OperationRecord]) -> Value {
    let mut report = report();
    report.guests = guests;
    json!({
        "schema": "bosun.poll/v1",
        "known_generation": known,
        "applied_generation": applied,
        "report": report,
        "operations": ops,
    })
}

fn with_memory(memory_mib: u64) -> Value {
    let mut doc = desired();
    doc["guests"][0]["resources"]["memory_mib"] = json!(memory_mib);
    doc
}

fn guest(doc: &Value, status: GuestStatus) -> GuestReport {
    let spec = &doc["guests"][0];
    GuestReport {
        guest_id: Some(spec["guest_id"].as_str().unwrap().parse().unwrap()),
        vmid: 101,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: spec["hostname"].as_str().unwrap().into(),
        status,
        resources: Some(serde_json::from_value(spec["resources"].clone()).unwrap()),
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

fn op(correlation: Option<&str>, guest_id: Option<String>, status: &str) -> OperationRecord {
    serde_json::from_value(json!({
        "op_id": Uuid::now_v7(),
        "kind": "set_spec",
        "guest_id": guest_id,
        "vmid": 101,
        "correlation_id": correlation,
        "status": status,
        "error": if status == "failed" { Some("CT 101 is locked (backup)") } else { None },
        "started_at": jiff::Timestamp::now(),
        "steps": [{ "seq": 1, "name": "set_config", "state": "ok",
                    "detail": { "memory": 8192 }, "intent_at": jiff::Timestamp::now() }],
    }))
    .unwrap()
}

#[tokio::test]
async fn current_and_last_applied_documents_and_the_correlation_id_reach_the_agent() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-history").await;
    let first = with_memory(4096);
    assert_eq!(
        put(&hub, host, Some("change-1"), &first).await["generation"],
        1
    );

    // The poll answer carries the generation's correlation id with the document.
    let (status, answer) = poll_with(&hub, host, &key, &poll(0, 0, Vec::new(), &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["generation"], 1);
    assert_eq!(answer["correlation_id"], "change-1");
    assert!(answer["desired"].is_object());

    // The host applies generation 1; the operator moves on to generation 2.
    let (status, _) = poll_with(
        &hub,
        host,
        &key,
        &poll(1, 1, vec![guest(&first, GuestStatus::Running)], &[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let second = with_memory(8192);
    assert_eq!(
        put(&hub, host, Some("change-2"), &second).await["generation"],
        2
    );

    let view: DesiredView = get(&hub, &format!("/v1/admin/hosts/{host}/desired")).await;
    assert_eq!(view.current.generation, 2);
    assert_eq!(view.current.correlation_id.as_deref(), Some("change-2"));
    assert_eq!(view.current.document.guests[0].resources.memory_mib, 8192);

    let status: DesiredStatus = get(&hub, &format!("/v1/admin/hosts/{host}/desired/status")).await;
    let applied = status
        .applied
        .as_ref()
        .expect("the last-applied document is kept");
    assert_eq!(applied.generation, 1);
    assert_eq!(applied.correlation_id.as_deref(), Some("change-1"));
    assert_eq!(applied.document.guests[0].resources.memory_mib, 4096);
    assert_eq!(status.desired.as_ref().unwrap().generation, 2);
    assert_eq!(status.applied_generation, 1);
    assert_eq!(status.guests.len(), 1);
    assert_eq!(status.guests[0].state, ProgressState::Pending);

    // The agent's operation for the change fails: the guest shows the agent's reason.
    let guest_id = second["guests"][0]["guest_id"].as_str().unwrap().to_owned();
    let failed = op(Some("change-2"), Some(guest_id.clone()), "failed");
    let (code, _) = poll_with(
        &hub,
        host,
        &key,
        &poll(
            2,
            1,
            vec![guest(&first, GuestStatus::Running)],
            std::slice::from_ref(&failed),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let status: DesiredStatus = get(&hub, &format!("/v1/admin/hosts/{host}/desired/status")).await;
    assert_eq!(status.guests[0].state, ProgressState::Failed);
    assert!(
        status.guests[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("CT 101 is locked")
    );
    assert_eq!(status.operations, vec![failed]);

    // It is retried and the host converges: generation 2 is the last applied one now.
    let (code, _) = poll_with(
        &hub,
        host,
        &key,
        &poll(2, 2, vec![guest(&second, GuestStatus::Running)], &[]),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let status: DesiredStatus = get(&hub, &format!("/v1/admin/hosts/{host}/desired/status")).await;
    assert_eq!(status.applied.unwrap().generation, 2);
    assert_eq!(status.guests[0].state, ProgressState::Applied);

    // Without a header the generation has no correlation id; a bad header is refused.
    put(&hub, host, None, &with_memory(2048)).await;
    let view: DesiredView = get(&hub, &format!("/v1/admin/hosts/{host}/desired")).await;
    assert_eq!(view.current.correlation_id, None);
    let resp = hub
        .client
        .put(format!("{}/v1/admin/hosts/{host}/desired", hub.url))
        .bearer_auth(&hub.admin)
        .header("X-Correlation-Id", "x".repeat(200))
        .body(desired().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_correlation_id".to_owned())
    );
    // A host with no desired state has none to show.
    let (other, _) = hub.enroll("pve-empty").await;
    let resp = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/hosts/{other}/desired"),
            None,
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "no_desired_state".to_owned())
    );
}

#[tokio::test]
async fn history_is_bounded_but_keeps_the_applied_generation() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-prune").await;
    put(&hub, host, Some("g1"), &with_memory(1024)).await;
    let (code, _) = poll_with(&hub, host, &key, &poll(1, 1, Vec::new(), &[])).await;
    assert_eq!(code, StatusCode::OK);
    for memory in 0..20 {
        put(&hub, host, None, &with_memory(2048 + memory)).await;
    }
    let status: DesiredStatus = get(&hub, &format!("/v1/admin/hosts/{host}/desired/status")).await;
    assert_eq!(status.desired.unwrap().generation, 21);
    let applied = status.applied.unwrap();
    assert_eq!(
        (
            applied.generation,
            applied.document.guests[0].resources.memory_mib
        ),
        (1, 1024)
    );
    let (dir, _) = hub.stop().await;
    let rows = common::store_integers(
        &dir,
        "SELECT generation FROM desired_history WHERE host_id = ?1 ORDER BY generation",
        host.to_string(),
    )
    .await;
    let kept = i64::from(bosun_hubd::store::KEEP_RECENT_GENERATIONS);
    let mut expected = vec![1];
    expected.extend(22 - kept..=21);
    assert_eq!(rows, expected);
}

#[tokio::test]
async fn operation_records_are_stored_bounded_and_listed() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-ops").await;
    let tagged = op(Some("c-7"), None, "done");
    let other = op(None, None, "running");
    let (code, _) = poll_with(
        &hub,
        host,
        &key,
        &poll(0, 0, Vec::new(), &[tagged.clone(), other.clone()]),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let by_id: Vec<OperationRecord> = get(
        &hub,
        &format!("/v1/admin/hosts/{host}/operations?op={}", other.op_id),
    )
    .await;
    assert_eq!(by_id, vec![other.clone()]);
    let by_correlation: Vec<OperationRecord> = get(
        &hub,
        &format!("/v1/admin/hosts/{host}/operations?correlation=c-7"),
    )
    .await;
    assert_eq!(by_correlation, vec![tagged.clone()]);
    // Both filters: the operation, if it carries that correlation id.
    let both: Vec<OperationRecord> = get(
        &hub,
        &format!(
            "/v1/admin/hosts/{host}/operations?op={}&correlation=c-7",
            tagged.op_id
        ),
    )
    .await;
    assert_eq!(both, vec![tagged]);
    let neither: Vec<OperationRecord> = get(
        &hub,
        &format!(
            "/v1/admin/hosts/{host}/operations?op={}&correlation=c-7",
            other.op_id
        ),
    )
    .await;
    assert_eq!(neither, Vec::new());
    // A record sent again replaces the stored one.
    let mut finished = other.clone();
    finished.status = "done".into();
    poll_with(
        &hub,
        host,
        &key,
        &poll(0, 0, Vec::new(), &[finished.clone()]),
    )
    .await;
    let by_id: Vec<OperationRecord> = get(
        &hub,
        &format!("/v1/admin/hosts/{host}/operations?op={}", other.op_id),
    )
    .await;
    assert_eq!(by_id, vec![finished]);

    // A hostile agent cannot make the hub hold more: too many records, too many steps or a
    // huge detail is refused, and the hub keeps only the newest records per host.
    let many: Vec<OperationRecord> = (0..=MAX_PER_POLL).map(|_| op(None, None, "done")).collect();
    let (code, body) = poll_with(&hub, host, &key, &poll(0, 0, Vec::new(), &many)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let mut huge = op(None, None, "done");
    huge.steps[0].detail = json!({ "blob": "z".repeat(MAX_DETAIL_BYTES) });
    let (code, _) = poll_with(&hub, host, &key, &poll(0, 0, Vec::new(), &[huge])).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let mut long = op(None, None, "done");
    long.steps = vec![long.steps[0].clone(); bosun_proto::oplog::MAX_STEPS + 1];
    let (code, _) = poll_with(&hub, host, &key, &poll(0, 0, Vec::new(), &[long])).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let mut newest = None;
    for _ in 0..(MAX_STORED_PER_HOST / MAX_PER_POLL + 1) {
        let batch: Vec<OperationRecord> =
            (0..MAX_PER_POLL).map(|_| op(None, None, "done")).collect();
        newest = batch.last().map(|r| r.op_id);
        let (code, _) = poll_with(&hub, host, &key, &poll(0, 0, Vec::new(), &batch)).await;
        assert_eq!(code, StatusCode::OK);
    }
    let all: Vec<OperationRecord> = get(
        &hub,
        &format!("/v1/admin/hosts/{host}/operations?limit=100000"),
    )
    .await;
    assert_eq!(all.len(), MAX_STORED_PER_HOST);
    assert_eq!(all.last().map(|r| r.op_id), newest);
    assert!(
        all.iter().all(|r| r.op_id != other.op_id),
        "the oldest were pruned"
    );
    let resp = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/hosts/{host}/operations?op=x&correlation=y"),
            None,
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_query".to_owned())
    );
}

#[test]
fn a_database_of_the_previous_schema_keeps_its_generation_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.sqlite");
    let host = Uuid::now_v7();
    let doc = desired().to_string();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        // Version 5: the schema before the hub kept desired-state history.
        let previous = 5;
        for migration in &bosun_hubd::store::sqlite::schema::MIGRATIONS[..previous] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", i64::try_from(previous).unwrap())
            .unwrap();
        conn.execute(
            "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s,
                                known_generation, applied_generation)
             VALUES (?1, 'old-box', zeroblob(32), 'active', 0, 30, 7, 7)",
            [host.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO desired (host_id, generation, document, updated_ms) VALUES (?1, 7, ?2, 1000)",
            rusqlite::params![host.to_string(), doc],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let current = store.desired_current(host).unwrap().unwrap();
    assert_eq!(current.generation, 7);
    assert_eq!(current.correlation_id, None);
    let facts = store.desired_facts(host).unwrap();
    assert_eq!(
        facts.applied.unwrap().generation,
        7,
        "the applied document is the carried-over one"
    );
    assert!(store.poll_view(host).unwrap().correlation_id.is_none());
}
