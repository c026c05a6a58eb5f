//! Operator tokens (`operator_tokens`), for both stores: a name, a role, an optional expiry
//! and the SHA-256 of the secret. The admin API checks every request against this table
//! (`lookup`), so a token revoked on one replica stops working on all of them at once.
//!
//! The hub keeps at most [`MAX_TOKENS`], and never lets the last unexpired admin token go
//! (`LastAdminToken`): somebody can always still manage the hub.

use bosun_proto::operator_token::{OperatorTokenInfo, Role};

use super::codec::{ts, ts_opt};
use super::tx::{Dialect, Row, Tx};
use super::{StoreError, StoreResult};
use crate::secret::SecretHash;

/// The name of the admin token `bosun-hubd init` makes (and the one an older hub's single
/// admin token becomes when the store is migrated).
pub const INIT_TOKEN_NAME: &str = "admin";

/// Most operator tokens a hub keeps (expired ones count until they are revoked).
pub const MAX_TOKENS: usize = 256;

/// A token's `last_used_ms` is written again only when it is older than this: a busy token
/// costs one write a minute, not one per request.
pub const LAST_USED_GRANULARITY_MS: i64 = 60_000;

/// A new operator token.
#[derive(Debug, Clone)]
pub struct NewOperatorToken {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The secret's hash.
    pub hash: SecretHash,
    /// The token that created it (`None`: `bosun-hubd init`).
    pub created_by: Option<String>,
    /// Expiry, Unix ms.
    pub expires_ms: Option<i64>,
    /// Now, Unix ms.
    pub now_ms: i64,
}

/// The token a request presented, as the admin API checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorTokenRecord {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The stored hash (compared again in constant time by the caller).
    pub hash: SecretHash,
    /// Expiry, Unix ms.
    pub expires_ms: Option<i64>,
    /// When it was last used, Unix ms.
    pub last_used_ms: Option<i64>,
}

impl OperatorTokenRecord {
    /// Whether it works at `now_ms`.
    pub fn live_at(&self, now_ms: i64) -> bool {
        self.expires_ms.is_none_or(|expires| expires > now_ms)
    }
}

fn role(text: &str) -> StoreResult<Role> {
    Role::parse(text).ok_or_else(|| StoreError::Corrupt {
        what: "operator token role",
        reason: format!("unknown role `{text}`"),
    })
}

fn hash(bytes: &[u8]) -> StoreResult<SecretHash> {
    SecretHash::from_slice(bytes).ok_or_else(|| StoreError::Corrupt {
        what: "operator token hash",
        reason: format!("{} bytes instead of 32", bytes.len()),
    })
}

/// The token whose secret hashes to `presented`, if any (expired ones too: the caller judges).
pub(super) fn lookup(
    tx: Tx<'_, '_>,
    presented: &SecretHash,
) -> StoreResult<Option<OperatorTokenRecord>> {
    type Found = (String, String, Vec<u8>, Option<i64>, Option<i64>);
    let row: Option<Found> = tx.query_opt(
        "look up operator token",
        "SELECT name, role, token_hash, expires_ms, last_used_ms FROM operator_tokens
         WHERE token_hash = ?1",
        &[&presented.0.as_slice()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    row.map(|(name, text, bytes, expires_ms, last_used_ms)| {
        Ok(OperatorTokenRecord {
            name,
            role: role(&text)?,
            hash: hash(&bytes)?,
            expires_ms,
            last_used_ms,
        })
    })
    .transpose()
}

/// Notes that `name` was used at `now_ms`.
pub(super) fn touch(tx: Tx<'_, '_>, name: &str, now_ms: i64) -> StoreResult<()> {
    tx.execute(
        "note operator token use",
        "UPDATE operator_tokens SET last_used_ms = ?2 WHERE name = ?1",
        &[&name, &now_ms],
    )?;
    Ok(())
}

/// Serializes the writes that judge the table as a whole (the bound, the last admin token)
/// across hub replicas: on PostgreSQL two replicas revoking the last two admin tokens at once
/// would each see the other's still there. Lookups are not held up. A SQLite hub is the only
/// writer already.
fn lock(tx: Tx<'_, '_>) -> StoreResult<()> {
    match tx.dialect() {
        Dialect::Sqlite => Ok(()),
        Dialect::Postgres => tx.batch(
            "lock operator tokens",
            "LOCK TABLE operator_tokens IN SHARE ROW EXCLUSIVE MODE",
        ),
    }
}

/// Creates a token: `OperatorTokenNameTaken`, `TooManyOperatorTokens`.
pub(super) fn create(tx: Tx<'_, '_>, token: &NewOperatorToken) -> StoreResult<OperatorTokenInfo> {
    lock(tx)?;
    if read(tx, &token.name, token.now_ms)?.is_some() {
        return Err(StoreError::OperatorTokenNameTaken {
            name: token.name.clone(),
        });
    }
    let held: i64 = tx.query_row(
        "create operator token",
        "SELECT COUNT(*) FROM operator_tokens",
        &[],
        |r| r.get(0),
    )?;
    if usize::try_from(held).unwrap_or(usize::MAX) >= MAX_TOKENS {
        return Err(StoreError::TooManyOperatorTokens { limit: MAX_TOKENS });
    }
    tx.execute(
        "create operator token",
        "INSERT INTO operator_tokens (name, role, token_hash, created_ms, created_by, expires_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &[
            &token.name,
            &token.role.as_str(),
            &token.hash.0.as_slice(),
            &token.now_ms,
            &token.created_by,
            &token.expires_ms,
        ],
    )?;
    tx.event(
        token.now_ms,
        None,
        "operator_token_created",
        &serde_json::json!({
            "name": token.name,
            "role": token.role.as_str(),
            "expires": ts_opt(token.expires_ms)?,
        }),
    )?;
    read(tx, &token.name, token.now_ms)?.ok_or_else(|| unknown(&token.name))
}

/// Every token, by name.
pub(super) fn list(tx: Tx<'_, '_>, now_ms: i64) -> StoreResult<Vec<OperatorTokenInfo>> {
    tx.query_map(
        "list operator tokens",
        &format!("{SELECT_INFO} ORDER BY name"),
        &[],
        |r| info_row(r, now_ms),
    )?
    .into_iter()
    .collect()
}

/// Revokes (deletes) a token: `UnknownOperatorToken`, `LastAdminToken`.
pub(super) fn revoke(tx: Tx<'_, '_>, name: &str, now_ms: i64) -> StoreResult<OperatorTokenInfo> {
    lock(tx)?;
    let info = read(tx, name, now_ms)?.ok_or_else(|| unknown(name))?;
    if info.role == Role::Admin && !info.expired && live_admins(tx, now_ms)? <= 1 {
        return Err(StoreError::LastAdminToken {
            name: name.to_owned(),
        });
    }
    tx.execute(
        "revoke operator token",
        "DELETE FROM operator_tokens WHERE name = ?1",
        &[&name],
    )?;
    tx.event(
        now_ms,
        None,
        "operator_token_revoked",
        &serde_json::json!({ "name": name, "role": info.role.as_str() }),
    )?;
    Ok(info)
}

/// Gives a token a new secret (its name, role and expiry stay): `UnknownOperatorToken`.
pub(super) fn rotate(
    tx: Tx<'_, '_>,
    name: &str,
    new_hash: &SecretHash,
    now_ms: i64,
) -> StoreResult<OperatorTokenInfo> {
    lock(tx)?;
    let changed = tx.execute(
        "rotate operator token",
        "UPDATE operator_tokens SET token_hash = ?2, rotated_ms = ?3 WHERE name = ?1",
        &[&name, &new_hash.0.as_slice(), &now_ms],
    )?;
    if changed == 0 {
        return Err(unknown(name));
    }
    let info = read(tx, name, now_ms)?.ok_or_else(|| unknown(name))?;
    tx.event(
        now_ms,
        None,
        "operator_token_rotated",
        &serde_json::json!({ "name": name, "role": info.role.as_str() }),
    )?;
    Ok(info)
}

/// Stores the first admin token, `name`, made by `bosun-hubd init`.
pub(super) fn insert_first(
    tx: Tx<'_, '_>,
    name: &str,
    hash: &SecretHash,
    now_ms: i64,
) -> StoreResult<()> {
    tx.execute(
        "init admin",
        "INSERT INTO operator_tokens (name, role, token_hash, created_ms) VALUES (?1, ?2, ?3, ?4)",
        &[&name, &Role::Admin.as_str(), &hash.0.as_slice(), &now_ms],
    )?;
    Ok(())
}

/// Admin tokens that work at `now_ms`.
fn live_admins(tx: Tx<'_, '_>, now_ms: i64) -> StoreResult<i64> {
    tx.query_row(
        "count admin tokens",
        "SELECT COUNT(*) FROM operator_tokens
         WHERE role = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)",
        &[&Role::Admin.as_str(), &now_ms],
        |r| r.get(0),
    )
}

fn unknown(name: &str) -> StoreError {
    StoreError::UnknownOperatorToken {
        name: name.to_owned(),
    }
}

fn read(tx: Tx<'_, '_>, name: &str, now_ms: i64) -> StoreResult<Option<OperatorTokenInfo>> {
    tx.query_opt(
        "read operator token",
        &format!("{SELECT_INFO} WHERE name = ?1"),
        &[&name],
        |r| info_row(r, now_ms),
    )?
    .transpose()
}

const SELECT_INFO: &str = "SELECT name, role, created_ms, created_by, expires_ms, rotated_ms,
        last_used_ms FROM operator_tokens";

/// A token's row; the outer result is the backend's, the inner one the decoding's.
fn info_row(r: &Row<'_, '_>, now_ms: i64) -> rusqlite::Result<StoreResult<OperatorTokenInfo>> {
    let name: String = r.get(0)?;
    let text: String = r.get(1)?;
    let created_ms: i64 = r.get(2)?;
    let created_by: Option<String> = r.get(3)?;
    let expires_ms: Option<i64> = r.get(4)?;
    let rotated_ms: Option<i64> = r.get(5)?;
    let last_used_ms: Option<i64> = r.get(6)?;
    Ok((|| {
        Ok(OperatorTokenInfo {
            name,
            role: role(&text)?,
            created_at: ts(created_ms)?,
            created_by,
            expires_at: ts_opt(expires_ms)?,
            expired: expires_ms.is_some_and(|expires| expires <= now_ms),
            rotated_at: ts_opt(rotated_ms)?,
            last_used_at: ts_opt(last_used_ms)?,
        })
    })())
}
