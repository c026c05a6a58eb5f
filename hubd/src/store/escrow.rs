//! Escrow blobs: stored as the agent sent them (the hub cannot open them), with the
//! fingerprint of the key each says it wraps, which the host views and the `escrow_missing`
//! alert compare with the host's reported key. A blob the stored report cannot verify asks the
//! host for a full report (the report's key fingerprint travels only in full reports).

use bosun_proto::admin::EscrowState;
use uuid::Uuid;

use super::StoreResult;
use super::codec::ts;
use super::tx::Tx;
use crate::report_alerts::escrow::verified;

/// Stores the blob (last write wins); returns the host's name, for judging its report again
/// (`watch::judge`).
pub(super) fn put(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    blob: &str,
    key_fingerprint: &str,
    now_ms: i64,
) -> StoreResult<String> {
    tx.require_host(host_id)?;
    let host = host_id.to_string();
    tx.execute(
        "put escrow",
        "INSERT INTO escrow (host_id, blob, updated_ms, key_fingerprint) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (host_id) DO UPDATE SET blob = excluded.blob, updated_ms = excluded.updated_ms,
             key_fingerprint = excluded.key_fingerprint",
        &[&host, &blob, &now_ms, &key_fingerprint],
    )?;
    let (hostname, reported): (String, Option<String>) = tx.query_row(
        "put escrow",
        tx.dialect().pick(
            "SELECT h.hostname,
                    CASE WHEN json_valid(r.report) THEN json_extract(r.report, '$.pbs_key_fingerprint') END
             FROM hosts h LEFT JOIN host_reports r ON r.host_id = h.host_id WHERE h.host_id = ?1",
            "SELECT h.hostname, (r.report::json ->> 'pbs_key_fingerprint')
             FROM hosts h LEFT JOIN host_reports r ON r.host_id = h.host_id WHERE h.host_id = ?1",
        ),
        &[&host],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let verified = verified(Some(key_fingerprint), reported.as_deref());
    if !verified {
        // The agent uploads a blob only after checking it against its own K, so the stored
        // report is behind (K is newer than the host's last full report, the only place its
        // fingerprint travels): ask the host for a full report at its next poll.
        tx.execute(
            "put escrow",
            "UPDATE hosts SET full_report_wanted = 1 WHERE host_id = ?1",
            &[&host],
        )?;
    }
    tx.event(
        now_ms,
        Some(host_id),
        "escrow_stored",
        &serde_json::json!({
            "bytes": blob.len(),
            "key_fingerprint": key_fingerprint,
            "verified": verified,
        }),
    )?;
    Ok(hostname)
}

/// The stored blob, exactly as the agent sent it.
pub(super) fn blob(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<Option<String>> {
    tx.require_host(host_id)?;
    tx.query_opt(
        "read escrow",
        "SELECT blob FROM escrow WHERE host_id = ?1",
        &[&host_id.to_string()],
        |r| r.get(0),
    )
}

/// The fingerprint the host's stored blob says it wraps, if a blob is stored.
pub(super) fn stored_fingerprint(tx: Tx<'_, '_>, host: &str) -> StoreResult<Option<String>> {
    tx.query_opt(
        "read escrow fingerprint",
        "SELECT key_fingerprint FROM escrow WHERE host_id = ?1",
        &[&host],
        |r| r.get::<Option<String>>(0),
    )
    .map(Option::flatten)
}
/// The escrow state shown in the host views, from the stored blob's fingerprint and time and
/// the fingerprint of the host's stored report.
pub(super) fn state(
    stored: Option<(Option<String>, i64)>,
    reported: Option<&str>,
) -> StoreResult<EscrowState> {
    let Some((key_fingerprint, updated_ms)) = stored else {
        return Ok(EscrowState::None);
    };
    let updated_at = ts(updated_ms)?;
    // A blob stored before fingerprints were kept, and not readable as JSON, shows as stored.
    let key_fingerprint = key_fingerprint.unwrap_or_default();
    Ok(if verified(Some(&key_fingerprint), reported) {
        EscrowState::Verified {
            key_fingerprint,
            updated_at,
        }
    } else {
        EscrowState::Stored {
            key_fingerprint,
            updated_at,
        }
    })
}
