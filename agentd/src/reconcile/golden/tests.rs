use std::sync::Mutex;

use bosun_proto::desired::GoldenArchive;

use bosun_proto::golden::GOLDEN_NAMESPACE;

use super::*;
use crate::clock::SystemClock;

const GOLDEN: &str = "local:backup/vzdump-lxc-9000-2026_11_21-10_00_00.tar.zst";
const OTHER: &str = "local:backup/vzdump-lxc-4242-2026_11_20-03_00_00.tar.zst";
const HASH: &str = "5e1f0e4b8a2a8f3c6c2d1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a098765432";

/// Hashes from a table, counting calls.
struct Table {
    hashes: Vec<(String, String)>,
    calls: Mutex<u32>,
}

impl ArchiveHasher for Table {
    async fn hash(&self, name: &ArchiveName) -> Result<String, HashFailure> {
        *self.calls.lock().unwrap() += 1;
        self.hashes
            .iter()
            .find(|(n, _)| n == name.as_str())
            .map(|(_, h)| h.clone())
            .ok_or_else(|| HashFailure::Unexpected("no such file".into()))
    }
}

fn table(entries: &[(&str, &str)]) -> Table {
    Table {
        hashes: entries
            .iter()
            .map(|(v, h)| {
                (
                    archive_name(v).unwrap().as_str().to_owned(),
                    (*h).to_owned(),
                )
            })
            .collect(),
        calls: Mutex::new(0),
    }
}

fn golden(volid: &str, sha256: &str) -> GoldenArchive {
    GoldenArchive {
        volid: volid.to_owned(),
        sha256: sha256.to_owned(),
        signed: None,
        version: None,
    }
}

async fn journal(dir: &tempfile::TempDir) -> JournalHandle {
    let j = JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap();
    j.record_golden(GOLDEN.into(), HASH.into(), GoldenSource::Built)
        .await
        .unwrap();
    j
}

#[tokio::test]
async fn a_journaled_unchanged_golden_is_accepted_after_a_fresh_hash() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[(GOLDEN, HASH)]);
    let record = verify(&j, Some(&hasher), &golden(GOLDEN, HASH))
        .await
        .unwrap();
    assert_eq!(record.source, GoldenSource::Built);
    assert_eq!(
        *hasher.calls.lock().unwrap(),
        1,
        "hashed before the restore"
    );
}

#[tokio::test]
async fn another_customers_backup_is_refused_whatever_hash_the_hub_sends() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[(OTHER, HASH)]);
    for sha in [HASH, &"0".repeat(64)] {
        let err = verify(&j, Some(&hasher), &golden(OTHER, sha))
            .await
            .unwrap_err();
        assert!(
            matches!(err, GoldenRefusal::UnknownProvenance { .. }),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_hash_that_is_not_the_journaled_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[(GOLDEN, HASH)]);
    let err = verify(&j, Some(&hasher), &golden(GOLDEN, &"0".repeat(64)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, GoldenRefusal::HashNotJournaled { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_golden_whose_file_changed_after_it_was_journaled_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let changed = "1".repeat(64);
    let hasher = table(&[(GOLDEN, &changed)]);
    let err = verify(&j, Some(&hasher), &golden(GOLDEN, HASH))
        .await
        .unwrap_err();
    match err {
        GoldenRefusal::Changed {
            found, journaled, ..
        } => {
            assert_eq!(found, changed);
            assert_eq!(journaled, HASH);
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn without_a_helper_nothing_can_be_verified_so_nothing_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let err = verify::<Table>(&j, None, &golden(GOLDEN, HASH))
        .await
        .unwrap_err();
    assert!(matches!(err, GoldenRefusal::NoHelper { .. }), "{err}");
}

#[tokio::test]
async fn a_volid_that_is_not_a_dump_archive_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[]);
    for volid in [
        "local-lvm:vm-100-disk-0",
        "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
        "local:backup/../../etc/shadow",
        "no-colon",
    ] {
        let err = verify(&j, Some(&hasher), &golden(volid, HASH))
            .await
            .unwrap_err();
        assert!(
            matches!(err, GoldenRefusal::NotAnArchive { .. }),
            "{volid}: {err}"
        );
    }
    assert_eq!(*hasher.calls.lock().unwrap(), 0);
}

#[tokio::test]
async fn the_journal_refuses_a_malformed_hash() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    for bad in ["", "00", &"G".repeat(64), &"A".repeat(64)] {
        assert!(
            j.record_golden(OTHER.into(), bad.into(), GoldenSource::Signed)
                .await
                .is_err(),
            "{bad:?}"
        );
    }
    assert!(j.golden(OTHER.into()).await.unwrap().is_none());
}

#[tokio::test]
async fn a_build_is_journaled_with_the_helpers_hash_and_then_passes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let j = JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap();
    let built = Output::GoldenBuilt {
        vmid: bosun_proto::helper::Vmid::new(9000).unwrap(),
        archive: Some("/var/lib/vz/dump/vzdump-lxc-9000-2026_11_21-10_00_00.tar.zst".into()),
        sha256: Some(HASH.into()),
        size: Some(1),
    };
    let record = record_build(&j, "local", built).await.unwrap();
    assert_eq!(record.volid, GOLDEN);
    assert_eq!(record.sha256, HASH);
    let hasher = table(&[(GOLDEN, HASH)]);
    verify(&j, Some(&hasher), &golden(GOLDEN, HASH))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_build_without_a_helper_hash_is_not_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let j = JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap();
    let built = Output::GoldenBuilt {
        vmid: bosun_proto::helper::Vmid::new(9000).unwrap(),
        archive: Some("/mnt/elsewhere/vzdump-lxc-9000-2026_11_21-10_00_00.tar.zst".into()),
        sha256: None,
        size: None,
    };
    let err = record_build(&j, "local", built).await.unwrap_err();
    assert!(
        matches!(err, GoldenRecordError::Unverifiable { .. }),
        "{err}"
    );
    assert!(j.golden(GOLDEN.into()).await.unwrap().is_none());
}

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

    fn allowed(&self, namespaces: &str) -> AllowedSigners {
        let public = std::fs::read_to_string(self.dir.path().join("key.pub")).unwrap();
        AllowedSigners::parse(&format!(
            "op@example namespaces=\"{namespaces}\" {}",
            public.trim()
        ))
        .unwrap()
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

    /// `volid`/`sha256` with a document naming `doc_volid`/`doc_sha`, signed in `namespace`.
    fn golden(
        &self,
        volid: &str,
        sha256: &str,
        doc: (&str, &str),
        namespace: &str,
    ) -> GoldenArchive {
        let bytes =
            serde_json::to_vec(&bosun_proto::golden::GoldenDocument::new(doc.0, doc.1)).unwrap();
        let signature = self.sign(&bytes, namespace);
        GoldenArchive {
            volid: volid.to_owned(),
            sha256: sha256.to_owned(),
            signed: Some(bosun_proto::golden::SignedGolden::new(&bytes, &signature)),
            version: None,
        }
    }
}

async fn empty_journal(dir: &tempfile::TempDir) -> JournalHandle {
    JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_allowed_operators_signed_golden_is_journaled_after_a_fresh_hash() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let hasher = table(&[(OTHER, HASH)]);
    let entry = op.golden(OTHER, HASH, (OTHER, HASH), GOLDEN_NAMESPACE);
    let signers = op.allowed(GOLDEN_NAMESPACE);
    admit_signed(
        &j,
        Some(&hasher),
        || Ok(signers),
        jiff::Timestamp::now(),
        &entry,
    )
    .await
    .unwrap();
    let record = j.golden(OTHER.into()).await.unwrap().unwrap();
    assert_eq!(record.source, GoldenSource::Signed);
    assert_eq!(record.sha256, HASH);
    verify(&j, Some(&hasher), &entry).await.unwrap();
    assert_eq!(
        *hasher.calls.lock().unwrap(),
        2,
        "hashed to admit and to verify"
    );
}

#[tokio::test]
async fn signed_goldens_that_do_not_hold_up_are_refused_and_not_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let op = Operator::new();
    let stranger = Operator::new();
    let now = jiff::Timestamp::now();
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
    ];
    for (what, entry, signers, hasher, reason) in cases {
        let err = admit_signed(&j, Some(&hasher), || Ok(signers), now, &entry)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), reason, "{what}: {err}");
        assert_eq!(j.golden(OTHER.into()).await.unwrap(), None, "{what}");
    }
}

#[tokio::test]
async fn a_refusal_is_audited_once_and_the_memory_of_refusals_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let check = GoldenCheck::new(
        j.clone(),
        None,
        dir.path().join("allowed_signers"),
        SystemClock::shared(),
    );
    let refused = |j: JournalHandle| async move {
        j.audit_since(0, 10_000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event.event == "golden.refused")
            .count()
    };
    for _ in 0..3 {
        assert!(check.check(&golden(OTHER, HASH)).await.is_err());
    }
    assert_eq!(refused(j.clone()).await, 1, "audited once");
    for i in 0..MAX_REPORTED_REFUSALS + 10 {
        let volid = format!("local:backup/vzdump-lxc-{i}-2026_11_20-03_00_00.tar.zst");
        assert!(check.check(&golden(&volid, HASH)).await.is_err());
    }
    assert!(check.reported.lock().len() <= MAX_REPORTED_REFUSALS);
    assert_eq!(refused(j).await, MAX_REPORTED_REFUSALS + 11);
}
