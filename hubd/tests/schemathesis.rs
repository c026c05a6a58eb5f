//! `docs/hub.openapi.json` against a running hub, with Schemathesis
//! (`bosun_tests::schemathesis`): every request the document calls valid is accepted (or
//! refused only for auth, a missing row or a conflict), no answer is a 5xx, and every answer
//! fits the schema documented for its status. The admin and operations routes run with the
//! admin token; the agent routes with an enrolled host's key and its host id.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use bosun_tests::schemathesis::{self, Fuzz};
use common::TestHub;

/// The admin operations whose schema-valid requests the hub may still refuse with 400 or 422,
/// for rules between values that an OpenAPI schema cannot state:
/// - a signed job's `document` is base64 of a job document the envelope schema cannot see into
///   (its schema, target host, kind and params), and its `signature` is checked against it;
/// - an artifact's body must hash to the digest its path names;
/// - the audit trail's `guest` filter needs `host`, and `since` must parse as a time (`format:
///   date-time` is an annotation only);
/// - a desired-state document's rules across fields: unique guest ids, vmids and storage ids,
///   tiers naming manifest targets, a target's `policy.schedule`; and a calendar event's ranges
///   running forward (the rest of its grammar is the schema's `pattern`).
///
/// Everything else the document calls valid the hub takes: a whole number written as a float
/// where it says `integer`, `op` together with `correlation`, any `before` cursor its pattern
/// allows.
const CROSS_FIELD_RULES: &str = r#"
[[operations]]
include-name = "POST /v1/admin/hosts/{host_id}/jobs"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "422"]

[[operations]]
include-name = "PUT /v1/admin/artifacts/{sha256}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

[[operations]]
include-name = "GET /v1/admin/audit"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404"]

[[operations]]
include-name = "PUT /v1/admin/hosts/{host_id}/desired"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"#;

/// The agent operations whose schema-valid requests the hub may still refuse: a job result
/// names its job in the body and the path (400 `job_id_mismatch` when they differ); and the
/// poll's cross-field rules (below) are not in its schema, so 422 `invalid_field` is allowed
/// there. A 400 (a body that does not parse as its type) is not, but
/// for the poll: OpenAPI 3.1 reads `format: date-time` as an annotation, so a report's
/// timestamps may be any string under its schema, and the hub cannot parse `""` as one. A
/// report at its documented item bounds (1,000 guests, 8,000 restore tests) is larger than the
/// hub's 1 MiB body limit, so a poll that large is answered 413. What stays 422 in the poll are
/// its cross-field rules: increasing audit sequence numbers, a delta's `base_seq` before its
/// `seq`, a vmid listed once across `guests` and `removed_guests`.
const AGENT_RULES: &str = r#"
[[operations]]
include-name = "POST /v1/hosts/{host_id}/jobs/{job_id}/result"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "422"]

[[operations]]
include-name = "POST /v1/hosts/{host_id}/poll"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "413", "422"]

"#;

/// The operator token the admin pass may revoke and rotate.
const FUZZED_TOKEN: &str = "fuzzed";

/// Runs one Schemathesis pass over the operations tagged `tag`, with `bearer`.
async fn fuzz(program: &Path, hub: &TestHub, tag: &'static str, bearer: &str, config: String) {
    let program = program.to_owned();
    let document = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/hub.openapi.json");
    let base = hub.url.clone();
    let bearer = bearer.to_owned();
    let started = Instant::now();
    let run = tokio::task::spawn_blocking(move || {
        let reports = tempfile::tempdir().unwrap();
        schemathesis::run(
            &program,
            &Fuzz {
                document: &document,
                base_url: &base,
                bearer: Some(&bearer),
                tag: Some(tag),
                exclude_paths: &[],
                seed: 20_260_314,
                max_examples: 25,
                config: &config,
                report_dir: reports.path(),
            },
        )
    })
    .await
    .unwrap();
    match run {
        Ok(passed) => println!(
            "schemathesis passed over `{tag}` in {:.1?}\n{}",
            started.elapsed(),
            passed.output
        ),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_accepts_what_its_document_accepts() {
    let program = schemathesis::executable(&std::env::current_exe().unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    let hub = TestHub::start().await;
    let admin = hub.admin.clone();
    // The fuzz runs with the admin token, and may revoke or rotate any token it names: the
    // operator-token routes are pointed at one made for it, so it never locks itself out.
    let resp = hub
        .admin(
            reqwest::Method::POST,
            "/v1/admin/tokens",
            Some(serde_json::json!({ "name": FUZZED_TOKEN, "role": "viewer" })),
        )
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::CREATED);
    let rules = format!("{CROSS_FIELD_RULES}\n[parameters]\n\"path.name\" = \"{FUZZED_TOKEN}\"\n");
    fuzz(&program, &hub, "admin", &admin, rules).await;
    let resp = hub
        .admin(reqwest::Method::GET, "/v1/admin/hosts", None)
        .await;
    assert_eq!(
        resp.status(),
        reqwest::StatusCode::OK,
        "the admin token outlived the fuzz"
    );
    fuzz(&program, &hub, "operations", &admin, String::new()).await;
    let (host, key) = hub.enroll("fuzzed").await;
    let pinned = format!("{AGENT_RULES}\n[parameters]\n\"path.host_id\" = \"{host}\"\n");
    fuzz(&program, &hub, "agent", &key, pinned).await;
}
