//! A check of JSON values against the document's schemas, and proof that it refuses.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{doc_example, document};

/// A check of a JSON value against the subset of JSON Schema (2020-12, as OpenAPI 3.1 uses
/// it) that utoipa writes. A keyword or format it does not know fails the check, so a schema
/// it cannot judge never passes unseen.
pub struct Schemas<'a> {
    components: &'a Map<String, Value>,
}

impl<'a> Schemas<'a> {
    pub fn of(doc: &'a Value) -> Self {
        Self {
            components: doc["components"]["schemas"].as_object().unwrap(),
        }
    }

    pub fn named(&self, name: &str, value: &Value) -> Result<(), String> {
        let schema = self
            .components
            .get(name)
            .ok_or_else(|| format!("no schema {name}"))?;
        self.check(schema, value, name)
    }

    pub fn check(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let rules = match schema {
            Value::Object(rules) => rules,
            Value::Bool(true) => return Ok(()),
            other => return Err(format!("{at}: schema {other} is not understood")),
        };
        for (keyword, rule) in rules {
            match keyword.as_str() {
                "$ref" => {
                    let name = rule
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                        .ok_or_else(|| format!("{at}: reference {rule}"))?;
                    self.named(name, value).map_err(|e| format!("{at}: {e}"))?;
                }
                "type" => check_type(rule, value, at)?,
                "enum" => {
                    if !rule.as_array().is_some_and(|values| values.contains(value)) {
                        return Err(format!("{at}: {value} is not one of {rule}"));
                    }
                }
                "properties" => {
                    if let Some(object) = value.as_object() {
                        for (name, inner) in rule.as_object().unwrap() {
                            if let Some(field) = object.get(name) {
                                self.check(inner, field, &format!("{at}.{name}"))?;
                            }
                        }
                    }
                }
                "required" => {
                    if let Some(object) = value.as_object() {
                        for name in rule.as_array().unwrap() {
                            if !object.contains_key(name.as_str().unwrap()) {
                                return Err(format!("{at}: required {name} is missing"));
                            }
                        }
                    }
                }
                "additionalProperties" => {
                    let known = rules.get("properties").and_then(Value::as_object);
                    for (name, field) in value.as_object().into_iter().flatten() {
                        if known.is_some_and(|k| k.contains_key(name)) {
                            continue;
                        }
                        if rule == &Value::Bool(false) {
                            return Err(format!("{at}: unknown field {name}"));
                        }
                        self.check(rule, field, &format!("{at}.{name}"))?;
                    }
                }
                "items" => {
                    for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                        self.check(rule, item, &format!("{at}[{i}]"))?;
                    }
                }
                "allOf" => {
                    for inner in rule.as_array().unwrap() {
                        self.check(inner, value, at)?;
                    }
                }
                "oneOf" | "anyOf" => {
                    let fits = rule
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|inner| self.check(inner, value, at).is_ok())
                        .count();
                    let ok = if keyword == "oneOf" {
                        fits == 1
                    } else {
                        fits >= 1
                    };
                    if !ok {
                        return Err(format!(
                            "{at}: {value} fits {fits} of the {keyword} schemas"
                        ));
                    }
                }
                "format" => check_format(rule.as_str().unwrap(), value, at)?,
                "minimum" | "maximum" => {
                    if let (Some(n), Some(bound)) = (value.as_f64(), rule.as_f64()) {
                        let ok = if keyword == "minimum" {
                            n >= bound
                        } else {
                            n <= bound
                        };
                        if !ok {
                            return Err(format!("{at}: {n} is outside {keyword} {bound}"));
                        }
                    }
                }
                "minLength" | "maxLength" => {
                    if let (Some(text), Some(bound)) = (value.as_str(), rule.as_u64()) {
                        let len = u64::try_from(text.chars().count()).unwrap();
                        let ok = if keyword == "minLength" {
                            len >= bound
                        } else {
                            len <= bound
                        };
                        if !ok {
                            return Err(format!("{at}: `{text}` is outside {keyword} {bound}"));
                        }
                    }
                }
                "minItems" | "maxItems" => {
                    if let (Some(items), Some(bound)) = (value.as_array(), rule.as_u64()) {
                        let len = u64::try_from(items.len()).unwrap();
                        let ok = if keyword == "minItems" {
                            len >= bound
                        } else {
                            len <= bound
                        };
                        if !ok {
                            return Err(format!("{at}: {len} items is outside {keyword} {bound}"));
                        }
                    }
                }
                "pattern" => {
                    let pattern = regex::Regex::new(rule.as_str().unwrap())
                        .map_err(|e| format!("{at}: pattern {rule}: {e}"))?;
                    if let Some(text) = value.as_str()
                        && !pattern.is_match(text)
                    {
                        return Err(format!("{at}: `{text}` does not match pattern {rule}"));
                    }
                }
                "description" | "title" | "default" | "example" | "examples" | "deprecated" => {}
                other => return Err(format!("{at}: keyword `{other}` is not understood")),
            }
        }
        Ok(())
    }
}

fn check_type(rule: &Value, value: &Value, at: &str) -> Result<(), String> {
    let fits = |name: &str| match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    };
    let ok = match rule {
        Value::String(name) => fits(name),
        Value::Array(names) => names.iter().any(|n| n.as_str().is_some_and(fits)),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{at}: {value} is not of type {rule}"))
    }
}

fn check_format(format: &str, value: &Value, at: &str) -> Result<(), String> {
    let valid = match format {
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64"
        | "float" | "double" => return Ok(()),
        "date-time" => |text: &str| text.parse::<jiff::Timestamp>().is_ok(),
        "uuid" => |text: &str| Uuid::parse_str(text).is_ok(),
        _ => return Err(format!("{at}: format `{format}` is not understood")),
    };
    // `type` judges a value that is not a string (e.g. `null` where the field is optional).
    match value.as_str() {
        Some(text) if !valid(text) => Err(format!("{at}: `{text}` is not a {format}")),
        _ => Ok(()),
    }
}

#[test]
fn the_schema_check_refuses_what_does_not_fit() {
    let doc = document();
    let schemas = Schemas::of(&doc);
    let enroll: Value = doc_example("enroll-request.json");
    schemas.named("EnrollRequest", &enroll).unwrap();
    let desired: Value = doc_example("desired.json");
    schemas.named("DesiredState", &desired).unwrap();

    let mut missing = enroll.clone();
    missing.as_object_mut().unwrap().remove("token");
    let mut typo = desired.clone();
    typo["gusets"] = json!([]);
    let mut bad_power = desired.clone();
    bad_power["guests"][0]["power"] = json!("sleeping");
    let mut bad_time = doc_example("escrow.json");
    bad_time["created_at"] = json!("yesterday");
    let mut bad_uuid = desired.clone();
    bad_uuid["guests"][0]["guest_id"] = json!("guest-1");
    let mut bad_schema = enroll.clone();
    bad_schema["schema"] = json!("bosun.enroll/v2");
    let mut empty_schedule = desired.clone();
    empty_schedule["backup_policy"]["schedule"] = json!("");
    let mut plaintext = desired.clone();
    plaintext["storage"][0]["credentials"] = json!("hunter2");
    for (name, value, complaint) in [
        ("EnrollRequest", missing, "required"),
        ("DesiredState", typo, "unknown field gusets"),
        ("DesiredState", bad_power, "sleeping"),
        ("EscrowBlob", bad_time, "date-time"),
        ("DesiredState", bad_uuid, "uuid"),
        ("EnrollRequest", bad_schema, "not one of"),
        ("DesiredState", empty_schedule, "minLength"),
        ("DesiredState", plaintext, "credentials"),
        (
            "CreateEnrollToken",
            json!({ "ttl_seconds": 59 }),
            "outside minimum",
        ),
        ("HostStatus", json!("asleep"), "not one of"),
        ("EscrowState", json!({ "state": "stored" }), "fits 0"),
        ("HostSummary", json!([]), "type"),
    ] {
        let err = schemas.named(name, &value).unwrap_err();
        assert!(err.contains(complaint), "{name}: {err}");
    }
}
