//! The append-only, hash-chained audit log.
//!
//! Each row carries `hash = SHA-256(prev_hash ‖ canonical(row))`, where
//! `prev_hash` is the previous row's hash (32 zero bytes for the first row) and
//! `canonical(row)` is a length-prefixed encoding of the row's sequence number,
//! time and every field, so no two different rows encode alike. Triggers refuse
//! `UPDATE`, and `DELETE` of anything but the pruned prefix ([`super::audit_retention`]:
//! oldest first, only rows the hub acknowledged); the chain of the remaining rows starts
//! at the recorded anchor (the last pruned row's seq and hash). Someone who edits the
//! file directly (dropping the triggers first) breaks the chain, and
//! [`Store::verify_audit_chain`] names the first row that no longer matches. Cutting rows off the *end* leaves a valid
//! shorter chain: the hub keeps the head it last acknowledged, which is what
//! catches that.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};
use sha2::{Digest, Sha256};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::OpId;
use super::store::Store;
use super::store::{from_ms, opt_u32, to_ms};

/// The hash that precedes the first row.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// Something worth writing to the customer-visible audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// A dotted event name (`job.refused`, `gate.denied`, `guest.destroyed`, …).
    pub event: String,
    /// The operation it belongs to.
    pub op_id: Option<OpId>,
    /// The signed job it concerns.
    pub job_id: Option<String>,
    /// The guest it concerns.
    pub guest_id: Option<String>,
    /// The vmid it concerns.
    pub vmid: Option<u32>,
    /// The forwarded request/correlation id.
    pub request_id: Option<String>,
    /// Further facts as JSON; never a secret.
    pub detail: serde_json::Value,
}

impl AuditEvent {
    /// An event with no fields but its name.
    pub fn new(event: impl Into<String>) -> Self {
        Self {
            event: event.into(),
            op_id: None,
            job_id: None,
            guest_id: None,
            vmid: None,
            request_id: None,
            detail: serde_json::Value::Null,
        }
    }
}

/// One stored audit row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Its position in the chain, from 1.
    pub seq: u64,
    /// When it was written.
    pub at: Timestamp,
    /// The event as written.
    pub event: AuditEvent,
    /// The previous row's hash.
    pub prev_hash: [u8; 32],
    /// This row's hash.
    pub hash: [u8; 32],
}

/// The result of checking the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainVerdict {
    /// Every row matches.
    Intact {
        /// Rows written: the last sequence number (pruned rows included).
        rows: u64,
        /// The last row's hash (the genesis hash when empty).
        head: [u8; 32],
    },
    /// The first row that does not match.
    Broken {
        /// Its sequence number.
        seq: u64,
        /// What is wrong with it.
        reason: BrokenLink,
    },
}

/// Why a row breaks the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenLink {
    /// A row is missing before this one.
    Gap {
        /// The sequence number that should have come.
        expected: u64,
    },
    /// Its `prev_hash` is not the previous row's hash.
    PrevHashMismatch,
    /// Its content no longer hashes to its `hash`.
    ContentMismatch,
    /// A hash column does not hold 32 bytes.
    BadHashLength,
}

/// The fields as stored, in the order they are hashed.
struct RowContent<'a> {
    seq: u64,
    at_ms: i64,
    event: &'a str,
    op_id: Option<&'a str>,
    job_id: Option<&'a str>,
    guest_id: Option<&'a str>,
    vmid: Option<u32>,
    request_id: Option<&'a str>,
    detail: &'a str,
}

fn put_text(hasher: &mut Sha256, text: &str) {
    let len = u64::try_from(text.len()).unwrap_or(u64::MAX);
    hasher.update(len.to_be_bytes());
    hasher.update(text.as_bytes());
}

fn put_opt_text(hasher: &mut Sha256, text: Option<&str>) {
    match text {
        None => hasher.update([0]),
        Some(text) => {
            hasher.update([1]);
            put_text(hasher, text);
        }
    }
}

fn row_hash(prev_hash: &[u8; 32], row: &RowContent<'_>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"bosun.audit/v1");
    hasher.update(prev_hash);
    hasher.update(row.seq.to_be_bytes());
    hasher.update(row.at_ms.to_be_bytes());
    put_text(&mut hasher, row.event);
    put_opt_text(&mut hasher, row.op_id);
    put_opt_text(&mut hasher, row.job_id);
    put_opt_text(&mut hasher, row.guest_id);
    match row.vmid {
        None => hasher.update([0]),
        Some(vmid) => {
            hasher.update([1]);
            hasher.update(vmid.to_be_bytes());
        }
    }
    put_opt_text(&mut hasher, row.request_id);
    put_text(&mut hasher, row.detail);
    hasher.finalize().into()
}

/// Appends one row inside an open transaction; returns its sequence number.
pub(super) fn append(
    tx: &Transaction<'_>,
    now: Timestamp,
    event: &AuditEvent,
) -> Result<u64, JournalError> {
    let query = |source| JournalError::Query {
        operation: "append audit row",
        source,
    };
    let last: Option<(i64, Vec<u8>)> = tx
        .query_row(
            "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(query)?;
    let (prev_seq, prev_hash) = match last {
        None => anchor(tx)?,
        Some((seq, hash)) => {
            let hash: [u8; 32] = hash.try_into().map_err(|_| JournalError::Corrupt {
                table: "audit_log",
                column: "hash",
                value: format!("seq {seq}: not 32 bytes"),
            })?;
            let seq = u64::try_from(seq).map_err(|_| JournalError::Corrupt {
                table: "audit_log",
                column: "seq",
                value: seq.to_string(),
            })?;
            (seq, hash)
        }
    };
    let seq = prev_seq.saturating_add(1);
    let detail = serde_json::to_string(&event.detail).map_err(|source| JournalError::Encode {
        what: "audit detail",
        source,
    })?;
    let op_id = event.op_id.map(|id| id.to_string());
    let content = RowContent {
        seq,
        at_ms: to_ms(now),
        event: &event.event,
        op_id: op_id.as_deref(),
        job_id: event.job_id.as_deref(),
        guest_id: event.guest_id.as_deref(),
        vmid: event.vmid,
        request_id: event.request_id.as_deref(),
        detail: &detail,
    };
    let hash = row_hash(&prev_hash, &content);
    let seq_sql = i64::try_from(seq).map_err(|_| JournalError::Corrupt {
        table: "audit_log",
        column: "seq",
        value: seq.to_string(),
    })?;
    tx.execute(
        "INSERT INTO audit_log (seq, at_ms, event, op_id, job_id, guest_id, vmid, request_id,
                                detail, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            seq_sql,
            content.at_ms,
            content.event,
            content.op_id,
            content.job_id,
            content.guest_id,
            content.vmid,
            content.request_id,
            detail,
            prev_hash.as_slice(),
            hash.as_slice(),
        ],
    )
    .map_err(query)?;
    Ok(seq)
}

/// The last pruned row's sequence number and hash (`(0, GENESIS_HASH)` before any pruning):
/// where the chain of the remaining rows starts.
pub(super) fn anchor(conn: &rusqlite::Connection) -> Result<(u64, [u8; 32]), JournalError> {
    let (seq, hash): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT pruned_seq, pruned_hash FROM audit_retention WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(|source| JournalError::Query {
            operation: "read audit anchor",
            source,
        })?;
    let corrupt = |column: &'static str, value: String| JournalError::Corrupt {
        table: "audit_retention",
        column,
        value,
    };
    let seq = u64::try_from(seq).map_err(|_| corrupt("pruned_seq", seq.to_string()))?;
    let hash = <[u8; 32]>::try_from(hash.as_slice())
        .map_err(|_| corrupt("pruned_hash", hex::encode(&hash)))?;
    Ok((seq, hash))
}

/// A raw row read back for verification or listing.
struct RawRow {
    seq: i64,
    at_ms: i64,
    event: String,
    op_id: Option<String>,
    job_id: Option<String>,
    guest_id: Option<String>,
    vmid: Option<i64>,
    request_id: Option<String>,
    detail: String,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
}

const SELECT_ROWS: &str = "SELECT seq, at_ms, event, op_id, job_id, guest_id, vmid, request_id,
        detail, prev_hash, hash FROM audit_log";

fn raw_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        seq: row.get(0)?,
        at_ms: row.get(1)?,
        event: row.get(2)?,
        op_id: row.get(3)?,
        job_id: row.get(4)?,
        guest_id: row.get(5)?,
        vmid: row.get(6)?,
        request_id: row.get(7)?,
        detail: row.get(8)?,
        prev_hash: row.get(9)?,
        hash: row.get(10)?,
    })
}

impl Store {
    /// Appends an audit row on its own.
    pub fn append_audit(&mut self, event: &AuditEvent) -> Result<u64, JournalError> {
        let now = self.now();
        self.write("append audit row", |tx| append(tx, now, event))
    }

    /// Checks the whole chain from the first row and reports the first row
    /// that does not match.
    pub fn verify_audit_chain(&self) -> Result<ChainVerdict, JournalError> {
        let query = |source| JournalError::Query {
            operation: "verify audit chain",
            source,
        };
        let mut stmt = self
            .conn
            .prepare(&format!("{SELECT_ROWS} ORDER BY seq"))
            .map_err(query)?;
        let rows = stmt.query_map([], raw_row).map_err(query)?;
        // Pruned rows were acknowledged by the hub; the chain goes on from the last of them.
        let (pruned_seq, mut prev_hash) = anchor(&self.conn)?;
        let mut expected: u64 = pruned_seq.saturating_add(1);
        for row in rows {
            let row = row.map_err(query)?;
            let seq = u64::try_from(row.seq).unwrap_or(0);
            if seq != expected {
                return Ok(ChainVerdict::Broken {
                    seq,
                    reason: BrokenLink::Gap { expected },
                });
            }
            let (Ok(stored_prev), Ok(stored_hash)) = (
                <[u8; 32]>::try_from(row.prev_hash.as_slice()),
                <[u8; 32]>::try_from(row.hash.as_slice()),
            ) else {
                return Ok(ChainVerdict::Broken {
                    seq,
                    reason: BrokenLink::BadHashLength,
                });
            };
            if stored_prev != prev_hash {
                return Ok(ChainVerdict::Broken {
                    seq,
                    reason: BrokenLink::PrevHashMismatch,
                });
            }
            let Ok(vmid) = row.vmid.map(u32::try_from).transpose() else {
                return Ok(ChainVerdict::Broken {
                    seq,
                    reason: BrokenLink::ContentMismatch,
                });
            };
            let content = RowContent {
                seq,
                at_ms: row.at_ms,
                event: &row.event,
                op_id: row.op_id.as_deref(),
                job_id: row.job_id.as_deref(),
                guest_id: row.guest_id.as_deref(),
                vmid,
                request_id: row.request_id.as_deref(),
                detail: &row.detail,
            };
            if row_hash(&prev_hash, &content) != stored_hash {
                return Ok(ChainVerdict::Broken {
                    seq,
                    reason: BrokenLink::ContentMismatch,
                });
            }
            prev_hash = stored_hash;
            expected = expected.saturating_add(1);
        }
        Ok(ChainVerdict::Intact {
            rows: expected.saturating_sub(1),
            head: prev_hash,
        })
    }

    /// The last row's sequence number and hash (`(0, GENESIS_HASH)` when
    /// empty), without walking the chain: what a report sends so the hub can
    /// notice a chain that was cut short or rewritten.
    pub fn audit_head(&self) -> Result<(u64, [u8; 32]), JournalError> {
        let last: Option<(i64, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|source| JournalError::Query {
                operation: "read audit head",
                source,
            })?;
        let Some((seq, hash)) = last else {
            return anchor(&self.conn);
        };
        let corrupt = |column: &'static str, value: String| JournalError::Corrupt {
            table: "audit_log",
            column,
            value,
        };
        let seq = u64::try_from(seq).map_err(|_| corrupt("seq", seq.to_string()))?;
        let hash = <[u8; 32]>::try_from(hash.as_slice())
            .map_err(|_| corrupt("hash", hex::encode(&hash)))?;
        Ok((seq, hash))
    }

    /// The newest `limit` `guest.restored` rows (DR and host-loss restores), newest first:
    /// what the report names as a restored guest's last backup until a new one lands.
    pub fn restored_guests(&self, limit: u32) -> Result<Vec<AuditEntry>, JournalError> {
        self.audit_rows_where(
            "WHERE event = 'guest.restored' ORDER BY seq DESC LIMIT ?1",
            params![limit],
        )
    }

    /// Audit rows after `after_seq` (0 for all), oldest first, at most `limit`:
    /// the tail the hub has not acknowledged yet.
    pub fn audit_since(&self, after_seq: u64, limit: u32) -> Result<Vec<AuditEntry>, JournalError> {
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        self.audit_rows_where(
            "WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            params![after, limit],
        )
    }

    /// The audit rows `tail` (a `WHERE … ORDER BY … LIMIT …` over the row columns) selects.
    pub(super) fn audit_rows_where(
        &self,
        tail: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<AuditEntry>, JournalError> {
        let query = |source| JournalError::Query {
            operation: "read audit rows",
            source,
        };
        let mut stmt = self
            .conn
            .prepare_cached(&format!("{SELECT_ROWS} {tail}"))
            .map_err(query)?;
        let rows = stmt.query_map(params, raw_row).map_err(query)?;
        let mut entries = Vec::new();
        for row in rows {
            entries.push(entry_from_raw(row.map_err(query)?)?);
        }
        Ok(entries)
    }
}

fn entry_from_raw(row: RawRow) -> Result<AuditEntry, JournalError> {
    let corrupt = |column: &'static str, value: String| JournalError::Corrupt {
        table: "audit_log",
        column,
        value,
    };
    let seq = u64::try_from(row.seq).map_err(|_| corrupt("seq", row.seq.to_string()))?;
    let op_id = row
        .op_id
        .map(|id| id.parse::<OpId>().map_err(|_| corrupt("op_id", id)))
        .transpose()?;
    let detail = serde_json::from_str(&row.detail).map_err(|_| corrupt("detail", row.detail))?;
    let prev_hash = <[u8; 32]>::try_from(row.prev_hash.as_slice())
        .map_err(|_| corrupt("prev_hash", hex::encode(&row.prev_hash)))?;
    let hash = <[u8; 32]>::try_from(row.hash.as_slice())
        .map_err(|_| corrupt("hash", hex::encode(&row.hash)))?;
    Ok(AuditEntry {
        seq,
        at: from_ms(row.at_ms, "audit_log", "at_ms")?,
        event: AuditEvent {
            event: row.event,
            op_id,
            job_id: row.job_id,
            guest_id: row.guest_id,
            vmid: opt_u32(row.vmid, "audit_log", "vmid")?,
            request_id: row.request_id,
            detail,
        },
        prev_hash,
        hash,
    })
}

journal_calls! {
    /// See [`Store::append_audit`].
    fn append_audit(event: AuditEvent) -> u64 = |s| s.append_audit(&event);
    /// See [`Store::verify_audit_chain`].
    fn verify_audit_chain() -> ChainVerdict = |s| s.verify_audit_chain();
    /// See [`Store::audit_head`].
    fn audit_head() -> (u64, [u8; 32]) = |s| s.audit_head();
    /// See [`Store::audit_since`].
    fn audit_since(after_seq: u64, limit: u32) -> Vec<AuditEntry>
        = |s| s.audit_since(after_seq, limit);
    /// See [`Store::restored_guests`].
    fn restored_guests(limit: u32) -> Vec<AuditEntry> = |s| s.restored_guests(limit);
}

#[cfg(test)]
pub(super) mod tests_support {
    use super::{RowContent, row_hash};

    /// The hash a row with these fields (and no op, job, guest or request id) would carry.
    pub(crate) fn content_hash(
        prev_hash: &[u8; 32],
        seq: u64,
        at_ms: i64,
        event: &str,
        vmid: Option<u32>,
        detail: &str,
    ) -> [u8; 32] {
        row_hash(
            prev_hash,
            &RowContent {
                seq,
                at_ms,
                event,
                op_id: None,
                job_id: None,
                guest_id: None,
                vmid,
                request_id: None,
                detail,
            },
        )
    }
}
