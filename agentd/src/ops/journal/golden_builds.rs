//! Golden builds: archives this host's helper built for a signed golden recipe, with the
//! provenance the issue asks for — volid, size and SHA-256 (both read by the helper from the
//! file vzdump wrote), the golden (recipe) version and the controller digest baked in. A
//! desired guest that names a golden version is provisioned from the newest *verified* build
//! of it: a build is journaled unverified and marked verified once it booted in a scratch
//! guest ([`crate::guests::golden_build`]).

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// The audit action of a journaled golden build.
pub const GOLDEN_BUILT_ACTION: &str = "golden.built";

/// The audit action of a build that passed its verification.
pub const GOLDEN_VERIFIED_ACTION: &str = "golden.verified";

/// The most builds [`Store::golden_builds`] lists.
pub const MAX_LISTED_BUILDS: u32 = 16;

/// A build as listed for the report: the build and when it passed its verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedBuild {
    /// The build.
    pub build: GoldenBuild,
    /// When it passed its verification; `None` while unverified or after a failed one.
    pub verified_at: Option<Timestamp>,
}

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
    /// The serial of the signed recipe it was built for (0: a recipe signed before serials,
    /// or a build journaled before them); guests are not provisioned from it once the host
    /// holds a recipe with a higher serial (decision 0092).
    pub recipe_serial: u64,
}

fn valid_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Store {
    /// Journals a build (source `built`, unverified) with its audit row (`golden.built`), in
    /// one transaction. A rebuild at the same volid replaces the record.
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
        let recipe_serial =
            i64::try_from(build.recipe_serial).map_err(|_| JournalError::Corrupt {
                table: "golden_archives",
                column: "recipe_serial",
                value: build.recipe_serial.to_string(),
            })?;
        let now = self.now();
        self.write("record golden build", |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO golden_archives
                 (volid, sha256, source, built_ms, size, recipe_version, controller_digest,
                  verified_ms, recipe_serial)
                 VALUES (?1, ?2, 'built', ?3, ?4, ?5, ?6, NULL, ?7)",
                params![
                    build.volid,
                    build.sha256,
                    to_ms(build.built_at),
                    size,
                    build.version,
                    build.controller_digest,
                    recipe_serial
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
                "recipe_serial": build.recipe_serial,
            });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// Marks the build at `volid` verified (audited `golden.verified` with `detail`), in one
    /// transaction; `false` when no build is journaled there.
    pub fn mark_golden_verified(
        &mut self,
        volid: &str,
        took_ms: u64,
        detail: serde_json::Value,
    ) -> Result<bool, JournalError> {
        let took_ms = i64::try_from(took_ms).unwrap_or(i64::MAX);
        let now = self.now();
        self.write("mark golden build verified", |tx| {
            let changed = tx
                .execute(
                    "UPDATE golden_archives SET verified_ms = ?2, verify_duration_ms = ?3
                     WHERE volid = ?1 AND source = 'built'",
                    params![volid, to_ms(now), took_ms],
                )
                .map_err(query_err("mark golden build verified"))?;
            if changed == 0 {
                return Ok(false);
            }
            let mut event = AuditEvent::new(GOLDEN_VERIFIED_ACTION);
            event.detail = serde_json::json!({ "volid": volid, "check": detail });
            audit::append(tx, now, &event)?;
            Ok(true)
        })
    }

    /// Stamps the build at `volid` with `recipe_serial` when it was made for a recipe with a
    /// lower one: the operator signed the same version and controller again under a newer
    /// serial (a rollback, say), and the existing build is that recipe's build. Gives whether
    /// it changed.
    pub fn restamp_golden_build(
        &mut self,
        volid: &str,
        recipe_serial: u64,
    ) -> Result<bool, JournalError> {
        const WHAT: &str = "restamp golden build";
        let serial = i64::try_from(recipe_serial).map_err(|_| JournalError::Corrupt {
            table: "golden_archives",
            column: "recipe_serial",
            value: recipe_serial.to_string(),
        })?;
        self.write(WHAT, |tx| {
            let changed = tx
                .execute(
                    "UPDATE golden_archives SET recipe_serial = ?2
                     WHERE volid = ?1 AND source = 'built'
                       AND (recipe_serial IS NULL OR recipe_serial < ?2)",
                    params![volid, serial],
                )
                .map_err(query_err(WHAT))?;
            Ok(changed > 0)
        })
    }

    /// This host's builds, newest first, at most `limit` (capped at [`MAX_LISTED_BUILDS`]).
    pub fn golden_builds(&self, limit: u32) -> Result<Vec<ListedBuild>, JournalError> {
        const WHAT: &str = "list golden builds";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT volid, sha256, built_ms, size, recipe_version, controller_digest,
                        verified_ms, recipe_serial
                 FROM golden_archives
                 WHERE source = 'built' AND recipe_version IS NOT NULL
                   AND size IS NOT NULL AND controller_digest IS NOT NULL
                   AND removed_ms IS NULL
                 ORDER BY built_ms DESC, rowid DESC LIMIT ?1",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map(params![limit.min(MAX_LISTED_BUILDS)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                    r.get::<_, Option<i64>>(7)?,
                ))
            })
            .map_err(query_err(WHAT))?;
        let mut out = Vec::new();
        for row in rows {
            let (volid, sha256, built_ms, size, version, digest, verified_ms, recipe_serial) =
                row.map_err(query_err(WHAT))?;
            out.push(ListedBuild {
                build: GoldenBuild {
                    volid,
                    sha256,
                    size: u64::try_from(size).unwrap_or(0),
                    version,
                    controller_digest: digest,
                    built_at: from_ms(built_ms, "golden_archives", "built_ms")?,
                    recipe_serial: read_serial(recipe_serial)?,
                },
                verified_at: verified_ms
                    .map(|ms| from_ms(ms, "golden_archives", "verified_ms"))
                    .transpose()?,
            });
        }
        Ok(out)
    }

    /// The newest *verified* build of golden `version`; with `controller_digest`, only one
    /// baking that digest.
    pub fn golden_build(
        &self,
        version: &str,
        controller_digest: Option<&str>,
    ) -> Result<Option<GoldenBuild>, JournalError> {
        const WHAT: &str = "read golden build";
        type Row = (String, String, i64, i64, String, Option<i64>);
        let row: Option<Row> = self
            .conn
            .query_row(
                "SELECT volid, sha256, built_ms, size, controller_digest, recipe_serial
                 FROM golden_archives
                 WHERE source = 'built' AND recipe_version = ?1 AND verified_ms IS NOT NULL
                   AND removed_ms IS NULL AND size IS NOT NULL AND controller_digest IS NOT NULL
                   AND (?2 IS NULL OR controller_digest = ?2)
                 ORDER BY built_ms DESC LIMIT 1",
                params![version, controller_digest],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional()
            .map_err(query_err(WHAT))?;
        row.map(|(volid, sha256, built_ms, size, digest, recipe_serial)| {
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
                recipe_serial: read_serial(recipe_serial)?,
            })
        })
        .transpose()
    }
}

/// A build's stored recipe serial; none (journaled before serials) is 0.
fn read_serial(stored: Option<i64>) -> Result<u64, JournalError> {
    stored.map_or(Ok(0), |serial| {
        u64::try_from(serial).map_err(|_| JournalError::Corrupt {
            table: "golden_archives",
            column: "recipe_serial",
            value: serial.to_string(),
        })
    })
}

journal_calls! {
    /// See [`Store::record_golden_build`].
    fn record_golden_build(build: GoldenBuild) -> () = |s| s.record_golden_build(&build);
    /// See [`Store::mark_golden_verified`].
    fn mark_golden_verified(volid: String, took_ms: u64, detail: serde_json::Value) -> bool
        = |s| s.mark_golden_verified(&volid, took_ms, detail);
    /// See [`Store::restamp_golden_build`].
    fn restamp_golden_build(volid: String, recipe_serial: u64) -> bool
        = |s| s.restamp_golden_build(&volid, recipe_serial);
    /// See [`Store::golden_builds`].
    fn golden_builds(limit: u32) -> Vec<ListedBuild> = |s| s.golden_builds(limit);
    /// See [`Store::golden_build`].
    fn golden_build(version: String, controller_digest: Option<String>) -> Option<GoldenBuild>
        = |s| s.golden_build(&version, controller_digest.as_deref());
}
