//! Artifacts for agents on PostgreSQL: the same opaque bytes under their SHA-256 as
//! [`super::sqlite_artifacts`], shared by every replica. Two replicas storing the same upload
//! at once keep one copy (the primary key), and the newest [`MAX_ARTIFACTS`] survive pruning.
//! PostgreSQL has no insertion order to break a tie of `stored_ms` (SQLite's rowid), so an
//! upload takes the table's lock and is stored at least a millisecond after the newest one:
//! uploads are rare operator actions, and "newest" then means the last one stored.

use bosun_proto::admin::ArtifactInfo;
use rusqlite::params;

use super::MAX_ARTIFACTS;
use super::StoreResult;
use super::pg_conn::{OptionalExtension as _, PgTx};
use super::postgres::{event, sql};
use super::sqlite_artifacts::info;

/// Stores `data` under `sha256` (storing the same bytes again keeps the first copy).
pub(super) fn put(
    tx: &PgTx<'_>,
    sha256: &str,
    data: &[u8],
    now_ms: i64,
) -> StoreResult<ArtifactInfo> {
    let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
    tx.batch("LOCK TABLE artifacts IN SHARE ROW EXCLUSIVE MODE")
        .map_err(sql("put artifact"))?;
    tx.execute(
        "INSERT INTO artifacts (sha256, size, data, stored_ms)
         SELECT $1, $2, $3, GREATEST($4, COALESCE(MAX(stored_ms) + 1, $4)) FROM artifacts
         ON CONFLICT (sha256) DO NOTHING",
        params![sha256, size, data, now_ms],
    )
    .map_err(sql("put artifact"))?;
    tx.execute(
        "DELETE FROM artifacts WHERE sha256 NOT IN
             (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, sha256 DESC LIMIT $1)",
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
            "SELECT stored_ms FROM artifacts WHERE sha256 = $1",
            params![sha256],
            |r| r.get(0),
        )
        .map_err(sql("put artifact"))?;
    info(sha256.to_owned(), size, stored_ms)
}

/// The bytes stored under `sha256`.
pub(super) fn get(tx: &PgTx<'_>, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
    tx.query_row(
        "SELECT data FROM artifacts WHERE sha256 = $1",
        params![sha256],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql("read artifact"))
}

/// Every stored artifact, newest first.
pub(super) fn list(tx: &PgTx<'_>) -> StoreResult<Vec<ArtifactInfo>> {
    let mut stmt = tx
        .prepare(
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, sha256 DESC",
        )
        .map_err(sql("list artifacts"))?;
    let rows = stmt
        .query_map(params![], |r| {
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
