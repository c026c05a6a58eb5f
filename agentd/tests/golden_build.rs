//! Golden builds with provenance: a golden recipe an allowed operator signed (stock
//! `ssh-keygen -Y sign -n bosun-golden@v1`) is built once through the helper and journaled
//! with the helper's volid, size and SHA-256, the recipe version and the controller digest;
//! a forged or unsigned recipe builds nothing; a guest naming a golden version is mapped to
//! this host's own build, and a version never built here is refused.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[allow(dead_code, reason = "the shared fake serves other suites too")]
use crate::localapi_support::fake_helper;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_agentd::clock::{Clock, ManualClock, SharedClock, SystemClock};
use bosun_agentd::config::golden::GoldenSettings;
use bosun_agentd::guests::golden_build::boot_test::{BootFuture, BootTest, BootTestError};
use bosun_agentd::guests::golden_build::{GoldenBuildError, GoldenBuilder};
use bosun_agentd::guests::reconcile::golden::{GoldenCheck, GoldenRefusal};
use bosun_agentd::links::helper::HelperClient;
use bosun_agentd::ops::journal::{GoldenBuild, GoldenSource, JournalHandle};
use bosun_proto::desired::GoldenArchive;
use bosun_proto::golden::GOLDEN_NAMESPACE;
use bosun_proto::golden_recipe::GoldenRecipeDocument;
use bosun_proto::helper::{BridgeName, DiskGib, Request, StorageId, TemplateVolid, Vmid};
use bosun_proto::signed::SignedDocument;
use fake_helper::FakeHelper;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const ARCHIVE: &str = "vzdump-lxc-9000-2026_11_23-12_00_00.tar.zst";
const HASH: &str = "a1a2a3a4a5a6a7a8a9a0b1b2b3b4b5b6b7b8b9b0c1c2c3c4c5c6c7c8c9c0d1d2";

/// The boot test's stand-in at this level (the real one, against the simulator, is
/// exercised end to end in the workspace suite `agent_golden_builds`): passes or fails as
/// told and records what it booted.
#[derive(Debug, Default)]
struct Boots {
    fail: AtomicBool,
    booted: Mutex<Vec<String>>,
}

impl BootTest for Boots {
    fn boot<'a>(&'a self, build: &'a GoldenBuild) -> BootFuture<'a> {
        Box::pin(async move {
            self.booted.lock().unwrap().push(build.volid.clone());
            if self.fail.load(Ordering::SeqCst) {
                return Err(BootTestError::TimedOut {
                    volid: build.volid.clone(),
                    seconds: 1,
                });
            }
            Ok(())
        })
    }
}

struct Lab {
    dir: tempfile::TempDir,
    boots: Arc<Boots>,
    helper: FakeHelper,
    journal: JournalHandle,
    signers: PathBuf,
}

fn keygen(dir: &Path, name: &str) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(dir.join(name))
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::read_to_string(dir.join(format!("{name}.pub")))
        .unwrap()
        .trim()
        .to_owned()
}

fn sign(dir: &Path, key: &str, namespace: &str, bytes: &[u8]) -> String {
    let file = dir.join("recipe.json");
    std::fs::write(&file, bytes).unwrap();
    let _ = std::fs::remove_file(dir.join("recipe.json.sig"));
    let out = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(dir.join(key))
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(dir.join("recipe.json.sig")).unwrap()
}

impl Lab {
    async fn start() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let helper = FakeHelper::start(dir.path());
        let journal = JournalHandle::open(&dir.path().join("journal.db"), SystemClock::shared())
            .await
            .unwrap();
        let operator = keygen(dir.path(), "operator");
        keygen(dir.path(), "stranger");
        let signers = dir.path().join("allowed_signers");
        std::fs::write(
            &signers,
            format!("op@example namespaces=\"{GOLDEN_NAMESPACE}\" {operator}\n"),
        )
        .unwrap();
        Lab {
            dir,
            boots: Arc::default(),
            helper,
            journal,
            signers,
        }
    }

    fn builder(&self) -> GoldenBuilder {
        self.builder_on(SystemClock::shared())
    }

    fn builder_on(&self, clock: SharedClock) -> GoldenBuilder {
        self.bare_builder(clock)
            .with_boot_test(Arc::clone(&self.boots) as Arc<dyn BootTest>)
    }

    /// A builder without a boot test.
    fn bare_builder(&self, clock: SharedClock) -> GoldenBuilder {
        GoldenBuilder::new(
            HelperClient::socket(&self.helper.socket),
            self.journal.clone(),
            clock,
            self.signers.clone(),
            GoldenSettings {
                builder_vmid: Vmid::new(9000).unwrap(),
                template: TemplateVolid::new(
                    "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                )
                .unwrap(),
                rootfs_storage: StorageId::new("local-lvm").unwrap(),
                rootfs_gib: DiskGib::new(8).unwrap(),
                bridge: BridgeName::new("vmbr0").unwrap(),
                storage: StorageId::new("local").unwrap(),
                build_timeout: Duration::from_secs(60),
                boot_stay_up: Duration::from_secs(1),
            },
        )
    }

    fn recipe(&self, key: &str, version: &str, namespace: &str) -> SignedDocument {
        let doc = GoldenRecipeDocument::new(version, "bosun/controller:1.4", DIGEST);
        self.sign_recipe(key, &doc, namespace)
    }

    fn sign_recipe(
        &self,
        key: &str,
        doc: &GoldenRecipeDocument,
        namespace: &str,
    ) -> SignedDocument {
        let bytes = serde_json::to_vec(&doc).unwrap();
        let signature = sign(self.dir.path(), key, namespace, &bytes);
        SignedDocument::new(&bytes, &signature)
    }

    fn builds(&self) -> usize {
        self.helper
            .verbs()
            .iter()
            .filter(|v| **v == "build_golden")
            .count()
    }
}

#[tokio::test]
async fn a_signed_recipe_is_built_once_and_journaled_with_the_helpers_facts() {
    let lab = Lab::start().await;
    *lab.helper.golden_build.lock() =
        Some((format!("/var/lib/vz/dump/{ARCHIVE}"), HASH.into(), 4096));
    let builder = lab.builder();
    let recipe = lab.recipe("operator", "2026.11-1", GOLDEN_NAMESPACE);
    let build = builder.ensure(&recipe).await.unwrap().expect("built");
    assert_eq!(build.volid, format!("local:backup/{ARCHIVE}"));
    assert_eq!((build.sha256.as_str(), build.size), (HASH, 4096));
    assert_eq!(build.version, "2026.11-1");
    assert_eq!(build.controller_digest, DIGEST);
    // The helper was asked with the configured builder and the signed controller image,
    // whose archive it bakes only if the bytes hash to the signed digest.
    let calls = lab.helper.calls.lock().clone();
    let Some(Request::BuildGolden(args)) = calls.last() else {
        panic!("{calls:?}");
    };
    assert_eq!(args.controller_image.as_str(), "bosun/controller:1.4");
    assert_eq!(
        Some(args.controller_sha256.as_str()),
        DIGEST.strip_prefix("sha256:")
    );
    assert_eq!(
        (args.vmid.get(), args.golden_storage.as_str()),
        (9000, "local")
    );
    // Journaled as built, with provenance; audited.
    let record = lab
        .journal
        .golden(build.volid.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.source, GoldenSource::Built);
    let stored = lab
        .journal
        .golden_build("2026.11-1".into(), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.size, 4096);
    let audit = lab.journal.audit_since(0, 100).await.unwrap();
    let built: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "golden.built")
        .collect();
    assert_eq!(built.len(), 1);
    assert_eq!(built[0].event.detail["controller_digest"], DIGEST);

    // The same recipe again: nothing to build.
    assert!(builder.ensure(&recipe).await.unwrap().is_none());
    assert_eq!(lab.builds(), 1);
    // A refresh (a new version) builds again.
    let refresh = lab.recipe("operator", "2026.12-1", GOLDEN_NAMESPACE);
    assert!(builder.ensure(&refresh).await.unwrap().is_some());
    assert_eq!(lab.builds(), 2);
}

#[tokio::test]
async fn a_recipe_with_a_refresh_cadence_is_rebuilt_once_its_newest_build_is_that_old() {
    let lab = Lab::start().await;
    *lab.helper.golden_build.lock() =
        Some((format!("/var/lib/vz/dump/{ARCHIVE}"), HASH.into(), 4096));
    let clock = ManualClock::new("2026-11-01T03:00:00Z".parse().unwrap());
    let builder = lab.builder_on(clock.shared());
    let doc =
        GoldenRecipeDocument::new("2026.11-1", "bosun/controller:1.4", DIGEST).with_refresh_days(7);
    let weekly = lab.sign_recipe("operator", &doc, GOLDEN_NAMESPACE);
    let first = builder.ensure(&weekly).await.unwrap().expect("built");
    let due = builder
        .next_refresh(&weekly)
        .await
        .expect("a refresh is due some day");
    assert_eq!(
        due,
        "2026-11-08T03:00:00Z".parse::<jiff::Timestamp>().unwrap()
    );
    // Six days on: still fresh.
    clock.advance(Duration::from_secs(6 * 86_400));
    assert!(builder.ensure(&weekly).await.unwrap().is_none());
    assert_eq!(lab.builds(), 1);
    // Seven days on: built again, journaled as a newer build of the same version and digest.
    clock.advance(Duration::from_secs(86_400));
    let second = builder.ensure(&weekly).await.unwrap().expect("rebuilt");
    assert_eq!(lab.builds(), 2);
    assert_eq!(second.built_at, clock.now());
    assert!(second.built_at > first.built_at);
    assert_eq!(
        (second.version.as_str(), second.controller_digest.as_str()),
        ("2026.11-1", DIGEST)
    );
    assert_eq!(
        builder.next_refresh(&weekly).await,
        Some("2026-11-15T03:00:00Z".parse().unwrap())
    );
    // The same version signed without a cadence is never refreshed.
    let once = lab.recipe("operator", "2026.11-1", GOLDEN_NAMESPACE);
    clock.advance(Duration::from_secs(90 * 86_400));
    assert!(builder.ensure(&once).await.unwrap().is_none());
    assert_eq!(builder.next_refresh(&once).await, None);
    assert_eq!(lab.builds(), 2);
    // A hub that adds a cadence to the operator's signed bytes is refused.
    let forged = SignedDocument::new(
        &serde_json::to_vec(&doc.clone().with_refresh_days(1)).unwrap(),
        &weekly.signature,
    );
    let err = builder.ensure(&forged).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::Signature(_)), "{err}");
    assert_eq!(lab.builds(), 2);
}

#[tokio::test]
async fn a_refreshed_base_replaces_the_old_one_only_once_it_booted() {
    let lab = Lab::start().await;
    *lab.helper.golden_build.lock() =
        Some((format!("/var/lib/vz/dump/{ARCHIVE}"), HASH.into(), 4096));
    let clock = ManualClock::new("2026-11-01T03:00:00Z".parse().unwrap());
    let builder = lab.builder_on(clock.shared());
    let doc =
        GoldenRecipeDocument::new("2026.11-1", "bosun/controller:1.4", DIGEST).with_refresh_days(7);
    let weekly = lab.sign_recipe("operator", &doc, GOLDEN_NAMESPACE);
    let old = builder.ensure(&weekly).await.unwrap().expect("built");
    assert_eq!(*lab.boots.booted.lock().unwrap(), vec![old.volid.clone()]);

    // The refresh's base does not boot: kept unverified, guests keep the old build.
    const NEWER: &str = "vzdump-lxc-9000-2026_11_08-03_00_00.tar.zst";
    *lab.helper.golden_build.lock() =
        Some((format!("/var/lib/vz/dump/{NEWER}"), "e".repeat(64), 5000));
    lab.boots.fail.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(7 * 86_400));
    let err = builder.ensure(&weekly).await.unwrap_err();
    assert!(
        matches!(err, GoldenBuildError::VerifyFailed { .. }),
        "{err}"
    );
    assert!(err.is_verify_failure() && !err.is_refusal());
    let used = lab
        .journal
        .golden_build("2026.11-1".into(), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        used.volid, old.volid,
        "provisioning keeps the verified build"
    );
    let listed = lab.journal.golden_builds(16).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].build.volid, format!("local:backup/{NEWER}"));
    assert!(listed[0].verified_at.is_none());
    assert!(listed[1].verified_at.is_some());

    // The next try boots: the new build replaces the old one for provisioning.
    lab.boots.fail.store(false, Ordering::SeqCst);
    let new = builder.ensure(&weekly).await.unwrap().expect("rebuilt");
    let used = lab
        .journal
        .golden_build("2026.11-1".into(), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(used.volid, new.volid);
    assert_eq!(used.sha256, "e".repeat(64));
    let audit = lab.journal.audit_since(0, 100).await.unwrap();
    let verified = audit
        .iter()
        .filter(|e| e.event.event == "golden.verified")
        .count();
    assert_eq!(verified, 2);
    // No boot test wired: a build is never used unverified.
    let bare = lab.bare_builder(clock.shared());
    let other = lab.recipe("operator", "2026.12-1", GOLDEN_NAMESPACE);
    let err = bare.ensure(&other).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::NoBootTest { .. }), "{err}");
    assert!(
        lab.journal
            .golden_build("2026.12-1".into(), None)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn forged_or_misnamespaced_recipes_build_nothing() {
    let lab = Lab::start().await;
    *lab.helper.golden_build.lock() = Some((format!("/var/lib/vz/dump/{ARCHIVE}"), HASH.into(), 1));
    let builder = lab.builder();
    // Signed by a key nobody trusts.
    let stranger = lab.recipe("stranger", "evil", GOLDEN_NAMESPACE);
    let err = builder.ensure(&stranger).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::Signature(_)), "{err}");
    assert!(err.is_refusal());
    // The operator's signature, but in the jobs namespace.
    let wrong_ns = lab.recipe("operator", "evil", "bosun-job@v1");
    let err = builder.ensure(&wrong_ns).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::Signature(_)), "{err}");
    // The operator's signed bytes with the controller swapped by a hub.
    let good = lab.recipe("operator", "2026.11-1", GOLDEN_NAMESPACE);
    let swapped = GoldenRecipeDocument::new("2026.11-1", "evil/miner:latest", DIGEST);
    let tampered = SignedDocument::new(&serde_json::to_vec(&swapped).unwrap(), &good.signature);
    let err = builder.ensure(&tampered).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::Signature(_)), "{err}");
    assert_eq!(lab.builds(), 0, "no build reached the helper");
    assert!(
        lab.journal
            .golden_build("evil".into(), None)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_build_the_helper_cannot_vouch_for_is_not_journaled() {
    let lab = Lab::start().await;
    let builder = lab.builder();
    let recipe = lab.recipe("operator", "2026.11-1", GOLDEN_NAMESPACE);
    // The build fails.
    let err = builder.ensure(&recipe).await.unwrap_err();
    assert!(matches!(err, GoldenBuildError::Helper { .. }), "{err}");
    assert!(!err.is_refusal());
    // The archive lands outside the dump root: no hash, nothing journaled.
    *lab.helper.golden_build.lock() = Some(("/mnt/elsewhere/x.tar.zst".into(), HASH.into(), 1));
    let err = builder.ensure(&recipe).await.unwrap_err();
    assert!(
        matches!(err, GoldenBuildError::Unverifiable { .. }),
        "{err}"
    );
    assert!(
        lab.journal
            .golden_build("2026.11-1".into(), None)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_golden_version_maps_to_this_hosts_build_and_an_unknown_one_is_refused() {
    let lab = Lab::start().await;
    *lab.helper.golden_build.lock() =
        Some((format!("/var/lib/vz/dump/{ARCHIVE}"), HASH.into(), 4096));
    lab.helper
        .set_archive(&format!("local:backup/{ARCHIVE}"), HASH);
    let check = GoldenCheck::new(
        lab.journal.clone(),
        Some(HelperClient::socket(&lab.helper.socket)),
        lab.signers.clone(),
        uuid::Uuid::new_v4(),
        SystemClock::shared(),
    );
    let wanted = GoldenArchive {
        volid: String::new(),
        sha256: String::new(),
        signed: None,
        version: Some("2026.11-1".into()),
    };
    // Not built yet: refused, nothing restored.
    let err = check
        .check(&wanted, bosun_proto::desired::GuestKind::Lxc)
        .await
        .unwrap_err();
    assert!(matches!(err, GoldenRefusal::UnknownVersion { .. }), "{err}");
    assert_eq!(err.reason(), "unknown_version");
    let audit = lab.journal.audit_since(0, 100).await.unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "golden.refused")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].event.detail["volid"], "golden version 2026.11-1");

    let recipe = lab.recipe("operator", "2026.11-1", GOLDEN_NAMESPACE);
    lab.builder().ensure(&recipe).await.unwrap().unwrap();
    let record = check
        .check(&wanted, bosun_proto::desired::GuestKind::Lxc)
        .await
        .unwrap();
    assert_eq!(record.volid, format!("local:backup/{ARCHIVE}"));
    assert_eq!(record.sha256, HASH);
    // The file changed since the build: the fresh hash no longer matches.
    lab.helper
        .set_archive(&format!("local:backup/{ARCHIVE}"), &"e".repeat(64));
    let err = check
        .check(&wanted, bosun_proto::desired::GuestKind::Lxc)
        .await
        .unwrap_err();
    assert!(matches!(err, GoldenRefusal::Changed { .. }), "{err}");
}
