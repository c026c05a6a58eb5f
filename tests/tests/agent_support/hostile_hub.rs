//! A hub that sends whatever the test tells it to: desired state the real
//! hub would accept, and jobs it would never forward (replayed, retargeted,
//! tampered…). It records every poll and every job result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::routing::post;
use axum::{Json, Router};
use bosun_proto::job::JobResult;
use bosun_proto::poll::PollRequest;
use parking_lot::Mutex;
use serde_json::{Value, json};
use uuid::Uuid;

#[derive(Default)]
pub struct Script {
    pub generation: u64,
    pub desired: Option<Value>,
    pub jobs: Vec<Value>,
    pub polls: Vec<PollRequest>,
    /// The `wait` each poll asked for, in seconds (parallel to `polls`).
    pub waits: Vec<u32>,
    pub results: Vec<JobResult>,
    /// Acknowledge each report by its number (`report_seq`), as the real hub does;
    /// off by default (an older hub that numbers nothing).
    pub numbered: bool,
    /// Answer the next delta with `full_report: true` and no `report_seq`, as a hub that
    /// lost the agent's report does.
    pub forget_next_delta: bool,
}

#[derive(Clone)]
pub struct HostileHub {
    pub url: String,
    pub fingerprint: String,
    pub host_id: Uuid,
    pub script: Arc<Mutex<Script>>,
    handle: axum_server::Handle<std::net::SocketAddr>,
}

impl HostileHub {
    pub async fn start() -> Self {
        super::install_crypto();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let der = cert.cert.der().to_vec();
        let fingerprint = bosun_proto::fingerprint::cert_sha256(&der);
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der.into()], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let host_id = Uuid::new_v4();
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new()
            .route("/v1/enroll", post(enroll))
            .route("/v1/hosts/{host}/poll", post(poll))
            .route("/v1/hosts/{host}/jobs/{job}/result", post(result))
            .with_state((host_id, Arc::clone(&script)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(
            listener,
            axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls)),
        )
        .unwrap()
        .handle(handle.clone());
        tokio::spawn(async move { server.serve(app.into_make_service()).await });
        Self {
            url,
            fingerprint,
            host_id,
            script,
            handle,
        }
    }

    /// Publishes a new desired state.
    pub fn set_desired(&self, desired: Value) {
        let mut s = self.script.lock();
        s.generation += 1;
        s.desired = Some(desired);
    }

    pub fn set_jobs(&self, jobs: Vec<Value>) {
        self.script.lock().jobs = jobs;
    }

    pub fn results(&self) -> Vec<JobResult> {
        self.script.lock().results.clone()
    }

    /// Every audit action reported so far, with its detail.
    pub fn audit(&self) -> Vec<(String, Value)> {
        let mut seen = std::collections::BTreeMap::new();
        for poll in &self.script.lock().polls {
            for entry in poll.audit() {
                seen.insert(entry.seq, (entry.action.clone(), entry.detail.clone()));
            }
        }
        seen.into_values().collect()
    }

    pub fn last_poll(&self) -> Option<PollRequest> {
        self.script.lock().polls.last().cloned()
    }

    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}

type AppState = (Uuid, Arc<Mutex<Script>>);

async fn enroll(State((host_id, _)): State<AppState>) -> (axum::http::StatusCode, Json<Value>) {
    (
        axum::http::StatusCode::CREATED,
        Json(json!({
            "schema": "bosun.enrolled/v1",
            "host_id": host_id,
            "host_key": "bhk_hostile_test_key",
            "status": "active",
            "config": { "poll_interval_seconds": 1, "long_poll_seconds": 1 },
        })),
    )
}

async fn poll(
    State((_, script)): State<AppState>,
    Path(_host): Path<String>,
    RawQuery(query): RawQuery,
    Json(request): Json<PollRequest>,
) -> Json<Value> {
    let wait = query
        .as_deref()
        .and_then(|q| q.strip_prefix("wait="))
        .and_then(|w| w.parse::<u32>().ok())
        .unwrap_or(0);
    let response = {
        let mut s = script.lock();
        s.waits.push(wait);
        let known = request.known_generation;
        let seq = request
            .report
            .as_ref()
            .map(|r| r.seq)
            .or(request.delta.as_ref().map(|d| d.seq));
        let forget = s.forget_next_delta && request.delta.is_some();
        if forget {
            s.forget_next_delta = false;
        }
        let (report_seq, full_report) = match (s.numbered, forget) {
            (_, true) => (None, true),
            (true, false) => (seq, false),
            (false, false) => (None, false),
        };
        s.polls.push(request);
        json!({
            "report_seq": report_seq,
            "full_report": full_report,
            "schema": "bosun.poll-response/v1",
            "generation": s.generation,
            "desired": if known != s.generation { s.desired.clone() } else { None },
            "jobs": s.jobs.clone(),
            "config": { "poll_interval_seconds": 1, "long_poll_seconds": 1 },
            "audit_acked_seq": null,
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    Json(response)
}

async fn result(
    State((_, script)): State<AppState>,
    Path((_host, _job)): Path<(String, String)>,
    Json(result): Json<JobResult>,
) -> axum::http::StatusCode {
    script.lock().results.push(result);
    axum::http::StatusCode::NO_CONTENT
}
