use std::sync::Mutex;

use bosun_proto::desired::GoldenArchive;

use super::*;
use crate::clock::SystemClock;

pub(super) const GOLDEN: &str = "local:backup/vzdump-lxc-9000-2026_11_21-10_00_00.tar.zst";
pub(super) const OTHER: &str = "local:backup/vzdump-lxc-4242-2026_11_20-03_00_00.tar.zst";
pub(super) const HASH: &str = "5e1f0e4b8a2a8f3c6c2d1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a098765432";

/// This host.
pub(super) const HOST: Uuid = Uuid::from_u128(0x5eed);

/// This host, now.
pub(super) fn here() -> GoldenUse {
    GoldenUse {
        host_id: HOST,
        now: jiff::Timestamp::now(),
        golden_serial: 0,
        recipe_serial: 0,
    }
}

/// An `allowed_signers` naming nobody (a built archive never reads it).
pub(super) fn nobody() -> Result<AllowedSigners, AllowedSignersError> {
    AllowedSigners::parse("")
}

/// Hashes from a table, counting calls.
pub(super) struct Table {
    hashes: Vec<(String, String)>,
    pub(super) calls: Mutex<u32>,
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

pub(super) fn table(entries: &[(&str, &str)]) -> Table {
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

pub(super) fn golden(volid: &str, sha256: &str) -> GoldenArchive {
    GoldenArchive {
        volid: volid.to_owned(),
        sha256: sha256.to_owned(),
        signed: None,
        version: None,
    }
}

pub(super) async fn journal(dir: &tempfile::TempDir) -> JournalHandle {
    let j = JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap();
    j.record_golden(GOLDEN.into(), HASH.into(), GoldenSource::Built)
        .await
        .unwrap();
    assert!(
        j.mark_golden_verified(GOLDEN.into(), 1_000, serde_json::json!({}))
            .await
            .unwrap()
    );
    j
}

#[tokio::test]
async fn a_journaled_unchanged_golden_is_accepted_after_a_fresh_hash() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(&dir).await;
    let hasher = table(&[(GOLDEN, HASH)]);
    let record = verify(&j, Some(&hasher), nobody, here(), &golden(GOLDEN, HASH))
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
        let err = verify(&j, Some(&hasher), nobody, here(), &golden(OTHER, sha))
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
    let err = verify(
        &j,
        Some(&hasher),
        nobody,
        here(),
        &golden(GOLDEN, &"0".repeat(64)),
    )
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
    let err = verify(&j, Some(&hasher), nobody, here(), &golden(GOLDEN, HASH))
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
    let err = verify::<Table>(&j, None, nobody, here(), &golden(GOLDEN, HASH))
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
        let err = verify(&j, Some(&hasher), nobody, here(), &golden(volid, HASH))
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
            j.record_golden(OTHER.into(), bad.into(), GoldenSource::Built)
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
    assert_eq!(record.verified_at, None);
    // Until its boot test passes, the build is refused even when named by volid and hash
    // (both are in its audit row, which the hub reads).
    let hasher = table(&[(GOLDEN, HASH)]);
    let err = verify(&j, Some(&hasher), nobody, here(), &golden(GOLDEN, HASH))
        .await
        .unwrap_err();
    assert!(matches!(err, GoldenRefusal::Unverified { .. }), "{err}");
    assert_eq!(err.reason(), "unverified");
    assert!(
        j.mark_golden_verified(GOLDEN.into(), 1_000, serde_json::json!({"boot": "ok"}))
            .await
            .unwrap()
    );
    verify(&j, Some(&hasher), nobody, here(), &golden(GOLDEN, HASH))
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

pub(super) async fn empty_journal(dir: &tempfile::TempDir) -> JournalHandle {
    JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refusal_is_audited_once_and_the_memory_of_refusals_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let check = GoldenCheck::new(
        j.clone(),
        None,
        dir.path().join("allowed_signers"),
        HOST,
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
        assert!(
            check
                .check(&golden(OTHER, HASH), GuestKind::Lxc)
                .await
                .is_err()
        );
    }
    assert_eq!(refused(j.clone()).await, 1, "audited once");
    for i in 0..MAX_REPORTED_REFUSALS + 10 {
        let volid = format!("local:backup/vzdump-lxc-{i}-2026_11_20-03_00_00.tar.zst");
        assert!(
            check
                .check(&golden(&volid, HASH), GuestKind::Lxc)
                .await
                .is_err()
        );
    }
    assert!(check.reported.lock().len() <= MAX_REPORTED_REFUSALS);
    assert_eq!(refused(j).await, MAX_REPORTED_REFUSALS + 11);
}

/// A guest naming a golden version starts from its build only while no recipe with a higher
/// serial than the one it was built for is held.
#[tokio::test]
async fn a_build_of_an_older_recipe_seeds_no_guest_once_a_newer_recipe_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let j = empty_journal(&dir).await;
    let build = crate::ops::journal::GoldenBuild {
        volid: GOLDEN.into(),
        sha256: HASH.into(),
        size: 4096,
        version: "2026.10-1".into(),
        controller_digest: format!("sha256:{}", "c".repeat(64)),
        built_at: jiff::Timestamp::now(),
        recipe_serial: 1,
    };
    j.record_golden_build(build).await.unwrap();
    j.mark_golden_verified(GOLDEN.into(), 1, serde_json::json!({}))
        .await
        .unwrap();
    let named = GoldenArchive {
        version: Some("2026.10-1".into()),
        ..golden("", "")
    };
    for held in [0, 1] {
        let resolved = resolve_version(&j, held, &named).await.unwrap();
        assert_eq!(
            (resolved.volid.as_str(), resolved.sha256.as_str()),
            (GOLDEN, HASH)
        );
    }
    let err = resolve_version(&j, 2, &named).await.unwrap_err();
    assert_eq!(err.reason(), "superseded", "{err}");
    assert!(
        err.to_string().contains("golden version 2026.10-1"),
        "{err}"
    );
    // The operator signs the same version again under serial 2: the build is its build.
    assert!(j.restamp_golden_build(GOLDEN.into(), 2).await.unwrap());
    assert!(
        !j.restamp_golden_build(GOLDEN.into(), 1).await.unwrap(),
        "never lowered"
    );
    resolve_version(&j, 2, &named).await.unwrap();
}

/// A journaled record of `volid` from `source`.
fn record(volid: &str, source: GoldenSource) -> GoldenRecord {
    GoldenRecord {
        volid: volid.into(),
        sha256: HASH.into(),
        source,
        built_at: jiff::Timestamp::UNIX_EPOCH,
        verified_at: None,
    }
}

/// A signed source whose document names `volid` for guests of `kind`.
fn signed_for(volid: &str, kind: GuestKind) -> GoldenSource {
    let document = bosun_proto::golden::GoldenDocument::new(volid, HASH).for_kind(kind);
    GoldenSource::Signed(crate::ops::journal::GoldenSignature {
        document: serde_json::to_vec(&document).unwrap(),
        signature: "sig".into(),
        fingerprint: "SHA256:x".into(),
        principals: "op".into(),
    })
}

#[test]
fn a_base_seeds_only_guests_of_the_kind_it_was_signed_for_and_named_as() {
    const VM: &str = "local:backup/vzdump-qemu-9001-2026_01_01-00_00_00.vma.zst";
    let kind_of = |r: Result<(), GoldenRefusal>| match r {
        Ok(()) => "ok".to_owned(),
        Err(GoldenRefusal::WrongKind { archive, .. }) => format!("wrong_kind({archive})"),
        Err(e) => e.reason().to_owned(),
    };
    let cases = [
        // A container base: signed (before VMs, no kind) or built here.
        (
            record(GOLDEN, signed_for(GOLDEN, GuestKind::Lxc)),
            GuestKind::Lxc,
            "ok",
        ),
        (
            record(GOLDEN, signed_for(GOLDEN, GuestKind::Lxc)),
            GuestKind::Qemu,
            "wrong_kind(lxc)",
        ),
        (record(GOLDEN, GoldenSource::Built), GuestKind::Lxc, "ok"),
        (
            record(GOLDEN, GoldenSource::Built),
            GuestKind::Qemu,
            "wrong_kind(lxc)",
        ),
        // A VM base signed for VMs.
        (
            record(VM, signed_for(VM, GuestKind::Qemu)),
            GuestKind::Qemu,
            "ok",
        ),
        (
            record(VM, signed_for(VM, GuestKind::Qemu)),
            GuestKind::Lxc,
            "wrong_kind(qemu)",
        ),
        // A VM archive signed as a container base, and the other way round: the name
        // and the signed kind must agree with the guest.
        (
            record(VM, signed_for(VM, GuestKind::Lxc)),
            GuestKind::Qemu,
            "wrong_kind(lxc)",
        ),
        (
            record(VM, signed_for(VM, GuestKind::Lxc)),
            GuestKind::Lxc,
            "wrong_kind(qemu)",
        ),
        (
            record(GOLDEN, signed_for(GOLDEN, GuestKind::Qemu)),
            GuestKind::Qemu,
            "wrong_kind(lxc)",
        ),
        // No vzdump name at all.
        (
            record(
                "local:iso/x.iso",
                signed_for("local:iso/x.iso", GuestKind::Qemu),
            ),
            GuestKind::Qemu,
            "not_an_archive",
        ),
    ];
    for (i, (record, kind, want)) in cases.iter().enumerate() {
        assert_eq!(kind_of(check_kind(record, *kind)), *want, "case {i}");
    }
}
