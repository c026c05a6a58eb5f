//! Ids typed back as prefixes, resolved by the hub: `bosunctl` and a bare API client get the
//! same answers (a unique prefix resolves, an ambiguous one is refused listing its candidates
//! by name, an unknown one is not found, one too short is refused), and the event log names
//! hosts instead of printing their ids.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
}

/// A signed `break-glass-disable` job with id `job_id` for `host`: (document, signature).
fn signed_job(dir: &Path, host: Uuid, job_id: Uuid) -> (PathBuf, PathBuf) {
    let key = dir.join("operator_key");
    if !key.exists() {
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let file = dir.join(format!("job-{}.json", job_id.simple()));
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (not_before, expires_at) = (
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(5),
    );
    std::fs::write(
        &file,
        format!(
            "{{\"schema\":\"bosun.job/v1\",\"job_id\":\"{job_id}\",\"kind\":\"break-glass-disable\",\
             \"target\":{{\"host_id\":\"{host}\"}},\"params\":{{}},\"nonce\":\"{}\",\
             \"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n",
            job_id.simple()
        ),
    )
    .unwrap();
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "bosun-job@v1", "-f"])
        .arg(&key)
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    let sig = file.with_extension("json.sig");
    (file, sig)
}

async fn api_get(hub: &Fixture, path: &str) -> (u16, Value) {
    let resp = hub
        .pinned_client()
        .get(format!("{}{path}", hub.url))
        .bearer_auth(&hub.admin)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_resolves_typed_id_prefixes_for_every_client() {
    let hub = start_hub().await;
    let alpha = hub.enroll_agent("pve-alpha").await;
    let bravo = hub.enroll_agent("pve-bravo").await;
    let full = alpha.to_string();

    // A bare API client: a host by a prefix of its id, in any case.
    let (status, detail) = api_get(
        &hub,
        &format!("/v1/admin/hosts/{}", &full[..8].to_uppercase()),
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["host_id"], full);
    let (status, events) = api_get(&hub, &format!("/v1/admin/events?host={}", &full[..6])).await;
    assert_eq!(status, 200, "{events}");
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["host_id"] == full),
        "{events}"
    );
    let (status, body) = api_get(&hub, "/v1/admin/hosts/abc").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_host_id")),
        "{body}"
    );

    // Two jobs whose ids share their first block, one for each host.
    let ids = [
        Uuid::parse_str("5eed0000-0000-4000-8000-000000000001").unwrap(),
        Uuid::parse_str("5eed0000-0000-4000-8000-000000000002").unwrap(),
    ];
    for (host, job_id) in [(alpha, ids[0]), (bravo, ids[1])] {
        let (doc, sig) = signed_job(hub.dir.path(), host, job_id);
        let out = hub
            .run(&[
                "job",
                "submit",
                doc.to_str().unwrap(),
                sig.to_str().unwrap(),
            ])
            .await;
        assert_exit(&out, 0);
    }

    // Ambiguous: refused with exit 4, the hub listing both jobs by kind and host.
    let out = hub
        .run(&["job", "cancel", "--host", "pve-alpha", "5eed0000"])
        .await;
    assert_exit(&out, 4);
    let said = text(&out);
    for expected in [
        ids[0].to_string(),
        ids[1].to_string(),
        "break-glass-disable on pve-alpha".to_owned(),
        "break-glass-disable on pve-bravo".to_owned(),
    ] {
        assert!(said.contains(&expected), "{expected}: {said}");
    }
    let (status, body) = api_get(&hub, "/v1/admin/events?host=5eed").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("unknown_host")),
        "{body}"
    );
    // Unknown (exit 8) and too short (exit 4).
    assert_exit(
        &hub.run(&["job", "cancel", "--host", "pve-alpha", "5eed0001"])
            .await,
        8,
    );
    assert_exit(
        &hub.run(&["job", "cancel", "--host", "pve-alpha", "5ee"])
            .await,
        4,
    );
    // Unique: the longer prefix cancels alpha's job.
    let out = hub
        .run(&[
            "job",
            "cancel",
            "--host",
            &full[..8],
            "5eed0000-0000-4000-8000-00000000000",
        ])
        .await;
    assert_exit(&out, 4);
    let out = hub
        .run(&[
            "job",
            "cancel",
            "--host",
            &full[..8],
            "5EED0000000040008000000000000001",
        ])
        .await;
    assert_exit(&out, 0);
    assert!(
        text(&out).contains(&format!("job {} cancelled", ids[0])),
        "{}",
        text(&out)
    );

    // The event log names each host; `--host` takes a prefix the hub resolves.
    let out = hub.run(&["events", "--host", &full[..8]]).await;
    assert_exit(&out, 0);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.contains("pve-alpha"), "{listed}");
    assert!(!listed.contains(&full), "{listed}");
    assert!(!listed.contains("pve-bravo"), "{listed}");
}
