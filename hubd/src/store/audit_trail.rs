//! Reading the audit trail the agents report (`GET /v1/admin/audit`, `bosunctl audit`, the
//! dashboard's host page): newest first, by host, guest and time, a page at a time. One query
//! serves both stores; they differ only in how a guest id is read from the JSON detail
//! (`Dialect`) and in their placeholders.

use bosun_proto::admin::AuditRecord;
use rusqlite::ToSql;
use uuid::Uuid;

use super::{StoreError, StoreResult};

/// What to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this host's entries.
    pub host_id: Option<Uuid>,
    /// Only entries about this guest (needs `host_id`: the guest is read from each entry's
    /// detail, and one host's trail is bounded by its cap).
    pub guest_id: Option<Uuid>,
    /// Only entries at or after this time, Unix ms.
    pub since_ms: Option<i64>,
    /// Only entries older than this one (the previous page's last).
    pub before: Option<AuditCursor>,
    /// At most this many.
    pub limit: u32,
}

/// Where a page ends: the last entry's time, host and number. Entries are ordered by
/// (time, host, number), newest first, so a page resumes exactly after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCursor {
    /// The entry's time, Unix ms.
    pub at_ms: i64,
    /// Its host.
    pub host_id: Uuid,
    /// Its number on the host.
    pub seq: i64,
}

impl AuditCursor {
    /// The cursor of an entry.
    pub fn after(record: &AuditRecord) -> Self {
        Self {
            at_ms: record.at.as_millisecond(),
            host_id: record.host_id,
            seq: i64::try_from(record.seq).unwrap_or(i64::MAX),
        }
    }

    /// As text: `AT_MS.SEQ.HOST_ID`.
    pub fn encode(&self) -> String {
        format!("{}.{}.{}", self.at_ms, self.seq, self.host_id)
    }

    /// Reads [`Self::encode`]'s text; `None` when it is not one. A number past what 64 bits
    /// hold (up to 19 digits, as the API's pattern allows) stands for the largest (or, for a
    /// negative time, the smallest) one: no entry lies beyond it, so the page is the same.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '.');
        let at_ms = cursor_number(parts.next()?, true)?;
        let seq = cursor_number(parts.next()?, false)?;
        let host_id = Uuid::parse_str(parts.next()?).ok()?;
        Some(Self {
            at_ms,
            host_id,
            seq,
        })
    }
}

/// One number of a cursor: 1 to 19 digits (a `-` before them where `signed`), held to the
/// range of an `i64`.
fn cursor_number(part: &str, signed: bool) -> Option<i64> {
    let magnitude = match part.strip_prefix('-') {
        Some(rest) if signed => rest,
        _ => part,
    };
    if magnitude.is_empty()
        || magnitude.len() > 19
        || !magnitude.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let n: i128 = part.parse().ok()?;
    Some(i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX }))
}

/// The SQL each store speaks where they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The guest id in an entry's JSON detail, as text.
    fn guest_of_detail(self) -> &'static str {
        match self {
            Self::Sqlite => "json_extract(a.detail, '$.guest_id')",
            Self::Postgres => "(a.detail::jsonb ->> 'guest_id')",
        }
    }

    fn placeholder(self, n: usize) -> String {
        match self {
            Self::Sqlite => format!("?{n}"),
            Self::Postgres => format!("${n}"),
        }
    }
}

/// The statement and its parameters for `query`.
pub(super) fn statement(dialect: Dialect, query: &AuditQuery) -> (String, Vec<Box<dyn ToSql>>) {
    let mut params: Vec<Box<dyn ToSql>> = Vec::new();
    let mut clauses: Vec<String> = Vec::new();
    let next = |value: Box<dyn ToSql>, params: &mut Vec<Box<dyn ToSql>>| {
        params.push(value);
        dialect.placeholder(params.len())
    };
    if let Some(host) = query.host_id {
        let p = next(Box::new(host.to_string()), &mut params);
        clauses.push(format!("a.host_id = {p}"));
    }
    if let Some(guest) = query.guest_id {
        let p = next(Box::new(guest.to_string()), &mut params);
        clauses.push(format!("{} = {p}", dialect.guest_of_detail()));
    }
    if let Some(since) = query.since_ms {
        let p = next(Box::new(since), &mut params);
        clauses.push(format!("a.at_ms >= {p}"));
    }
    if let Some(before) = &query.before {
        let at = next(Box::new(before.at_ms), &mut params);
        let host = next(Box::new(before.host_id.to_string()), &mut params);
        let seq = next(Box::new(before.seq), &mut params);
        clauses.push(format!(
            "(a.at_ms, a.host_id, a.seq) < ({at}, {host}, {seq})"
        ));
    }
    let limit = next(Box::new(i64::from(query.limit)), &mut params);
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT a.host_id, h.hostname, a.seq, a.at_ms, a.action, a.detail, a.repeats, a.last_at_ms
         FROM audit a LEFT JOIN hosts h ON h.host_id = a.host_id
         {filter}
         ORDER BY a.at_ms DESC, a.host_id DESC, a.seq DESC LIMIT {limit}"
    );
    (sql, params)
}

/// A row of [`statement`]: host, hostname, seq, at_ms, action, detail, repeats, last_at_ms.
pub(super) type AuditRow = (
    String,
    Option<String>,
    i64,
    i64,
    String,
    String,
    i64,
    Option<i64>,
);

/// A row as the API answers it.
pub(super) fn record(row: AuditRow) -> StoreResult<AuditRecord> {
    let (host_id, hostname, seq, at_ms, action, detail, repeats, last_at_ms) = row;
    Ok(AuditRecord {
        host_id: super::codec::uuid(&host_id)?,
        hostname,
        seq: super::codec::unsigned(seq),
        at: super::codec::ts(at_ms)?,
        action,
        detail: serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
            what: "audit detail",
            reason: e.to_string(),
        })?,
        repeats: super::codec::unsigned(repeats).max(1),
        last_at: last_at_ms.map(super::codec::ts).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Every cursor the API's `before` pattern allows decodes, and what it refuses does not.
    #[test]
    fn a_cursor_decodes_whatever_the_documented_pattern_allows() {
        let host = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        let cursor = AuditCursor::decode(&format!("1700000000000.42.{host}")).unwrap();
        assert_eq!((cursor.at_ms, cursor.seq), (1_700_000_000_000, 42));
        assert_eq!(cursor.encode(), format!("1700000000000.42.{host}"));
        let huge = AuditCursor::decode(&format!("9999999999999999999.9999999999999999999.{host}"));
        let huge = huge.unwrap();
        assert_eq!((huge.at_ms, huge.seq), (i64::MAX, i64::MAX));
        let low = AuditCursor::decode(&format!("-9999999999999999999.0.{host}")).unwrap();
        assert_eq!(low.at_ms, i64::MIN);
        for bad in [
            format!("1.2.{}", "-".repeat(36)),
            format!("1.-2.{host}"),
            format!("1..{host}"),
            format!("12345678901234567890.1.{host}"),
            "1.2".to_owned(),
        ] {
            assert!(AuditCursor::decode(&bad).is_none(), "{bad}");
        }
    }
}
