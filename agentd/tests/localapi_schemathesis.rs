//! `docs/localapi.openapi.json` against the running local API, with Schemathesis
//! (`bosun_tests::schemathesis`): every request the document calls valid is accepted (or
//! refused only for auth, scope, a missing snapshot or a busy guest), no answer is a 5xx, and
//! every answer fits the schema documented for its status.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::path::PathBuf;
use std::time::Instant;

use bosun_tests::schemathesis::{self, Fuzz};
use localapi_support::{Harness, daily_policy, record_own_guest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_api_accepts_what_its_document_accepts() {
    let program = schemathesis::executable(&std::env::current_exe().unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    let harness = Harness::start().await;
    // A consent is bound to the guest the journal records at its vmid: the guest is the
    // agent's own, as every guest with a token is.
    let guest = harness.guest(0).clone();
    record_own_guest(&harness.journal, &guest.guest_id, guest.vmid).await;
    // `GET /v1/backup/due` answers 200 only under a policy.
    harness.policy.send_replace(Some(daily_policy("daily", 15)));
    let document = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/localapi.openapi.json");
    let reports = tempfile::tempdir().unwrap();
    let token = harness.guest(0).token.clone();
    let base = harness.base.clone();
    let started = Instant::now();
    let run = tokio::task::spawn_blocking(move || {
        schemathesis::run(
            &program,
            &Fuzz {
                document: &document,
                base_url: &base,
                bearer: Some(&token),
                tag: None,
                exclude_paths: &[],
                seed: 20_260_314,
                max_examples: 25,
                config: "",
                report_dir: reports.path(),
            },
        )
    })
    .await
    .unwrap();
    match run {
        Ok(passed) => println!(
            "schemathesis passed in {:.1?}\n{}",
            started.elapsed(),
            passed.output
        ),
        Err(e) => panic!("{e}"),
    }
}
