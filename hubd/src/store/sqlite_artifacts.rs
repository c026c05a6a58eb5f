//! Artifacts for agents (agent self-update): opaque bytes under their SHA-256, which the hub
//! checks on upload only so a typo cannot file bytes under the wrong name. What vouches for an
//! artifact is the operator's signed job naming its digest, which the agent checks again.

use bosun_proto::admin::ArtifactInfo;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::StoreResult;
use super::sqlite::{event, sql, ts};

/// How many artifacts the hub keeps; storing another drops the oldest.
pub const MAX_ARTIFACTS: i64 = 8;

/// Stores `data` under `sha256` (storing the same bytes again keeps the first copy).
pub(super) fn put(
    tx: &Connection,
    sha256: &str,
    data: &[u8],
    now_ms: i64,
) -> StoreResult<ArtifactInfo> {
    let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO artifacts (sha256, size, data, stored_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (sha256) DO NOTHING",
        params![sha256, size, data, now_ms],
    )
    .map_err(sql("put artifact"))?;
    tx.execute(
        "DELETE FROM artifacts WHERE sha256 NOT IN
             (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, rowid DESC LIMIT ?1)",
        params![MAX_ARTIFACTS],
    )
    .map_err(sql("prune artifacts"))?;
    event(
        tx,
        now_ms,
        None,
        "artifact_stored",
        &serde_json::json!({ "sha256": sha256, "size": size }),
    )?;
    let stored_ms: i64 = tx
        .query_row(
            "SELECT stored_ms FROM artifacts WHERE sha256 = ?1",
            params![sha256],
            |r| r.get(0),
        )
        .map_err(sql("put artifact"))?;
    info(sha256.to_owned(), size, stored_ms)
}

/// A stored artifact's row as the admin API lists it (both stores).
pub(super) fn info(sha256: String, size: i64, stored_ms: i64) -> StoreResult<ArtifactInfo> {
    Ok(ArtifactInfo {
        sha256,
        size: u64::try_from(size).unwrap_or(0),
        stored_at: ts(stored_ms)?,
    })
}

/// The bytes stored under `sha256`.
pub(super) fn get(tx: &Connection, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
    tx.query_row(
        "SELECT data FROM artifacts WHERE sha256 = ?1",
        params![sha256],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql("read artifact"))
}

/// Every stored artifact, newest first.
pub(super) fn list(tx: &Connection) -> StoreResult<Vec<ArtifactInfo>> {
    let mut stmt = tx
        .prepare(
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, rowid DESC",
        )
        .map_err(sql("list artifacts"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(sql("list artifacts"))?;
    let mut out = Vec::new();
    for row in rows {
        let (sha256, size, stored_ms) = row.map_err(sql("list artifacts"))?;
        out.push(info(sha256, size, stored_ms)?);
    }
    Ok(out)
}
