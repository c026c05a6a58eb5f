//! Artifacts for agents (agent self-update): opaque bytes under their SHA-256, which the hub
//! checks on upload only so a typo cannot file bytes under the wrong name. What vouches for an
//! artifact is the operator's signed job naming its digest, which the agent checks again.
//!
//! Two PostgreSQL replicas storing the same upload at once keep one copy (the primary key),
//! and the newest [`MAX_ARTIFACTS`] survive pruning. PostgreSQL has no insertion order to
//! break a tie of `stored_ms` (SQLite's rowid), so there an upload takes the table's lock and
//! is stored at least a millisecond after the newest one: uploads are rare operator actions,
//! and "newest" then means the last one stored.

use bosun_proto::admin::ArtifactInfo;

use super::StoreResult;
use super::sqlite::ts;
use super::tx::{Dialect, Tx};

/// How many artifacts the hub keeps; storing another drops the oldest.
pub const MAX_ARTIFACTS: i64 = 8;

/// Stores `data` under `sha256` (storing the same bytes again keeps the first copy).
pub(super) fn put(
    tx: Tx<'_, '_>,
    sha256: &str,
    data: &[u8],
    now_ms: i64,
) -> StoreResult<ArtifactInfo> {
    let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
    if tx.dialect() == Dialect::Postgres {
        tx.batch(
            "put artifact",
            "LOCK TABLE artifacts IN SHARE ROW EXCLUSIVE MODE",
        )?;
    }
    tx.execute(
        "put artifact",
        tx.dialect().pick(
            "INSERT INTO artifacts (sha256, size, data, stored_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (sha256) DO NOTHING",
            "INSERT INTO artifacts (sha256, size, data, stored_ms)
             SELECT ?1, ?2, ?3, GREATEST(?4, COALESCE(MAX(stored_ms) + 1, ?4)) FROM artifacts
             ON CONFLICT (sha256) DO NOTHING",
        ),
        &[&sha256, &size, &data, &now_ms],
    )?;
    tx.execute(
        "prune artifacts",
        tx.dialect().pick(
            "DELETE FROM artifacts WHERE sha256 NOT IN
                 (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, rowid DESC LIMIT ?1)",
            "DELETE FROM artifacts WHERE sha256 NOT IN
                 (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, sha256 DESC LIMIT ?1)",
        ),
        &[&MAX_ARTIFACTS],
    )?;
    tx.event(
        now_ms,
        None,
        "artifact_stored",
        &serde_json::json!({ "sha256": sha256, "size": size }),
    )?;
    let stored_ms: i64 = tx.query_row(
        "put artifact",
        "SELECT stored_ms FROM artifacts WHERE sha256 = ?1",
        &[&sha256],
        |r| r.get(0),
    )?;
    info(sha256.to_owned(), size, stored_ms)
}

/// A stored artifact's row as the admin API lists it.
fn info(sha256: String, size: i64, stored_ms: i64) -> StoreResult<ArtifactInfo> {
    Ok(ArtifactInfo {
        sha256,
        size: u64::try_from(size).unwrap_or(0),
        stored_at: ts(stored_ms)?,
    })
}

/// The bytes stored under `sha256`.
pub(super) fn get(tx: Tx<'_, '_>, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
    tx.query_opt(
        "read artifact",
        "SELECT data FROM artifacts WHERE sha256 = ?1",
        &[&sha256],
        |r| r.get(0),
    )
}

/// Every stored artifact, newest first.
pub(super) fn list(tx: Tx<'_, '_>) -> StoreResult<Vec<ArtifactInfo>> {
    tx.query_map(
        "list artifacts",
        tx.dialect().pick(
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, rowid DESC",
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, sha256 DESC",
        ),
        &[],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
    )?
    .into_iter()
    .map(|(sha256, size, stored_ms)| info(sha256, size, stored_ms))
    .collect()
}
