//! `bosun.golden-recipe/v1`: an operator's signed request that each host build a golden
//! image of a given *version* — the recipe version, and the controller image (by name and
//! digest) baked into it. It travels in the desired state's `golden_recipe` entry, signed
//! with `ssh-keygen -Y sign -n bosun-golden@v1` like a golden archive choice (the same
//! authority: what is baked into customer guests). A host whose journal holds no build of
//! this version and digest asks its helper to build one; a guest's desired `golden` then
//! names the version ([`crate::desired::GoldenArchive::version`]) and the agent maps it to
//! its own build (volid, size, the helper's SHA-256).
//!
//! A recipe carries a `serial` that only rises, like a golden document's
//! ([`crate::golden::check_serial`], decision 0092): once a host holds a recipe, it builds
//! none with a lower serial and provisions no guest from a build of one. A recipe signed
//! before the field counts as serial 0.

use serde::{Deserialize, Serialize};

use crate::helper::{ImageRef, Sha256Hex};
use crate::signed::SignedDocument;
use crate::validate::{self, ValidationError};

/// Schema of [`GoldenRecipeDocument`].
pub const GOLDEN_RECIPE_SCHEMA: &str = "bosun.golden-recipe/v1";

/// Longest signed recipe document accepted (bytes, before base64).
pub const MAX_GOLDEN_RECIPE_DOCUMENT: usize = 4096;

/// Longest golden version name.
pub const MAX_VERSION_CHARS: usize = 64;

/// The refresh intervals a recipe may name, in days.
pub const REFRESH_DAYS: std::ops::RangeInclusive<u16> = 1..=90;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GoldenRecipeDocument {
    /// Always [`GOLDEN_RECIPE_SCHEMA`].
    pub schema: String,
    /// The golden version (the recipe version) guests name, `[A-Za-z0-9._-]`.
    pub version: String,
    /// The controller image inside the host's controller image archive (`docker tag` source).
    pub controller_image: String,
    /// The controller's digest, `sha256:` and 64 lowercase hex digits: the SHA-256 of the
    /// host's controller image archive (the `docker save` file the helper bakes,
    /// `sha256sum controller-image.tar`), which the helper checks before it builds.
    pub controller_digest: String,
    /// Rebuild this version on this cadence: a host whose newest verified build of the
    /// version and digest is this many days old builds it again (1 to 90). Absent: built
    /// once, never refreshed (recipes signed before the field stay valid and keep their
    /// meaning). Only the operator's signature sets it; desired state cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_days: Option<u16>,
    /// Rises with every recipe the operator signs ([`crate::golden::check_serial`]); absent
    /// in recipes signed before the field, which count as serial 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u64>,
}

impl GoldenRecipeDocument {
    /// A document for `version` baking `controller_image` with `controller_digest`.
    pub fn new(version: &str, controller_image: &str, controller_digest: &str) -> Self {
        Self {
            schema: GOLDEN_RECIPE_SCHEMA.to_owned(),
            version: version.to_owned(),
            controller_image: controller_image.to_owned(),
            controller_digest: controller_digest.to_ascii_lowercase(),
            refresh_days: None,
            serial: None,
        }
    }

    /// The same recipe with `serial`.
    #[must_use]
    pub fn with_serial(mut self, serial: u64) -> Self {
        self.serial = Some(serial);
        self
    }

    /// The serial the ordering rule reads: 0 for a recipe signed before serials.
    pub fn serial(&self) -> u64 {
        self.serial.unwrap_or(0)
    }

    /// The same recipe, rebuilt every `days` days.
    #[must_use]
    pub fn with_refresh_days(mut self, days: u16) -> Self {
        self.refresh_days = Some(days);
        self
    }

    /// Checks the schema and every field's shape.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, GOLDEN_RECIPE_SCHEMA)?;
        validate_version("version", &self.version)?;
        ImageRef::new(self.controller_image.clone()).map_err(|e| ValidationError::Invalid {
            field: "controller_image".into(),
            reason: e.reason.into(),
        })?;
        let digest_ok = self
            .controller_digest
            .strip_prefix("sha256:")
            .is_some_and(crate::golden::is_sha256);
        if !digest_ok {
            return Err(ValidationError::Invalid {
                field: "controller_digest".into(),
                reason: "expected `sha256:` and 64 lowercase hex digits".into(),
            });
        }
        if let Some(days) = self.refresh_days
            && !REFRESH_DAYS.contains(&days)
        {
            return Err(ValidationError::Invalid {
                field: "refresh_days".into(),
                reason: format!(
                    "expected {} to {} days",
                    REFRESH_DAYS.start(),
                    REFRESH_DAYS.end()
                ),
            });
        }
        crate::golden::validate_serial("serial", self.serial)
    }

    /// The refresh interval, if the recipe names one.
    pub fn refresh_interval(&self) -> Option<jiff::SignedDuration> {
        self.refresh_days
            .map(|days| jiff::SignedDuration::from_hours(i64::from(days) * 24))
    }

    /// The image reference handed to the helper's `build_golden`.
    pub fn image(&self) -> Result<ImageRef, ValidationError> {
        ImageRef::new(self.controller_image.clone()).map_err(|e| ValidationError::Invalid {
            field: "controller_image".into(),
            reason: e.reason.into(),
        })
    }

    /// The controller digest's 64 hex digits, handed to the helper's `build_golden`, which
    /// bakes the host's controller image archive only if its bytes hash to them.
    pub fn archive_sha256(&self) -> Result<Sha256Hex, ValidationError> {
        let hex = self
            .controller_digest
            .strip_prefix("sha256:")
            .unwrap_or_default();
        Sha256Hex::new(hex.to_owned()).map_err(|e| ValidationError::Invalid {
            field: "controller_digest".into(),
            reason: e.reason.into(),
        })
    }
}

/// Checks a golden version name: 1 to 64 characters of `[A-Za-z0-9._-]`, not `.`/`..`.
pub fn validate_version(field: &str, version: &str) -> Result<(), ValidationError> {
    let ok = (1..=MAX_VERSION_CHARS).contains(&version.len())
        && version != "."
        && version != ".."
        && version
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: format!("expected 1 to {MAX_VERSION_CHARS} characters of [A-Za-z0-9._-]"),
        })
    }
}

/// The field a signed recipe travels in, named in errors.
const FIELD: &str = "golden_recipe";

impl SignedDocument {
    /// The exact signed bytes of a recipe document, within [`MAX_GOLDEN_RECIPE_DOCUMENT`].
    pub fn golden_recipe_bytes(&self) -> Result<Vec<u8>, ValidationError> {
        self.bytes_within(FIELD, MAX_GOLDEN_RECIPE_DOCUMENT)
    }

    /// Checks sizes and that the document decodes to a valid [`GoldenRecipeDocument`];
    /// gives it. The signature is checked by the agent against its `allowed_signers`.
    pub fn golden_recipe(&self) -> Result<GoldenRecipeDocument, ValidationError> {
        let document: GoldenRecipeDocument =
            self.decode(FIELD, GOLDEN_RECIPE_SCHEMA, MAX_GOLDEN_RECIPE_DOCUMENT)?;
        document
            .validate()
            .map_err(|e| crate::validate::prefix(FIELD, e))?;
        Ok(document)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:5f2b6c0d8e1a4b3c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";

    #[test]
    fn a_recipe_round_trips_and_bad_fields_are_named() {
        let doc = GoldenRecipeDocument::new("2026.11-1", "bosun/controller:1.4", DIGEST);
        let signed = SignedDocument::new(&serde_json::to_vec(&doc).unwrap(), "sig");
        assert_eq!(signed.golden_recipe().unwrap(), doc);

        type Mutate = fn(&mut GoldenRecipeDocument);
        let cases: [(Mutate, &str); 8] = [
            (
                |d| d.serial = Some(crate::golden::MAX_GOLDEN_SERIAL + 1),
                "golden_recipe.serial",
            ),
            (|d| d.refresh_days = Some(0), "golden_recipe.refresh_days"),
            (|d| d.refresh_days = Some(91), "golden_recipe.refresh_days"),
            (|d| d.version = "a b".into(), "golden_recipe.version"),
            (|d| d.version = String::new(), "golden_recipe.version"),
            (
                |d| d.controller_image = "Bad Image".into(),
                "golden_recipe.controller_image",
            ),
            (
                |d| d.controller_digest = "sha256:abc".into(),
                "golden_recipe.controller_digest",
            ),
            (
                |d| d.schema = "bosun.golden/v1".into(),
                "golden_recipe.schema",
            ),
        ];
        for (mutate, field) in cases {
            let mut bad = doc.clone();
            mutate(&mut bad);
            let signed = SignedDocument::new(&serde_json::to_vec(&bad).unwrap(), "sig");
            assert_eq!(signed.golden_recipe().unwrap_err().field(), field);
        }
        // A refreshed recipe round-trips; one signed before the field stays valid.
        let weekly = doc.clone().with_refresh_days(7);
        let signed = SignedDocument::new(&serde_json::to_vec(&weekly).unwrap(), "sig");
        assert_eq!(signed.golden_recipe().unwrap().refresh_days, Some(7));
        let old = br#"{"schema":"bosun.golden-recipe/v1","version":"2026.11-1","controller_image":"bosun/controller:1.4","controller_digest":"sha256:5f2b6c0d8e1a4b3c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"}"#;
        let signed = SignedDocument::new(old, "sig");
        assert_eq!(signed.golden_recipe().unwrap(), doc);
        assert_eq!(doc.serial(), 0, "a recipe from before serials counts as 0");
        let numbered = doc.clone().with_serial(1_764_000_000);
        let signed = SignedDocument::new(&serde_json::to_vec(&numbered).unwrap(), "sig");
        assert_eq!(signed.golden_recipe().unwrap().serial(), 1_764_000_000);
        // A golden archive document is not a recipe.
        let golden = crate::golden::GoldenDocument::new("local:backup/x", &"a".repeat(64));
        let signed = SignedDocument::new(&serde_json::to_vec(&golden).unwrap(), "sig");
        assert!(signed.golden_recipe().is_err());
    }
}
