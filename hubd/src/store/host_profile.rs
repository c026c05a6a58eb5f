//! What a host says it is and has, and the labels operators give it (decision 0077), written
//! once for both stores.
//!
//! A poll that carries the host's capabilities replaces the stored document and its words
//! (`host_capability_tags`, what `hosts list --capability` matches). Labels change only through
//! the admin API, as one change (set and remove together), bounded per host and recorded as a
//! `host_labeled` event naming the operator token. `matching` answers a fleet filter in one
//! statement: every label and every capability word asked for must be there.

use std::collections::BTreeMap;

use bosun_proto::capabilities::{HostCapabilities, LabelChange, MAX_LABELS};
use rusqlite::ToSql;
use uuid::Uuid;

use super::codec::{ts, uuid};
use super::tx::Tx;
use super::{StoreError, StoreResult};

/// Most labels, and most capability words, one fleet filter names (each).
pub const MAX_FILTER_TERMS: usize = 8;

/// A fleet filter: hosts carrying every label and every capability word named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    /// `key=value` labels, all required.
    pub labels: Vec<(String, String)>,
    /// Capability words ([`HostCapabilities::tags`]), all required.
    pub capabilities: Vec<String>,
}

impl HostFilter {
    /// Whether the filter names nothing (every host matches).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.capabilities.is_empty()
    }
}

/// Stores `capabilities` as the host's, with their words, replacing what was there.
pub(super) fn write_capabilities(
    tx: Tx<'_, '_>,
    host: &str,
    capabilities: &HostCapabilities,
    now_ms: i64,
) -> StoreResult<()> {
    let document = serde_json::to_string(capabilities).map_err(|e| StoreError::Corrupt {
        what: "host capabilities",
        reason: e.to_string(),
    })?;
    tx.execute(
        "store capabilities",
        "INSERT INTO host_capabilities (host_id, document, updated_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (host_id) DO UPDATE SET document = excluded.document,
                                             updated_ms = excluded.updated_ms",
        rusqlite::params![host, document, now_ms],
    )?;
    tx.execute(
        "store capabilities",
        "DELETE FROM host_capability_tags WHERE host_id = ?1",
        rusqlite::params![host],
    )?;
    for tag in capabilities.tags() {
        tx.execute(
            "store capabilities",
            "INSERT INTO host_capability_tags (host_id, tag) VALUES (?1, ?2)",
            rusqlite::params![host, tag],
        )?;
    }
    Ok(())
}

/// The host's stored capabilities and when they were stored; a document that no longer parses
/// reads as none (the host's next full report replaces it).
pub(super) fn capabilities(
    tx: Tx<'_, '_>,
    host: &str,
) -> StoreResult<Option<(HostCapabilities, jiff::Timestamp)>> {
    let row: Option<(String, i64)> = tx.query_opt(
        "read capabilities",
        "SELECT document, updated_ms FROM host_capabilities WHERE host_id = ?1",
        rusqlite::params![host],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((document, updated_ms)) = row else {
        return Ok(None);
    };
    match serde_json::from_str::<HostCapabilities>(&document) {
        Ok(caps) => Ok(Some((caps, ts(updated_ms)?))),
        Err(e) => {
            tracing::warn!(host_id = host, error = %e, "stored capabilities unreadable; shown as none");
            Ok(None)
        }
    }
}

/// The host's labels, by key.
pub(super) fn labels(tx: Tx<'_, '_>, host: &str) -> StoreResult<BTreeMap<String, String>> {
    Ok(tx
        .query_map(
            "read labels",
            "SELECT key, value FROM host_labels WHERE host_id = ?1 ORDER BY key",
            rusqlite::params![host],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .into_iter()
        .collect())
}

/// Applies a validated `change` to the host's labels: [`StoreError::UnknownHost`],
/// [`StoreError::TooManyLabels`] when the host would carry more than
/// [`MAX_LABELS`] (nothing changes then). Returns the labels after the change and records a
/// `host_labeled` event (naming the operator token) when anything changed.
pub(super) fn change_labels(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    change: &LabelChange,
    now_ms: i64,
) -> StoreResult<BTreeMap<String, String>> {
    tx.require_host(host_id)?;
    let host = host_id.to_string();
    let before = labels(tx, &host)?;
    let mut after = before.clone();
    for key in &change.remove {
        after.remove(key);
    }
    for (key, value) in &change.set {
        after.insert(key.clone(), value.clone());
    }
    if after.len() > MAX_LABELS {
        return Err(StoreError::TooManyLabels {
            host_id,
            count: after.len(),
            limit: MAX_LABELS,
        });
    }
    if after == before {
        return Ok(after);
    }
    for key in before.keys().filter(|k| !after.contains_key(*k)) {
        tx.execute(
            "change labels",
            "DELETE FROM host_labels WHERE host_id = ?1 AND key = ?2",
            rusqlite::params![host, key],
        )?;
    }
    for (key, value) in after.iter().filter(|(k, v)| before.get(*k) != Some(*v)) {
        tx.execute(
            "change labels",
            "INSERT INTO host_labels (host_id, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (host_id, key) DO UPDATE SET value = excluded.value",
            rusqlite::params![host, key, value],
        )?;
    }
    let removed: Vec<&String> = before.keys().filter(|k| !after.contains_key(*k)).collect();
    let set: BTreeMap<&String, &String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .collect();
    tx.event(
        now_ms,
        Some(host_id),
        "host_labeled",
        &serde_json::json!({ "set": set, "removed": removed }),
    )?;
    Ok(after)
}

/// The hosts `filter` matches, in one statement.
pub(super) fn matching(tx: Tx<'_, '_>, filter: &HostFilter) -> StoreResult<Vec<Uuid>> {
    let mut sql = String::from("SELECT h.host_id FROM hosts h WHERE 1 = 1");
    let mut params: Vec<&dyn ToSql> = Vec::new();
    for (key, value) in &filter.labels {
        params.push(key);
        params.push(value);
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM host_labels l WHERE l.host_id = h.host_id
                          AND l.key = ?{} AND l.value = ?{})",
            params.len() - 1,
            params.len()
        ));
    }
    for tag in &filter.capabilities {
        params.push(tag);
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM host_capability_tags t WHERE t.host_id = h.host_id
                          AND t.tag = ?{})",
            params.len()
        ));
    }
    tx.query_map("filter hosts", &sql, &params, |r| r.get::<String>(0))?
        .iter()
        .map(|id| uuid(id))
        .collect()
}
