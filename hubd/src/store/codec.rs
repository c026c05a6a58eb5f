//! Converters between the values the store's columns hold and the types it hands out,
//! shared by every statement module of both backends.

use bosun_proto::admin::{AlertKind, HostStatus};
use jiff::Timestamp;
use uuid::Uuid;

use super::error::{StoreError, StoreResult};
use crate::deadman::PlannedAlert;

/// Maps a rusqlite error to [`StoreError::Sqlite`] for operation `op`.
pub(super) fn sql(op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| StoreError::Sqlite { op, source }
}

/// Unix ms to a timestamp.
pub(super) fn ts(ms: i64) -> StoreResult<Timestamp> {
    Timestamp::from_millisecond(ms).map_err(|e| StoreError::Corrupt {
        what: "timestamp",
        reason: e.to_string(),
    })
}

/// Optional Unix ms to an optional timestamp.
pub(super) fn ts_opt(ms: Option<i64>) -> StoreResult<Option<Timestamp>> {
    ms.map(ts).transpose()
}

/// A stored UUID.
pub(super) fn uuid(text: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(text).map_err(|e| StoreError::Corrupt {
        what: "uuid",
        reason: e.to_string(),
    })
}

/// A stored generation or sequence number (never negative).
pub(super) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A generation for storage.
pub(super) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Parses a stored host status.
pub(super) fn host_status(text: &str) -> StoreResult<HostStatus> {
    match text {
        "pending_approval" => Ok(HostStatus::PendingApproval),
        "active" => Ok(HostStatus::Active),
        "revoked" => Ok(HostStatus::Revoked),
        other => Err(StoreError::Corrupt {
            what: "host status",
            reason: format!("unknown status `{other}`"),
        }),
    }
}

/// Parses a stored alert kind.
pub(super) fn alert_kind(text: &str) -> StoreResult<AlertKind> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|e| {
        StoreError::Corrupt {
            what: "alert kind",
            reason: e.to_string(),
        }
    })
}

/// Convenience for alerts raised outside a sweep.
pub(super) fn host_alert(kind: AlertKind, host_id: Uuid, hostname: &str) -> PlannedAlert {
    PlannedAlert {
        kind,
        host_id: Some(host_id),
        hostname: Some(hostname.to_owned()),
        subject: Some(host_id.to_string()),
        message: alert_message(kind, Some(hostname), ""),
    }
}

/// Message text of an alert.
pub(crate) fn alert_message(kind: AlertKind, hostname: Option<&str>, detail: &str) -> String {
    match (kind, hostname) {
        (AlertKind::HostOverdue, Some(name)) => format!("host {name} is overdue: {detail}"),
        (AlertKind::HostRecovered, Some(name)) => format!("host {name} is polling again"),
        (_, _) => detail.to_owned(),
    }
}

/// Parses stored JSON.
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    what: &'static str,
) -> impl Fn(&str) -> StoreResult<T> {
    move |text| {
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
            what,
            reason: e.to_string(),
        })
    }
}
