//! The recovery code at enrollment (DESIGN §8a, decision 0075): `bosun-agentctl enroll`, the
//! real binary, enrolls a fresh box at a real hub and makes the escrow in the same command, so
//! the code is printed once; a second run finishes nothing twice and prints no code; the
//! deferred path (`--escrow-later`) enrolls without one and the hub's `escrow_missing` alert
//! stays open until `escrow create` runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::escrow_support;

use std::time::Duration;

use agent_support::*;
use bosun_pvesim::SimConfig;
use escrow_support::*;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

/// `enroll --sheet <sheets> --work-factor 12 <extra>` on `config`.
async fn enroll(config: &std::path::Path, sheets: &std::path::Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "enroll",
        "--sheet",
        sheets.to_str().unwrap(),
        "--work-factor",
        WORK_FACTOR,
        "--customer",
        "Acme GmbH",
    ];
    args.extend_from_slice(extra);
    agentctl(config, &args, None).await
}

async fn open_alerts(hub: &RealHub, host: Uuid, kind: &str) -> usize {
    let (_, alerts) = hub.admin(Method::GET, "/v1/admin/alerts/open", None).await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind && a["host_id"] == host.to_string().as_str())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrolling_makes_the_escrow_once_and_a_second_run_shows_no_code() {
    let hub = RealHub::start().await;
    let sim = start_sim(SimConfig::fast()).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let scratch = tempfile::tempdir().unwrap();
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();

    // One command: enrolled, K made, the sheet printed, the blob at the hub.
    let run = enroll(&files.config_path, &first, &[]).await;
    run.expect(
        0,
        &[
            "(enrolled now)",
            "Print the sheet now",
            "systemctl enable --now",
        ],
    );
    let host: Uuid = run
        .field("host")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(run.field("sealing recipient").starts_with("age1"), "{run}");
    let pdf = std::path::PathBuf::from(run.field("recovery sheet"));
    assert_eq!(pdf.parent(), Some(first.as_path()));
    assert_eq!(mode(&pdf), 0o600);
    let words = words_on_sheet(&pdf);
    assert!(is_code(&words), "the sheet's words are a code");
    let fingerprint = run.field("key fingerprint");
    let blob = hub_blob(&hub, host).await;
    assert_eq!(blob["key_fingerprint"], fingerprint.as_str());

    // Again: enrolled before, the escrow exists, no code is printed and nothing changes.
    let again = enroll(&files.config_path, &second, &[]).await;
    again.expect(
        0,
        &["(enrolled before)", "its recovery code is not shown again"],
    );
    assert!(!again.stdout.contains("recovery sheet:"), "{again}");
    assert_eq!(
        std::fs::read_dir(&second).unwrap().count(),
        0,
        "no second sheet"
    );
    assert_eq!(hub_blob(&hub, host).await, blob);

    // The agent starts as the enrolled host, reports the escrowed K, and the hub calls the
    // escrow verified; while it runs, enroll refuses (the state directory is the agent's).
    let agent = InProcessAgent::start(&files.config_path).await;
    assert_eq!(agent.handles.host_id, host);
    eventually(Duration::from_secs(30), "the escrow verified", || async {
        hub.host(host).await["escrow"]["state"] == "verified"
    })
    .await;
    enroll(&files.config_path, &second, &[])
        .await
        .expect(75, &["stop bosun-agentd"]);
    agent.stop().await;
    let (_, hosts) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
    assert_eq!(hosts.as_array().map(Vec::len), Some(1), "enrolled once");
    assert_codes_not_stored(&[&files.state_dir, hub.dir.path()], &[&words]);
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrolling_without_the_customer_keeps_escrow_missing_until_the_escrow_exists() {
    let hub = RealHub::start().await;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    let sim = start_sim(SimConfig::fast()).await;
    sim.add_pbs_remote(
        escrow_support::pbs::PBS,
        escrow_support::pbs::FP,
        "store1",
        &password,
    );
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));

    // A sheet directory is not asked for, and nothing is printed but the reminder.
    let run = agentctl(&files.config_path, &["enroll", "--escrow-later"], None).await;
    run.expect(0, &["(enrolled now)", "escrow: none yet", "escrow_missing"]);
    assert!(!run.stdout.contains("recovery sheet:"), "{run}");
    let host: Uuid = run
        .field("host")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Without the flag, a sheet directory is required.
    agentctl(&files.config_path, &["enroll"], None)
        .await
        .expect(2, &["--sheet"]);

    // The host backs up to PBS: the hub alerts escrow_missing, and keeps it open.
    let agent = InProcessAgent::start(&files.config_path).await;
    let recipient = hub_recipient(&hub, host).await;
    let mut state: Value = desired(&sim, &[], "running");
    escrow_support::pbs::with_pbs(&mut state, host, &recipient, &password);
    hub.put_desired(host, &state).await;
    eventually(Duration::from_secs(60), "escrow_missing opens", || async {
        open_alerts(&hub, host, "escrow_missing").await == 1
    })
    .await;
    // A second deferred run changes nothing: still no escrow, still alerted.
    agent.stop().await;
    agentctl(&files.config_path, &["enroll", "--escrow-later"], None)
        .await
        .expect(0, &["(enrolled before)", "escrow: none yet"]);
    let agent = InProcessAgent::start(&files.config_path).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(open_alerts(&hub, host, "escrow_missing").await, 1);

    // With the customer: the escrow exists, the alert resolves.
    let sheets = tempfile::tempdir().unwrap();
    let made = agentctl(
        &files.config_path,
        &[
            "escrow",
            "create",
            "--sheet",
            sheets.path().to_str().unwrap(),
            "--work-factor",
            WORK_FACTOR,
        ],
        None,
    )
    .await;
    made.expect(0, &["recovery sheet: "]);
    eventually(
        Duration::from_secs(30),
        "escrow_missing resolved",
        || async { open_alerts(&hub, host, "escrow_missing").await == 0 },
    )
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
