//! End to end on loopback: the simulator, a real hub and the agent. Enroll,
//! desired state with two guests → both provisioned, running, reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enroll_then_two_guests_are_provisioned_running_and_reported() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host_id = agent.handles.host_id;

    // The host key is stored 0600 and never logged or left in the config dir.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(files.state_dir.join("host.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let a = Uuid::new_v4();
    let b = Uuid::new_v4();
    hub.put_desired(
        host_id,
        &desired(&sim, &[(a, "alpha"), (b, "bravo")], "running"),
    )
    .await;

    let status = agent.handles.reconcile.clone();
    eventually(Duration::from_secs(60), "both guests running", || {
        let status = status.clone();
        async move {
            let s = status.borrow();
            s.applied_generation >= 1
                && s.guests.iter().filter(|g| g.guest_id.is_some()).count() == 2
                && s.guests
                    .iter()
                    .all(|g| g.status == bosun_proto::report::GuestStatus::Running)
        }
    })
    .await;

    // Proxmox holds exactly two guests, both running, sized and named as desired.
    let ids = sim.guest_ids();
    assert_eq!(ids.len(), 2, "no duplicate or half-built guest: {ids:?}");
    let mut names: Vec<String> = ids
        .iter()
        .map(|v| sim.guest_config(*v).unwrap()["hostname"].clone())
        .collect();
    names.sort();
    assert_eq!(names, ["alpha", "bravo"]);
    for vmid in &ids {
        assert_eq!(sim.guest_running(*vmid), Some(true));
        let config = sim.guest_config(*vmid).unwrap();
        assert_eq!(config.get("cores").map(String::as_str), Some("2"));
        assert_eq!(config.get("memory").map(String::as_str), Some("1024"));
        assert!(
            config.get("rootfs").is_some_and(|r| r.contains("size=10G")),
            "{config:?}"
        );
        // A fresh MAC, not the golden archive's.
        let net0 = config.get("net0").cloned().unwrap_or_default();
        assert!(net0.starts_with("name=eth0,bridge=vmbr0"), "{net0}");
        assert!(
            !net0.contains("BC:24:11:5E:A1:07"),
            "golden MAC kept: {net0}"
        );
        assert!(config.contains_key("hostname"));
    }

    // The hub received the report: both guests running, the generation applied.
    eventually(Duration::from_secs(30), "hub shows the report", || {
        let hub = &hub;
        async move {
            let host = hub.host(host_id).await;
            let text = host.to_string();
            text.contains(&a.to_string()) && text.contains(&b.to_string())
        }
    })
    .await;

    // Every operation of the journal ended; the audit chain is intact.
    let unfinished = agent.handles.journal.unfinished_operations().await.unwrap();
    assert!(unfinished.is_empty(), "{unfinished:?}");
    assert!(matches!(
        agent.handles.journal.verify_audit_chain().await.unwrap(),
        bosun_agentd::ops::journal::ChainVerdict::Intact { .. }
    ));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// The guests the hub holds for `host`: (guest id, status).
async fn hub_guests(hub: &RealHub, host: Uuid) -> Vec<(String, String)> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()
        .map(|guests| {
            guests
                .iter()
                .map(|g| {
                    (
                        g["guest_id"].as_str().unwrap_or_default().to_owned(),
                        g["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn hub_shows(hub: &RealHub, host: Uuid, guest: Uuid, status: &str, what: &str) {
    eventually(Duration::from_secs(60), what, || async move {
        hub_guests(hub, host)
            .await
            .iter()
            .any(|(g, s)| *g == guest.to_string() && s == status)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_deltas_after_a_full_one_and_a_hub_restart_resyncs() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let both = [(a, "alpha"), (b, "bravo")];
    hub.put_desired(host, &desired(&sim, &both, "running"))
        .await;
    hub_shows(&hub, host, a, "running", "alpha running at the hub").await;
    hub_shows(&hub, host, b, "running", "bravo running at the hub").await;

    // Steady state: deltas only, no further full report.
    let status = agent.handles.hub.clone();
    let fulls = status.borrow().full_reports;
    assert!(fulls >= 1, "the first report is full");
    let deltas = status.borrow().delta_reports;
    eventually(Duration::from_secs(30), "two more deltas", || {
        let status = status.clone();
        async move { status.borrow().delta_reports >= deltas + 2 }
    })
    .await;

    // A change travels as a delta and the hub merges it.
    let mut stop_b = desired(&sim, &both, "running");
    stop_b["guests"][1]["power"] = "stopped".into();
    hub.put_desired(host, &stop_b).await;
    hub_shows(&hub, host, b, "stopped", "bravo stopped at the hub").await;
    assert_eq!(
        status.borrow().full_reports,
        fulls,
        "the change went out as a delta"
    );
    assert_eq!(hub_guests(&hub, host).await.len(), 2);

    // The hub goes down and the agent notices (a poll fails), then the hub comes back: the
    // agent reconnects with a full report, then deltas again. A restart too quick for the
    // agent to notice resyncs nothing, and needs nothing: the hub stopped with every report
    // on disk, so the agent's next delta still follows on from what the hub kept.
    let paused = hub.pause().await;
    eventually(
        Duration::from_secs(60),
        "the agent sees the hub down",
        || {
            let status = status.clone();
            async move { status.borrow().failures > 0 }
        },
    )
    .await;
    let hub = paused.resume().await;
    // The agent's backoff while the hub was down, on a machine busy with other suites.
    eventually(
        Duration::from_secs(120),
        "a full report after reconnect",
        || {
            let status = status.clone();
            async move { status.borrow().full_reports > fulls }
        },
    )
    .await;
    hub.put_desired(host, &desired(&sim, &both, "running"))
        .await;
    hub_shows(&hub, host, b, "running", "bravo running again").await;
    let mut guests = hub_guests(&hub, host).await;
    guests.sort();
    let mut want = vec![
        (a.to_string(), "running".to_owned()),
        (b.to_string(), "running".to_owned()),
    ];
    want.sort();
    assert_eq!(guests, want);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
