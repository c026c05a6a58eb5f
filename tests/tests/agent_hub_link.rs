//! The hub link cannot be bent (DESIGN §5): the agent process against a hostile hub
//! over real TLS with the pinned certificate, counting what reaches the hub, a plain
//! http listener and the simulator.
//!
//! - a generation that goes backwards is acted on, cached and audited once, so a
//!   restart while the hub is away does not bring the hostile document back;
//! - a hub cannot park the agent with out-of-range timings;
//! - acks never exceed what the real hub accepts, so a repaired hub is polled again;
//! - no redirect is followed (the report never goes out in clear);
//! - an over-large answer and a job flood are capped, audited once, and cheap.
//!
//! `forged_job_flood_figures` (ignored) is the benchmark in `docs/benchmarks.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::process::AgentProcess;
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::*;
use bosun_proto::job::JobOutcome;
use bosun_proto::poll::{MAX_ACKED_JOBS, MAX_JOBS_PER_POLL};
use bosun_pvesim::{SimConfig, SimHandle};
use serde_json::{Value, json};
use uuid::Uuid;

struct Stack {
    sim: SimHandle,
    hub: HostileHub,
    files: AgentFiles,
}

async fn stack() -> Stack {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    Stack { sim, hub, files }
}

/// Audit entries of `action` the agent reported.
fn audited(hub: &HostileHub, action: &str) -> Vec<Value> {
    hub.audit()
        .into_iter()
        .filter(|(a, _)| a == action)
        .map(|(_, d)| d)
        .collect()
}

/// `count` jobs for `host` the operator never signed: each carries a real signature
/// by a key that is not trusted, made once over another document.
fn forged_jobs(host: Uuid, count: usize) -> Vec<Value> {
    let stranger = OperatorKey::new("stranger@example");
    let sample = job_doc("decommission", host, Uuid::new_v4(), 100, json!({}), 1);
    let signature = stranger.sign(&serde_json::to_vec(&sample).unwrap(), "bosun-job@v1");
    (0..count)
        .map(|_| {
            let doc = job_doc("decommission", host, Uuid::new_v4(), 100, json!({}), 1);
            envelope(&serde_json::to_vec(&doc).unwrap(), &signature)
        })
        .collect()
}

/// The memory (MiB) of the only guest in the simulator, once it runs.
fn guest_memory(sim: &SimHandle) -> Option<String> {
    let vmid = *sim.guest_ids().first()?;
    if sim.guest_running(vmid) != Some(true) {
        return None;
    }
    sim.guest_config(vmid)?.get("memory").cloned()
}

/// Item 2: a generation frozen at 2^63−1 by a hostile hub is undone by the hub's reset,
/// and a restart while the hub is unreachable keeps the reset's document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_goes_backwards_is_acted_on_and_cached() {
    let Stack { sim, hub, files } = stack().await;
    let guest = Uuid::new_v4();
    let mut hostile = desired(&sim, &[(guest, "customer")], "running");
    hostile["guests"][0]["resources"]["memory_mib"] = json!(256);
    hub.set_desired_at(u64::try_from(i64::MAX).unwrap(), hostile);
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(60), "guest at 256 MiB", || {
        let m = guest_memory(&sim);
        async move { m.as_deref() == Some("256") }
    })
    .await;

    // The hub is reset: generation 1 again, 512 MiB.
    let mut reset = desired(&sim, &[(guest, "customer")], "running");
    reset["guests"][0]["resources"]["memory_mib"] = json!(512);
    hub.set_desired_at(1, reset);
    eventually(Duration::from_secs(30), "guest at 512 MiB", || {
        let m = guest_memory(&sim);
        async move { m.as_deref() == Some("512") }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resets = audited(&hub, "desired.generation_reset");
    let last = hub.last_poll().unwrap();
    assert_eq!(
        last.known_generation, 1,
        "the agent holds the reset generation"
    );
    eventually(
        Duration::from_secs(30),
        "generation 1 reported applied",
        || {
            let applied = hub.last_poll().map(|p| p.applied_generation);
            async move { applied == Some(1) }
        },
    )
    .await;

    // Restart while the hub is unreachable: the agent acts on its cache.
    agent.stop();
    hub.shutdown();
    sim.clear_requests();
    let agent = AgentProcess::start(&files.config_path);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let shrunk: Vec<_> = mutations(&sim)
        .into_iter()
        .filter(|r| r.params.iter().any(|(k, v)| k == "memory" && v == "256"))
        .collect();
    assert!(
        shrunk.is_empty(),
        "the hostile document came back after the restart: {shrunk:?}"
    );
    assert_eq!(guest_memory(&sim).as_deref(), Some("512"));
    assert_eq!(resets.len(), 1, "the reset audited once: {resets:?}");
    assert_eq!(resets[0]["detail"]["generation"], 1);
    agent.stop();
    sim.shutdown().await;
}

/// Item 3: `poll_interval_seconds = 86400` with `long_poll_seconds = 0` does not park
/// the agent: the config is refused (audited once), and polls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_cannot_park_the_agent() {
    let Stack { sim, hub, files } = stack().await;
    hub.script.lock().config = Some(json!({
        "poll_interval_seconds": 86_400,
        "long_poll_seconds": 0,
    }));
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "the parking config sent", || {
        let n = hub.answered(200);
        async move { n >= 2 }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The hub reverts.
    hub.script.lock().config = None;
    let before = hub.answered(200);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = hub.answered(200);
    assert!(
        after >= before + 3,
        "the agent stopped polling: {before} polls before the revert, {after} five seconds later"
    );
    let refused = audited(&hub, "hub.config_refused");
    assert_eq!(refused.len(), 1, "audited once: {refused:?}");
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}

/// Item 4: 1,200 forged jobs whose acks a failing hub never takes; the repaired hub
/// (checking polls as the real one does, at most 1,000 acks) is polled again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_never_exceed_what_the_real_hub_accepts() {
    let Stack { sim, hub, files } = stack().await;
    let flood: Vec<Value> = forged_jobs(hub.host_id, 1_200);
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "first poll", || {
        let n = hub.answered(200);
        async move { n >= 1 }
    })
    .await;
    hub.script.lock().flood = Some(serde_json::to_string(&flood).unwrap());
    eventually(Duration::from_secs(30), "the forged jobs sent", || {
        let sent = hub.script.lock().flood_sent.is_some();
        async move { sent }
    })
    .await;
    // The hub fails every poll from now on, so no ack is ever taken.
    hub.script.lock().fail_with = Some(503);
    eventually(Duration::from_secs(120), "the forged jobs answered", || {
        let s = hub.script.lock();
        let quiet = s
            .last_result_at
            .is_some_and(|t| t.elapsed() > Duration::from_secs(3));
        async move { quiet }
    })
    .await;
    let rejected = hub
        .results()
        .iter()
        .filter(|r| r.outcome == JobOutcome::Rejected)
        .count();
    assert!(rejected > 0, "the forged jobs are answered rejected");
    // The hub is repaired.
    {
        let mut s = hub.script.lock();
        s.fail_with = None;
        s.strict = true;
    }
    let before = hub.answered(200);
    eventually(Duration::from_secs(20), "the repaired hub polled", || {
        let n = hub.answered(200);
        async move { n >= before + 2 }
    })
    .await;
    let (most, refused) = {
        let s = hub.script.lock();
        let most = s.polls.iter().map(|p| p.acked_jobs.len()).max().unwrap();
        (most, s.statuses.iter().filter(|s| **s == 422).count())
    };
    assert!(most <= MAX_ACKED_JOBS, "a poll carried {most} acks");
    assert_eq!(refused, 0, "the repaired hub refused polls");
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}

/// A plain http listener that counts connections.
async fn plain_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, count)
}

/// Item 5: a 307 to plain http is not followed; the report never goes out in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_client_follows_no_redirect() {
    let Stack { sim, hub, files } = stack().await;
    let (port, plain) = plain_listener().await;
    hub.script.lock().redirect_to = Some(format!(
        "http://127.0.0.1:{port}/v1/hosts/{}/poll",
        hub.host_id
    ));
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "three redirects answered", || {
        let n = hub.answered(307);
        async move { n >= 3 }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        plain.load(Ordering::SeqCst),
        0,
        "the agent followed the redirect to plain http"
    );
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}

/// A TLS server (its own self-signed leaf) answering every request with a 307 to `to`;
/// gives its url and fingerprint.
async fn redirector(to: String) -> (String, String) {
    install_crypto();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = cert.cert.der().to_vec();
    let fingerprint = bosun_proto::fingerprint::cert_sha256(&der);
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![der.into()], key)
        .unwrap();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let app = axum::Router::new().fallback(move || {
        let to = to.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, to)],
            )
        }
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let server = axum_server::from_tcp_rustls(
        listener,
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls)),
    )
    .unwrap();
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    (url, fingerprint)
}

/// Item 5, every client: the agent's hub and Proxmox clients, the guest's local-API
/// client and bosunctl each refuse a redirect instead of following it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_bosun_client_follows_a_redirect() {
    let (port, plain) = plain_listener().await;
    let (url, fingerprint) = redirector(format!("http://127.0.0.1:{port}/elsewhere")).await;

    let hub =
        bosun_agentd::links::hub_client::client::HubClient::new(url.parse().unwrap(), &fingerprint)
            .unwrap();
    let enrolled = hub
        .enroll(&secrecy::SecretString::from("token"), "host", None)
        .await;
    assert!(enrolled.is_err(), "hub client: {enrolled:?}");
    followed(&plain, "hub client").await;

    let pve = bosun_pve::PveClient::new(bosun_pve::PveConfig {
        base_url: format!("{url}/api2/json").parse().unwrap(),
        node: bosun_pve::NodeName::new("pve".to_owned()).unwrap(),
        token_id: "bosun@pve!agent".into(),
        token_secret: secrecy::SecretString::from("secret"),
        trust: bosun_pve::TlsTrust::PinnedSha256(fingerprint.clone()),
        policy: bosun_pve::RetryPolicy::fast(),
    })
    .unwrap();
    let version = bosun_pve::Pve::version(&pve).await;
    assert!(version.is_err(), "proxmox client: {version:?}");
    followed(&plain, "proxmox client").await;

    let guest = bosun_guest::client::LocalApiClient::new(
        &url,
        &fingerprint,
        bosun_proto::secret::SecretToken::new("token"),
    )
    .unwrap();
    let due = guest.backup_due().await;
    assert!(due.is_err(), "guest client: {due:?}");
    followed(&plain, "guest client").await;

    let ctl = bosunctl::client::HubClient::new(bosunctl::config::Settings {
        url: url.clone(),
        fingerprint: fingerprint.clone(),
        token: secrecy::SecretString::from("admin"),
        allowed_signers: None,
    })
    .unwrap();
    let hosts = ctl
        .call(reqwest::Method::GET, "/v1/admin/hosts", None, &[])
        .await;
    assert!(hosts.is_err(), "bosunctl: {hosts:?}");
    followed(&plain, "bosunctl").await;
}

async fn followed(plain: &AtomicUsize, client: &str) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        plain.load(Ordering::SeqCst),
        0,
        "the {client} followed the redirect to plain http"
    );
}

/// Item 6a: a 50 MB answer is refused without being read whole, audited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_is_refused_and_audited_once() {
    let Stack { sim, hub, files } = stack().await;
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "steady polling", || {
        let n = hub.answered(200);
        async move { n >= 5 }
    })
    .await;
    let base_kb = agent.status_kb("VmHWM");
    hub.script.lock().padding = Some(50_000_000);
    let before = hub.answered(200);
    eventually(Duration::from_secs(60), "three padded answers", || {
        let n = hub.answered(200);
        async move { n >= before + 3 }
    })
    .await;
    let peak_kb = agent.status_kb("VmHWM");
    assert!(
        peak_kb < base_kb + 40 * 1024,
        "peak RSS grew from {base_kb} kB to {peak_kb} kB on a 50 MB answer"
    );
    hub.script.lock().padding = None;
    eventually(Duration::from_secs(30), "the refusal audited", || {
        let n = audited(&hub, "hub.answer_too_large").len();
        async move { n > 0 }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        audited(&hub, "hub.answer_too_large").len(),
        1,
        "audited once"
    );
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}

/// Item 6b: 10,000 forged jobs in one answer: at most one poll's worth is looked at
/// (each answered `rejected`), the cap audited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_flood_is_capped_and_audited_once() {
    let Stack { sim, hub, files } = stack().await;
    let flood = serde_json::to_string(&forged_jobs(hub.host_id, 10_000)).unwrap();
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "first poll", || {
        let n = hub.answered(200);
        async move { n >= 1 }
    })
    .await;
    hub.script.lock().flood = Some(flood);
    eventually(Duration::from_secs(30), "the kept jobs answered", || {
        let n = hub.results().len();
        async move { n >= MAX_JOBS_PER_POLL }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let results = hub.results();
    assert_eq!(
        results.len(),
        MAX_JOBS_PER_POLL,
        "one poll's worth answered"
    );
    assert!(results.iter().all(|r| r.outcome == JobOutcome::Rejected));
    eventually(Duration::from_secs(30), "the cap audited", || {
        let n = audited(&hub, "hub.jobs_capped").len();
        async move { n > 0 }
    })
    .await;
    let capped = audited(&hub, "hub.jobs_capped");
    assert_eq!(capped.len(), 1, "audited once: {capped:?}");
    assert_eq!(capped[0]["detail"]["offered"], 10_000);
    assert_eq!(sim.guest_ids().len(), 0);
    assert!(destructive(&sim).is_empty());
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}

/// The forged-job flood benchmark: 10,000 forged jobs in one answer; time until every
/// job the agent takes is answered `rejected` and acked, and the agent's peak RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn forged_job_flood_figures() {
    let Stack { sim, hub, files } = stack().await;
    let jobs = forged_jobs(hub.host_id, 10_000);
    let flood = serde_json::to_string(&jobs).unwrap();
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "steady polling", || {
        let n = hub.answered(200);
        async move { n >= 5 }
    })
    .await;
    let idle_kb = agent.status_kb("VmHWM");
    let answer_bytes = flood.len();
    hub.script.lock().flood = Some(flood);
    let deadline = Instant::now() + Duration::from_secs(300);
    let taken = loop {
        {
            let s = hub.script.lock();
            if let Some(sent) = s.flood_sent {
                let acked: usize = s.polls.iter().map(|p| p.acked_jobs.len()).sum();
                let answered = s.results.len();
                let audited = s
                    .polls
                    .iter()
                    .flat_map(|p| p.audit().to_vec())
                    .any(|e| e.action == "hub.jobs_capped");
                // Capped (one poll's worth answered) or, for an agent without the
                // cap, every job answered.
                let capped_done = audited && answered >= MAX_JOBS_PER_POLL.min(jobs.len());
                let all_done = answered >= jobs.len();
                if (capped_done || all_done) && acked >= answered {
                    let done = s
                        .poll_times
                        .iter()
                        .zip(&s.polls)
                        .filter(|(_, p)| !p.acked_jobs.is_empty())
                        .map(|(t, _)| *t)
                        .max()
                        .unwrap();
                    break done.max(s.last_result_at.unwrap()) - sent;
                }
            }
        }
        assert!(Instant::now() < deadline, "the flood was not handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak_kb = agent.status_kb("VmHWM");
    let rss_kb = agent.status_kb("VmRSS");
    println!(
        "forged-job flood: {} jobs in one {answer_bytes}-byte answer; {} answered rejected; handled in {:?}; VmHWM {idle_kb} kB before, {peak_kb} kB after; VmRSS {rss_kb} kB",
        jobs.len(),
        hub.results().len(),
        taken
    );
    agent.stop();
    hub.shutdown();
    sim.shutdown().await;
}
