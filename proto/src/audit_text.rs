//! An audit entry's detail as one short line of text, for listings (`bosunctl audit`, the
//! dashboard's host page); the whole detail stays in the JSON.

use serde_json::Value;

/// Longest line [`one_line`] makes, in characters.
pub const WIDTH: usize = 100;

/// An entry's detail as one short line: the guest (vmid, then the guest id's first block),
/// the job, then the action's own detail as `key=value`.
pub fn one_line(detail: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(vmid) = detail.get("vmid").and_then(Value::as_u64) {
        parts.push(format!("vm {vmid}"));
    }
    if let Some(guest) = detail.get("guest_id").and_then(Value::as_str) {
        parts.push(format!("guest {}", short_id(guest)));
    }
    if let Some(job) = detail.get("job_id").and_then(Value::as_str) {
        parts.push(format!("job {}", short_id(job)));
    }
    match detail.get("detail") {
        Some(Value::Object(fields)) => {
            for (key, value) in fields {
                parts.push(format!("{key}={}", scalar(value)));
            }
        }
        Some(Value::Null) | None => {}
        Some(other) => parts.push(scalar(other)),
    }
    let line = if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    };
    truncate(&line, WIDTH)
}

/// Any JSON detail (an event's) as one short line: an object's fields as `key=value` by name,
/// nested objects and arrays abbreviated; anything else as bare text.
pub fn fields_line(detail: &Value) -> String {
    let line = match detail {
        Value::Object(fields) if fields.is_empty() => "-".to_owned(),
        Value::Object(fields) => fields
            .iter()
            .filter(|(_, value)| !value.is_null())
            .map(|(key, value)| format!("{key}={}", scalar(value)))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Null => "-".to_owned(),
        other => scalar(other),
    };
    truncate(&line, WIDTH)
}

/// A UUID's first block (enough to tell guests apart in a listing).
fn short_id(id: &str) -> &str {
    id.split('-').next().unwrap_or(id)
}

/// A JSON value as bare text; objects and arrays as `{…}` / `[…]`.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Object(_) => "{…}".to_owned(),
        Value::Array(items) if items.is_empty() => "[]".to_owned(),
        Value::Array(_) => "[…]".to_owned(),
        other => other.to_string(),
    }
}

/// `text` cut to `width` characters, `…` marking the cut; control characters become spaces
/// (a detail is the agent's text, and must not move the terminal's cursor).
fn truncate(text: &str, width: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if crate::inert::is_control(c) { ' ' } else { c })
        .collect();
    if clean.chars().count() <= width {
        return clean;
    }
    let mut cut: String = clean.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::{fields_line, one_line};

    #[test]
    fn an_event_detail_reads_as_key_value_text() {
        let detail = json!({
            "hostname": "pve-a", "generation": 3, "nested": { "a": 1 }, "list": [1],
            "gone": null, "note": "line\nbreak",
        });
        assert_eq!(
            fields_line(&detail),
            "generation=3 hostname=pve-a list=[…] nested={…} note=line break"
        );
        assert_eq!(fields_line(&json!({})), "-");
        assert_eq!(fields_line(&json!("text")), "text");
        assert_eq!(
            fields_line(&json!({ "x": "y".repeat(300) }))
                .chars()
                .count(),
            super::WIDTH
        );
    }

    use serde_json::json;

    #[test]
    fn a_detail_reads_as_one_short_line() {
        let detail = json!({
            "op_id": null, "job_id": "7c1d9e2a-0000-4000-8000-000000000001",
            "guest_id": "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10", "vmid": 101,
            "request_id": null, "hash": "ab12",
            "detail": { "tier": "local", "bytes": 1024, "ok": true, "steps": [1], "why": "a\nb" }
        });
        assert_eq!(
            one_line(&detail),
            "vm 101 guest 0b6f4f2e job 7c1d9e2a bytes=1024 ok=true steps=[…] tier=local why=a b"
        );
        assert_eq!(one_line(&json!({})), "-");
        assert_eq!(one_line(&json!({ "detail": "refused" })), "refused");
        let long = one_line(&json!({ "detail": { "message": "x".repeat(300) } }));
        assert_eq!(long.chars().count(), 100);
        assert!(long.ends_with('…'));
    }
}
