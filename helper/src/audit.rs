//! The one audit line per call: JSON on stderr (the journal under systemd).

use bosun_proto::helper::{Request, Response};
use serde_json::{Value, json};

use crate::privs::CapReport;

/// Prefix of every audit line, so a reader can find them among other output.
pub const AUDIT_PREFIX: &str = "bosun-helper audit: ";

/// Everything an audit line says about one call.
#[derive(Debug, Default)]
pub struct Record {
    /// `socket`, `sudo` or `unknown`.
    pub transport: &'static str,
    /// The caller's uid once known.
    pub caller_uid: Option<u32>,
    /// The verb once known.
    pub verb: Option<&'static str>,
    /// The parsed request, secrets redacted.
    pub args: Option<Value>,
    /// Capabilities held while the verb ran.
    pub caps: Option<CapReport>,
}

/// The request's arguments with secrets replaced by their size.
pub fn redacted_args(request: &Request) -> Value {
    let mut value = serde_json::to_value(request).unwrap_or(Value::Null);
    if let Request::PushBootstrap(args) = request
        && let Some(slot) = value.pointer_mut("/args/document")
    {
        *slot = Value::String(format!("<{} bytes redacted>", args.document.len()));
    }
    value.get("args").cloned().unwrap_or(Value::Null)
}

/// Formats the audit line for `record` ending in `response`.
pub fn line(record: &Record, response: &Response) -> String {
    let (result, reason, message) = match response {
        Response::Ok { .. } => ("ok", None, None),
        Response::Refused { reason, message } => ("refused", Some(*reason), Some(message)),
        Response::Failed { message } => ("failed", None, Some(message)),
    };
    let body = json!({
        "pid": std::process::id(),
        "transport": record.transport,
        "caller_uid": record.caller_uid,
        "verb": record.verb,
        "args": record.args,
        "result": result,
        "reason": reason,
        "message": message,
        "caps": record.caps,
    });
    format!("{AUDIT_PREFIX}{body}")
}
