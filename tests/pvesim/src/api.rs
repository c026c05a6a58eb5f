//! What a handler sees (`Ctx`) and what it returns (`Reply`, `ApiError`), in PVE's shapes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use crate::state::Shared;

/// An API error in PVE's envelope: status, message and the per-parameter `errors` map.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    pub(crate) errors: BTreeMap<String, String>,
}

impl ApiError {
    /// 400 `Parameter verification failed.` with one entry.
    pub(crate) fn param(key: &str, msg: &str) -> Self {
        let mut errors = BTreeMap::new();
        errors.insert(key.to_owned(), with_newline(msg));
        Self::params(errors)
    }

    /// 400 `Parameter verification failed.` with all collected entries.
    pub(crate) fn params(errors: BTreeMap<String, String>) -> Self {
        Self {
            status: 400,
            message: "Parameter verification failed.\n".to_owned(),
            errors,
        }
    }

    /// 403 `Permission check failed (<path>, <priv>)`.
    pub(crate) fn perm(path: &str, privilege: &str) -> Self {
        Self::perm_text(&format!("{path}, {privilege}"))
    }

    /// 403 `Permission check failed (<text>)`, e.g. a root-only rule.
    pub(crate) fn perm_text(text: &str) -> Self {
        Self {
            status: 403,
            message: format!("Permission check failed ({text})\n"),
            errors: BTreeMap::new(),
        }
    }

    /// 500 with the handler's `die` message.
    pub(crate) fn internal(msg: &str) -> Self {
        Self {
            status: 500,
            message: with_newline(msg),
            errors: BTreeMap::new(),
        }
    }

    /// 501 for an unknown path or method.
    pub(crate) fn not_implemented(msg: String) -> Self {
        Self {
            status: 501,
            message: msg,
            errors: BTreeMap::new(),
        }
    }
}

fn with_newline(msg: &str) -> String {
    if msg.ends_with('\n') {
        msg.to_owned()
    } else {
        format!("{msg}\n")
    }
}

/// A handler's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// `{"data": value}`.
    Data(Value),
    /// `{"data": value, "total": n}` (task logs).
    DataWithTotal(Value, usize),
}

pub(crate) type HandlerResult = Result<Reply, ApiError>;

/// The context of one authenticated, validated request.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    /// `user@realm` or `user@realm!tokenid`.
    pub(crate) authid: String,
    /// Validated parameters (path parameters included), normalised strings.
    pub(crate) params: BTreeMap<String, String>,
    /// Names of the parameters the caller sent explicitly (path parameters excluded).
    pub(crate) explicit: BTreeSet<String>,
}

impl Ctx {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    pub(crate) fn flag(&self, key: &str) -> bool {
        self.get(key) == Some("1")
    }

    /// `vmid` (validated by the schema before handlers run).
    pub(crate) fn vmid(&self) -> Result<u32, ApiError> {
        self.get("vmid")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ApiError::param("vmid", "property is missing and it is not optional"))
    }

    pub(crate) fn required(&self, key: &str) -> Result<&str, ApiError> {
        self.get(key)
            .ok_or_else(|| ApiError::param(key, "property is missing and it is not optional"))
    }

    /// Whether the caller is exactly `root@pam` (a token never is).
    pub(crate) fn is_root(&self) -> bool {
        self.authid == "root@pam"
    }

    pub(crate) fn has(&self, path: &str, privilege: &str) -> bool {
        self.shared
            .state
            .lock()
            .access
            .has(&self.authid, path, privilege)
    }

    /// 403 unless the caller holds `privilege` on `path`.
    pub(crate) fn require(&self, path: &str, privilege: &str) -> Result<(), ApiError> {
        if self.has(path, privilege) {
            Ok(())
        } else {
            Err(ApiError::perm(path, privilege))
        }
    }

    pub(crate) fn node(&self) -> &str {
        self.shared.node()
    }
}

pub(crate) fn data(value: Value) -> HandlerResult {
    Ok(Reply::Data(value))
}
