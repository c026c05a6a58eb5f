use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::{RefOr, schema::Schema};

use super::*;

/// Every named schema `T` reaches, as JSON, by name.
fn components<T: ToSchema>() -> BTreeMap<String, Value> {
    let mut found: Vec<(String, RefOr<Schema>)> = Vec::new();
    T::schemas(&mut found);
    let mut by_name = BTreeMap::new();
    by_name.insert(T::name().into_owned(), json(&T::schema()));
    for (name, schema) in found {
        by_name.insert(name, json(&schema));
    }
    by_name
}

fn json(schema: &RefOr<Schema>) -> Value {
    serde_json::to_value(schema).expect("a schema serialises")
}

/// Every field path under `schema`, stopping at a path the census names as one document
/// (`stops`).
fn walk(
    schema: &Value,
    at: &str,
    components: &BTreeMap<String, Value>,
    stops: &BTreeSet<&str>,
    depth: usize,
    out: &mut BTreeSet<String>,
) {
    assert!(depth < 32, "schema nests deeper than 32 at {at}");
    if let Some(name) = schema.get("$ref").and_then(Value::as_str) {
        let name = name.rsplit('/').next().unwrap_or(name);
        let resolved = components
            .get(name)
            .unwrap_or_else(|| panic!("{at}: $ref to {name}, which no schema defines"));
        return walk(resolved, at, components, stops, depth + 1, out);
    }
    for combinator in ["allOf", "oneOf", "anyOf"] {
        if let Some(parts) = schema.get(combinator).and_then(Value::as_array) {
            for part in parts {
                walk(part, at, components, stops, depth + 1, out);
            }
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, &format!("{at}[]"), components, stops, depth + 1, out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(
            values,
            &format!("{at}{{}}"),
            components,
            stops,
            depth + 1,
            out,
        );
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let path = if at.is_empty() {
                name.clone()
            } else {
                format!("{at}.{name}")
            };
            out.insert(path.clone());
            if !stops.contains(path.as_str()) {
                walk(property, &path, components, stops, depth + 1, out);
            }
        }
    }
}

/// The paths of `T` that need a class: every leaf, and every path the census names as one
/// document. A path with fields of its own is classed by its fields.
fn needing_class<T: ToSchema>(census: &[Entry], skip: &[&str]) -> BTreeSet<String> {
    let components = components::<T>();
    let stops: BTreeSet<&str> = census
        .iter()
        .filter(|e| matches!(e.class, FieldClass::Signed | FieldClass::SealedAndSigned))
        .map(|e| e.path)
        .chain(skip.iter().copied())
        .collect();
    let root = components
        .get(T::name().as_ref())
        .expect("the root schema is among its components")
        .clone();
    let mut all = BTreeSet::new();
    walk(&root, "", &components, &stops, 0, &mut all);
    let parents: BTreeSet<String> = all
        .iter()
        .filter_map(|p| {
            let cut = p.rfind('.')?;
            Some(p[..cut].trim_end_matches("[]").to_owned())
        })
        .collect();
    all.into_iter()
        .filter(|p| stops.contains(p.as_str()) || !parents.contains(p))
        .filter(|p| !skip.contains(&p.as_str()))
        .collect()
}

/// The fields without a class and the entries naming no field, in words.
fn mismatch(document: &str, fields: &BTreeSet<String>, census: &[Entry]) -> Vec<String> {
    let named: BTreeSet<&str> = census.iter().map(|e| e.path).collect();
    let mut problems: Vec<String> = fields
        .iter()
        .filter(|f| !named.contains(f.as_str()))
        .map(|f| format!("{document}: field `{f}` has no class in proto/src/census.rs"))
        .collect();
    problems.extend(
        named
            .iter()
            .filter(|n| !fields.contains(**n))
            .map(|n| format!("{document}: census entry `{n}` names no field")),
    );
    let mut seen = BTreeSet::new();
    problems.extend(
        census
            .iter()
            .filter(|e| !seen.insert(e.path))
            .map(|e| format!("{document}: census entry `{}` is there twice", e.path)),
    );
    problems
}

#[test]
fn every_field_of_the_desired_state_and_the_poll_answer_has_a_class() {
    let mut problems = mismatch(
        "bosun.desired/v1",
        &needing_class::<crate::desired::DesiredState>(DESIRED, &[]),
        DESIRED,
    );
    problems.extend(mismatch(
        "bosun.poll-response/v1",
        &needing_class::<crate::poll::PollResponse>(POLL_ANSWER, &[POLL_DESIRED]),
        POLL_ANSWER,
    ));
    assert!(
        problems.is_empty(),
        "census out of date (decision 0096):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_census_catches_a_field_without_a_class_and_an_entry_without_a_field() {
    let fields = needing_class::<crate::desired::DesiredState>(DESIRED, &[]);
    let short = &DESIRED[1..];
    let problems = mismatch("d", &fields, short);
    assert_eq!(
        problems,
        [format!(
            "d: field `{}` has no class in proto/src/census.rs",
            DESIRED[0].path
        )]
    );
    let mut extra = DESIRED.to_vec();
    extra.push(entry("guests[].nickname", FieldClass::Cosmetic, "none"));
    extra.push(DESIRED[0]);
    let problems = mismatch("d", &fields, &extra);
    assert_eq!(
        problems,
        [
            "d: census entry `guests[].nickname` names no field".to_owned(),
            format!("d: census entry `{}` is there twice", DESIRED[0].path),
        ]
    );
}

#[test]
fn a_signed_document_is_one_entry_and_its_insides_are_not_walked() {
    let fields = needing_class::<crate::desired::DesiredState>(DESIRED, &[]);
    assert!(fields.contains("data_plan"));
    assert!(fields.contains("guests[].golden.signed"));
    assert!(!fields.iter().any(|f| f.starts_with("data_plan.")));
    assert!(fields.contains("guests[].resources.memory_mib"));
    assert!(
        !fields.contains("guests[].resources"),
        "a path with fields is classed by them"
    );
    let answer = needing_class::<crate::poll::PollResponse>(POLL_ANSWER, &[POLL_DESIRED]);
    assert!(!answer.iter().any(|f| f.starts_with("desired")));
}

#[test]
fn every_entry_says_why() {
    for entry in DESIRED.iter().chain(POLL_ANSWER) {
        assert!(
            !entry.reason.trim().is_empty() && entry.reason.len() <= 160,
            "{}: a reason of one line",
            entry.path
        );
    }
}
