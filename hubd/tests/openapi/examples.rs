//! Every `docs/proto/` example parses into its Rust type and fits the schema the document
//! names for it; every example inside the document fits the schema it illustrates.

use bosun_hubd::api::openapi;
use serde_json::Value;

use super::schema::Schemas;
use super::{document, documented, repo};

/// Parses `text` as `T` and runs its own validation.
fn parses<T: serde::de::DeserializeOwned>(
    validate: fn(&T) -> Result<(), bosun_proto::ValidationError>,
) -> impl Fn(&str) -> Result<(), String> {
    move |text| {
        let value: T = serde_json::from_str(text).map_err(|e| e.to_string())?;
        validate(&value).map_err(|e| e.to_string())
    }
}

#[test]
fn every_example_fits_its_schema_and_its_type() {
    use bosun_proto::{admin as a, delta, desired, enroll, escrow, job, poll, report};
    type Check = Box<dyn Fn(&str) -> Result<(), String>>;
    let table: Vec<(&str, &str, Check)> = vec![
        (
            "enroll-request.json",
            "EnrollRequest",
            Box::new(parses(enroll::EnrollRequest::validate)),
        ),
        (
            "enroll-response.json",
            "EnrollResponse",
            Box::new(parses(|_: &enroll::EnrollResponse| Ok(()))),
        ),
        (
            "enroll-response-replacement.json",
            "EnrollResponse",
            Box::new(parses(|_: &enroll::EnrollResponse| Ok(()))),
        ),
        (
            "poll-request.json",
            "PollRequest",
            Box::new(parses(poll::PollRequest::validate)),
        ),
        (
            "poll-request-delta.json",
            "PollRequest",
            Box::new(parses(poll::PollRequest::validate)),
        ),
        (
            "poll-response.json",
            "PollResponse",
            Box::new(parses(poll::PollResponse::validate)),
        ),
        (
            "report.json",
            "StateReport",
            Box::new(parses(report::StateReport::validate)),
        ),
        (
            "report-delta.json",
            "ReportDelta",
            Box::new(parses(delta::ReportDelta::validate)),
        ),
        (
            "desired.json",
            "DesiredState",
            Box::new(parses(desired::DesiredState::validate)),
        ),
        (
            "desired-ordered.json",
            "DesiredState",
            Box::new(parses(desired::DesiredState::validate)),
        ),
        (
            "signed-job.json",
            "SignedJob",
            Box::new(parses(job::SignedJob::validate)),
        ),
        (
            "job-result.json",
            "JobResult",
            Box::new(parses(job::JobResult::validate)),
        ),
        (
            "escrow.json",
            "EscrowBlob",
            Box::new(parses(escrow::EscrowBlob::validate)),
        ),
        (
            "error.json",
            "ErrorBody",
            Box::new(parses(|_: &a::ErrorBody| Ok(()))),
        ),
    ];
    // Not hub API bodies: the bytes an operator signs (inside `SignedJob.document`) and what
    // the agent pushes into a guest.
    let elsewhere = ["job.json", "bootstrap.json"];

    let doc = document();
    let schemas = Schemas::of(&doc);
    let mut files: Vec<String> = std::fs::read_dir(repo("docs/proto"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".json"))
        .collect();
    files.sort();
    for file in &files {
        assert!(
            table.iter().any(|(f, ..)| f == file) || elsewhere.contains(&file.as_str()),
            "docs/proto/{file} names no schema of the hub API; add it to this table"
        );
    }
    for (file, schema, parse) in &table {
        let text = std::fs::read_to_string(repo("docs/proto").join(file)).unwrap();
        parse(&text).unwrap_or_else(|e| panic!("{file} as the Rust type: {e}"));
        let value: Value = serde_json::from_str(&text).unwrap();
        schemas
            .named(schema, &value)
            .unwrap_or_else(|e| panic!("{file} against {schema}: {e}"));
    }

    // The examples inside the document fit the schema they illustrate.
    let mut examples = 0;
    for (method, path) in documented(&doc) {
        let op = &doc["paths"][&path][&method];
        let mut bodies = vec![("request".to_owned(), &op["requestBody"]["content"])];
        for (status, response) in op["responses"].as_object().unwrap() {
            bodies.push((status.clone(), &response["content"]));
        }
        for (what, content) in bodies {
            let media = &content["application/json"];
            if media["example"].is_null() {
                continue;
            }
            examples += 1;
            schemas
                .check(
                    &media["schema"],
                    &media["example"],
                    &format!("{method} {path} {what}"),
                )
                .unwrap();
        }
    }
    assert!(examples >= 20, "only {examples} examples in the document");
    // Each example landed where the table puts it.
    for (method, path, status, text) in openapi::EXAMPLES {
        let op = &doc["paths"][*path][*method];
        let content = match status {
            None => &op["requestBody"]["content"],
            Some(status) => &op["responses"][*status]["content"],
        };
        let expected: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            content["application/json"]["example"], expected,
            "{method} {path} {status:?}: the example is missing"
        );
    }
    assert!(openapi::EXAMPLES.len() >= 10);
}

/// A request example is one a hub takes today: the signed job's window lies ahead (a hub
/// refuses an expired job with 400 `job_expired`, and the fuzzer sends the examples first), and
/// stays ahead for years.
#[test]
fn the_job_examples_have_not_expired() {
    use bosun_proto::job::SignedJob;
    let years_ahead = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 366 * 10);
    for file in ["signed-job.json", "poll-response.json"] {
        let text = std::fs::read_to_string(repo("docs/proto").join(file)).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let signed: Vec<SignedJob> = match file {
            "signed-job.json" => vec![serde_json::from_value(value).unwrap()],
            _ => serde_json::from_value(value["jobs"].clone()).unwrap(),
        };
        assert!(!signed.is_empty(), "{file} holds no job");
        for job in signed {
            let document = job.parse_document().unwrap();
            assert!(
                document.expires_at > years_ahead,
                "{file}: job {} expires at {}; move its window further ahead",
                document.job_id,
                document.expires_at
            );
        }
    }
}

/// A calendar event the grammar refuses does not fit the document's schedule schema, and the
/// ones it takes do.
#[test]
fn the_schedule_schema_is_the_calendar_grammar() {
    let doc = document();
    let schemas = Schemas::of(&doc);
    let schedule = &doc["components"]["schemas"]["BackupPolicy"]["properties"]["schedule"];
    for event in [
        "daily",
        "02:30",
        "mon..fri 22:00",
        "sat,sun 03:00",
        "*-*-01",
        "2026..2030/2-06-15 12:00",
        "*:0/15",
        "semi-annually",
    ] {
        bosun_proto::calendar::CalendarEvent::parse(event).unwrap();
        schemas
            .check(schedule, &Value::from(event), event)
            .unwrap_or_else(|e| panic!("{event:?} does not fit: {e}"));
    }
    for event in [
        "0",
        "7",
        "25:00",
        "*-13-01",
        "mon 1",
        "fortnightly",
        "02:30 mon",
    ] {
        assert!(
            bosun_proto::calendar::CalendarEvent::parse(event).is_err(),
            "{event}"
        );
        assert!(
            schemas.check(schedule, &Value::from(event), event).is_err(),
            "{event:?} fits the schedule schema"
        );
    }
}
