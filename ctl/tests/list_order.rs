//! Every list `bosunctl` prints is newest first (decision 0069), in JSON and in text alike:
//! the event log and a host's jobs through the real binary against a real hub on loopback.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};

fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}", common::text(out));
}

/// Writes, signs (`ssh-keygen -Y sign` with a key made on first use) and submits a
/// `break-glass-disable` job for `host`; gives its id.
async fn queue_job(hub: &Fixture, host: Uuid, nonce: &str) -> Uuid {
    let dir = hub.dir.path();
    let key = dir.join("operator_key");
    if !key.exists() {
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "operator", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let job_id = Uuid::new_v4();
    let job = dir.join(format!("job-{nonce}.json"));
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(5),
    );
    std::fs::write(
        &job,
        format!(
            "{{\"schema\":\"bosun.job/v1\",\"job_id\":\"{job_id}\",\"kind\":\"break-glass-disable\",\
             \"target\":{{\"host_id\":\"{host}\"}},\"params\":{{}},\"nonce\":\"{nonce}\",\
             \"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n"
        ),
    )
    .unwrap();
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "bosun-job@v1", "-f"])
        .arg(&key)
        .arg(&job)
        .status()
        .unwrap();
    assert!(status.success());
    let sig: PathBuf = job.with_extension("json.sig");
    let out = hub.run(&["job", "submit", path(&job), path(&sig)]).await;
    assert_ok(&out);
    job_id
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The first column of each data row of a table (the header row skipped).
fn first_column(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_jobs_are_listed_newest_first() {
    let hub = start_hub().await;
    let first = hub.enroll_agent("pve-order-a").await;
    hub.enroll_agent("pve-order-b").await;

    // The event log: sequence numbers fall, in JSON and in the table.
    let out = hub.run(&["events", "--json"]).await;
    assert_ok(&out);
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.len() >= 2, "{events:?}");
    assert!(
        seqs.windows(2).all(|w| w[0] > w[1]),
        "newest first: {seqs:?}"
    );
    let out = hub.run(&["events"]).await;
    assert_ok(&out);
    let shown: Vec<u64> = first_column(&out)
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(
        shown, seqs,
        "the table lists what the JSON does, in its order"
    );
    // `--limit` keeps the newest.
    let out = hub.run(&["events", "--json", "--limit", "1"]).await;
    let newest: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0]["seq"].as_u64(), seqs.first().copied());

    // A host's jobs: the one queued last comes first.
    let older = queue_job(&hub, first, "order-job-nonce-1").await;
    let newer = queue_job(&hub, first, "order-job-nonce-2").await;
    let host = first.to_string();
    let out = hub.run(&["job", "list", "--host", &host, "--json"]).await;
    assert_ok(&out);
    let jobs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [newer.to_string(), older.to_string()], "{jobs:?}");
    let out = hub.run(&["job", "list", "--host", &host]).await;
    assert_ok(&out);
    // The table shows each id whole or as a prefix of it: the rows in the JSON's order.
    let shown = first_column(&out);
    let rows: Vec<&str> = shown
        .iter()
        .map(|id| {
            ids.iter()
                .copied()
                .find(|whole| whole.starts_with(id.as_str()))
                .unwrap_or_else(|| panic!("{id} is none of {ids:?}"))
        })
        .collect();
    assert_eq!(
        rows, ids,
        "the table lists what the JSON does, in its order"
    );
}

/// The ids of a JSON list `bosunctl` printed, by `key`.
fn ids(out: &Output, key: &str) -> Vec<String> {
    assert_ok(out);
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    list.iter()
        .map(|item| item[key].to_string().trim_matches('"').to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_of_things_that_happened_keeps_the_newest_limit() {
    let hub = start_hub().await;
    let host = hub.enroll_agent("pve-limit").await;
    let name = host.to_string();
    for n in 1..=3 {
        queue_job(&hub, host, &format!("limit-job-nonce-{n}")).await;
        let file = hub.dir.path().join(format!("artifact-{n}"));
        std::fs::write(&file, format!("artifact {n}")).unwrap();
        assert_ok(&hub.run(&["artifact", "upload", path(&file)]).await);
        // Apart in time: the hub orders artifacts by when they were stored.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert_ok(
            &hub.run(&[
                "enroll-token",
                "create",
                "--ttl",
                "10m",
                "--note",
                &format!("t{n}"),
            ])
            .await,
        );
        assert_ok(
            &hub.run(&[
                "alerts",
                "silence",
                "--host",
                &name,
                "--kind",
                "guest_orphaned",
                "--for",
                "1d",
                "--reason",
                &format!("s{n}"),
            ])
            .await,
        );
    }
    // Each list: all of it, then `--limit 2` gives its first two, in JSON and in the table.
    let lists: [(&[&str], &str); 4] = [
        (&["job", "list", "--host", &name], "job_id"),
        (&["artifact", "list"], "sha256"),
        (&["enroll-token", "list"], "token_id"),
        (&["alerts", "silences"], "id"),
    ];
    for (args, key) in lists {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let every = ids(&hub.run(&all).await, key);
        assert!(every.len() >= 3, "{args:?}: {every:?}");
        all.extend(["--limit", "2"]);
        let newest = ids(&hub.run(&all).await, key);
        assert_eq!(newest, every[..2], "{args:?}");
        let mut text = args.to_vec();
        text.extend(["--limit", "2"]);
        let out = hub.run(&text).await;
        assert_ok(&out);
        let rows = first_column(&out);
        assert_eq!(rows.len(), 2, "{args:?}: {rows:?}");
        assert!(
            rows.iter()
                .zip(&newest)
                .all(|(row, id)| id.starts_with(row.as_str())),
            "{args:?}: {rows:?} against {newest:?}"
        );
    }
    // The hub bounds each listing itself: a bare client asking for one gets one.
    for path in [
        format!("/v1/admin/hosts/{host}/jobs?limit=1"),
        "/v1/admin/artifacts?limit=1".to_owned(),
        "/v1/admin/enrollment-tokens?limit=1".to_owned(),
        "/v1/admin/alerts/silences?limit=1".to_owned(),
    ] {
        let listed: Vec<Value> = hub
            .pinned_client()
            .get(format!("{}{path}", hub.url))
            .bearer_auth(&hub.admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "{path}: {listed:?}");
    }
}
