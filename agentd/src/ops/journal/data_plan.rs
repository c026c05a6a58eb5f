//! The newest operator-signed data plan the agent verified (DESIGN §5): the exact signed
//! bytes and signature, the plan's serial and who signed it. Only a plan with a higher serial
//! replaces it, so a replayed older plan moves nothing.

use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

/// The stored plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPlan {
    /// The exact signed document bytes.
    pub document: Vec<u8>,
    /// The armored signature.
    pub signature: String,
    /// The plan's serial.
    pub serial: u64,
    /// The signer's key fingerprint.
    pub signer: String,
}

impl Store {
    /// Stores `plan` if its serial is above the stored one's (or none is stored); gives
    /// whether it was stored.
    pub fn store_plan(&mut self, plan: &StoredPlan) -> Result<bool, JournalError> {
        const WHAT: &str = "store data plan";
        let now = to_ms(self.now());
        let serial = i64::try_from(plan.serial).map_err(|_| JournalError::Corrupt {
            table: "data_plan",
            column: "serial",
            value: plan.serial.to_string(),
        })?;
        self.write(WHAT, |tx| {
            let changed = tx
                .execute(
                    "INSERT INTO data_plan (id, document, signature, serial, signer, accepted_ms)
                     VALUES (1, ?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (id) DO UPDATE SET
                         document = excluded.document, signature = excluded.signature,
                         serial = excluded.serial, signer = excluded.signer,
                         accepted_ms = excluded.accepted_ms
                     WHERE excluded.serial > data_plan.serial",
                    params![plan.document, plan.signature, serial, plan.signer, now],
                )
                .map_err(query_err(WHAT))?;
            Ok(changed > 0)
        })
    }

    /// The stored plan, if any.
    pub fn plan(&self) -> Result<Option<StoredPlan>, JournalError> {
        const WHAT: &str = "read data plan";
        let row: Option<(Vec<u8>, String, i64, String)> = self
            .conn
            .query_row(
                "SELECT document, signature, serial, signer FROM data_plan WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        row.map(|(document, signature, serial, signer)| {
            Ok(StoredPlan {
                document,
                signature,
                serial: u64::try_from(serial).map_err(|_| JournalError::Corrupt {
                    table: "data_plan",
                    column: "serial",
                    value: serial.to_string(),
                })?,
                signer,
            })
        })
        .transpose()
    }
}

journal_calls! {
    /// See [`Store::store_plan`].
    fn store_plan(plan: StoredPlan) -> bool = |s| s.store_plan(&plan);
    /// See [`Store::plan`].
    fn plan() -> Option<StoredPlan> = |s| s.plan();
}
