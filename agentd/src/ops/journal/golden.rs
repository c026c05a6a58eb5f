//! Golden archives of known provenance: built by this host's helper (with the SHA-256 the
//! helper computed by reading the file) or named in an operator-signed document. DESIGN §5
//! "Provenance of what is restored": provisioning restores nothing else.
//!
//! A signed archive's record keeps the exact signed bytes, the signature and who signed
//! them ([`GoldenSignature`]), so the signature can be verified again before every use
//! (`crate::guests::reconcile::golden`): the record says what an operator once chose, never that
//! the operator is still trusted.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// Where a golden archive's record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoldenSource {
    /// Built by this host's helper (`build_golden`).
    Built,
    /// Named in an operator-signed document, kept whole.
    Signed(GoldenSignature),
}

impl GoldenSource {
    fn as_str(&self) -> &'static str {
        match self {
            Self::Built => "built",
            Self::Signed(_) => "signed",
        }
    }
}

/// The signed `bosun.golden/v1` document behind a signed archive, as it was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenSignature {
    /// The exact signed bytes.
    pub document: Vec<u8>,
    /// The armored SSH signature over them.
    pub signature: String,
    /// The signing key's `SHA256:…` fingerprint when it was admitted.
    pub fingerprint: String,
    /// The principals of its `allowed_signers` line when it was admitted.
    pub principals: String,
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
    /// For a built archive, when its boot test passed (`None`: not yet, or it failed);
    /// provisioning takes a built archive only once verified (decision 0083).
    pub verified_at: Option<Timestamp>,
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
        let signed = match &source {
            GoldenSource::Built => None,
            GoldenSource::Signed(s) => Some(s),
        };
        self.write("record golden archive", |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO golden_archives (volid, sha256, source, built_ms,
                     signed_document, signature, signer_fingerprint, signer_principals)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    volid,
                    sha256,
                    source.as_str(),
                    now,
                    signed.map(|s| s.document.as_slice()),
                    signed.map(|s| s.signature.as_str()),
                    signed.map(|s| s.fingerprint.as_str()),
                    signed.map(|s| s.principals.as_str()),
                ],
            )
            .map_err(query_err("record golden archive"))?;
            Ok(())
        })
    }

    /// The record of `volid`, if it is a golden archive of known provenance.
    pub fn golden(&self, volid: &str) -> Result<Option<GoldenRecord>, JournalError> {
        const WHAT: &str = "read golden archive";
        type Row = (String, String, i64, Option<GoldenSignature>, Option<i64>);
        let row: Option<Row> = self
            .conn
            .query_row(
                "SELECT sha256, source, built_ms, signed_document, signature,
                        signer_fingerprint, signer_principals, verified_ms
                 FROM golden_archives WHERE volid = ?1",
                params![volid],
                |row| {
                    let signature = match (row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?) {
                        (Some(document), Some(signature), Some(fingerprint), Some(principals)) => {
                            Some(GoldenSignature {
                                document,
                                signature,
                                fingerprint,
                                principals,
                            })
                        }
                        _ => None,
                    };
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        signature,
                        row.get(7)?,
                    ))
                },
            )
            .optional()
            .map_err(query_err(WHAT))?;
        let Some((sha256, source, built_ms, signature, verified_ms)) = row else {
            return Ok(None);
        };
        let source = match (source.as_str(), signature) {
            ("built", _) => GoldenSource::Built,
            ("signed", Some(signature)) => GoldenSource::Signed(signature),
            (other, _) => {
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
            verified_at: verified_ms
                .map(|ms| from_ms(ms, "golden_archives", "verified_ms"))
                .transpose()?,
        }))
    }
}

journal_calls! {
    /// See [`Store::record_golden`].
    fn record_golden(volid: String, sha256: String, source: GoldenSource) -> ()
        = |s| s.record_golden(&volid, &sha256, source);
    /// See [`Store::golden`].
    fn golden(volid: String) -> Option<GoldenRecord> = |s| s.golden(&volid);
}
