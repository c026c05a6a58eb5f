//! The host's golden base as its report carries it (DESIGN §9, decision 0083): the build
//! guests are provisioned from now, a newer build waiting for (or having failed) its
//! verification, how many archives the golden storage keeps, the last build's outcome and the
//! last archive the agent could not remove. Every text is bounded and checked, since the hub
//! stores and shows it.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Longest reason or error text the report carries (bytes).
pub const MAX_GOLDEN_TEXT: usize = 512;

/// The host's golden base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GoldenReport {
    /// The newest verified build: what guests are provisioned from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<GoldenBase>,
    /// A build newer than `current` that has not passed its verification (yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<GoldenBase>,
    /// Golden archives this host's builds keep in the golden storage (at most the current
    /// one and the one before it once pruning caught up).
    #[serde(default)]
    pub archives: u32,
    /// The outcome of the build task's last pass that built, verified, refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_build: Option<GoldenOutcome>,
    /// The last old archive the agent could not remove (retried every pass until it goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_failed: Option<GoldenPruneFailure>,
}

/// One golden build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GoldenBase {
    /// The signed recipe's version, `[A-Za-z0-9._-]`, at most 64 bytes.
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = "^[A-Za-z0-9._-]+$")
    )]
    pub version: String,
    /// The archive's Proxmox volume id.
    #[cfg_attr(feature = "openapi", schema(max_length = 255))]
    pub volid: String,
    /// SHA-256 of the archive, 64 lowercase hex digits (read by the helper).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub sha256: String,
    /// The controller image digest baked in (`sha256:…`).
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub controller_digest: String,
    /// When it was built.
    pub built_at: Timestamp,
    /// When it passed its verification; absent while unverified or after a failed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Timestamp>,
    /// How long its verification (the boot test) took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_seconds: Option<u64>,
}

/// What the build task's last pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GoldenOutcomeKind {
    /// A new build was made and passed its verification.
    Verified,
    /// A new build was made but did not pass its verification.
    VerifyFailed,
    /// The build itself failed.
    BuildFailed,
    /// The signed recipe was refused (its signature or shape).
    Refused,
    /// A value this hub does not know.
    #[serde(other)]
    Unknown,
}

impl GoldenOutcomeKind {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::VerifyFailed => "verify_failed",
            Self::BuildFailed => "build_failed",
            Self::Refused => "refused",
            Self::Unknown => "unknown",
        }
    }

    /// The kind named `s` (`Unknown` for any other name).
    pub fn parse(s: &str) -> Self {
        match s {
            "verified" => Self::Verified,
            "verify_failed" => Self::VerifyFailed,
            "build_failed" => Self::BuildFailed,
            "refused" => Self::Refused,
            _ => Self::Unknown,
        }
    }
}

/// The last pass's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GoldenOutcome {
    /// When the pass ended.
    pub at: Timestamp,
    /// What it did.
    pub outcome: GoldenOutcomeKind,
    /// Why it failed (a fixed word such as `boot_test_failed`), absent when it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 64))]
    pub reason: Option<String>,
    /// The version the pass was about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 64))]
    pub version: Option<String>,
}

/// An old archive the agent could not remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GoldenPruneFailure {
    /// The archive.
    #[cfg_attr(feature = "openapi", schema(max_length = 255))]
    pub volid: String,
    /// When the last try failed.
    pub at: Timestamp,
    /// Tries so far.
    pub attempts: u32,
    /// Proxmox's error, bounded.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub error: String,
}

/// A host's current golden base as the host list shows it, read from its stored report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GoldenSummary {
    /// The recipe version of the build guests are provisioned from.
    pub version: String,
    /// The archive's SHA-256.
    pub sha256: String,
    /// When it was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_at: Option<Timestamp>,
}

impl GoldenSummary {
    /// The first twelve digits of the archive's digest, as lists show it.
    pub fn short_sha256(&self) -> &str {
        self.sha256.get(..12).unwrap_or(&self.sha256)
    }
}

impl GoldenReport {
    /// Checks every text's bounds and shape.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (name, base) in [("current", &self.current), ("pending", &self.pending)] {
            if let Some(base) = base {
                base.validate(name)?;
            }
        }
        if let Some(last) = &self.last_build {
            if let Some(reason) = &last.reason {
                validate::ident(|| "golden.last_build.reason".into(), reason, 64)?;
            }
            if let Some(version) = &last.version {
                validate::ident(|| "golden.last_build.version".into(), version, 64)?;
            }
        }
        if let Some(failure) = &self.prune_failed {
            validate::text(|| "golden.prune_failed.volid".into(), &failure.volid, 255)?;
            validate::text(
                || "golden.prune_failed.error".into(),
                &failure.error,
                MAX_GOLDEN_TEXT,
            )?;
        }
        Ok(())
    }
}

impl GoldenBase {
    fn validate(&self, name: &str) -> Result<(), ValidationError> {
        validate::ident(|| format!("golden.{name}.version"), &self.version, 64)?;
        validate::text(|| format!("golden.{name}.volid"), &self.volid, 255)?;
        validate::text(
            || format!("golden.{name}.controller_digest"),
            &self.controller_digest,
            128,
        )?;
        let hex = self.sha256.len() == 64
            && self
                .sha256
                .bytes()
                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        if !hex {
            return Err(ValidationError::Invalid {
                field: format!("golden.{name}.sha256"),
                reason: "expected 64 lowercase hex digits".into(),
            });
        }
        Ok(())
    }

    /// The first twelve digits of the archive's digest, as lists show it.
    pub fn short_sha256(&self) -> &str {
        self.sha256.get(..12).unwrap_or(&self.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> GoldenBase {
        GoldenBase {
            version: "2026.11-1".into(),
            volid: "golden:backup/vzdump-lxc-9000-2026_11_20-00_00_00.tar.zst".into(),
            sha256: "a".repeat(64),
            controller_digest: format!("sha256:{}", "b".repeat(64)),
            built_at: "2026-11-20T00:00:00Z".parse().unwrap(),
            verified_at: None,
            verify_seconds: None,
        }
    }

    #[test]
    fn a_report_is_checked_field_by_field() {
        let good = GoldenReport {
            current: Some(base()),
            pending: None,
            archives: 1,
            last_build: Some(GoldenOutcome {
                at: "2026-11-20T00:00:00Z".parse().unwrap(),
                outcome: GoldenOutcomeKind::VerifyFailed,
                reason: Some("boot_test_failed".into()),
                version: Some("2026.11-1".into()),
            }),
            prune_failed: None,
        };
        good.validate().unwrap();
        let mut bad = good.clone();
        bad.current.as_mut().unwrap().sha256 = "A".repeat(64);
        assert_eq!(bad.validate().unwrap_err().field(), "golden.current.sha256");
        let mut bad = good.clone();
        bad.last_build.as_mut().unwrap().reason = Some("a\nb".into());
        assert_eq!(
            bad.validate().unwrap_err().field(),
            "golden.last_build.reason"
        );
        let mut bad = good;
        bad.prune_failed = Some(GoldenPruneFailure {
            volid: "golden:backup/x".into(),
            at: "2026-11-20T00:00:00Z".parse().unwrap(),
            attempts: 1,
            error: "x".repeat(MAX_GOLDEN_TEXT + 1),
        });
        assert_eq!(
            bad.validate().unwrap_err().field(),
            "golden.prune_failed.error"
        );
    }

    #[test]
    fn an_unknown_outcome_decodes_as_unknown() {
        let outcome: GoldenOutcomeKind = serde_json::from_str("\"exploded\"").unwrap();
        assert_eq!(outcome, GoldenOutcomeKind::Unknown);
        assert_eq!(
            GoldenOutcomeKind::parse("refused"),
            GoldenOutcomeKind::Refused
        );
    }
}
