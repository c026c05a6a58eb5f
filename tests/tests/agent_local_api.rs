//! The agent runtime with `[helper]` and `[local_api]` switched on: a provisioned guest gets
//! its `bootstrap.json` pushed through the helper's wire protocol once it runs — on a later
//! reconcile pass when the first push failed — naming the local API the agent really serves,
//! and the token in it works there (pinned certificate, policy fed from the desired state),
//! while a made-up token does not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use crate::raw_tls;

use std::time::Duration;

use agent_support::*;
use sha2::{Digest, Sha256};
use uuid::Uuid;

fn pinned_fingerprint(response: &reqwest::Response) -> String {
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("tls info recorded");
    let der = info.peer_certificate().expect("the server sent a leaf");
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_guest_gets_a_bootstrap_whose_token_works_on_the_served_local_api() {
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    files.use_local_api(0, "[backup]\nstorage = \"local\"\n");

    let agent = InProcessAgent::start(&files.config_path).await;
    let endpoint = agent
        .handles
        .local_api
        .clone()
        .expect("the local api is served");
    assert_eq!(endpoint.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(endpoint.addr.port(), 0, "the bound port is reported");

    // The first push fails (as `pct push` does for a CT that is not running yet): the guest
    // is kept and a later reconcile pass delivers the bootstrap.
    helper
        .fail_writes
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let guest = Uuid::new_v4();
    hub.put_desired(
        agent.handles.host_id,
        &desired(&sim, &[(guest, "alpha")], "running"),
    )
    .await;
    let status = agent.handles.reconcile.clone();
    let vmid = running_vmid(&status, guest).await;
    eventually(Duration::from_secs(30), "a push was tried", || {
        let helper = helper.clone();
        async move { helper.verbs().contains(&"push_bootstrap") }
    })
    .await;
    assert!(!helper.bootstrap_path(vmid).exists());
    helper
        .fail_writes
        .store(false, std::sync::atomic::Ordering::SeqCst);
    eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
        let path = helper.bootstrap_path(vmid);
        async move { path.exists() }
    })
    .await;
    let verbs = helper.verbs();
    let pushes = verbs.iter().filter(|v| **v == "push_bootstrap").count();
    assert!(
        pushes >= 2
            && verbs
                .iter()
                .all(|v| *v == "push_bootstrap" || *v == "hash_archive"),
        "only golden hashes and pushes went through the helper: {verbs:?}"
    );

    let doc = helper.read_bootstrap(vmid);
    assert_eq!(doc.guest_id, guest);
    assert_eq!(doc.local_api.url, format!("https://{}", endpoint.addr));
    assert_eq!(doc.local_api.fingerprint, endpoint.fingerprint);
    assert_eq!(doc.hub.url, hub.url.trim_end_matches('/'));
    assert_eq!(doc.hub.fingerprint, hub.fingerprint.to_lowercase());

    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    // The token's hash is stored right after the push (a crash between the two leaves no
    // hash, and the next pass mints and pushes again), so a controller that reads its
    // bootstrap at once may be told 401 for a moment: it asks again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let storage = loop {
        let answer = client
            .get(format!("{}/v1/storage", doc.local_api.url))
            .bearer_auth(doc.local_api.token.expose())
            .send()
            .await
            .unwrap();
        if answer.status() != 401 || tokio::time::Instant::now() >= deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        pinned_fingerprint(&storage),
        doc.local_api.fingerprint,
        "the served leaf is the one the bootstrap pins"
    );
    assert_eq!(storage.status(), 200);
    let body: serde_json::Value = storage.json().await.unwrap();
    assert_eq!(body["vmid"], vmid, "{body}");

    // The backup policy reaches the local API from the desired state.
    let due = client
        .get(format!("{}/v1/backup/due", doc.local_api.url))
        .bearer_auth(doc.local_api.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(due.status(), 200, "{:?}", due.text().await);

    let stranger = client
        .get(format!("{}/v1/storage", doc.local_api.url))
        .bearer_auth("b".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 401);

    agent.stop().await;
    assert!(
        client
            .get(format!("{}/v1/health", doc.local_api.url))
            .send()
            .await
            .is_err(),
        "the local api stops with the agent"
    );
}

async fn status_of(client: &reqwest::Client, url: &str, token: &str) -> u16 {
    client
        .get(format!("{url}/v1/storage"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_local_api_certificate_reissues_every_running_guests_bootstrap() {
    use bosun_agentd::guests::credentials::rotate::{
        GuestRotation, RotateError, rotate_local_api_cert,
    };
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    // A fixed port: the bootstraps the offline rotation writes name it.
    files.use_local_api(fixed_port(), "");
    let config = bosun_agentd::config::AgentConfig::load(&files.config_path).unwrap();

    let agent = InProcessAgent::start(&files.config_path).await;
    let old_fingerprint = agent.handles.local_api.clone().unwrap().fingerprint;
    let guests = [(Uuid::new_v4(), "alpha"), (Uuid::new_v4(), "bravo")];
    hub.put_desired(agent.handles.host_id, &desired(&sim, &guests, "running"))
        .await;
    let status = agent.handles.reconcile.clone();
    let mut vmids = Vec::new();
    for (guest, _) in &guests {
        let vmid = running_vmid(&status, *guest).await;
        eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
            let path = helper.bootstrap_path(vmid);
            async move { path.exists() }
        })
        .await;
        vmids.push(vmid);
    }
    let old: Vec<_> = vmids.iter().map(|v| helper.read_bootstrap(*v)).collect();
    let url = old[0].local_api.url.clone();
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    assert_eq!(
        status_of(&client, &url, old[0].local_api.token.expose()).await,
        200
    );

    // While the agent runs, the rotation refuses and changes nothing.
    let err = rotate_local_api_cert(&config.rotation()).await.unwrap_err();
    assert!(matches!(err, RotateError::DaemonRunning { .. }), "{err}");
    assert!(err.to_string().contains("stop it first"), "{err}");
    assert_eq!(
        helper.read_bootstrap(vmids[0]).local_api.fingerprint,
        old_fingerprint
    );
    // Nor does a second agent start on the same state directory.
    let second = bosun_agentd::run_with(
        config.clone(),
        tokio_util::sync::CancellationToken::new(),
        bosun_agentd::RunOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(second, bosun_agentd::AgentError::StateLock(_)),
        "{second}"
    );

    agent.stop().await;
    let report = rotate_local_api_cert(&config.rotation()).await.unwrap();
    assert_ne!(report.fingerprint, old_fingerprint);
    assert_eq!(report.guests.len(), 2, "{report:?}");
    assert!(
        report
            .guests
            .iter()
            .all(|(_, _, o)| *o == GuestRotation::Reissued),
        "{report:?}"
    );
    assert!(!report.has_failures());

    // The agent, started again, serves the new leaf; the new bootstraps pin it.
    let agent = InProcessAgent::start(&files.config_path).await;
    assert_eq!(
        agent.handles.local_api.clone().unwrap().fingerprint,
        report.fingerprint
    );
    for (i, vmid) in vmids.iter().enumerate() {
        let new = helper.read_bootstrap(*vmid);
        assert_eq!(new.local_api.fingerprint, report.fingerprint);
        assert_eq!(new.local_api.url, url);
        assert_ne!(
            new.local_api.token.expose(),
            old[i].local_api.token.expose()
        );
        let response = client
            .get(format!("{url}/v1/storage"))
            .bearer_auth(new.local_api.token.expose())
            .send()
            .await
            .unwrap();
        assert_eq!(pinned_fingerprint(&response), report.fingerprint);
        assert_eq!(response.status(), 200);
        assert_eq!(
            status_of(&client, &url, old[i].local_api.token.expose()).await,
            401,
            "the old token is gone"
        );
    }
    agent.stop().await;
}

/// The hub's acknowledgement of the audit tail is recorded in the agent's journal: the
/// retention bound prunes only rows at or below it, so what the hub has not acknowledged
/// is never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hubs_audit_acknowledgement_is_recorded_for_retention() {
    let (_sim, _hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let journal = agent.handles.journal.clone();
    let mut last = 0;
    for n in 0..3 {
        let mut event = bosun_agentd::ops::journal::AuditEvent::new("test.marker");
        event.detail = serde_json::json!({ "n": n });
        last = journal.append_audit(event).await.unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "the hub acknowledges the audit rows",
        || {
            let journal = journal.clone();
            async move { journal.audit_acked().await.unwrap() >= last }
        },
    )
    .await;
    let acked = journal.audit_acked().await.unwrap();
    let (head, _) = journal.audit_head().await.unwrap();
    assert!(acked <= head, "an acknowledgement is clamped to the head");
    // Under the default bound nothing this young is pruned.
    assert_eq!(
        journal.audit_since(0, 10_000).await.unwrap().len() as u64,
        head
    );
    agent.stop().await;
}

/// The agent as configured from its file: one guest address holding idle TLS connections
/// gets only `max_connections_per_peer` of them, loses them to `idle_timeout_ms`, and
/// another guest address is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_connection_caps_and_idle_timeout_hold_against_an_idle_flood() {
    let (_sim, _hub, files) = enrolled_stack().await;
    files.use_local_api(
        0,
        "max_connections = 64\nmax_connections_per_peer = 4\nidle_timeout_ms = 1500\n",
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let endpoint = agent.handles.local_api.clone().expect("served");
    let tls = raw_tls::connector(&endpoint.fingerprint);
    let hostile: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let neighbour: std::net::IpAddr = "127.0.0.3".parse().unwrap();

    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(stream) = raw_tls::tls_from(&tls, hostile, endpoint.addr).await {
            held.push(stream);
        }
    }
    assert_eq!(
        held.len(),
        4,
        "max_connections_per_peer from the config file applies"
    );

    let client = raw_tls::client_from(&endpoint.fingerprint, neighbour);
    let health = client
        .get(format!("https://{}/v1/health", endpoint.addr))
        .send()
        .await
        .expect("the neighbour is served");
    assert_eq!(health.status(), 200);

    for stream in &mut held {
        let (closed, _) = raw_tls::closed_within(stream, Duration::from_secs(10)).await;
        assert!(closed, "idle_timeout_ms from the config file applies");
    }
    // The agent's metrics count both (the test's process runs this one agent).
    let text = bosun_agentd::metrics::agent()
        .render(Default::default(), bosun_metrics::Format::Text004)
        .await
        .unwrap();
    let count = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(
        count("bosun_agent_local_api_connections_refused_total{cap=\"per_peer\"}"),
        196.0
    );
    assert!(count("bosun_agent_local_api_connections_timed_out_total{timeout=\"idle\"}") >= 4.0);
    assert_eq!(
        count("bosun_agent_local_api_connections_timed_out_total{timeout=\"write_stall\"}"),
        0.0
    );
    agent.stop().await;
}
