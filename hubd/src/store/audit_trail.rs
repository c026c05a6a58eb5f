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

    /// Reads [`Self::encode`]'s text; `None` when it is not one.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '.');
        let at_ms = parts.next()?.parse().ok()?;
        let seq: i64 = parts.next()?.parse().ok()?;
        let host_id = Uuid::parse_str(parts.next()?).ok()?;
        (seq >= 0).then_some(Self {
            at_ms,
            host_id,
            seq,
        })
    }
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
        "SELECT a.host_id, h.hostname, a.seq, a.at_ms, a.action, a.detail
         FROM audit a LEFT JOIN hosts h ON h.host_id = a.host_id
         {filter}
         ORDER BY a.at_ms DESC, a.host_id DESC, a.seq DESC LIMIT {limit}"
    );
    (sql, params)
}

/// A row of [`statement`]: host, hostname, seq, at_ms, action, detail.
pub(super) type AuditRow = (String, Option<String>, i64, i64, String, String);

/// A row as the API answers it.
pub(super) fn record(row: AuditRow) -> StoreResult<AuditRecord> {
    let (host_id, hostname, seq, at_ms, action, detail) = row;
    Ok(AuditRecord {
        host_id: super::sqlite::uuid(&host_id)?,
        hostname,
        seq: super::sqlite::unsigned(seq),
        at: super::sqlite::ts(at_ms)?,
        action,
        detail: serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
            what: "audit detail",
            reason: e.to_string(),
        })?,
    })
}
