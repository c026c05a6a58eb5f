//! The newest operator-signed retention floor the agent verified (DESIGN §5): the exact
//! signed bytes and signature, the floor's issue time and who signed it. Only a floor issued
//! later replaces it, so a replayed older floor lowers nothing.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// The stored floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFloor {
    /// The exact signed document bytes.
    pub document: Vec<u8>,
    /// The armored signature.
    pub signature: String,
    /// The floor's `issued_at`.
    pub issued_at: Timestamp,
    /// The signer's key fingerprint.
    pub signer: String,
}

impl Store {
    /// Stores `floor` if it was issued after the stored one (or none is stored); gives
    /// whether it was stored.
    pub fn store_floor(&mut self, floor: &StoredFloor) -> Result<bool, JournalError> {
        let now = to_ms(self.now());
        let issued = to_ms(floor.issued_at);
        self.write("store retention floor", |tx| {
            let changed = tx
                .execute(
                    "INSERT INTO retention_floor
                         (id, document, signature, issued_ms, signer, accepted_ms)
                     VALUES (1, ?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (id) DO UPDATE SET
                         document = excluded.document, signature = excluded.signature,
                         issued_ms = excluded.issued_ms, signer = excluded.signer,
                         accepted_ms = excluded.accepted_ms
                     WHERE excluded.issued_ms > retention_floor.issued_ms",
                    params![floor.document, floor.signature, issued, floor.signer, now],
                )
                .map_err(query_err("store retention floor"))?;
            Ok(changed > 0)
        })
    }

    /// The stored floor, if any.
    pub fn floor(&self) -> Result<Option<StoredFloor>, JournalError> {
        const WHAT: &str = "read retention floor";
        let row: Option<(Vec<u8>, String, i64, String)> = self
            .conn
            .query_row(
                "SELECT document, signature, issued_ms, signer FROM retention_floor WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        row.map(|(document, signature, issued_ms, signer)| {
            Ok(StoredFloor {
                document,
                signature,
                issued_at: from_ms(issued_ms, "retention_floor", "issued_ms")?,
                signer,
            })
        })
        .transpose()
    }
}

journal_calls! {
    /// See [`Store::store_floor`].
    fn store_floor(floor: StoredFloor) -> bool = |s| s.store_floor(&floor);
    /// See [`Store::floor`].
    fn floor() -> Option<StoredFloor> = |s| s.floor();
}
