//! Golden builds: archives this host's helper built for a signed golden recipe, with the
//! provenance the issue asks for — volid, size and SHA-256 (both read by the helper from the
//! file vzdump wrote), the golden (recipe) version and the controller digest baked in. A
//! desired guest that names a golden version is provisioned from the newest build of it.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// The audit action of a journaled golden build.
pub const GOLDEN_BUILT_ACTION: &str = "golden.built";

/// One golden build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenBuild {
    /// The archive's volid.
    pub volid: String,
    /// SHA-256 of its bytes, lowercase hex, computed by the helper.
    pub sha256: String,
    /// Its size in bytes, as the helper read it.
    pub size: u64,
    /// The golden (recipe) version it was built for.
    pub version: String,
    /// The controller image digest baked into it.
    pub controller_digest: String,
    /// When it was journaled.
    pub built_at: Timestamp,
}

fn valid_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Store {
    /// Journals a build (source `built`) with its audit row (`golden.built`), in one
    /// transaction. A rebuild at the same volid replaces the record.
    pub fn record_golden_build(&mut self, build: &GoldenBuild) -> Result<(), JournalError> {
        if !valid_sha256(&build.sha256) {
            return Err(JournalError::Corrupt {
                table: "golden_archives",
                column: "sha256",
                value: build.sha256.chars().take(80).collect(),
            });
        }
        let size = i64::try_from(build.size).map_err(|_| JournalError::Corrupt {
            table: "golden_archives",
            column: "size",
            value: build.size.to_string(),
        })?;
        let now = self.now();
        self.write("record golden build", |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO golden_archives
                 (volid, sha256, source, built_ms, size, recipe_version, controller_digest)
                 VALUES (?1, ?2, 'built', ?3, ?4, ?5, ?6)",
                params![
                    build.volid,
                    build.sha256,
                    to_ms(build.built_at),
                    size,
                    build.version,
                    build.controller_digest
                ],
            )
            .map_err(query_err("record golden build"))?;
            let mut event = AuditEvent::new(GOLDEN_BUILT_ACTION);
            event.detail = serde_json::json!({
                "volid": build.volid,
                "sha256": build.sha256,
                "size": build.size,
                "version": build.version,
                "controller_digest": build.controller_digest,
            });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// The newest build of golden `version`; with `controller_digest`, only one baking
    /// that digest.
    pub fn golden_build(
        &self,
        version: &str,
        controller_digest: Option<&str>,
    ) -> Result<Option<GoldenBuild>, JournalError> {
        const WHAT: &str = "read golden build";
        let row: Option<(String, String, i64, i64, String)> = self
            .conn
            .query_row(
                "SELECT volid, sha256, built_ms, size, controller_digest FROM golden_archives
                 WHERE source = 'built' AND recipe_version = ?1
                   AND size IS NOT NULL AND controller_digest IS NOT NULL
                   AND (?2 IS NULL OR controller_digest = ?2)
                 ORDER BY built_ms DESC LIMIT 1",
                params![version, controller_digest],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        row.map(|(volid, sha256, built_ms, size, digest)| {
            Ok(GoldenBuild {
                volid,
                sha256,
                size: u64::try_from(size).map_err(|_| JournalError::Corrupt {
                    table: "golden_archives",
                    column: "size",
                    value: size.to_string(),
                })?,
                version: version.to_owned(),
                controller_digest: digest,
                built_at: from_ms(built_ms, "golden_archives", "built_ms")?,
            })
        })
        .transpose()
    }
}

journal_calls! {
    /// See [`Store::record_golden_build`].
    fn record_golden_build(build: GoldenBuild) -> () = |s| s.record_golden_build(&build);
    /// See [`Store::golden_build`].
    fn golden_build(version: String, controller_digest: Option<String>) -> Option<GoldenBuild>
        = |s| s.golden_build(&version, controller_digest.as_deref());
}
