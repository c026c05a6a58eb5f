//! Golden archives of known provenance: built by this host's helper (with the SHA-256 the
//! helper computed by reading the file) or named in an operator-signed document. DESIGN §5
//! "Provenance of what is restored": provisioning restores nothing else.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::store::{from_ms, query_err, to_ms};
use super::{JournalError, JournalHandle, Store};

/// Where a golden archive's record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoldenSource {
    /// Built by this host's helper (`build_golden`).
    Built,
    /// Named in an operator-signed document.
    Signed,
}

impl GoldenSource {
    fn as_str(self) -> &'static str {
        match self {
            Self::Built => "built",
            Self::Signed => "signed",
        }
    }
}

/// One journaled golden archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenRecord {
    /// Its Proxmox volume id (`local:backup/vzdump-lxc-…`).
    pub volid: String,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// Where the record came from.
    pub source: GoldenSource,
    /// When it was recorded.
    pub built_at: Timestamp,
}

fn valid_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Store {
    /// Records a golden archive of known provenance. Recording the same volid again
    /// replaces the record (a rebuilt archive gets a new hash).
    pub fn record_golden(
        &mut self,
        volid: &str,
        sha256: &str,
        source: GoldenSource,
    ) -> Result<(), JournalError> {
        if !valid_sha256(sha256) {
            return Err(JournalError::Corrupt {
                table: "golden_archives",
                column: "sha256",
                value: sha256.chars().take(80).collect(),
            });
        }
        let now = to_ms(self.now());
        self.write("record golden archive", |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO golden_archives (volid, sha256, source, built_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                params![volid, sha256, source.as_str(), now],
            )
            .map_err(query_err("record golden archive"))?;
            Ok(())
        })
    }

    /// The record of `volid`, if it is a golden archive of known provenance.
    pub fn golden(&self, volid: &str) -> Result<Option<GoldenRecord>, JournalError> {
        const WHAT: &str = "read golden archive";
        let row: Option<(String, String, i64)> = self
            .conn
            .query_row(
                "SELECT sha256, source, built_ms FROM golden_archives WHERE volid = ?1",
                params![volid],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        let Some((sha256, source, built_ms)) = row else {
            return Ok(None);
        };
        let source = match source.as_str() {
            "built" => GoldenSource::Built,
            "signed" => GoldenSource::Signed,
            other => {
                return Err(JournalError::Corrupt {
                    table: "golden_archives",
                    column: "source",
                    value: other.to_owned(),
                });
            }
        };
        Ok(Some(GoldenRecord {
            volid: volid.to_owned(),
            sha256,
            source,
            built_at: from_ms(built_ms, "golden_archives", "built_ms")?,
        }))
    }
}

impl JournalHandle {
    /// See [`Store::record_golden`].
    pub async fn record_golden(
        &self,
        volid: String,
        sha256: String,
        source: GoldenSource,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_golden(&volid, &sha256, source))
            .await
    }

    /// See [`Store::golden`].
    pub async fn golden(&self, volid: String) -> Result<Option<GoldenRecord>, JournalError> {
        self.call(move |s| s.golden(&volid)).await
    }
}
