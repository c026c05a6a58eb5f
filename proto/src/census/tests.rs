use std::collections::BTreeSet;

use super::*;

fn desired_needing_class() -> BTreeSet<String> {
    let fields = schema::desired_fields().expect("the desired state's schema walks");
    schema::needing_class(&fields, &schema::stops(DESIRED))
}

fn poll_answer_needing_class() -> BTreeSet<String> {
    let fields = schema::poll_answer_fields().expect("the poll answer's schema walks");
    schema::needing_class(&fields, &schema::stops(POLL_ANSWER))
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
    let mut problems = mismatch("bosun.desired/v1", &desired_needing_class(), DESIRED);
    problems.extend(mismatch(
        "bosun.poll-response/v1",
        &poll_answer_needing_class(),
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
    let fields = desired_needing_class();
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
    let fields = desired_needing_class();
    assert!(fields.contains("data_plan"));
    assert!(fields.contains("guests[].golden.signed"));
    assert!(!fields.iter().any(|f| f.starts_with("data_plan.")));
    assert!(fields.contains("guests[].resources.memory_mib"));
    assert!(
        !fields.contains("guests[].resources"),
        "a path with fields is classed by them"
    );
    let answer = poll_answer_needing_class();
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

#[test]
fn an_enumerations_values_are_read_from_its_schema() {
    let fields = schema::desired_fields().expect("the desired state's schema walks");
    let mut states = schema::enum_values(&fields["storage[].state"]);
    states.sort();
    assert_eq!(states, ["attached", "decommissioned", "disconnected"]);
    assert_eq!(
        schema::enum_values(&fields["guests[].power"]),
        ["running", "stopped"]
    );
    assert!(schema::enum_values(&fields["guests[].hostname"]).is_empty());
}
