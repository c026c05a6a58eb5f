//! End to end on loopback: the simulator, a real hub and the agent. Enroll,
//! desired state with two guests → both provisioned, running, reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;

use std::time::Duration;

use agent_support::*;
use bosun_pvesim::SimConfig;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enroll_then_two_guests_are_provisioned_running_and_reported() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
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
        bosun_agentd::journal::ChainVerdict::Intact { .. }
    ));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
