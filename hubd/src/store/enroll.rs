//! Enrollment tokens and enrollment: a fresh host, or (restore mode) a new box taking over
//! a revoked host's identity ([`crate::store::Store::enroll`](crate::store::HostStore::enroll) says what is reset and what is
//! kept), and the reseal mark that replacement leaves on sealed storage credentials.

use bosun_proto::admin::{EnrollTokenInfo, EnrollTokenState, HostStatus};
use bosun_proto::desired::DesiredState;
use bosun_proto::enroll::ReplacedHost;
use rusqlite::params;
use uuid::Uuid;

use super::codec::parse;
use super::codec::{host_status, ts, ts_opt, uuid};
use super::tx::Tx;
use super::{Enrolled, Enrollment, NewEnrollToken, StoreError, StoreResult};

/// Stores a new token; a restore-mode token only for a host that exists and is revoked.
pub(super) fn create_token(tx: Tx<'_, '_>, token: &NewEnrollToken) -> StoreResult<()> {
    if let Some(host_id) = token.restore_host {
        let status = tx.require_host(host_id)?;
        if status != HostStatus::Revoked {
            return Err(StoreError::HostNotRevoked { host_id, status });
        }
    }
    tx.execute(
        "create enrollment token",
        "INSERT INTO enroll_tokens (token_hash, created_ms, expires_ms, require_approval, note, restore_host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            token.hash.0.as_slice(),
            token.created_ms,
            token.expires_ms,
            token.require_approval,
            token.note,
            token.restore_host.map(|h| h.to_string()),
        ],
    )?;
    tx.event(
        token.created_ms,
        token.restore_host,
        "enroll_token_created",
        &serde_json::json!({
            "expires_ms": token.expires_ms,
            "require_approval": token.require_approval,
            "restore_host": token.restore_host,
        }),
    )
}

/// Most tokens one listing shows (newest first).
pub const MAX_LISTED_TOKENS: u32 = 500;

/// A token's public id: 16 hex digits of its hash. It names the token in lists and in a
/// revocation; it does not let anyone enroll (the hash does not give back the token).
pub fn token_id(hash: &[u8]) -> String {
    hex::encode(&hash[..hash.len().min(8)])
}

/// The tokens the hub still keeps (retention prunes used and expired ones), newest first,
/// at most `limit` and [`MAX_LISTED_TOKENS`].
pub(super) fn list_tokens(
    tx: Tx<'_, '_>,
    now_ms: i64,
    limit: u32,
) -> StoreResult<Vec<EnrollTokenInfo>> {
    type Raw = (
        Vec<u8>,
        i64,
        i64,
        bool,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<String>,
        Option<i64>,
    );
    let rows: Vec<Raw> = tx.query_map(
        "list enrollment tokens",
        "SELECT token_hash, created_ms, expires_ms, require_approval, note, restore_host,
                used_ms, used_by, revoked_ms
         FROM enroll_tokens ORDER BY created_ms DESC LIMIT ?1",
        params![limit.min(MAX_LISTED_TOKENS)],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
            ))
        },
    )?;
    rows.into_iter()
        .map(
            |(hash, created, expires, approval, note, restore, used, used_by, revoked)| {
                let state = match (used, revoked) {
                    (Some(_), _) => EnrollTokenState::Used,
                    (None, Some(_)) => EnrollTokenState::Revoked,
                    (None, None) if now_ms >= expires => EnrollTokenState::Expired,
                    (None, None) => EnrollTokenState::Unused,
                };
                Ok(EnrollTokenInfo {
                    token_id: token_id(&hash),
                    state,
                    created_at: ts(created)?,
                    expires_at: ts(expires)?,
                    require_approval: approval,
                    note,
                    restore_host: restore.as_deref().map(uuid).transpose()?,
                    used_at: ts_opt(used)?,
                    used_by: used_by.as_deref().map(uuid).transpose()?,
                    revoked_at: ts_opt(revoked)?,
                })
            },
        )
        .collect()
}

/// Revokes the unused token `id` names: a box can no longer enroll with it. Revoking a
/// revoked or expired token marks it revoked and succeeds; a used one is refused
/// (`TokenConsumed`: revoke the host it enrolled instead). Gives the token's state after.
pub(super) fn revoke_token(tx: Tx<'_, '_>, id: &str, now_ms: i64) -> StoreResult<EnrollTokenState> {
    let unknown = || StoreError::UnknownToken {
        token_id: id.chars().take(32).collect(),
    };
    if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(unknown());
    }
    let id = id.to_ascii_lowercase();
    // The tokens a box could still use, and those already revoked: few, whatever the table
    // holds (retention prunes the rest), so they are matched here rather than by an index.
    let rows: Vec<(Vec<u8>, Option<i64>, Option<i64>)> = tx.query_map(
        "revoke enrollment token",
        "SELECT token_hash, used_ms, revoked_ms FROM enroll_tokens",
        params![],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let (hash, used, revoked) = rows
        .into_iter()
        .find(|(hash, _, _)| token_id(hash) == id)
        .ok_or_else(unknown)?;
    if used.is_some() {
        return Err(StoreError::TokenConsumed { token_id: id });
    }
    if revoked.is_some() {
        return Ok(EnrollTokenState::Revoked);
    }
    tx.execute(
        "revoke enrollment token",
        "UPDATE enroll_tokens SET revoked_ms = ?1, expires_ms = CASE WHEN expires_ms > ?1 THEN ?1 ELSE expires_ms END
         WHERE token_hash = ?2 AND used_ms IS NULL",
        params![now_ms, hash.as_slice()],
    )?;
    tx.event(
        now_ms,
        None,
        "enroll_token_revoked",
        &serde_json::json!({ "token_id": id }),
    )?;
    Ok(EnrollTokenState::Revoked)
}

/// Consumes the token and enrolls: a new host, or the token's revoked host.
pub(super) fn enroll(tx: Tx<'_, '_>, e: &Enrollment) -> StoreResult<Enrolled> {
    type Row = (i64, bool, Option<i64>, Option<String>, Option<i64>);
    let row: Option<Row> = tx.query_opt(
        "enroll",
        tx.dialect().pick(
            "SELECT expires_ms, require_approval, used_ms, restore_host, revoked_ms
             FROM enroll_tokens WHERE token_hash = ?1",
            "SELECT expires_ms, require_approval, used_ms, restore_host, revoked_ms
             FROM enroll_tokens WHERE token_hash = ?1 FOR UPDATE",
        ),
        params![e.token_hash.0.as_slice()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    let (expires_ms, require_approval, used_ms, restore_host, revoked_ms) =
        row.ok_or(StoreError::TokenUnknown)?;
    if used_ms.is_some() {
        return Err(StoreError::TokenUsed);
    }
    if revoked_ms.is_some() {
        return Err(StoreError::TokenRevoked);
    }
    if e.now_ms >= expires_ms {
        return Err(StoreError::TokenExpired);
    }
    let status = if require_approval {
        HostStatus::PendingApproval
    } else {
        HostStatus::Active
    };
    let restore_host = restore_host.as_deref().map(uuid).transpose()?;
    // Checked (and, for a replacement, refused) before the token is consumed: a refused
    // enrollment leaves the token as it was.
    let enrolled = match restore_host {
        None => {
            insert_host(tx, e, status)?;
            Enrolled {
                host_id: e.host_id,
                status,
                replaced: None,
            }
        }
        Some(host_id) => replace_host(tx, host_id, e, status)?,
    };
    tx.execute(
        "enroll",
        "UPDATE enroll_tokens SET used_ms = ?1, used_by = ?2 WHERE token_hash = ?3",
        params![
            e.now_ms,
            enrolled.host_id.to_string(),
            e.token_hash.0.as_slice()
        ],
    )?;
    Ok(enrolled)
}

fn insert_host(tx: Tx<'_, '_>, e: &Enrollment, status: HostStatus) -> StoreResult<()> {
    tx.execute(
        "enroll",
        "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s,
                            agent_version, pve_version, key_issued_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?5)",
        params![
            e.host_id.to_string(),
            e.hostname,
            e.key_hash.0.as_slice(),
            status.as_str(),
            e.now_ms,
            e.poll_interval_s,
            e.agent_version,
            e.pve_version
        ],
    )?;
    tx.event(
        e.now_ms,
        Some(e.host_id),
        "enrolled",
        &serde_json::json!({ "hostname": e.hostname, "status": status.as_str(), "agent_version": e.agent_version }),
    )
}

/// Hands the revoked host `host_id` to the enrolling box (see [`crate::store::Store::enroll`](crate::store::HostStore::enroll)).
fn replace_host(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    e: &Enrollment,
    status: HostStatus,
) -> StoreResult<Enrolled> {
    let id = host_id.to_string();
    let (old_hostname, current, enrolled_ms): (String, String, i64) = tx
        .query_opt(
            "replace host",
            tx.dialect().pick(
                "SELECT hostname, status, enrolled_ms FROM hosts WHERE host_id = ?1",
                "SELECT hostname, status, enrolled_ms FROM hosts WHERE host_id = ?1 FOR UPDATE",
            ),
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        .ok_or(StoreError::UnknownHost { host_id })?;
    let current = host_status(&current)?;
    if current != HostStatus::Revoked {
        return Err(StoreError::HostNotRevoked {
            host_id,
            status: current,
        });
    }
    let reseal = holds_sealed_credentials(tx, &id)?;
    tx.execute(
        "replace host",
        "UPDATE hosts SET hostname = ?1, key_hash = ?2, status = ?3, poll_interval_s = ?4,
             agent_version = ?5, pve_version = ?6, controller_version = NULL,
             last_seen_ms = NULL, overdue_since_ms = NULL, alert_state = 'none',
             known_generation = 0, applied_generation = 0,
             report_seq = NULL, prev_seq = NULL, live = NULL, prev_live = NULL, prev_base = 0,
             judge_due_ms = NULL,
             audit_seq = NULL, full_report_wanted = 0, replaced_ms = ?7,
             next_key_hash = NULL, key_issued_ms = ?7, key_rotate_ms = NULL,
             reseal_required_ms = CASE WHEN ?8 THEN ?7 ELSE reseal_required_ms END
         WHERE host_id = ?9",
        params![
            e.hostname,
            e.key_hash.0.as_slice(),
            status.as_str(),
            e.poll_interval_s,
            e.agent_version,
            e.pve_version,
            e.now_ms,
            reseal,
            id
        ],
    )?;
    tx.execute(
        "replace host",
        "DELETE FROM host_reports WHERE host_id = ?1",
        params![id],
    )?;
    // The new box numbers its audit log from 1 again: the lost box's entries are archived so
    // the new ones are neither taken for duplicates nor acknowledged before they arrive.
    // A row counts every entry it stands for (decision 0106).
    let archived: i64 = tx.query_row(
        "archive audit entries",
        "SELECT CAST(COALESCE(SUM(repeats), 0) AS BIGINT) FROM audit WHERE host_id = ?1",
        params![id],
        |r| r.get(0),
    )?;
    tx.execute(
        "archive audit entries",
        "INSERT INTO replaced_audit
             (host_id, replaced_ms, seq, at_ms, action, detail, repeats, last_seq, last_at_ms)
         SELECT host_id, ?1, seq, at_ms, action, detail, repeats, last_seq, last_at_ms
         FROM audit WHERE host_id = ?2",
        params![e.now_ms, id],
    )?;
    tx.execute(
        "archive audit entries",
        "DELETE FROM audit WHERE host_id = ?1",
        params![id],
    )?;
    let unfinished_jobs: Vec<String> = tx.query_map(
        "replace host",
        "SELECT job_id FROM jobs WHERE host_id = ?1 AND state = 'acked' ORDER BY seq",
        params![id],
        |r| r.get(0),
    )?;
    let queued_jobs: i64 = tx.query_row(
        "replace host",
        "SELECT COUNT(*) FROM jobs WHERE host_id = ?1 AND state = 'queued'",
        params![id],
        |r| r.get(0),
    )?;
    tx.event(
        e.now_ms,
        Some(host_id),
        "replaced",
        &serde_json::json!({
            "old_hostname": old_hostname,
            "new_hostname": e.hostname,
            "status": status.as_str(),
            "agent_version": e.agent_version,
            "reseal_required": reseal,
            "queued_jobs": queued_jobs,
            "unfinished_jobs": unfinished_jobs,
            "archived_audit_entries": archived,
        }),
    )?;
    Ok(Enrolled {
        host_id,
        status,
        replaced: Some(ReplacedHost {
            hostname: old_hostname,
            enrolled_at: ts(enrolled_ms)?,
        }),
    })
}

/// Whether the host's desired state holds a sealed secret (sealed to some box's recipient):
/// a storage target's credentials or the tunnel's.
fn holds_sealed_credentials(tx: Tx<'_, '_>, host: &str) -> StoreResult<bool> {
    let document: Option<String> = tx.query_opt(
        "read desired state",
        "SELECT document FROM desired WHERE host_id = ?1",
        params![host],
        |r| r.get(0),
    )?;
    let Some(document) = document else {
        return Ok(false);
    };
    let desired: DesiredState = parse("desired state")(&document)?;
    Ok(desired.storage.iter().any(|t| t.credentials.is_some())
        || desired.tunnel_credentials.is_some())
}

/// After a desired state was accepted as `generation`: clears the host's reseal mark when
/// the new box has reported its storage recipient (so the operator could seal to it).
pub(super) fn clear_reseal(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    generation: i64,
    now_ms: i64,
) -> StoreResult<()> {
    let id = host_id.to_string();
    let row: Option<(Option<i64>, Option<String>)> = tx.query_opt(
        "clear reseal mark",
        "SELECT h.reseal_required_ms, r.report
         FROM hosts h LEFT JOIN host_reports r ON r.host_id = h.host_id WHERE h.host_id = ?1",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((Some(since_ms), Some(report))) = row else {
        return Ok(());
    };
    // Read leniently: a report the hub stored is one it parsed before.
    let recipient = serde_json::from_str::<serde_json::Value>(&report)
        .ok()
        .and_then(|r| r.get("storage_recipient")?.as_str().map(str::to_owned));
    let Some(recipient) = recipient else {
        return Ok(());
    };
    tx.execute(
        "clear reseal mark",
        "UPDATE hosts SET reseal_required_ms = NULL WHERE host_id = ?1",
        params![id],
    )?;
    tx.event(
        now_ms,
        Some(host_id),
        "resealed",
        &serde_json::json!({
            "generation": generation,
            "storage_recipient": recipient,
            "required_since": ts(since_ms)?,
        }),
    )
}
