//! Checks one parameter value against its schema, in PVE's order: type, format, pattern,
//! length, range, enum.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::formats::Formats;

/// Whether a schema marks a parameter optional (`optional: 1`; absent means required).
pub(crate) fn is_optional(schema: &Value) -> bool {
    match schema.get("optional") {
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "1",
        _ => false,
    }
}

pub(crate) fn number_field(schema: &Value, key: &str) -> Option<f64> {
    match schema.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Rewrites a Perl regex from the dump for Rust's engine and anchors it to the whole value.
pub(crate) fn perl_pattern(pattern: &str) -> Result<Regex, String> {
    let rewritten = pattern.replace("(?^i:", "(?i:").replace("(?^:", "(?:");
    Regex::new(&format!("^(?:{rewritten})$"))
        .map_err(|e| format!("pattern {pattern:?} does not compile: {e}"))
}

static INT_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[+-]?\d+$").expect("constant regex is valid"));
static NUM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$").expect("constant regex is valid")
});

/// Where a value sits: top-level booleans must be `0`/`1`; inside a property string PVE also
/// accepts `on/off/yes/no/true/false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    TopLevel,
    PropertyString,
}

/// Checks a top-level parameter value; gives one message per problem.
pub(crate) fn check(schema: &Value, value: &str, formats: &Formats) -> Vec<String> {
    check_at(schema, value, formats, Level::TopLevel)
}

pub(crate) fn check_at(
    schema: &Value,
    value: &str,
    formats: &Formats,
    level: Level,
) -> Vec<String> {
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    match ty {
        "boolean" => {
            let ok = match level {
                Level::TopLevel => matches!(value, "0" | "1"),
                Level::PropertyString => matches!(
                    value.to_ascii_lowercase().as_str(),
                    "0" | "1" | "on" | "off" | "yes" | "no" | "true" | "false"
                ),
            };
            if ok {
                Vec::new()
            } else {
                vec![format!("type check ('boolean') failed - got '{value}'")]
            }
        }
        "integer" | "number" => {
            let re = if ty == "integer" { &INT_RE } else { &NUM_RE };
            if !re.is_match(value) {
                return vec![format!("type check ('{ty}') failed - got '{value}'")];
            }
            let mut out = check_format(schema, value, formats);
            let n: f64 = value.parse().unwrap_or(f64::NAN);
            if let Some(min) = number_field(schema, "minimum")
                && n < min
            {
                out.push(format!("value must have a minimum value of {min}"));
            }
            if let Some(max) = number_field(schema, "maximum")
                && n > max
            {
                out.push(format!("value must have a maximum value of {max}"));
            }
            out.extend(check_enum(schema, value));
            out
        }
        "string" => {
            let mut out = check_format(schema, value, formats);
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match perl_pattern(p) {
                    Ok(re) if re.is_match(value) => {}
                    Ok(_) => out.push("value does not match the regex pattern".to_owned()),
                    Err(e) => out.push(e),
                }
            }
            let len = value.chars().count() as f64;
            if let Some(max) = number_field(schema, "maxLength")
                && len > max
            {
                out.push(format!("value may only be {max} characters long"));
            }
            if let Some(min) = number_field(schema, "minLength")
                && len < min
            {
                out.push(format!("value must be at least {min} characters long"));
            }
            out.extend(check_enum(schema, value));
            out
        }
        "array" => match schema.get("items") {
            Some(items) => check_at(items, value, formats, level),
            None => Vec::new(),
        },
        other => vec![format!(
            "parameters of type '{other}' cannot be sent as a form value"
        )],
    }
}

fn check_enum(schema: &Value, value: &str) -> Option<String> {
    let list = schema.get("enum")?.as_array()?;
    let found = list.iter().any(|e| match e {
        Value::String(s) => s == value,
        Value::Number(n) => n.to_string() == value,
        _ => false,
    });
    (!found).then(|| {
        let names: Vec<String> = list
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect();
        format!(
            "value '{value}' does not have a value in the enumeration '{}'",
            names.join(", ")
        )
    })
}

fn check_format(schema: &Value, value: &str, formats: &Formats) -> Vec<String> {
    match schema.get("format") {
        None => Vec::new(),
        Some(Value::String(name)) => formats.check_named(name, value),
        Some(Value::Object(props)) => formats.check_property_string(props, value),
        Some(other) => vec![format!("unexpected format {other}")],
    }
}
