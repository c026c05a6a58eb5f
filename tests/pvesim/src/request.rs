//! Request decoding as pve-http-server does it: query strings and form bodies split on `&`
//! and `;`, each pair split on the first `=` only, repeated keys collected into arrays;
//! JSON bodies for `application/json`.

use serde_json::Value;

use crate::schema::RawValue;

/// Decoded parameters in arrival order, with repeated keys merged.
#[derive(Debug, Default, Clone)]
pub(crate) struct Decoded {
    /// Every (key, value) pair as sent, for the request log.
    pub(crate) pairs: Vec<(String, String)>,
    /// Merged values by key, in first-seen order.
    pub(crate) values: Vec<(String, RawValue)>,
}

impl Decoded {
    pub(crate) fn push(&mut self, key: String, value: RawValue) {
        self.pairs.push((key.clone(), value.display()));
        match self.values.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => {
                let mut items = match std::mem::replace(existing, RawValue::Many(Vec::new())) {
                    RawValue::Many(v) => v,
                    other => vec![other.display()],
                };
                match value {
                    RawValue::Many(v) => items.extend(v),
                    other => items.push(other.display()),
                }
                *existing = RawValue::Many(items);
            }
            None => self.values.push((key, value)),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&RawValue> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Merges `other` in; its values replace ours (query parameters override the body).
    pub(crate) fn override_with(&mut self, other: Decoded) {
        self.pairs.extend(other.pairs);
        for (k, v) in other.values {
            match self.values.iter_mut().find(|(key, _)| *key == k) {
                Some((_, existing)) => *existing = v,
                None => self.values.push((k, v)),
            }
        }
    }
}

/// Decodes `a=1&b=2;c=3`.
pub(crate) fn decode_form(input: &str) -> Decoded {
    let mut out = Decoded::default();
    for pair in input.split(['&', ';']).filter(|p| !p.is_empty()) {
        let mut it = pair.splitn(3, '=');
        let key = unescape(it.next().unwrap_or_default());
        let value = unescape(it.next().unwrap_or_default());
        if key.is_empty() {
            continue;
        }
        out.push(key, RawValue::One(value));
    }
    out
}

/// Decodes a JSON object body; `None` if it is not an object.
pub(crate) fn decode_json(body: &[u8]) -> Option<Decoded> {
    let Value::Object(map) = serde_json::from_slice::<Value>(body).ok()? else {
        return None;
    };
    let mut out = Decoded::default();
    for (k, v) in map {
        let raw = match v {
            Value::Bool(b) => RawValue::JsonBool(b),
            Value::String(s) => RawValue::One(s),
            Value::Number(n) => RawValue::One(n.to_string()),
            Value::Array(items) => RawValue::Many(
                items
                    .into_iter()
                    .map(|i| match i {
                        Value::String(s) => s,
                        other => other.to_string(),
                    })
                    .collect(),
            ),
            Value::Null => continue,
            Value::Object(_) => RawValue::One(v.to_string()),
        };
        out.push(k, raw);
    }
    Some(out)
}

/// Percent-decoding with `+` as space (form encoding).
pub(crate) fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => match (hex_val(bytes[i + 1]), hex_val(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decoding of a path segment (`+` stays).
pub(crate) fn unescape_path(s: &str) -> String {
    unescape(&s.replace('+', "%2B"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_splits_on_ampersand_and_semicolon_and_first_equals() {
        let d = decode_form("a=1;b=2&net0=name=eth0,bridge=vmbr0&c=x%3Dy");
        assert_eq!(d.get("a"), Some(&RawValue::One("1".into())));
        assert_eq!(d.get("b"), Some(&RawValue::One("2".into())));
        assert_eq!(d.get("net0"), Some(&RawValue::One("name".into())));
        assert_eq!(d.get("c"), Some(&RawValue::One("x=y".into())));
    }

    #[test]
    fn repeated_keys_become_arrays() {
        let d = decode_form("delete=a&delete=b");
        assert_eq!(
            d.get("delete"),
            Some(&RawValue::Many(vec!["a".into(), "b".into()]))
        );
    }

    #[test]
    fn query_overrides_body() {
        let mut body = decode_form("a=1&b=2");
        body.override_with(decode_form("a=3"));
        assert_eq!(body.get("a"), Some(&RawValue::One("3".into())));
    }

    #[test]
    fn json_booleans_are_kept_typed() {
        let d = decode_json(br#"{"force":true,"vmid":100}"#).expect("object");
        assert_eq!(d.get("force"), Some(&RawValue::JsonBool(true)));
        assert_eq!(d.get("vmid"), Some(&RawValue::One("100".into())));
        assert!(decode_json(b"[1]").is_none());
    }

    #[test]
    fn bad_percent_sequences_are_kept() {
        assert_eq!(unescape("100%"), "100%");
        assert_eq!(unescape("%zz"), "%zz");
        assert_eq!(unescape_path("a+b%2Fc"), "a+b/c");
    }
}
