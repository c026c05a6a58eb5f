//! Golden images with provenance (DESIGN §5, §8): this host builds its own golden image
//! through the helper (`build_golden`) when an operator-signed golden recipe
//! (`bosun.golden-recipe/v1`, in the desired state's `golden_recipe`) names a version and
//! controller digest the journal holds no build of — the first desired state after
//! enrollment, and every later recipe or controller refresh.
//!
//! Each build is journaled with what the helper read from the file vzdump wrote (volid,
//! size, SHA-256), the recipe version and the controller digest ([`GoldenBuild`], audited
//! `golden.built`). A guest whose desired `golden` names a version is provisioned from the
//! newest build of that version ([`crate::guests::reconcile::golden::GoldenCheck`]), hashed again
//! before the restore; a version this host never built is refused like any archive of
//! unknown provenance.
//!
//! A recipe that names `refresh_days` is built again once its newest build of the version
//! and controller digest is that old: the new build is journaled beside the old one, and
//! guests provisioned later start from the newest. The cadence lives in the signed recipe
//! only, so unsigned desired state cannot change it.
//!
//! A new build is verified before it replaces the old one ([`GoldenBuilder::verify_build`]:
//! the helper's hash and the signed controller digest, then a boot in a scratch guest,
//! [`boot_test`]). Only verified builds seed guests; one that fails is kept unverified,
//! audited `golden.verify_failed`, and built again after the retry pause.
//!
//! Old archives are removed after each pass, keeping the newest build and the newest verified
//! one ([`prune`]); the journal's builds, their verification and the last outcome are the
//! report's golden base ([`report`]).
//!
//! A recipe carries a serial that only rises (decision 0092): once this host accepted a
//! recipe, one with a lower serial — a replay of what the operator signed before — is never
//! built, and guests naming a version built for it are refused
//! ([`crate::guests::reconcile::golden::resolve_version`]). The highest serial is journaled.
//!
//! A recipe whose signature does not verify, or whose serial is below the one held, is never
//! built (audited once, `golden.build_refused`). A failed build is audited (`golden.build_failed`) and retried
//! with a growing pause ([`build_task`]).

pub mod boot_test;
pub mod build_task;
pub mod prune;
pub mod report;

use std::path::PathBuf;
use std::sync::Arc;

use bosun_proto::golden::{GOLDEN_NAMESPACE, Superseded, check_serial};
use bosun_proto::golden_recipe::GoldenRecipeDocument;
use bosun_proto::helper::{ArchiveName, BuildGolden, Output, Request};
use bosun_proto::signed::SignedDocument;
use bosun_proto::validate::ValidationError;
use jiff::Timestamp;

use crate::clock::SharedClock;
use crate::config::golden::GoldenSettings;
use crate::guests::reconcile::golden::PendingBuild;
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{GoldenBuild, GoldenSerialKind, JournalError, JournalHandle};
use crate::trust::signing::{
    AllowedSigners, AllowedSignersError, SignatureError, verify_signature,
};

/// Why a signed recipe was not built.
#[derive(Debug, thiserror::Error)]
pub enum GoldenBuildError {
    /// The recipe document is malformed.
    #[error("the signed golden recipe is malformed")]
    Malformed(#[source] ValidationError),
    /// `allowed_signers` could not be read.
    #[error("reading the allowed signers")]
    Signers(#[source] AllowedSignersError),
    /// The signature is not an allowed operator's over this document.
    #[error("the golden recipe's signature is refused")]
    Signature(#[source] SignatureError),
    /// The recipe's serial is below one this host already holds: a replay of a recipe the
    /// operator has since replaced.
    #[error("golden recipe {version} is older than the one this host holds")]
    Superseded {
        /// The recipe's version.
        version: String,
        /// The serials.
        #[source]
        source: Superseded,
    },
    /// The helper refused or failed the build.
    #[error("building golden version {version} through the helper")]
    Helper {
        /// The recipe's version.
        version: String,
        /// Cause.
        #[source]
        source: HelperClientError,
    },
    /// The helper answered with another output.
    #[error("the helper answered build_golden with {output}")]
    UnexpectedOutput {
        /// The answer.
        output: String,
    },
    /// The build left no archive the helper could hash and size.
    #[error("the golden build left no archive the helper could read (archive {archive:?})")]
    Unverifiable {
        /// What the helper reported.
        archive: Option<String>,
    },
    /// The new build did not pass its boot test; the build stays journaled unverified and
    /// guests keep being provisioned from the previous verified one.
    #[error("golden build {volid} failed its verification")]
    VerifyFailed {
        /// The build's archive.
        volid: String,
        /// Cause.
        #[source]
        source: Box<boot_test::BootTestError>,
    },
    /// No boot test is wired (no Proxmox client): the build cannot be verified.
    #[error("golden build {volid} cannot be verified: no boot test is configured")]
    NoBootTest {
        /// The build's archive.
        volid: String,
    },
    /// The journal could not be read or written.
    #[error("journaling golden version {version}")]
    Journal {
        /// The recipe's version.
        version: String,
        /// Cause.
        #[source]
        source: JournalError,
    },
}

impl GoldenBuildError {
    /// A short name for audit rows.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::Signers(_) => "signers_unreadable",
            Self::Signature(_) => "bad_signature",
            Self::Superseded { .. } => "superseded",
            Self::Helper { .. } => "helper",
            Self::UnexpectedOutput { .. } => "unexpected_output",
            Self::Unverifiable { .. } => "unverifiable",
            Self::VerifyFailed { .. } => "boot_test_failed",
            Self::NoBootTest { .. } => "no_boot_test",
            Self::Journal { .. } => "journal",
        }
    }

    /// Whether the build was made but did not pass its verification.
    pub fn is_verify_failure(&self) -> bool {
        matches!(self, Self::VerifyFailed { .. } | Self::NoBootTest { .. })
    }

    /// Whether building again could help (a refused recipe stays refused).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::Malformed(_) | Self::Signature(_) | Self::Superseded { .. }
        )
    }
}

/// Whether `newest`, a build of `recipe`, is older than the recipe's refresh interval.
fn is_stale(recipe: &GoldenRecipeDocument, newest: &GoldenBuild, now: Timestamp) -> bool {
    recipe
        .refresh_interval()
        .is_some_and(|interval| now.duration_since(newest.built_at) >= interval)
}

/// Builds golden images for signed recipes through the helper.
#[derive(Debug, Clone)]
pub struct GoldenBuilder {
    helper: HelperClient,
    journal: JournalHandle,
    clock: SharedClock,
    signers_path: PathBuf,
    settings: GoldenSettings,
    pending: PendingBuild,
    boot_test: Option<Arc<dyn boot_test::BootTest>>,
    remover: Option<Arc<dyn prune::ArchiveRemover>>,
}

impl GoldenBuilder {
    /// A builder calling `helper` (its timeout is raised to the build timeout).
    pub fn new(
        helper: HelperClient,
        journal: JournalHandle,
        clock: SharedClock,
        signers_path: PathBuf,
        settings: GoldenSettings,
    ) -> Self {
        Self {
            helper: helper.with_timeout(settings.build_timeout),
            journal,
            clock,
            signers_path,
            settings,
            pending: PendingBuild::default(),
            boot_test: None,
            remover: None,
        }
    }

    /// The same builder, verifying each new build with `boot_test` before it is used.
    #[must_use]
    pub fn with_boot_test(mut self, boot_test: Arc<dyn boot_test::BootTest>) -> Self {
        self.boot_test = Some(boot_test);
        self
    }

    /// The same builder, removing old archives with `remover` after each pass
    /// ([`prune`]).
    #[must_use]
    pub fn with_remover(mut self, remover: Arc<dyn prune::ArchiveRemover>) -> Self {
        self.remover = Some(remover);
        self
    }

    /// The same builder, telling `pending` which version it is building.
    #[must_use]
    pub fn with_pending(mut self, pending: PendingBuild) -> Self {
        self.pending = pending;
        self
    }

    /// The recipe in `signed`, once its signature verifies against `allowed_signers`
    /// (namespace `bosun-golden@v1`).
    pub fn verify(
        &self,
        signed: &SignedDocument,
    ) -> Result<GoldenRecipeDocument, GoldenBuildError> {
        let document = signed
            .golden_recipe()
            .map_err(GoldenBuildError::Malformed)?;
        let bytes = signed
            .golden_recipe_bytes()
            .map_err(GoldenBuildError::Malformed)?;
        let signers =
            AllowedSigners::load(&self.signers_path).map_err(GoldenBuildError::Signers)?;
        verify_signature(
            &signers,
            GOLDEN_NAMESPACE,
            &bytes,
            &signed.signature,
            self.clock.now(),
        )
        .map_err(GoldenBuildError::Signature)?;
        Ok(document)
    }

    /// When the signed recipe's newest build falls due for its refresh, if the recipe names
    /// a cadence and this host has a build of it. Read after [`Self::ensure`] accepted the
    /// same document: it only says when to look again, and the next `ensure` verifies anew.
    pub async fn next_refresh(&self, signed: &SignedDocument) -> Option<Timestamp> {
        let recipe = signed.golden_recipe().ok()?;
        let interval = recipe.refresh_interval()?;
        let newest = self
            .journal
            .golden_build(
                recipe.version.clone(),
                Some(recipe.controller_digest.clone()),
            )
            .await
            .ok()??;
        newest.built_at.checked_add(interval).ok()
    }

    /// Holds the verified `recipe` against the highest recipe serial this host holds: one
    /// below it is refused; one above it raises it (journaled, so a restart keeps it).
    async fn hold_serial(&self, recipe: &GoldenRecipeDocument) -> Result<(), GoldenBuildError> {
        let journal_err = |source| GoldenBuildError::Journal {
            version: recipe.version.clone(),
            source,
        };
        let held = self
            .journal
            .golden_serial(GoldenSerialKind::Recipe)
            .await
            .map_err(journal_err)?;
        check_serial(recipe.serial(), held).map_err(|source| GoldenBuildError::Superseded {
            version: recipe.version.clone(),
            source,
        })?;
        if recipe.serial() > held {
            self.journal
                .raise_golden_serial(GoldenSerialKind::Recipe, recipe.serial())
                .await
                .map_err(journal_err)?;
            tracing::info!(version = %recipe.version, serial = recipe.serial(), "golden recipes below this serial are refused from now on");
        }
        Ok(())
    }

    /// Builds the signed recipe unless the journal already holds a build of its version
    /// and controller digest, younger than the recipe's `refresh_days` when it names them;
    /// gives the new build, or `None` when there was nothing to do. A recipe older than the
    /// one this host holds is refused before anything is built (decision 0092); a
    /// newer one naming a version and digest already built takes that build as its own.
    pub async fn ensure(
        &self,
        signed: &SignedDocument,
    ) -> Result<Option<GoldenBuild>, GoldenBuildError> {
        let recipe = self.verify(signed)?;
        self.hold_serial(&recipe).await?;
        let journal_err = |source| GoldenBuildError::Journal {
            version: recipe.version.clone(),
            source,
        };
        let known = self
            .journal
            .golden_build(
                recipe.version.clone(),
                Some(recipe.controller_digest.clone()),
            )
            .await
            .map_err(journal_err)?;
        if let Some(known) = known
            && !is_stale(&recipe, &known, self.clock.now())
        {
            if known.recipe_serial < recipe.serial() {
                // The same version and controller signed again under a newer serial: the
                // build is this recipe's too, and guests keep starting from it.
                self.journal
                    .restamp_golden_build(known.volid.clone(), recipe.serial())
                    .await
                    .map_err(journal_err)?;
            }
            return Ok(None);
        }
        // Guests naming the version wait while it is built and verified.
        self.pending.set(Some(recipe.version.clone()));
        let built = match self.build(&recipe).await {
            Ok(build) => self.verify_build(&build).await.map(|()| build),
            Err(e) => Err(e),
        };
        self.pending.set(None);
        built.map(Some)
    }

    /// Verifies a new build before it replaces the previous one: the helper hashed and
    /// sized the archive vzdump wrote and baked the controller only if its archive hashed to
    /// the signed digest (both in [`Self::build`]); here the base boots in a scratch guest.
    /// Passed: the build is marked verified (audited `golden.verified`). Failed: it stays
    /// unverified and guests keep the previous verified build.
    pub async fn verify_build(&self, build: &GoldenBuild) -> Result<(), GoldenBuildError> {
        let Some(boot_test) = &self.boot_test else {
            return Err(GoldenBuildError::NoBootTest {
                volid: build.volid.clone(),
            });
        };
        let started = std::time::Instant::now();
        boot_test
            .boot(build)
            .await
            .map_err(|source| GoldenBuildError::VerifyFailed {
                volid: build.volid.clone(),
                source: Box::new(source),
            })?;
        let detail = serde_json::json!({
            "sha256": build.sha256,
            "controller_digest": build.controller_digest,
            "boot_test_s": started.elapsed().as_secs(),
        });
        self.journal
            .mark_golden_verified(
                build.volid.clone(),
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                detail,
            )
            .await
            .map_err(|source| GoldenBuildError::Journal {
                version: build.version.clone(),
                source,
            })?;
        tracing::info!(volid = %build.volid, version = %build.version, "golden build verified");
        Ok(())
    }

    /// Runs `build_golden` for `recipe` and journals the archive it produced.
    pub async fn build(
        &self,
        recipe: &GoldenRecipeDocument,
    ) -> Result<GoldenBuild, GoldenBuildError> {
        let s = &self.settings;
        let request = Request::BuildGolden(BuildGolden {
            vmid: s.builder_vmid,
            template: s.template.clone(),
            rootfs_storage: s.rootfs_storage.clone(),
            rootfs_gib: s.rootfs_gib,
            bridge: s.bridge.clone(),
            golden_storage: s.storage.clone(),
            controller_image: recipe.image().map_err(GoldenBuildError::Malformed)?,
            controller_sha256: recipe
                .archive_sha256()
                .map_err(GoldenBuildError::Malformed)?,
        });
        tracing::info!(version = %recipe.version, controller_digest = %recipe.controller_digest, "building a golden image through the helper");
        let output =
            self.helper
                .call(&request)
                .await
                .map_err(|source| GoldenBuildError::Helper {
                    version: recipe.version.clone(),
                    source,
                })?;
        let Output::GoldenBuilt {
            archive,
            sha256,
            size,
            ..
        } = output
        else {
            return Err(GoldenBuildError::UnexpectedOutput {
                output: format!("{output:?}"),
            });
        };
        let file = archive
            .as_deref()
            .and_then(|a| std::path::Path::new(a).file_name())
            .and_then(|f| f.to_str())
            .and_then(|f| ArchiveName::new(f).ok());
        let (Some(file), Some(sha256), Some(size)) = (file, sha256, size) else {
            return Err(GoldenBuildError::Unverifiable { archive });
        };
        let build = GoldenBuild {
            volid: format!("{}:backup/{}", s.storage, file.as_str()),
            sha256,
            size,
            version: recipe.version.clone(),
            controller_digest: recipe.controller_digest.clone(),
            built_at: self.clock.now(),
            recipe_serial: recipe.serial(),
        };
        self.journal
            .record_golden_build(build.clone())
            .await
            .map_err(|source| GoldenBuildError::Journal {
                version: recipe.version.clone(),
                source,
            })?;
        tracing::info!(volid = %build.volid, size = build.size, version = %build.version, "golden build journaled with the helper's hash");
        Ok(build)
    }
}
