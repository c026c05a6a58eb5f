//! Artifacts for agents (agent self-update): opaque bytes under their SHA-256, which the hub
//! checks on upload so a typo cannot file bytes under the wrong name, and again before serving
//! them so a damaged copy is never handed out. What vouches for an artifact is the operator's
//! signed job naming its digest, which the agent checks again.
//!
//! Where the bytes live is the backend's (decision 0041): the SQLite hub keeps them as files
//! beside its database ([`super::artifact_files`]) and the table holds the metadata; PostgreSQL
//! replicas share no filesystem, so there the table holds the bytes (`data`). A SQLite row
//! still holding bytes (stored before) is read from the column until the store moves it out.
//!
//! Two PostgreSQL replicas storing the same upload at once keep one copy (the primary key),
//! and the newest [`MAX_ARTIFACTS`] survive pruning. PostgreSQL has no insertion order to
//! break a tie of `stored_ms` (SQLite's rowid), so there an upload takes the table's lock and
//! is stored at least a millisecond after the newest one: uploads are rare operator actions,
//! and "newest" then means the last one stored.

use bosun_proto::admin::ArtifactInfo;
use sha2::{Digest as _, Sha256};

use super::codec::ts;
use super::tx::{Dialect, Tx};
use super::{StoreError, StoreResult};

/// How many artifacts the hub keeps; storing another drops the oldest.
pub const MAX_ARTIFACTS: i64 = 8;

/// The bytes of a stored artifact, checked against their name.
#[derive(Debug)]
pub enum ArtifactBytes {
    /// A file beside the SQLite database, open at its start.
    File {
        /// The file.
        file: std::fs::File,
        /// Its length.
        size: u64,
    },
    /// Bytes the database holds.
    Inline(Vec<u8>),
}

/// A stored artifact's row: its size and the bytes, when the database holds them.
pub(super) type StoredRow = (i64, Option<Vec<u8>>);

/// Lowercase hex SHA-256 of what `reader` yields.
pub(super) fn sha256_of(mut reader: impl std::io::Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Refuses bytes that no longer hash to their name.
pub(super) fn check(sha256: &str, found: &str) -> StoreResult<()> {
    if found == sha256 {
        return Ok(());
    }
    tracing::error!(%sha256, %found, "stored artifact is damaged: its bytes no longer hash to its name; not served");
    Err(StoreError::ArtifactCorrupt {
        sha256: sha256.to_owned(),
        found: found.to_owned(),
    })
}

/// The bytes of a row whose database holds them, checked.
pub(super) fn inline(sha256: &str, data: Vec<u8>) -> StoreResult<ArtifactBytes> {
    let found = sha256_of(data.as_slice()).map_err(|source| StoreError::ArtifactFile {
        op: "hash artifact",
        path: std::path::PathBuf::from(sha256),
        source,
    })?;
    check(sha256, &found)?;
    Ok(ArtifactBytes::Inline(data))
}

/// Stores `sha256`'s metadata (and on PostgreSQL `data` itself; the SQLite store wrote the
/// file already) and prunes to the newest [`MAX_ARTIFACTS`]; storing the same bytes again
/// keeps the first copy. Returns the row and the digests pruned (whose files go once this
/// transaction commits).
pub(super) fn put(
    tx: Tx<'_, '_>,
    sha256: &str,
    data: &[u8],
    now_ms: i64,
) -> StoreResult<(ArtifactInfo, Vec<String>)> {
    let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
    let held: Option<&[u8]> = (tx.dialect() == Dialect::Postgres).then_some(data);
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
        &[&sha256, &size, &held, &now_ms],
    )?;
    let pruned: Vec<String> = tx.query_map(
        "prune artifacts",
        tx.dialect().pick(
            "SELECT sha256 FROM artifacts WHERE sha256 NOT IN
                 (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, rowid DESC LIMIT ?1)",
            "SELECT sha256 FROM artifacts WHERE sha256 NOT IN
                 (SELECT sha256 FROM artifacts ORDER BY stored_ms DESC, sha256 DESC LIMIT ?1)",
        ),
        &[&MAX_ARTIFACTS],
        |r| r.get(0),
    )?;
    for gone in &pruned {
        tx.execute(
            "prune artifacts",
            "DELETE FROM artifacts WHERE sha256 = ?1",
            &[gone],
        )?;
    }
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
    Ok((info(sha256.to_owned(), size, stored_ms)?, pruned))
}

/// A stored artifact's row as the admin API lists it.
fn info(sha256: String, size: i64, stored_ms: i64) -> StoreResult<ArtifactInfo> {
    Ok(ArtifactInfo {
        sha256,
        size: u64::try_from(size).unwrap_or(0),
        stored_at: ts(stored_ms)?,
    })
}

/// The row stored under `sha256`: its size, and its bytes when the database holds them.
pub(super) fn get(tx: Tx<'_, '_>, sha256: &str) -> StoreResult<Option<StoredRow>> {
    tx.query_opt(
        "read artifact",
        "SELECT size, data FROM artifacts WHERE sha256 = ?1",
        &[&sha256],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// The bytes of the row stored under `sha256`, checked, on a backend whose database holds
/// them all (PostgreSQL).
pub(super) fn get_held(tx: Tx<'_, '_>, sha256: &str) -> StoreResult<Option<ArtifactBytes>> {
    match get(tx, sha256)? {
        None => Ok(None),
        Some((_, Some(data))) => inline(sha256, data).map(Some),
        Some((_, None)) => Err(StoreError::Corrupt {
            what: "artifact",
            reason: format!("the row of {sha256} holds no bytes"),
        }),
    }
}

/// Every stored artifact, newest first.
pub(super) fn list(tx: Tx<'_, '_>, limit: u32) -> StoreResult<Vec<ArtifactInfo>> {
    tx.query_map(
        "list artifacts",
        tx.dialect().pick(
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, rowid DESC
             LIMIT ?1",
            "SELECT sha256, size, stored_ms FROM artifacts ORDER BY stored_ms DESC, sha256 DESC
             LIMIT ?1",
        ),
        &[&i64::from(limit)],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
    )?
    .into_iter()
    .map(|(sha256, size, stored_ms)| info(sha256, size, stored_ms))
    .collect()
}
