use std::path::Path;
use std::process::Command;

use bosun_proto::admin::HostDetail;
use bosun_proto::job::JobDocument;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use uuid::Uuid;

use super::*;

const HOST: Uuid = Uuid::from_u128(0x10);
const GUEST: Uuid = Uuid::from_u128(0x20);

fn keygen(dir: &Path, name: &str) -> std::path::PathBuf {
    let key = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success());
    key
}

/// Signs `bytes` with `key` in `namespace` through the stock `ssh-keygen -Y sign`.
fn sign(dir: &Path, key: &Path, namespace: &str, bytes: &[u8]) -> String {
    let file = dir.join(format!("doc-{}.json", Uuid::new_v4().simple()));
    std::fs::write(&file, bytes).unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(file.with_extension("json.sig")).unwrap()
}

fn allowed(dir: &Path, key: &Path) -> AllowedSigners {
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let file = dir.join("allowed_signers");
    std::fs::write(
        &file,
        format!("ops@example.com namespaces=\"bosun-job@v1\" {public}"),
    )
    .unwrap();
    load_signers(&file).unwrap()
}

fn job(kind: &str, expires_in: SignedDuration, vmid: Option<u32>) -> JobDocument {
    let now = Timestamp::now();
    serde_json::from_value(json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::now_v7(),
        "kind": kind,
        "target": { "host_id": HOST, "guest_id": GUEST, "vmid": vmid },
        "params": {},
        "nonce": "abcdefghijklmnop",
        "not_before": now - SignedDuration::from_hours(1),
        "expires_at": now + expires_in,
    }))
    .unwrap()
}

fn host(status: &str, reported_vmid: Option<u32>) -> HostDetail {
    let guests: Vec<_> = reported_vmid
        .map(|vmid| json!({ "guest_id": GUEST, "vmid": vmid, "hostname": "web", "status": "running" }))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "host_id": HOST, "hostname": "pve-a", "status": status, "liveness": "ok",
        "last_seen": null, "agent_version": null, "controller_version": null,
        "desired_generation": 0, "known_generation": 0, "applied_generation": 0,
        "pending_jobs": 0, "enrolled_at": "2026-11-01T00:00:00Z", "poll_interval_seconds": 30,
        "desired": null, "escrow_updated_at": null,
        "last_report": {
            "schema": "bosun.report/v1", "versions": { "agent": "0.1.0" }, "guests": guests
        },
    }))
    .unwrap()
}

fn reason(err: CtlError) -> &'static str {
    match err {
        CtlError::JobRefused { reason, .. } => reason,
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn a_signature_verifies_with_its_own_key_and_an_edit_after_signing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "operator");
    let document = br#"{"kind":"force-backup"}"#;
    let armored = sign(dir.path(), &key, "bosun-job@v1", document);
    let now = Timestamp::now();

    let signer = check_signature(document, &armored, None, now).unwrap();
    assert!(
        matches!(signer, Signer::Unchecked { ref fingerprint } if fingerprint.starts_with("SHA256:"))
    );
    assert!(
        signer
            .describe()
            .contains("not checked against an allowed_signers file")
    );

    // The kind changed after signing: the bytes no longer match the signature.
    let edited = br#"{"kind":"decommission"}"#;
    let err = check_signature(edited, &armored, None, now).unwrap_err();
    assert_eq!(reason(err), "signature");
    // A signature in another namespace (a golden document's) is not a job signature.
    let golden = sign(dir.path(), &key, "bosun-golden@v1", document);
    let err = check_signature(document, &golden, None, now).unwrap_err();
    assert!(err.to_string().contains("namespace"), "{err}");
    let err = check_signature(document, "not a signature", None, now).unwrap_err();
    assert_eq!(reason(err), "signature");
}

#[test]
fn with_allowed_signers_only_a_listed_key_passes() {
    let dir = tempfile::tempdir().unwrap();
    let operator = keygen(dir.path(), "operator");
    let stranger = keygen(dir.path(), "stranger");
    let signers = allowed(dir.path(), &operator);
    let document = br#"{"kind":"force-backup"}"#;
    let now = Timestamp::now();

    let good = sign(dir.path(), &operator, "bosun-job@v1", document);
    let signer = check_signature(document, &good, Some(&signers), now).unwrap();
    assert!(
        matches!(signer, Signer::Allowed { ref principals, .. } if principals == "ops@example.com"),
        "{signer:?}"
    );

    let other = sign(dir.path(), &stranger, "bosun-job@v1", document);
    let err = check_signature(document, &other, Some(&signers), now).unwrap_err();
    assert_eq!(reason(err), "signature");
    // Without the file, the stranger's signature is only known to be intact.
    assert!(matches!(
        check_signature(document, &other, None, now).unwrap(),
        Signer::Unchecked { .. }
    ));
}

#[test]
fn an_expired_job_is_refused_and_a_valid_one_passes() {
    let now = Timestamp::now();
    check_validity(
        &job("force-backup", SignedDuration::from_hours(1), None),
        now,
    )
    .unwrap();
    let err = check_validity(
        &job("force-backup", SignedDuration::from_mins(-1), None),
        now,
    )
    .unwrap_err();
    assert!(err.to_string().contains("expired at"), "{err}");
    assert_eq!(err.exit_code(), crate::error::exit::INPUT);
}

#[test]
fn the_target_must_be_a_live_host_and_a_guest_it_knows_by_its_vmid() {
    let hour = SignedDuration::from_hours(1);
    check_target(
        &job("force-backup", hour, Some(101)),
        &host("active", Some(101)),
    )
    .unwrap();
    check_target(&job("force-backup", hour, None), &host("active", Some(101))).unwrap();

    let err = check_target(
        &job("force-backup", hour, Some(101)),
        &host("revoked", Some(101)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("revoked"), "{err}");
    let err =
        check_target(&job("force-backup", hour, Some(101)), &host("active", None)).unwrap_err();
    assert!(err.to_string().contains("has no guest"), "{err}");
    let err = check_target(
        &job("force-backup", hour, Some(102)),
        &host("active", Some(101)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("runs as vmid 101"), "{err}");
    assert_eq!(known_vmid(&host("active", Some(101)), GUEST), Some(101));
    assert_eq!(known_vmid(&host("active", None), GUEST), None);
}
