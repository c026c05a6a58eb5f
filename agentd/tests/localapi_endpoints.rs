//! Every local-API endpoint against the simulator over real TLS: auth, scoping, snapshots,
//! rollback, storage, restore-test status and limits.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::time::Duration;

use bosun_agentd::guests::localapi::{LocalApiConfig, RestoreTestRecord};
use bosun_pve::Pve as _;
use localapi_support::{Harness, Options, pinned_client};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_needs_no_token_and_everything_else_does() {
    let h = Harness::start().await;
    let resp = h.client.get(h.url("/v1/health")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "ok");

    for path in [
        "/v1/storage",
        "/v1/snapshot",
        "/v1/backup/due",
        "/v1/backup/status",
        "/v1/restore-test/status",
    ] {
        let (status, body) =
            localapi_support::read(h.client.get(h.url(path)).send().await.unwrap()).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert_eq!(body["code"], "unauthorized");
        let forged = format!("blt_{}", "A".repeat(43));
        let resp = h
            .client
            .get(h.url(path))
            .bearer_auth(forged)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path} with an unknown token");
    }
    for path in ["/v1/snapshot", "/v1/rollback", "/v1/backup"] {
        let resp = h
            .client
            .post(h.url(path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_fingerprint_fails_the_handshake() {
    let h = Harness::start().await;
    let wrong = "00".repeat(32);
    let err = pinned_client(&wrong)
        .get(h.url("/v1/health"))
        .send()
        .await
        .expect_err("a wrong pin must fail");
    assert!(err.is_connect() || err.is_request(), "{err:?}");
    // The right pin keeps working after the failed attempt.
    assert_eq!(
        h.client
            .get(h.url("/v1/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_another_guest_is_refused_audited_and_never_reaches_proxmox() {
    let h = Harness::start().await;
    let other = h.guest(1).clone();
    h.sim.clear_requests();
    let attempts: Vec<(&str, &str, serde_json::Value)> = vec![
        ("GET", "/v1/storage?vmid=102", json!(null)),
        (
            "GET",
            "/v1/snapshot?guest_id=0195a0e0-0000-7000-8000-000000000002",
            json!(null),
        ),
        ("GET", "/v1/backup/due?vmid=102", json!(null)),
        ("GET", "/v1/backup/status?vmid=102", json!(null)),
        ("GET", "/v1/restore-test/status?vmid=102", json!(null)),
        ("POST", "/v1/snapshot", json!({"vmid": 102})),
        ("POST", "/v1/snapshot", json!({"guest_id": other.guest_id})),
        (
            "POST",
            "/v1/rollback",
            json!({"snapshot": "pre-deploy", "vmid": "102"}),
        ),
        ("POST", "/v1/backup", json!({"quiesced": true, "vmid": 102})),
        ("POST", "/v1/backup?vmid=102", json!({})),
    ];
    for (method, path, body) in &attempts {
        let (status, answer) = if *method == "GET" {
            h.get(0, path).await
        } else {
            h.post(0, path, body.clone()).await
        };
        assert_eq!(status, 403, "{method} {path} {body}: {answer}");
        assert_eq!(answer["code"], "foreign_guest");
    }
    assert!(
        h.sim_calls_for(other.vmid).is_empty(),
        "no call may reach the other guest: {:?}",
        h.sim_calls_for(other.vmid)
    );
    assert!(
        h.sim.requests().is_empty(),
        "a refused request makes no Proxmox call at all: {:?}",
        h.sim.requests()
    );
    // Each refusal is counted: its own row for the first at an endpoint, a summary row with
    // the count of the repeats in its window.
    h.api.flush_refusals().await;
    let audit = h.journal.audit_since(0, 1000).await.unwrap();
    let refusals: u64 = audit
        .iter()
        .map(|e| match e.event.event.as_str() {
            "localapi.foreign_guest" => 1,
            "localapi.foreign_guest.repeated" => e.event.detail["count"].as_u64().unwrap(),
            _ => 0,
        })
        .sum();
    assert_eq!(refusals, attempts.len() as u64);

    // Naming one's own guest is fine.
    let (status, body) = h.get(0, "/v1/storage?vmid=101").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = h
        .get(
            0,
            "/v1/backup/status?guest_id=0195a0e0-0000-7000-8000-000000000001",
        )
        .await;
    assert_eq!(status, 200);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_lists_the_guests_own_mounts_with_their_class() {
    use bosun_proto::desired::StorageClass;
    let mut options = Options::default();
    options
        .storage
        .classes
        .insert_storage("local-lvm", StorageClass::Fast);
    let h = Harness::start_with(options).await;
    let (status, body) = h.get(0, "/v1/storage").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["vmid"], 101);
    assert_eq!(body["guest_id"], h.guest(0).guest_id);
    let root = &body["mounts"][0];
    assert_eq!(root["key"], "rootfs");
    assert_eq!(root["path"], "/");
    assert_eq!(root["storage"], "local-lvm");
    assert_eq!(root["class"], "fast");
    let (_, other) = h.get(1, "/v1/storage").await;
    assert_eq!(other["vmid"], 102);

    // The classes are read at every request: what the storage watcher publishes next is
    // answered next, without a restart.
    h.storage.send_modify(|facts| {
        facts.classes = Default::default();
        facts
            .classes
            .insert_storage("local-lvm", StorageClass::Slow);
    });
    let (_, body) = h.get(0, "/v1/storage").await;
    assert_eq!(body["mounts"][0]["class"], "slow", "{body}");
    h.storage
        .send_modify(|facts| facts.classes = Default::default());
    let (_, body) = h.get(0, "/v1/storage").await;
    assert_eq!(
        body["mounts"][0]["class"],
        serde_json::Value::Null,
        "{body}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_named_listed_and_rolled_back_only_within_the_guest() {
    let h = Harness::start().await;
    let (status, taken) = h
        .post(
            0,
            "/v1/snapshot",
            json!({"description": "before deploy 42"}),
        )
        .await;
    assert_eq!(status, 201, "{taken}");
    let name = taken["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("bosun-") && name.len() <= 40, "{name}");
    assert!(h.sim.snapshot_names(101).contains(&name));
    assert!(!h.sim.snapshot_names(102).contains(&name));

    // A second snapshot in the same second gets a distinct name.
    let (status, again) = h.post(0, "/v1/snapshot", json!({})).await;
    assert_eq!(status, 201, "{again}");
    assert_ne!(again["name"], taken["name"]);

    let (status, list) = h.get(0, "/v1/snapshot").await;
    assert_eq!(status, 200);
    let entries = list["snapshots"].as_array().unwrap();
    let mine = entries.iter().find(|s| s["name"] == name.as_str()).unwrap();
    assert_eq!(mine["taken_through_api"], true);
    assert_eq!(mine["description"], "before deploy 42");

    // The other guest sees none of them and cannot roll back to them.
    let (_, theirs) = h.get(1, "/v1/snapshot").await;
    assert!(
        theirs["snapshots"].as_array().unwrap().is_empty(),
        "{theirs}"
    );
    h.sim.clear_requests();
    let (status, body) = h.post(1, "/v1/rollback", json!({"snapshot": name})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "snapshot_not_found");
    assert!(
        h.sim_calls_for(101).is_empty(),
        "{:?}",
        h.sim_calls_for(101)
    );
    assert!(
        !h.sim
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/rollback")),
        "no rollback may be issued"
    );

    // Names that cannot be snapshots are not found either.
    let (status, body) = h.post(0, "/v1/rollback", json!({})).await;
    assert_eq!(status, 400, "a rollback names its snapshot: {body}");
    for bad in ["current", "vzdump", "../x", "a b"] {
        let (status, body) = h.post(0, "/v1/rollback", json!({"snapshot": bad})).await;
        assert_eq!(status, 404, "{bad:?}: {body}");
    }

    // The simulator deadlocks rolling back a *running* guest (it logs "stopping CT" while
    // holding its state lock), so stop the guest first; `start=1` must bring it back.
    let upid = h
        .pve
        .stop_ct(bosun_pve::Vmid::new(101).unwrap())
        .await
        .unwrap();
    h.pve.wait_task(bosun_pve::Op::StopCt, &upid).await.unwrap();
    assert_eq!(h.sim.guest_running(101), Some(false));
    let (status, accepted) = h.post(0, "/v1/rollback", json!({"snapshot": name})).await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["snapshot"], name.as_str());
    let op_id: bosun_agentd::ops::journal::OpId =
        accepted["op_id"].as_str().unwrap().parse().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let op = h.journal.operation(op_id).await.unwrap().unwrap();
        if op.status.is_terminal() {
            assert_eq!(
                op.status,
                bosun_agentd::ops::journal::OpStatus::Done,
                "{op:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollback never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rollbacks: Vec<_> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/rollback"))
        .collect();
    assert_eq!(rollbacks.len(), 1);
    assert_eq!(
        rollbacks[0].path,
        format!("/nodes/pve/lxc/101/snapshot/{name}/rollback")
    );
    assert_eq!(
        h.sim.guest_running(101),
        Some(true),
        "the guest is started again"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_test_status_says_plainly_when_none_ran() {
    let h = Harness::start().await;
    let (status, body) = h.get(0, "/v1/restore-test/status").await;
    assert_eq!(status, 200);
    assert_eq!(body["state"], "never_run");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no restore test")
    );
    assert!(body["last"].is_null());
    h.board.record(
        &h.guest(0).guest_id,
        RestoreTestRecord {
            finished_at: "2026-03-14T03:00:00Z".parse().unwrap(),
            passed: true,
            outcome: bosun_agentd::ops::journal::TestOutcome::Passed,
            duration_s: 42,
            archive: "local:backup/vzdump-lxc-101-2026_03_14-02_00_00.tar.zst".to_owned(),
            detail: None,
        },
    );
    let (_, body) = h.get(0, "/v1/restore-test/status").await;
    assert_eq!(body["state"], "passed");
    assert_eq!(body["last"]["duration_s"], 42);
    assert_eq!(body["last"]["outcome"], "passed");
    let (_, other) = h.get(1, "/v1/restore-test/status").await;
    assert_eq!(other["state"], "never_run", "results are per guest");
    // Booted but not checked is said so, never `passed`.
    h.board.record(
        &h.guest(1).guest_id,
        RestoreTestRecord {
            finished_at: "2026-03-14T03:00:00Z".parse().unwrap(),
            passed: false,
            outcome: bosun_agentd::ops::journal::TestOutcome::NotChecked,
            duration_s: 40,
            archive: "local:backup/vzdump-lxc-102-2026_03_14-02_00_00.tar.zst".to_owned(),
            detail: Some("booted, not checked: the guest installs no restore check".to_owned()),
        },
    );
    let (_, other) = h.get(1, "/v1/restore-test/status").await;
    assert_eq!(other["state"], "not_checked");
    assert_eq!(other["last"]["outcome"], "not_checked");
    assert!(
        other["message"]
            .as_str()
            .unwrap()
            .contains("did not check its data"),
        "{other}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_in_the_error_format() {
    let h = Harness::start_with(Options {
        config: LocalApiConfig {
            rate_per_s: 1,
            burst: 3,
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    // Body too large: 413 (checked before the rate limit matters: one request).
    let big = json!({"description": "x".repeat(20_000)});
    let (status, body) = h.post(1, "/v1/snapshot", big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    // Not JSON: 415.
    let resp = h
        .client
        .post(h.url("/v1/backup"))
        .bearer_auth(&h.guest(1).token)
        .header("content-type", "text/plain")
        .body("quiesced=true")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);
    // Bad JSON: 400.
    let resp = h
        .client
        .post(h.url("/v1/backup"))
        .bearer_auth(&h.guest(1).token)
        .header("content-type", "application/json")
        .body("{\"quiesced\": \"yes\"")
        .send()
        .await
        .unwrap();
    let (status, body) = localapi_support::read(resp).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "bad_request");
    // Guest 2's burst of 3 is spent now.
    let (status, body) = h.get(1, "/v1/backup/status").await;
    assert_eq!(status, 429, "{body}");

    // Guest 1 has its own bucket: three pass, the fourth is limited with Retry-After.
    for _ in 0..3 {
        let (status, _) = h.get(0, "/v1/backup/status").await;
        assert_eq!(status, 200);
    }
    let resp = h
        .client
        .get(h.url("/v1/backup/status"))
        .bearer_auth(&h.guest(0).token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_some());
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
    // Unknown routes and methods answer in the same format.
    let (status, body) =
        localapi_support::read(h.client.get(h.url("/v2/nothing")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "not_found");
    let (status, body) =
        localapi_support::read(h.client.delete(h.url("/v1/health")).send().await.unwrap()).await;
    assert_eq!(status, 405);
    assert_eq!(body["code"], "method_not_allowed");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_bad_requests() {
    let h = Harness::start().await;
    for body in [
        "{",
        "[]",
        "{\"quiesced\": \"yes\"}",
        "{\"max_quiesce_s\": -1}",
        "{\"max_quiesce_s\": 0}",
        "{\"max_quiesce_s\": 120.5}",
        "{\"max_quiesce_s\": 5000000000.0}",
    ] {
        let resp = h
            .client
            .post(h.url("/v1/backup"))
            .bearer_auth(&h.guest(0).token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, answer) = localapi_support::read(resp).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["code"], "bad_request");
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_body_limit_applies() {
    let h = Harness::start_with(Options {
        guests: 1,
        config: LocalApiConfig {
            max_body_bytes: 2048,
            rate_per_s: 1000,
            burst: 1000,
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    // Under the default limit (16 KiB) but over the configured one.
    let big = json!({"description": "x".repeat(4000)});
    let (status, body) = h.post(0, "/v1/snapshot", big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    assert!(body["message"].as_str().unwrap().contains("2048"), "{body}");
    h.shutdown().await;
}

/// `GET /v1/audit`: a guest's controller reads what was done to its own guest (here its
/// snapshot and rollback) and the break-glass sessions opened on its host, with the operator's
/// key and signer left out; another guest's entries never show, pages are bounded and run
/// newest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_shows_a_guest_only_its_own_entries_and_its_hosts_break_glass() {
    let h = Harness::start().await;
    // What the harness did to the guest (its token minted) is there from the start.
    let (status, start) = h.get(0, "/v1/audit").await;
    assert_eq!(status, 200, "{start}");
    let start = start["entries"].as_array().unwrap().len();

    let (status, taken) = h.post(0, "/v1/snapshot", json!({})).await;
    assert_eq!(status, 201, "{taken}");
    let (status, theirs) = h.post(1, "/v1/snapshot", json!({})).await;
    assert_eq!(status, 201, "{theirs}");
    let mut door =
        bosun_agentd::ops::journal::AuditEvent::new(bosun_agentd::ops::journal::BREAK_GLASS_OPENED);
    door.detail = json!({
        "account": "bosun-breakglass", "reason": "agent wedged, ticket 4711",
        "expires_at": "2026-11-24T18:00:00Z", "fingerprint": "SHA256:operatorkey",
        "signer": "SHA256:signer", "job_id": "j-1",
    });
    h.journal.append_audit(door).await.unwrap();

    let (status, page) = h.get(0, "/v1/audit").await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), start + 2, "{page}");
    assert_eq!(entries[0]["event"], "break_glass.opened");
    assert_eq!(entries[0]["host_wide"], true);
    assert_eq!(
        entries[0]["detail"],
        json!({ "account": "bosun-breakglass", "reason": "agent wedged, ticket 4711",
                "expires_at": "2026-11-24T18:00:00Z" }),
        "the operator's key and signer are not shown"
    );
    assert_eq!(entries[1]["event"], "operation.finished");
    assert_eq!(entries[1]["host_wide"], false);
    assert_eq!(entries[1]["detail"]["kind"], "localapi.snapshot");
    assert_eq!(entries[1]["detail"]["status"], "done");
    assert!(page["next_before"].is_null(), "{page}");

    // The other guest sees its own snapshot and the host's door, never this guest's rows.
    let (_, other) = h.get(1, "/v1/audit").await;
    let others = other["entries"].as_array().unwrap();
    assert!(
        others
            .iter()
            .any(|e| e["detail"]["kind"] == "localapi.snapshot"),
        "{other}"
    );
    assert!(
        others.iter().all(|e| e["seq"] != entries[1]["seq"]),
        "{other}"
    );
    assert_eq!(others[0]["event"], "break_glass.opened", "{other}");

    // Bounded pages, newest first, and the cursor leads to the older entries.
    let (_, first) = h.get(0, "/v1/audit?limit=1").await;
    assert_eq!(first["entries"][0]["seq"], entries[0]["seq"]);
    let before = first["next_before"].as_u64().unwrap();
    let (_, second) = h
        .get(0, &format!("/v1/audit?limit=1&before={before}"))
        .await;
    assert_eq!(second["entries"][0]["seq"], entries[1]["seq"]);
    for bad in ["limit=0", "limit=101", "before=0", "before=x"] {
        let (status, body) = h.get(0, &format!("/v1/audit?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = h
        .get(
            0,
            &format!("/v1/audit?guest_id={}", localapi_support::guest_id(2)),
        )
        .await;
    assert_eq!(status, 403, "naming another guest: {body}");
    h.shutdown().await;
}
