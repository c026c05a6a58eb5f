//! What a hub brought back from a backup remembers of it (`docs/hub-backup.md`).
//!
//! A backup is older than what the agents have seen: a host's agent may hold a desired-state
//! generation the restored hub never stored. The agent takes the hub's lower generation as a
//! hub reset (it acts on the hub's document and audits `desired.generation_reset`), but one
//! number must never name two documents: were the operator to set a new desired state before
//! the host polls the restored hub, it would get the very generation the agent already holds
//! with other content, and the agent, holding "that" generation, would never fetch it. So the
//! restore is recorded (`meta.restored_ms` and a `hub_restored` event), a desired state for a
//! host that has not polled since is refused (`NotSeenSinceRestore`), and a new generation is
//! numbered above every generation the host has reported holding or applying.

use rusqlite::params;
use uuid::Uuid;

use super::codec::{signed, unsigned};
use super::tx::Tx;
use super::{StoreError, StoreResult};

/// The `meta` key holding when the hub was last restored (Unix ms, as decimal text).
const RESTORED_KEY: &str = "restored_ms";

/// A restore to record ([`Store::mark_restored`](crate::store::HubKeyStore::mark_restored)).
#[derive(Debug, Clone)]
pub struct RestoredHub {
    /// When the restore happened.
    pub now_ms: i64,
    /// When the backup was taken, when known.
    pub backup_taken_ms: Option<i64>,
    /// What the hub was restored from, in words (an archive's name, "a PostgreSQL dump").
    pub source: String,
}

/// Records the restore: `meta.restored_ms` and a `hub_restored` event.
pub(super) fn mark(tx: Tx<'_, '_>, restored: &RestoredHub) -> StoreResult<()> {
    tx.execute(
        "record the restore",
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![RESTORED_KEY, restored.now_ms.to_string().into_bytes()],
    )?;
    tx.event(
        restored.now_ms,
        None,
        "hub_restored",
        &serde_json::json!({
            "source": restored.source,
            "backup_taken_ms": restored.backup_taken_ms,
        }),
    )
}

/// When the hub was last restored, if ever.
pub(super) fn restored_ms(tx: Tx<'_, '_>) -> StoreResult<Option<i64>> {
    let value: Option<Vec<u8>> = tx.query_opt(
        "read the restore mark",
        "SELECT value FROM meta WHERE key = ?1",
        params![RESTORED_KEY],
        |r| r.get(0),
    )?;
    value
        .map(|bytes| {
            std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .ok_or_else(|| StoreError::Corrupt {
                    what: "restore mark",
                    reason: "`meta.restored_ms` is not a number".to_owned(),
                })
        })
        .transpose()
}

/// The generation a new desired state for `host` gets after `current`. On a hub that was
/// restored: refused with `NotSeenSinceRestore` until the host has polled since, then numbered
/// above every generation the host reported holding or applying (only then: elsewhere what a
/// host reports never steers its numbering).
pub(super) fn next_generation(tx: Tx<'_, '_>, host: Uuid, current: u64) -> StoreResult<u64> {
    let Some(restored_ms) = restored_ms(tx)? else {
        return Ok(current.saturating_add(1));
    };
    let (known, applied, last_seen): (i64, i64, Option<i64>) = tx
        .query_opt(
            "put desired state",
            "SELECT known_generation, applied_generation, last_seen_ms FROM hosts
             WHERE host_id = ?1",
            params![host.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        .ok_or(StoreError::UnknownHost { host_id: host })?;
    if last_seen.is_none_or(|seen| seen < restored_ms) {
        return Err(StoreError::NotSeenSinceRestore {
            host_id: host,
            restored_ms,
        });
    }
    let reported = unsigned(known.max(applied));
    // Kept within what the store holds (a signed 64-bit integer).
    Ok(current
        .max(reported)
        .saturating_add(1)
        .min(unsigned(signed(u64::MAX))))
}
