//! The census's documents as their OpenAPI schemas say (feature `openapi`): every field path
//! and its schema, for the census test and for the hostile cases generated from the census.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::{RefOr, schema::Schema};

use super::{DESIRED, Entry, FieldClass, POLL_ANSWER, POLL_DESIRED};

/// How deep a schema may nest before the walk gives up (a recursive type).
pub const MAX_DEPTH: usize = 32;

/// Why a document's schema could not be walked.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A `$ref` names a schema the document's components do not hold.
    #[error("{path}: $ref to {name}, which no schema defines")]
    Dangling {
        /// Where.
        path: String,
        /// The schema named.
        name: String,
    },
    /// The schema nests deeper than [`MAX_DEPTH`].
    #[error("{path}: the schema nests deeper than {MAX_DEPTH}")]
    TooDeep {
        /// Where.
        path: String,
    },
    /// A schema does not serialise.
    #[error("a schema does not serialise: {0}")]
    Json(#[from] serde_json::Error),
}

/// Every field path of `T` and its schema, stopping at the paths in `stops` (their schema is
/// kept, their insides not walked). A path with fields of its own is listed too.
pub fn fields<T: ToSchema>(stops: &BTreeSet<&str>) -> Result<BTreeMap<String, Value>, SchemaError> {
    let mut found: Vec<(String, RefOr<Schema>)> = Vec::new();
    T::schemas(&mut found);
    let mut components = BTreeMap::new();
    for (name, schema) in found {
        components.insert(name, serde_json::to_value(&schema)?);
    }
    let root = serde_json::to_value(T::schema())?;
    let mut walk = Walk {
        components: &components,
        stops,
        out: BTreeMap::new(),
    };
    walk.schema(&root, "", 0)?;
    Ok(walk.out)
}

/// The paths a census table must class: every leaf of `fields`, and every path it stops at.
pub fn needing_class(fields: &BTreeMap<String, Value>, stops: &BTreeSet<&str>) -> BTreeSet<String> {
    let parents: BTreeSet<&str> = fields
        .keys()
        .filter_map(|path| {
            path.rfind('.')
                .map(|cut| path[..cut].trim_end_matches("[]"))
        })
        .collect();
    fields
        .keys()
        .filter(|path| stops.contains(path.as_str()) || !parents.contains(path.as_str()))
        .cloned()
        .collect()
}

/// The paths `census` stops at: its signed documents and sealed credentials.
pub fn stops(census: &'static [Entry]) -> BTreeSet<&'static str> {
    census
        .iter()
        .filter(|e| matches!(e.class, FieldClass::Signed | FieldClass::SealedAndSigned))
        .map(|e| e.path)
        .collect()
}

/// Every field of `bosun.desired/v1` and its schema.
pub fn desired_fields() -> Result<BTreeMap<String, Value>, SchemaError> {
    fields::<crate::desired::DesiredState>(&stops(DESIRED))
}

/// Every field of the poll answer but [`POLL_DESIRED`] and its schema.
pub fn poll_answer_fields() -> Result<BTreeMap<String, Value>, SchemaError> {
    let mut stops = stops(POLL_ANSWER);
    stops.insert(POLL_DESIRED);
    let mut fields = fields::<crate::poll::PollResponse>(&stops)?;
    fields.remove(POLL_DESIRED);
    Ok(fields)
}

/// The string values a field's schema admits when it is an enumeration (through `oneOf`,
/// `allOf`, `anyOf` and `$ref`s resolved by [`fields`]); empty otherwise.
pub fn enum_values(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_enum(schema, 0, &mut out);
    out
}

fn collect_enum(schema: &Value, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        out.extend(values.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    for combinator in ["allOf", "oneOf", "anyOf"] {
        for part in schema
            .get(combinator)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect_enum(part, depth + 1, out);
        }
    }
}

struct Walk<'a> {
    components: &'a BTreeMap<String, Value>,
    stops: &'a BTreeSet<&'a str>,
    out: BTreeMap<String, Value>,
}

impl Walk<'_> {
    /// `schema` with its `$ref`s (at its top and in its combinators) replaced by what they
    /// name.
    fn resolved(&self, schema: &Value, at: &str, depth: usize) -> Result<Value, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep {
                path: at.to_owned(),
            });
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            let target = self
                .components
                .get(name)
                .ok_or_else(|| SchemaError::Dangling {
                    path: at.to_owned(),
                    name: name.to_owned(),
                })?;
            return self.resolved(target, at, depth + 1);
        }
        let mut out = schema.clone();
        for combinator in ["allOf", "oneOf", "anyOf"] {
            if let Some(parts) = schema.get(combinator).and_then(Value::as_array) {
                let parts = parts
                    .iter()
                    .map(|part| self.resolved(part, at, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                out[combinator] = Value::Array(parts);
            }
        }
        Ok(out)
    }

    fn schema(&mut self, schema: &Value, at: &str, depth: usize) -> Result<(), SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep {
                path: at.to_owned(),
            });
        }
        let schema = self.resolved(schema, at, depth)?;
        for combinator in ["allOf", "oneOf", "anyOf"] {
            for part in schema
                .get(combinator)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.schema(part, at, depth + 1)?;
            }
        }
        if let Some(items) = schema.get("items") {
            self.schema(items, &format!("{at}[]"), depth + 1)?;
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            self.schema(values, &format!("{at}{{}}"), depth + 1)?;
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let path = if at.is_empty() {
                    name.clone()
                } else {
                    format!("{at}.{name}")
                };
                let resolved = self.resolved(property, &path, depth + 1)?;
                self.out.insert(path.clone(), resolved);
                if !self.stops.contains(path.as_str()) {
                    self.schema(property, &path, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}
