//! The newest operator-signed credential the agent accepted for each subject of the plan in
//! force (a storage target, the tunnel), still sealed (decision 0095): a desired state that
//! leaves a credential out, or carries an older one, leaves the held one in use. Only a
//! credential issued later replaces it; a signed plan that drops the subject releases it.

use jiff::Timestamp;
use rusqlite::params;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms, tuple_rows};

/// One held credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCredential {
    /// What it is for: `target:` and the target identity's digest, or `tunnel:` and its id.
    pub subject: String,
    /// The armored ciphertext as the operator sealed it.
    pub sealed: String,
    /// When the operator issued it.
    pub issued_at: Timestamp,
    /// SHA-256 of the signed document.
    pub digest: [u8; 32],
    /// The signer's key fingerprint.
    pub signer: String,
}

impl Store {
    /// Holds `credential` for its subject if none is held or the held one was issued earlier;
    /// gives whether it was stored.
    pub fn hold_credential(&mut self, credential: &HeldCredential) -> Result<bool, JournalError> {
        const WHAT: &str = "hold credential";
        let now = to_ms(self.now());
        self.write(WHAT, |tx| {
            let changed = tx
                .execute(
                    "INSERT INTO held_credentials
                         (subject, sealed, issued_ms, digest, signer, accepted_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (subject) DO UPDATE SET
                         sealed = excluded.sealed, issued_ms = excluded.issued_ms,
                         digest = excluded.digest, signer = excluded.signer,
                         accepted_ms = excluded.accepted_ms
                     WHERE excluded.issued_ms > held_credentials.issued_ms",
                    params![
                        credential.subject,
                        credential.sealed,
                        to_ms(credential.issued_at),
                        credential.digest.as_slice(),
                        credential.signer,
                        now
                    ],
                )
                .map_err(query_err(WHAT))?;
            Ok(changed > 0)
        })
    }

    /// Every held credential (at most one per subject of the plan in force).
    pub fn held_credentials(&self) -> Result<Vec<HeldCredential>, JournalError> {
        const WHAT: &str = "read held credentials";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT subject, sealed, issued_ms, digest, signer FROM held_credentials
                 ORDER BY subject",
            )
            .map_err(query_err(WHAT))?;
        let rows: Vec<(String, String, i64, Vec<u8>, String)> = tuple_rows(&mut stmt, [], WHAT)?;
        rows.into_iter()
            .map(|(subject, sealed, issued_ms, digest, signer)| {
                let digest =
                    <[u8; 32]>::try_from(digest.as_slice()).map_err(|_| JournalError::Corrupt {
                        table: "held_credentials",
                        column: "digest",
                        value: hex::encode(&digest),
                    })?;
                Ok(HeldCredential {
                    subject,
                    sealed,
                    issued_at: from_ms(issued_ms, "held_credentials", "issued_ms")?,
                    digest,
                    signer,
                })
            })
            .collect()
    }

    /// Releases the credentials held for `subjects` (the plan in force no longer names them);
    /// gives how many were held.
    pub fn release_credentials(&mut self, subjects: &[String]) -> Result<usize, JournalError> {
        const WHAT: &str = "release credentials";
        self.write(WHAT, |tx| {
            let mut released = 0;
            for subject in subjects {
                released += tx
                    .execute(
                        "DELETE FROM held_credentials WHERE subject = ?1",
                        params![subject],
                    )
                    .map_err(query_err(WHAT))?;
            }
            Ok(released)
        })
    }
}

journal_calls! {
    /// See [`Store::hold_credential`].
    fn hold_credential(credential: HeldCredential) -> bool = |s| s.hold_credential(&credential);
    /// See [`Store::held_credentials`].
    fn held_credentials() -> Vec<HeldCredential> = |s| s.held_credentials();
    /// See [`Store::release_credentials`].
    fn release_credentials(subjects: Vec<String>) -> usize = |s| s.release_credentials(&subjects);
}
