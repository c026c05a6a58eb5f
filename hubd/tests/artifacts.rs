//! Artifacts for agent self-update: the admin uploads bytes under their SHA-256 (the digest
//! is checked; a mismatch, a bad digest and a body over 256 MiB are refused); an enrolled
//! host fetches them with its own key (no key, another host's key: 401; unknown digest: 404);
//! the hub keeps the newest eight. A SQLite hub keeps the bytes as files beside its database
//! (the row holds none), removes the files it prunes and refuses a file whose bytes no longer
//! hash to its name; a PostgreSQL hub keeps them in the table.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::store::{ARTIFACTS_DIR, StoreLocation};
use common::{TestHub, error_code, store_integers, test_store};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn upload(hub: &TestHub, name: &str, bytes: Vec<u8>) -> reqwest::Response {
    let admin = hub.admin.clone();
    hub.request(
        Method::PUT,
        &format!("/v1/admin/artifacts/{name}"),
        Some(&admin),
        Some(bytes),
    )
    .await
}

#[tokio::test]
async fn an_uploaded_artifact_is_served_to_enrolled_hosts_only() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-a").await;
    let (_other, other_key) = hub.enroll("pve-b").await;
    let bytes = b"\x7fELF not really a binary".repeat(1000);
    let sha = hex(&bytes);

    let resp = upload(&hub, &sha, bytes.clone()).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let info: Value = resp.json().await.unwrap();
    assert_eq!(info["sha256"], sha);
    assert_eq!(info["size"], bytes.len());
    // The same bytes again: still one artifact.
    assert_eq!(
        upload(&hub, &sha, bytes.clone()).await.status(),
        StatusCode::CREATED
    );
    let list: Value = hub
        .admin(Method::GET, "/v1/admin/artifacts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");

    let path = format!("/v1/hosts/{host}/artifacts/{sha}");
    let resp = hub.request(Method::GET, &path, Some(&key), None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    assert_eq!(resp.bytes().await.unwrap().to_vec(), bytes);

    for token in [None, Some(other_key.as_str()), Some(hub.admin.as_str())] {
        let (status, code) = error_code(hub.request(Method::GET, &path, token, None).await).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
    }
    let missing = format!("/v1/hosts/{host}/artifacts/{}", "0".repeat(64));
    let (status, code) =
        error_code(hub.request(Method::GET, &missing, Some(&key), None).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "no_artifact")
    );
    let bad = format!("/v1/hosts/{host}/artifacts/..%2F..%2Fetc");
    let (status, code) = error_code(hub.request(Method::GET, &bad, Some(&key), None).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_sha256")
    );
}

#[tokio::test]
async fn uploads_must_hash_to_their_name_and_fit_the_bound() {
    let hub = TestHub::start().await;
    let (status, code) = error_code(upload(&hub, &hex(b"other"), b"bytes".to_vec()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "sha256_mismatch")
    );
    let (status, code) = error_code(upload(&hub, "NOT-A-DIGEST", b"bytes".to_vec()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_sha256")
    );
    // Without the admin token nothing is stored.
    let resp = hub
        .request(
            Method::PUT,
            &format!("/v1/admin/artifacts/{}", hex(b"bytes")),
            None,
            Some(b"bytes".to_vec()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // One byte over the bound.
    let size = usize::try_from(bosun_proto::update::MAX_ARTIFACT_BYTES).unwrap() + 1;
    let big = vec![0u8; size];
    let (status, code) = error_code(upload(&hub, &hex(&big), big).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    let list: Value = hub
        .admin(Method::GET, "/v1/admin/artifacts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list, Value::Array(Vec::new()));
}

#[tokio::test]
async fn the_newest_eight_are_kept() {
    let hub = TestHub::start().await;
    let mut names = Vec::new();
    for i in 0..10u8 {
        let bytes = vec![i; 16];
        names.push(hex(&bytes));
        assert_eq!(
            upload(&hub, &hex(&bytes), bytes).await.status(),
            StatusCode::CREATED
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let list: Value = hub
        .admin(Method::GET, "/v1/admin/artifacts", None)
        .await
        .json()
        .await
        .unwrap();
    let kept: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["sha256"].as_str().unwrap())
        .collect();
    assert_eq!(
        kept.len(),
        usize::try_from(bosun_hubd::store::MAX_ARTIFACTS).unwrap()
    );
    assert!(!kept.contains(&names[0].as_str()) && !kept.contains(&names[1].as_str()));
    assert_eq!(kept[0], names[9]);
    if test_store(&hub.dir) == StoreLocation::Sqlite {
        let mut files = files(&hub);
        files.sort();
        let mut kept: Vec<String> = kept.iter().map(|k| (*k).to_owned()).collect();
        kept.sort();
        assert_eq!(files, kept, "the pruned artifacts' files are gone");
    }
}

/// The names in the hub's artifact directory.
fn files(hub: &TestHub) -> Vec<String> {
    std::fs::read_dir(hub.dir.path().join(ARTIFACTS_DIR))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_sqlite_hub_keeps_the_bytes_in_files_and_refuses_a_damaged_one() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-a").await;
    let bytes = b"\x7fELF streamed from a file".repeat(5000);
    let sha = hex(&bytes);
    assert_eq!(
        upload(&hub, &sha, bytes.clone()).await.status(),
        StatusCode::CREATED
    );
    let held = store_integers(
        &hub.dir,
        "SELECT COUNT(*) FROM artifacts WHERE sha256 = ?1 AND data IS NOT NULL",
        sha.clone(),
    )
    .await;
    let path = format!("/v1/hosts/{host}/artifacts/{sha}");
    let resp = hub.request(Method::GET, &path, Some(&key), None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-length"], bytes.len().to_string());
    assert_eq!(resp.bytes().await.unwrap().to_vec(), bytes);
    if test_store(&hub.dir) != StoreLocation::Sqlite {
        assert_eq!(held, [1], "PostgreSQL replicas keep the bytes in the table");
        assert!(files(&hub).is_empty());
        return;
    }
    assert_eq!(held, [0], "the row holds no bytes");
    let file = hub.dir.path().join(ARTIFACTS_DIR).join(&sha);
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    assert_eq!(
        files(&hub),
        std::slice::from_ref(&sha),
        "no temporary file is left"
    );

    // A file damaged on disk is refused, never served.
    let mut damaged = bytes.clone();
    damaged[100] ^= 1;
    std::fs::write(&file, &damaged).unwrap();
    let (status, code) = error_code(hub.request(Method::GET, &path, Some(&key), None).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, "artifact_corrupt")
    );
    // Uploading it again keeps the row and mends the file.
    assert_eq!(
        upload(&hub, &sha, bytes.clone()).await.status(),
        StatusCode::CREATED
    );
    let resp = hub.request(Method::GET, &path, Some(&key), None).await;
    assert_eq!(resp.bytes().await.unwrap().to_vec(), bytes);
}
