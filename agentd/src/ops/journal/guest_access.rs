//! Which SSH keys each guest's bootstrap carries (decision 0107): the SHA-256 of the
//! `authorized_keys` text the last pushed bootstrap handed the guest. Recorded right after the
//! token the same push carried, removed with that token; reconcile compares it with what the
//! signed plan in force trusts and delivers a new bootstrap when they differ. A guest with no
//! row was given no key.

use std::collections::BTreeMap;

use rusqlite::params;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

impl Store {
    /// Records that guest `guest_id`'s bootstrap now carries the keys hashing to `keys_sha256`.
    pub fn record_guest_access(
        &mut self,
        guest_id: &str,
        keys_sha256: [u8; 32],
    ) -> Result<(), JournalError> {
        const WHAT: &str = "record guest access";
        let now = to_ms(self.now());
        self.write(WHAT, |tx| {
            tx.execute(
                "INSERT INTO guest_access (guest_id, keys_sha256, delivered_ms)
                 VALUES (?1, ?2, ?3)
                 ON CONFLICT (guest_id) DO UPDATE SET
                     keys_sha256 = excluded.keys_sha256, delivered_ms = excluded.delivered_ms",
                params![guest_id, keys_sha256.as_slice(), now],
            )
            .map_err(query_err(WHAT))?;
            Ok(())
        })
    }

    /// The keys' SHA-256 every guest's bootstrap carries, by guest: one read for a pass.
    pub fn guest_access(&self) -> Result<BTreeMap<String, [u8; 32]>, JournalError> {
        const WHAT: &str = "read guest access";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT guest_id, keys_sha256 FROM guest_access")
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, Vec<u8>>(1)?))
            })
            .map_err(query_err(WHAT))?;
        let mut out = BTreeMap::new();
        for row in rows {
            let (guest_id, sha) = row.map_err(query_err(WHAT))?;
            let sha: [u8; 32] = sha
                .try_into()
                .map_err(|bad: Vec<u8>| JournalError::Corrupt {
                    table: "guest_access",
                    column: "keys_sha256",
                    value: format!("{} bytes", bad.len()),
                })?;
            out.insert(guest_id, sha);
        }
        Ok(out)
    }
}

journal_calls! {
    /// See [`Store::record_guest_access`].
    fn record_guest_access(guest_id: String, keys_sha256: [u8; 32]) -> ()
        = |s| s.record_guest_access(&guest_id, keys_sha256);
    /// See [`Store::guest_access`].
    fn guest_access() -> BTreeMap<String, [u8; 32]> = |s| s.guest_access();
}
