//! A host's key through a rotation (decision 0044), written once for both stores.
//!
//! The hub holds at most two keys per host, as hashes: the current one and the next one the
//! host's agent made. The agent sends the next key's hash over the channel the current key
//! authenticates (`stage`); from then on either key is accepted, and the first request that
//! presents the next key makes it the current one and retires the old (`promote`). Every
//! step is a single conditional write, so a lost answer or a replayed request at any step
//! leaves both sides holding a key the other accepts.
//!
//! When a rotation is due is decided from the host row ([`HostKeyFacts`]): an operator asked
//! (`request`, e.g. after a suspected leak), or the current key is older than the hub's
//! rotation age, or it was issued before keys rotated at all.

use rusqlite::params;
use uuid::Uuid;

use super::tx::{Row, Tx};
use super::{StoreError, StoreResult};
use crate::secret::SecretHash;

pub use super::model::HostKeyFacts;

/// How long a host key lives (`[hosts]` in `hub.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLifetime {
    /// A key this old is replaced at the host's next poll.
    pub rotate_after_ms: i64,
    /// A key this old is refused: the host polled too rarely to rotate it in time, and must be
    /// enrolled again. Always longer than `rotate_after_ms`.
    pub expire_after_ms: i64,
}

impl Default for KeyLifetime {
    /// Rotated every 30 days, refused after 365 (a box may sit powered off for months and
    /// still come back; one gone for a year is enrolled again).
    fn default() -> Self {
        const DAY_MS: i64 = 86_400_000;
        Self {
            rotate_after_ms: 30 * DAY_MS,
            expire_after_ms: 365 * DAY_MS,
        }
    }
}

impl KeyLifetime {
    /// Whether a key issued at `issued_ms` is past its lifetime at `now_ms` (a key issued
    /// before rotation existed never expires until it is rotated).
    pub fn expired(&self, issued_ms: Option<i64>, now_ms: i64) -> bool {
        issued_ms.is_some_and(|issued| now_ms.saturating_sub(issued) >= self.expire_after_ms)
    }
}

impl HostKeyFacts {
    /// What the poll's answer says about the key: `(rotate, next)`. While a next key is held,
    /// the answer names it (present it now); otherwise it asks for one when a rotation is due.
    pub fn answer(&self, lifetime: &KeyLifetime, now_ms: i64) -> (bool, Option<SecretHash>) {
        if let Some(next) = self.next {
            return (false, Some(next));
        }
        let due = self.rotate_requested
            || self
                .issued_ms
                .is_none_or(|issued| now_ms.saturating_sub(issued) >= lifetime.rotate_after_ms);
        (due, None)
    }
}

/// The key columns of a host row, in this order, for the statements that read them.
pub(super) const KEY_COLUMNS: &str = "next_key_hash, key_issued_ms, key_rotate_ms";

/// Rebuilds [`HostKeyFacts`] from [`KEY_COLUMNS`] read at `first` and the two after it.
pub(super) fn facts(row: &Row<'_, '_>, first: usize) -> rusqlite::Result<HostKeyFacts> {
    let next: Option<Vec<u8>> = row.get(first)?;
    let issued_ms: Option<i64> = row.get(first + 1)?;
    let rotate_ms: Option<i64> = row.get(first + 2)?;
    Ok(HostKeyFacts {
        issued_ms,
        rotate_requested: rotate_ms.is_some(),
        // A stored hash of the wrong length is no key at all: the agent is asked again.
        next: next.as_deref().and_then(SecretHash::from_slice),
    })
}

/// Keeps `next` as the host's next key, when `current` is still its current key (the agent
/// presented it with the request that carried `next`). Replaces a next key sent before: the
/// agent's newest is the one it holds. `false`: the current key changed meanwhile, nothing
/// stored.
pub(super) fn stage(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    current: SecretHash,
    next: SecretHash,
    now_ms: i64,
) -> StoreResult<bool> {
    if current.matches(&next) {
        // Not a new key: nothing to rotate to.
        return Ok(false);
    }
    let id = host_id.to_string();
    let before: Option<Option<Vec<u8>>> = tx.query_opt(
        "stage host key",
        "SELECT next_key_hash FROM hosts WHERE host_id = ?1 AND key_hash = ?2",
        params![id, current.0.as_slice()],
        |r| r.get(0),
    )?;
    let Some(before) = before else {
        return Ok(false);
    };
    if before.as_deref() == Some(next.0.as_slice()) {
        // The agent sent it again: its answer was lost. Nothing to write.
        return Ok(true);
    }
    tx.execute(
        "stage host key",
        "UPDATE hosts SET next_key_hash = ?1 WHERE host_id = ?2 AND key_hash = ?3",
        params![next.0.as_slice(), id, current.0.as_slice()],
    )?;
    tx.event(
        now_ms,
        Some(host_id),
        "host.key_staged",
        &serde_json::json!({ "replaced_earlier": before.is_some() }),
    )?;
    Ok(true)
}

/// Makes `next` the host's current key when it is the next key held: the old key stops
/// authenticating, the key's age starts again and an operator's request is settled. `false`:
/// `next` is not the next key (any more).
pub(super) fn promote(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    next: SecretHash,
    now_ms: i64,
) -> StoreResult<bool> {
    let id = host_id.to_string();
    let changed = tx.execute(
        "promote host key",
        "UPDATE hosts SET key_hash = next_key_hash, next_key_hash = NULL, key_issued_ms = ?1,
             key_rotate_ms = NULL
         WHERE host_id = ?2 AND next_key_hash = ?3",
        params![now_ms, id, next.0.as_slice()],
    )?;
    if changed == 0 {
        return Ok(false);
    }
    tx.event(
        now_ms,
        Some(host_id),
        "host.key_rotated",
        &serde_json::json!({}),
    )?;
    tx.wake(host_id)?;
    Ok(true)
}

/// An operator asks for the host's key to be replaced at its next poll. A next key the hub
/// held is dropped (after a suspected leak, a key staged by whoever held the old one must not
/// become current); the agent's request with it is refused and it sends a new one.
pub(super) fn request(tx: Tx<'_, '_>, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
    let status = tx.require_host(host_id)?;
    if status == bosun_proto::admin::HostStatus::Revoked {
        return Err(StoreError::HostState {
            host_id,
            status: status.as_str(),
            action: "rotate its key",
        });
    }
    let dropped: Option<Vec<u8>> = tx.query_row(
        "request host key rotation",
        "SELECT next_key_hash FROM hosts WHERE host_id = ?1",
        params![host_id.to_string()],
        |r| r.get(0),
    )?;
    tx.execute(
        "request host key rotation",
        "UPDATE hosts SET key_rotate_ms = ?1, next_key_hash = NULL WHERE host_id = ?2",
        params![now_ms, host_id.to_string()],
    )?;
    tx.event(
        now_ms,
        Some(host_id),
        "host.key_rotation_requested",
        &serde_json::json!({ "dropped_next_key": dropped.is_some() }),
    )?;
    tx.wake(host_id)
}
