use std::time::Duration;

use bosun_proto::desired::GuestKind;
use bosun_proto::golden::{GoldenDocument, SignedGolden};
use jiff::SignedDuration;

use super::super::tests::{
    GOLDEN, HASH, HOST, OTHER, Table, empty_journal, golden, here, journal, table,
};
use super::super::{GoldenCheck, verify};
use super::*;
use crate::clock::ManualClock;

/// An operator key made by `ssh-keygen`, signing with `ssh-keygen -Y sign`.
struct Operator {
    dir: tempfile::TempDir,
}

impl Operator {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
            .arg(dir.path().join("key"))
            .status()
            .unwrap();
        assert!(status.success());
        Self { dir }
    }

    /// This key's `allowed_signers` line with `options` (e.g. `namespaces="…"`).
    fn line(&self, options: &str) -> String {
        let public = std::fs::read_to_string(self.dir.path().join("key.pub")).unwrap();
        format!("op@example {options} {}", public.trim())
    }

    fn allowed(&self, namespaces: &str) -> AllowedSigners {
        AllowedSigners::parse(&self.line(&format!("namespaces=\"{namespaces}\""))).unwrap()
    }

    fn sign(&self, bytes: &[u8], namespace: &str) -> String {
        let file = self.dir.path().join("doc");
        std::fs::write(&file, bytes).unwrap();
        let _ = std::fs::remove_file(self.dir.path().join("doc.sig"));
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
            .arg(self.dir.path().join("key"))
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(self.dir.path().join("doc.sig")).unwrap()
    }

    /// The desired entry `volid`/`sha256` carrying `document`, signed in `namespace`.
    fn entry(
        &self,
        volid: &str,
        sha256: &str,
        document: &GoldenDocument,
        namespace: &str,
    ) -> GoldenArchive {
        let bytes = serde_json::to_vec(document).unwrap();
        let signature = self.sign(&bytes, namespace);
        GoldenArchive {
            volid: volid.to_owned(),
            sha256: sha256.to_owned(),
            signed: Some(SignedGolden::new(&bytes, &signature)),
            version: None,
        }
    }

    /// `volid`/`sha256` with a document naming `doc_volid`/`doc_sha`, signed in `namespace`.
    fn golden(
        &self,
        volid: &str,
        sha256: &str,
        doc: (&str, &str),
        namespace: &str,
    ) -> GoldenArchive {
        self.entry(volid, sha256, &GoldenDocument::new(doc.0, doc.1), namespace)
    }
}

fn calls(hasher: &Table) -> u32 {
    *hasher.calls.lock().unwrap()
}

#[tokio::test]
async fn an_allowed_operators_signed_golden_is_journaled_with_its_signer_after_a_fresh_hash() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let hasher = table(&[(OTHER, HASH)]);
    let entry = op.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE);
    let signers = || Ok(op.allowed(GOLDEN_NAMESPACE));
    admit_signed(&j, Some(&hasher), signers, here(), &entry)
        .await
        .unwrap();
    let record = j.golden(OTHER.into()).await.unwrap().unwrap();
    assert_eq!(record.sha256, HASH);
    let GoldenSource::Signed(signature) = &record.source else {
        panic!("{record:?}");
    };
    let signed = entry.signed.as_ref().unwrap();
    assert_eq!(signature.document, signed.golden_bytes().unwrap());
    assert_eq!(signature.signature, signed.signature);
    assert_eq!(signature.principals, "op@example");
    assert!(
        signature.fingerprint.starts_with("SHA256:"),
        "{signature:?}"
    );
    verify(&j, Some(&hasher), signers, here(), &entry)
        .await
        .unwrap();
    assert_eq!(calls(&hasher), 2, "hashed to admit and to verify");
}

#[tokio::test]
async fn signed_goldens_that_do_not_hold_up_are_refused_and_not_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let stranger = Operator::new();
    let now = jiff::Timestamp::now();
    let at = GoldenUse { now, ..here() };
    let scoped = |document: GoldenDocument| op.entry(OTHER, HASH, &document, GOLDEN_NAMESPACE);
    let cases: Vec<(&str, GoldenArchive, AllowedSigners, Table, &str)> = vec![
        (
            "a document for the golden re-attached to another archive",
            op.golden(OTHER, HASH, (GOLDEN, HASH), GOLDEN_NAMESPACE),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "bad_signed_document",
        ),
        (
            "a stranger's signature",
            stranger.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "bad_signature",
        ),
        (
            "a job signature (wrong namespace)",
            op.golden(OTHER, HASH, (OTHER, HASH), "bosun-job@v1"),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "bad_signature",
        ),
        (
            "a key allowed for jobs only",
            op.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE),
            op.allowed("bosun-job@v1"),
            table(&[(OTHER, HASH)]),
            "bad_signature",
        ),
        (
            "a file whose bytes are not the signed hash",
            op.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, &"2".repeat(64))]),
            "changed",
        ),
        (
            "a document for another host",
            scoped(GoldenDocument::new(OTHER, HASH).for_host(Uuid::from_u128(9))),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "other_host",
        ),
        (
            "a document past its expiry",
            scoped(
                GoldenDocument::new(OTHER, HASH).expiring_at(now - SignedDuration::from_secs(1)),
            ),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "expired",
        ),
        (
            "a document expiring at this very moment",
            scoped(GoldenDocument::new(OTHER, HASH).expiring_at(now)),
            op.allowed(GOLDEN_NAMESPACE),
            table(&[(OTHER, HASH)]),
            "expired",
        ),
    ];
    for (what, entry, signers, hasher, reason) in cases {
        let err = admit_signed(&j, Some(&hasher), || Ok(signers), at, &entry)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), reason, "{what}: {err}");
        assert_eq!(j.golden(OTHER.into()).await.unwrap(), None, "{what}");
    }
}

/// The attack this module stops: an admitted archive outlives its signer's trust.
#[tokio::test]
async fn a_signed_golden_is_refused_once_its_signer_is_no_longer_trusted_until_re_signed() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let hasher = table(&[(OTHER, HASH)]);
    let entry = op.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE);
    let trusted = || Ok(op.allowed(GOLDEN_NAMESPACE));
    admit_signed(&j, Some(&hasher), trusted, here(), &entry)
        .await
        .unwrap();
    verify(&j, Some(&hasher), trusted, here(), &entry)
        .await
        .unwrap();
    let hashed = calls(&hasher);

    let expired_window = format!("namespaces=\"{GOLDEN_NAMESPACE}\",valid-before=\"20200101\"");
    let stripped = GoldenArchive {
        signed: None,
        ..entry.clone()
    };
    let cases: Vec<(&str, AllowedSigners, &GoldenArchive)> = vec![
        (
            "the operator's line removed",
            AllowedSigners::parse("").unwrap(),
            &entry,
        ),
        (
            "the line narrowed to jobs",
            op.allowed("bosun-job@v1"),
            &entry,
        ),
        (
            "the line's validity window over",
            AllowedSigners::parse(&op.line(&expired_window)).unwrap(),
            &entry,
        ),
        (
            "the operator removed and the hub dropping the document from the entry",
            AllowedSigners::parse("").unwrap(),
            &stripped,
        ),
    ];
    for (what, signers, wanted) in cases {
        admit_signed(&j, Some(&hasher), || Ok(signers.clone()), here(), wanted)
            .await
            .unwrap();
        let err = verify(&j, Some(&hasher), || Ok(signers), here(), wanted)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "signer_revoked", "{what}: {err}");
        assert!(
            bosun_errchain::error_chain(&err).contains("op@example"),
            "{what}: {err}"
        );
    }
    assert_eq!(
        calls(&hasher),
        hashed,
        "nothing hashed for a refused signer"
    );

    // Another operator, still trusted, signs the same archive: it is usable again, now
    // under the new signer, and the old one stays out.
    let successor = Operator::new();
    let resigned = successor.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE);
    let only_successor = || Ok(successor.allowed(GOLDEN_NAMESPACE));
    admit_signed(&j, Some(&hasher), only_successor, here(), &resigned)
        .await
        .unwrap();
    verify(&j, Some(&hasher), only_successor, here(), &entry)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_scoped_document_is_held_to_its_host_and_expiry_at_every_use() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let hasher = table(&[(OTHER, HASH)]);
    let start: jiff::Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
    let until = start + SignedDuration::from_hours(24);
    let document = GoldenDocument::new(OTHER, HASH)
        .for_host(HOST)
        .expiring_at(until);
    let entry = op.entry(OTHER, HASH, &document, GOLDEN_NAMESPACE);
    let signers = || Ok(op.allowed(GOLDEN_NAMESPACE));
    let at = |host_id, now| GoldenUse {
        host_id,
        now,
        ..here()
    };
    admit_signed(&j, Some(&hasher), signers, at(HOST, start), &entry)
        .await
        .unwrap();
    let last_second = until - SignedDuration::from_secs(1);
    verify(&j, Some(&hasher), signers, at(HOST, last_second), &entry)
        .await
        .unwrap();
    let hashed = calls(&hasher);
    for (what, host, now, reason) in [
        ("at its expiry", HOST, until, "expired"),
        (
            "a day after",
            HOST,
            until + SignedDuration::from_hours(24),
            "expired",
        ),
        ("on another host", Uuid::from_u128(9), start, "other_host"),
    ] {
        let err = verify(&j, Some(&hasher), signers, at(host, now), &entry)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), reason, "{what}: {err}");
    }
    assert_eq!(calls(&hasher), hashed, "nothing hashed out of scope");
}

#[tokio::test]
async fn a_built_golden_needs_no_signer_even_with_allowed_signers_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[(GOLDEN, HASH)]);
    let missing = dir.path().join("no-such-allowed-signers");
    let record = verify(
        &j,
        Some(&hasher),
        || AllowedSigners::load(&missing),
        here(),
        &golden(GOLDEN, HASH),
    )
    .await
    .unwrap();
    assert_eq!(record.source, GoldenSource::Built);
}

/// The check provisioning runs takes its time from the clock seam and rereads the signers
/// file: the same journaled archive is refused once the clock passes the document's expiry,
/// and once the file no longer lists the signer, each refusal audited.
#[tokio::test]
async fn the_provisioning_check_uses_the_clock_and_the_current_signers_file() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let start: jiff::Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
    let clock = ManualClock::new(start);
    let document =
        GoldenDocument::new(OTHER, HASH).expiring_at(start + SignedDuration::from_hours(1));
    let entry = op.entry(OTHER, HASH, &document, GOLDEN_NAMESPACE);
    let hasher = table(&[(OTHER, HASH)]);
    let signers = || Ok(op.allowed(GOLDEN_NAMESPACE));
    let now = GoldenUse {
        now: start,
        ..here()
    };
    admit_signed(&j, Some(&hasher), signers, now, &entry)
        .await
        .unwrap();
    let path = dir.path().join("allowed_signers");
    std::fs::write(
        &path,
        op.line(&format!("namespaces=\"{GOLDEN_NAMESPACE}\"")) + "\n",
    )
    .unwrap();
    // No helper here: a covered archive gets as far as hashing and stops there.
    let check = GoldenCheck::new(j.clone(), None, path.clone(), HOST, clock.shared());
    let reason = |r: Result<GoldenRecord, GoldenRefusal>| r.unwrap_err().reason();
    assert_eq!(
        reason(check.check(&entry, GuestKind::Lxc).await),
        "no_helper"
    );
    std::fs::write(&path, "").unwrap();
    assert_eq!(
        reason(check.check(&entry, GuestKind::Lxc).await),
        "signer_revoked"
    );
    std::fs::write(
        &path,
        op.line(&format!("namespaces=\"{GOLDEN_NAMESPACE}\"")) + "\n",
    )
    .unwrap();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(reason(check.check(&entry, GuestKind::Lxc).await), "expired");
    let audited: Vec<String> = j
        .audit_since(0, 100)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event.event == "golden.refused")
        .map(|e| e.event.detail["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(audited, ["no_helper", "signer_revoked", "expired"]);
}

/// Where and when, with the serials the journal holds now (what `GoldenCheck` reads).
async fn held(j: &JournalHandle) -> GoldenUse {
    use crate::ops::journal::GoldenSerialKind;
    GoldenUse {
        golden_serial: j.golden_serial(GoldenSerialKind::Golden).await.unwrap(),
        recipe_serial: j.golden_serial(GoldenSerialKind::Recipe).await.unwrap(),
        ..here()
    }
}

/// Base A (serial 1) seeds a guest, then base B (serial 2): A, its own journaled document
/// unchanged, seeds nothing more, and neither does a document from before serials; the
/// operator's rollback (A again under serial 3) does, and then B is the older one.
#[tokio::test]
async fn an_older_signed_base_is_refused_once_a_newer_one_was_used_until_a_rollback_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let hasher = table(&[(OTHER, HASH), (GOLDEN, HASH)]);
    let signers = || Ok(op.allowed(GOLDEN_NAMESPACE));
    let base = |volid: &str, serial: Option<u64>| {
        let mut document = GoldenDocument::new(volid, HASH);
        document.serial = serial;
        op.entry(volid, HASH, &document, GOLDEN_NAMESPACE)
    };
    let use_it = |entry: GoldenArchive| {
        let j = j.clone();
        let hasher = &hasher;
        async move {
            let at = held(&j).await;
            admit_signed(&j, Some(hasher), signers, at, &entry).await?;
            verify(&j, Some(hasher), signers, at, &entry).await
        }
    };
    let (a, b) = (base(OTHER, Some(1)), base(GOLDEN, Some(2)));
    use_it(a.clone()).await.unwrap();
    assert_eq!(held(&j).await.golden_serial, 1);
    use_it(b.clone()).await.unwrap();
    assert_eq!(held(&j).await.golden_serial, 2);

    let hashed = calls(&hasher);
    let err = use_it(a.clone()).await.unwrap_err();
    assert_eq!(err.reason(), "superseded", "{err}");
    let err = use_it(base(OTHER, None)).await.unwrap_err();
    assert_eq!(
        err.reason(),
        "superseded",
        "a document from before serials: {err}"
    );
    assert_eq!(
        calls(&hasher),
        hashed,
        "nothing hashed for an older document"
    );
    let GoldenSource::Signed(kept) = j.golden(OTHER.into()).await.unwrap().unwrap().source else {
        panic!("A stays journaled as signed");
    };
    assert_eq!(
        kept.document,
        a.signed.as_ref().unwrap().golden_bytes().unwrap()
    );

    // The rollback: A's bytes under serial 3.
    use_it(base(OTHER, Some(3))).await.unwrap();
    assert_eq!(held(&j).await.golden_serial, 3);
    assert_eq!(use_it(b).await.unwrap_err().reason(), "superseded");
    // Equal serials stand side by side: a second base signed as serial 3 too.
    let beside = GoldenDocument::new(GOLDEN, HASH).with_serial(3);
    use_it(op.entry(GOLDEN, HASH, &beside, GOLDEN_NAMESPACE))
        .await
        .unwrap();
}
