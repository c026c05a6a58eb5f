//! The highest serial of each kind of signed golden document this host holds (decision
//! 0092): golden archive documents (`bosun.golden/v1`) and golden recipes
//! (`bosun.golden-recipe/v1`). It only rises, and it outlives restarts, so a hub that brings
//! back a document the operator has since replaced finds it refused here
//! ([`bosun_proto::golden::check_serial`]).

use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

/// Which signed golden documents a serial orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoldenSerialKind {
    /// `bosun.golden/v1`: an operator's choice of golden archive.
    Golden,
    /// `bosun.golden-recipe/v1`: a golden version to build, and its controller.
    Recipe,
}

impl GoldenSerialKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Golden => "golden",
            Self::Recipe => "golden_recipe",
        }
    }
}

fn stored(serial: u64) -> Result<i64, JournalError> {
    i64::try_from(serial).map_err(|_| JournalError::Corrupt {
        table: "golden_serials",
        column: "serial",
        value: serial.to_string(),
    })
}

impl Store {
    /// The highest serial of `kind` this host holds; 0 when it holds none.
    pub fn golden_serial(&self, kind: GoldenSerialKind) -> Result<u64, JournalError> {
        const WHAT: &str = "read golden serial";
        let serial: Option<i64> = self
            .conn
            .query_row(
                "SELECT serial FROM golden_serials WHERE kind = ?1",
                params![kind.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(query_err(WHAT))?;
        serial.map_or(Ok(0), |serial| {
            u64::try_from(serial).map_err(|_| JournalError::Corrupt {
                table: "golden_serials",
                column: "serial",
                value: serial.to_string(),
            })
        })
    }

    /// Raises the held serial of `kind` to `serial` when it is higher; gives whether it rose.
    pub fn raise_golden_serial(
        &mut self,
        kind: GoldenSerialKind,
        serial: u64,
    ) -> Result<bool, JournalError> {
        const WHAT: &str = "raise golden serial";
        let value = stored(serial)?;
        let now = to_ms(self.now());
        self.write(WHAT, |tx| {
            let changed = tx
                .execute(
                    "INSERT INTO golden_serials (kind, serial, raised_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (kind) DO UPDATE SET
                         serial = excluded.serial, raised_ms = excluded.raised_ms
                     WHERE excluded.serial > golden_serials.serial",
                    params![kind.as_str(), value, now],
                )
                .map_err(query_err(WHAT))?;
            Ok(changed > 0)
        })
    }
}

journal_calls! {
    /// See [`Store::golden_serial`].
    fn golden_serial(kind: GoldenSerialKind) -> u64 = |s| s.golden_serial(kind);
    /// See [`Store::raise_golden_serial`].
    fn raise_golden_serial(kind: GoldenSerialKind, serial: u64) -> bool
        = |s| s.raise_golden_serial(kind, serial);
}
