use std::path::{Path, PathBuf};
use std::process::Command;

use bosun_proto::job::SignedJob;
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::*;

/// A real OpenSSH key and `ssh-keygen -Y sign`.
struct Signer {
    key: PathBuf,
    _dir: tempfile::TempDir,
}

impl Signer {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("id_ed25519");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op@example", "-f"])
            .arg(&key)
            .status()
            .expect("ssh-keygen runs");
        assert!(status.success());
        Self { key, _dir: dir }
    }

    fn allowed(&self) -> AllowedSigners {
        let public = std::fs::read_to_string(self.key.with_extension("pub")).expect("pub key");
        AllowedSigners::parse(&format!("op@example {public}")).expect("allowed signers")
    }

    fn sign(&self, bytes: &[u8], namespace: &str) -> String {
        let file = self.key.parent().expect("dir").join("job.json");
        std::fs::write(&file, bytes).expect("write job");
        sign_file(&self.key, &file, namespace)
    }
}

fn sign_file(key: &Path, file: &Path, namespace: &str) -> String {
    let mut sig = file.as_os_str().to_owned();
    sig.push(".sig");
    let sig = PathBuf::from(sig);
    let _ = std::fs::remove_file(&sig);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(file)
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success());
    std::fs::read_to_string(sig).expect("signature")
}

const HOST: Uuid = Uuid::from_u128(0x1111);
const GUEST: Uuid = Uuid::from_u128(0x2222);

fn now() -> Timestamp {
    "2026-11-21T00:00:00Z".parse().expect("time")
}

fn document(kind: &str, host: Uuid, guest: Uuid, vmid: u32, hours: i64) -> Vec<u8> {
    let not_before = now();
    let expires_at = now() + SignedDuration::from_hours(hours);
    let mut doc = serde_json::json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::from_u128(0x3333),
        "kind": kind,
        "target": { "host_id": host, "guest_id": guest, "vmid": vmid },
        "params": { "backup": "local:backup/vzdump-lxc-101-2026_11_20-00_00_00.tar.zst" },
        "nonce": "nonce-0123456789abcdef",
        "not_before": not_before,
        "expires_at": expires_at,
    });
    if kind == "agent-update" {
        doc["target"] = serde_json::json!({ "host_id": host });
        doc["params"] = serde_json::json!({ "version": "1.2.3", "sha256": "ab".repeat(32) });
    }
    if kind == "adopt" {
        doc["params"] = serde_json::json!({
            "hostname": "legacy-web",
            "config_digest": "0123456789abcdef0123456789abcdef01234567",
        });
    }
    if kind == "break-glass-enable" {
        doc["target"] = serde_json::json!({ "host_id": host });
        doc["params"] = serde_json::json!({});
    }
    if kind == "restore-bulk" {
        doc["params"] = serde_json::json!({ "volume": "media" });
    }
    serde_json::to_vec(&doc).expect("json")
}

/// A guest a signed decommission destroyed.
const GONE: Uuid = Uuid::from_u128(0x7777);

fn index() -> GuestIndex {
    GuestIndex {
        by_vmid: [(101, GUEST)].into(),
        gone: [GONE].into(),
        // 101 is the guest's; 950 a restore test's scratch guest (no guest id).
        held: [101, 950, 130].into(),
        // The adopt job that recorded 130: sent again, it passes to its claim.
        adopted_by: [Uuid::from_u128(0x5555)].into(),
    }
}

fn check(
    signed: &SignedJob,
    signers: &AllowedSigners,
    at: Timestamp,
) -> Result<CheckedJob, JobRefusal> {
    check_job(signed, signers, HOST, &index(), at, DEFAULT_SKEW)
}

#[test]
fn every_refusal_and_the_one_acceptance() {
    let signer = Signer::new();
    let other = Signer::new();
    let signers = signer.allowed();
    let good = document("restore-now", HOST, GUEST, 101, 1);
    let sig = signer.sign(&good, "bosun-job@v1");
    let accepted = check(&SignedJob::new(&good, &sig), &signers, now()).expect("valid job");
    assert_eq!(accepted.document.target.vmid, Some(101));

    // Within the skew on either side.
    let early = now() - SignedDuration::from_secs(60);
    assert!(check(&SignedJob::new(&good, &sig), &signers, early).is_ok());

    let code = |r: Result<CheckedJob, JobRefusal>| r.map(|_| ()).expect_err("refused").code();

    let mut tampered = good.clone();
    let at = tampered.len() - 3;
    tampered[at] = b' ';
    assert_eq!(
        code(check(&SignedJob::new(&tampered, &sig), &signers, now())),
        "bad_signature"
    );

    let ns = signer.sign(&good, "file");
    assert_eq!(
        code(check(&SignedJob::new(&good, &ns), &signers, now())),
        "wrong_namespace"
    );

    let stranger = other.sign(&good, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&good, &stranger), &signers, now())),
        "unknown_signer"
    );

    let late = now() + SignedDuration::from_hours(2);
    assert_eq!(
        code(check(&SignedJob::new(&good, &sig), &signers, late)),
        "expired"
    );

    let too_early = now() - SignedDuration::from_hours(1);
    assert_eq!(
        code(check(&SignedJob::new(&good, &sig), &signers, too_early)),
        "not_yet_valid"
    );

    let elsewhere = document("restore-now", Uuid::from_u128(0x9999), GUEST, 101, 1);
    let s = signer.sign(&elsewhere, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&elsewhere, &s), &signers, now())),
        "other_host"
    );

    let retargeted = document("restore-now", HOST, GUEST, 102, 1);
    let s = signer.sign(&retargeted, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&retargeted, &s), &signers, now())),
        "target_mismatch"
    );

    // A decommissioned guest is gone, whatever vmid the job names.
    let again = document("decommission", HOST, GONE, 101, 1);
    let s = signer.sign(&again, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&again, &s), &signers, now())),
        "already_gone"
    );

    // An agent update names a version and the artifact's digest; both are checked.
    let update = document("agent-update", HOST, GUEST, 101, 1);
    let s = signer.sign(&update, "bosun-job@v1");
    assert!(check(&SignedJob::new(&update, &s), &signers, now()).is_ok());
    let mut no_digest: serde_json::Value = serde_json::from_slice(&update).unwrap();
    no_digest["params"] = serde_json::json!({ "version": "1.2.3" });
    let no_digest = serde_json::to_vec(&no_digest).unwrap();
    let s = signer.sign(&no_digest, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&no_digest, &s), &signers, now())),
        "malformed"
    );

    let garbage = b"{not json".to_vec();
    let s = signer.sign(&garbage, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&garbage, &s), &signers, now())),
        "malformed"
    );
    assert_eq!(
        peek_job_id(&SignedJob::new(&good, &sig)),
        Some(Uuid::from_u128(0x3333))
    );
    assert_eq!(peek_job_id(&SignedJob::new(&garbage, &s)), None);
}

/// A break-glass job for this host with `params`.
fn break_glass(kind: &str, params: serde_json::Value) -> Vec<u8> {
    let doc = serde_json::json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::from_u128(0x4444),
        "kind": kind,
        "target": { "host_id": HOST },
        "params": params,
        "nonce": "nonce-break-glass-0123",
        "not_before": now(),
        "expires_at": now() + SignedDuration::from_hours(1),
    });
    serde_json::to_vec(&doc).expect("json")
}

#[test]
fn break_glass_jobs_need_a_signature_a_key_and_at_most_a_day() {
    let signer = Signer::new();
    let signers = signer.allowed();
    let key = std::fs::read_to_string(signer.key.with_extension("pub")).expect("pub key");
    let code = |r: Result<CheckedJob, JobRefusal>| r.map(|_| ()).expect_err("refused").code();
    let params = |seconds: u64| serde_json::json!({ "ssh_public_key": key.trim(), "duration_seconds": seconds, "reason": "wedged" });
    let day = break_glass("break-glass-enable", params(86_400));
    let s = signer.sign(&day, "bosun-job@v1");
    assert!(check(&SignedJob::new(&day, &s), &signers, now()).is_ok());
    let disable = break_glass("break-glass-disable", serde_json::json!({}));
    let s = signer.sign(&disable, "bosun-job@v1");
    assert!(check(&SignedJob::new(&disable, &s), &signers, now()).is_ok());

    // A day and a second, even signed by an allowed operator.
    let longer = break_glass("break-glass-enable", params(86_401));
    let s = signer.sign(&longer, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&longer, &s), &signers, now())),
        "malformed"
    );
    // A key carrying options.
    let forced = break_glass(
        "break-glass-enable",
        serde_json::json!({ "ssh_public_key": format!("command=\"/bin/sh\" {}", key.trim()), "duration_seconds": 600, "reason": "x" }),
    );
    let s = signer.sign(&forced, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&forced, &s), &signers, now())),
        "malformed"
    );
    // Unsigned by anyone allowed.
    let other = Signer::new();
    let s = other.sign(&day, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&day, &s), &signers, now())),
        "unknown_signer"
    );
    // A guest target on a host job.
    let mut aimed: serde_json::Value = serde_json::from_slice(&day).expect("json");
    aimed["target"] = serde_json::json!({ "host_id": HOST, "guest_id": GUEST, "vmid": 101 });
    let aimed = serde_json::to_vec(&aimed).expect("json");
    let s = signer.sign(&aimed, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&aimed, &s), &signers, now())),
        "malformed"
    );
}

#[test]
fn an_unknown_kind_is_refused_as_such_and_never_read_as_another() {
    let signer = Signer::new();
    let signers = signer.allowed();
    let refusal = |kind: &str| {
        let doc = document(kind, HOST, GUEST, 101, 1);
        let s = signer.sign(&doc, "bosun-job@v1");
        check(&SignedJob::new(&doc, &s), &signers, now())
            .map(|c| c.document.kind)
            .expect_err("an unknown kind is refused")
    };
    for kind in [
        "frobnicate",
        "force_backup",
        "FORCE-BACKUP",
        "restore-now-later",
    ] {
        let refused = refusal(kind);
        assert_eq!(refused.code(), "unsupported_kind", "{kind}");
        assert_eq!(
            refused.to_string(),
            format!("job kind {kind} is not run by this agent")
        );
    }
    // What the refusal repeats of a hostile name is escaped and bounded.
    let hostile = format!("x\n{}", "y".repeat(1000));
    let refused = refusal(&hostile);
    assert_eq!(refused.code(), "unsupported_kind");
    let text = refused.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert!(text.len() < MAX_KIND_CHARS + 64, "{text}");
    // A known kind with a malformed document stays malformed.
    let mut unnamed: serde_json::Value =
        serde_json::from_slice(&document("force-backup", HOST, GUEST, 101, 1)).expect("json");
    unnamed["nonce"] = serde_json::json!("short");
    let unnamed = serde_json::to_vec(&unnamed).expect("json");
    let s = signer.sign(&unnamed, "bosun-job@v1");
    let refused = check(&SignedJob::new(&unnamed, &s), &signers, now()).map(|_| ());
    assert_eq!(refused.expect_err("malformed").code(), "malformed");
    // Every kind of the table passes the kind check.
    for row in crate::ops::jobs::kind::KindRow::ALL {
        if row.kind.needs_guest() && row.kind != bosun_proto::job::JobKind::ControllerUpdate {
            // An adoption names a container the journal does not hold, under a new id.
            let (guest, vmid) = if row.kind == bosun_proto::job::JobKind::Adopt {
                (Uuid::from_u128(0x4444), 120)
            } else {
                (GUEST, 101)
            };
            let doc = document(row.name(), HOST, guest, vmid, 1);
            let s = signer.sign(&doc, "bosun-job@v1");
            let checked = check(&SignedJob::new(&doc, &s), &signers, now()).expect("accepted");
            assert_eq!(checked.document.kind, row.kind);
        }
    }
}

/// An `adopt` job names a vmid the journal holds nothing at and a guest id it does not know;
/// everything else about it is checked as for any job.
#[test]
fn adopt_takes_only_what_the_journal_does_not_hold() {
    let signer = Signer::new();
    let signers = signer.allowed();
    let code = |r: Result<CheckedJob, JobRefusal>| r.map(|_| ()).expect_err("refused").code();
    let signed = |doc: &[u8]| SignedJob::new(doc, &signer.sign(doc, "bosun-job@v1"));
    let fresh = Uuid::from_u128(0x4444);

    // The job that adopted 130, sent again: its claim refuses it (`already_run`), not this.
    let mut replayed: serde_json::Value =
        serde_json::from_slice(&document("adopt", HOST, fresh, 130, 1)).unwrap();
    replayed["job_id"] = serde_json::json!(Uuid::from_u128(0x5555));
    let replayed = serde_json::to_vec(&replayed).unwrap();
    assert!(check(&signed(&replayed), &signers, now()).is_ok());
    // Another job for 130 is refused.
    let other = document("adopt", HOST, fresh, 130, 1);
    assert_eq!(
        code(check(&signed(&other), &signers, now())),
        "already_a_guest"
    );

    let good = document("adopt", HOST, fresh, 120, 1);
    let accepted = check(&signed(&good), &signers, now()).expect("an adoptable container");
    assert_eq!(accepted.document.target.vmid, Some(120));

    // The vmid of the journal's own guest, of a scratch guest, or the guest id it knows.
    let own = document("adopt", HOST, fresh, 101, 1);
    assert_eq!(
        code(check(&signed(&own), &signers, now())),
        "already_a_guest"
    );
    let scratch = document("adopt", HOST, fresh, 950, 1);
    assert_eq!(
        code(check(&signed(&scratch), &signers, now())),
        "already_a_guest"
    );
    let same_id = document("adopt", HOST, GUEST, 120, 1);
    assert_eq!(
        code(check(&signed(&same_id), &signers, now())),
        "guest_id_in_use"
    );
    // A decommissioned guest's id is never given out again.
    let gone = document("adopt", HOST, GONE, 120, 1);
    assert_eq!(code(check(&signed(&gone), &signers, now())), "already_gone");

    // Unsigned, or signed by nobody the host trusts: refused before anything is read.
    let stranger = Signer::new().sign(&good, "bosun-job@v1");
    assert_eq!(
        code(check(&SignedJob::new(&good, &stranger), &signers, now())),
        "unknown_signer"
    );
    // Without its pins (hostname and config digest), or with a parameter it does not take.
    for params in [
        serde_json::json!({ "hostname": "legacy-web" }),
        serde_json::json!({ "config_digest": "0123456789abcdef0123456789abcdef01234567" }),
        serde_json::json!({
            "hostname": "legacy-web",
            "config_digest": "0123456789abcdef0123456789abcdef01234567",
            "storage": "local-lvm",
        }),
    ] {
        let mut doc: serde_json::Value = serde_json::from_slice(&good).unwrap();
        doc["params"] = params;
        let doc = serde_json::to_vec(&doc).unwrap();
        assert_eq!(code(check(&signed(&doc), &signers, now())), "malformed");
    }
    // A guest is named: an adopt job for the host alone is malformed.
    let mut hostwide: serde_json::Value = serde_json::from_slice(&good).unwrap();
    hostwide["target"] = serde_json::json!({ "host_id": HOST });
    let hostwide = serde_json::to_vec(&hostwide).unwrap();
    assert_eq!(
        code(check(&signed(&hostwide), &signers, now())),
        "malformed"
    );
}
