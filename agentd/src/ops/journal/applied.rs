//! The newest generation of desired state a reconcile pass converged to completely (DESIGN §5:
//! the report says which generation is applied). Kept across restarts, so an agent that comes
//! back while part of the current generation is refused (decision 0065) reports the generation
//! it had applied, not none: every view of the hub keeps saying what is applied.

use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

const TABLE: &str = "applied_generation";

fn corrupt(value: impl ToString) -> JournalError {
    JournalError::Corrupt {
        table: TABLE,
        column: "generation",
        value: value.to_string(),
    }
}

impl Store {
    /// The generation last recorded applied; 0 when none was.
    pub fn applied_generation(&self) -> Result<u64, JournalError> {
        const WHAT: &str = "read applied generation";
        let generation: Option<i64> = self
            .conn
            .query_row(
                "SELECT generation FROM applied_generation WHERE id = 1",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        generation.map_or(Ok(0), |g| u64::try_from(g).map_err(|_| corrupt(g)))
    }

    /// Records `generation` as the one applied. Any generation replaces the stored one, a lower
    /// one too: after a hub reset the hub's generations start again, and what the agent applied
    /// last is what it reports.
    pub fn record_applied_generation(&mut self, generation: u64) -> Result<(), JournalError> {
        const WHAT: &str = "record applied generation";
        let value = i64::try_from(generation).map_err(|_| corrupt(generation))?;
        let now = to_ms(self.now());
        self.write(WHAT, |tx| {
            tx.execute(
                "INSERT INTO applied_generation (id, generation, applied_ms) VALUES (1, ?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET
                     generation = excluded.generation, applied_ms = excluded.applied_ms
                 WHERE excluded.generation != applied_generation.generation",
                params![value, now],
            )
            .map_err(query_err(WHAT))?;
            Ok(())
        })
    }
}

journal_calls! {
    /// See [`Store::applied_generation`].
    fn applied_generation() -> u64 = |s| s.applied_generation();
    /// See [`Store::record_applied_generation`].
    fn record_applied_generation(generation: u64) -> () = |s| s.record_applied_generation(generation);
}
