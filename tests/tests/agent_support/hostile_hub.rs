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
    /// The `config` of every answer (default: 1 s interval, 1 s long-poll).
    pub config: Option<Value>,
    /// Answer every poll with this status and an error body (e.g. 503: the hub is down).
    pub fail_with: Option<u16>,
    /// Check each poll as the real hub does ([`PollRequest::validate`]) and answer 422
    /// when it fails.
    pub strict: bool,
    /// Answer every poll with a 307 to this URL.
    pub redirect_to: Option<String>,
    /// Pad every answer with a string of this many bytes.
    pub padding: Option<usize>,
    /// The status of every poll answered, in order (including refused ones).
    pub statuses: Vec<u16>,
    /// Jobs sent in the next answer only (then cleared), pre-rendered as a JSON list.
    pub flood: Option<String>,
    /// When the flood answer was sent.
    pub flood_sent: Option<std::time::Instant>,
    /// When each recorded poll arrived (parallel to `polls`).
    pub poll_times: Vec<std::time::Instant>,
    /// When the last job result arrived.
    pub last_result_at: Option<std::time::Instant>,
    /// Take a poll that says `stopping` (recorded like any other) and never answer it.
    pub hang_on_stopping: bool,
    /// Key pins announced unsigned in every answer.
    pub hub_pins: Vec<String>,
    /// A signed pin set carried in every answer.
    pub hub_pins_signed: Option<Value>,
    /// Ask for a new host key in every answer, and name back the next key's hash the agent
    /// sent last (as the real hub does once it holds it).
    pub churn_host_key: bool,
    /// The next key hash named back (the last one a poll carried).
    pub held_next_key: Option<String>,
    /// The host key each answered poll presented (parallel to `polls`).
    pub bearers: Vec<String>,
    /// Rewrites every answer last, as a hub that says anything would.
    pub rewrite: Option<Rewrite>,
}

/// An answer's rewrite.
pub type Rewrite = Arc<dyn Fn(&mut Value) + Send + Sync>;

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
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Self::serve(der, key, listener)
    }

    /// A hostile hub holding a stolen certificate and key (PEM), on `port` of loopback: what a
    /// holder of the real hub's key serves in its place.
    pub async fn start_as(cert_pem: &str, key_pem: &str, port: u16) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        super::install_crypto();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .unwrap()
            .to_vec();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let mut tries = 0;
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "port {port} stays taken: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        };
        Self::serve(der, key, listener)
    }

    fn serve(
        der: Vec<u8>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
        listener: std::net::TcpListener,
    ) -> Self {
        let fingerprint = bosun_proto::fingerprint::cert_sha256(&der);
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

    /// Publishes a desired state under any generation (even a lower one).
    pub fn set_desired_at(&self, generation: u64, desired: Value) {
        let mut s = self.script.lock();
        s.generation = generation;
        s.desired = Some(desired);
    }

    /// Polls answered with `status` so far.
    pub fn answered(&self, status: u16) -> usize {
        self.script
            .lock()
            .statuses
            .iter()
            .filter(|s| **s == status)
            .count()
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
    headers: axum::http::HeaderMap,
    Json(request): Json<PollRequest>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let wait = query
        .as_deref()
        .and_then(|q| q.strip_prefix("wait="))
        .and_then(|w| w.parse::<u32>().ok())
        .unwrap_or(0);
    let hang = {
        let mut s = script.lock();
        let hang = s.hang_on_stopping && request.stopping;
        if hang {
            s.waits.push(wait);
            s.polls.push(request.clone());
            s.poll_times.push(std::time::Instant::now());
        }
        hang
    };
    if hang {
        return std::future::pending().await;
    }
    let response = {
        let mut s = script.lock();
        if let Some(to) = s.redirect_to.clone() {
            s.statuses.push(307);
            return (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, to)],
            )
                .into_response();
        }
        if let Some(status) = s.fail_with {
            s.statuses.push(status);
            return (
                axum::http::StatusCode::from_u16(status).unwrap(),
                Json(json!({ "error": "unavailable" })),
            )
                .into_response();
        }
        if s.strict
            && let Err(e) = request.validate()
        {
            s.statuses.push(422);
            return (
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({ "error": "invalid_document", "message": e.to_string() })),
            )
                .into_response();
        }
        s.statuses.push(200);
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
        if let Some(hash) = &request.next_host_key_sha256 {
            s.held_next_key = Some(hash.clone());
        }
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default()
            .to_owned();
        s.bearers.push(bearer);
        s.polls.push(request);
        s.poll_times.push(std::time::Instant::now());
        let mut body = json!({
            "report_seq": report_seq,
            "full_report": full_report,
            "schema": "bosun.poll-response/v1",
            "generation": s.generation,
            "desired": if known != s.generation { s.desired.clone() } else { None },
            "jobs": s.jobs.clone(),
            "config": s.config.clone().unwrap_or(json!({ "poll_interval_seconds": 1, "long_poll_seconds": 1 })),
            "audit_acked_seq": null,
        });
        if !s.hub_pins.is_empty() {
            body["hub_pins"] = json!(s.hub_pins);
        }
        if let Some(signed) = &s.hub_pins_signed {
            body["hub_pins_signed"] = signed.clone();
        }
        if s.churn_host_key {
            body["rotate_host_key"] = json!(true);
            if let Some(hash) = &s.held_next_key {
                body["next_host_key_sha256"] = json!(hash);
            }
        }
        if let Some(padding) = s.padding {
            body["padding"] = json!("x".repeat(padding));
        }
        if let Some(rewrite) = &s.rewrite {
            rewrite(&mut body);
        }
        let mut text = body.to_string();
        if let Some(flood) = s.flood.take() {
            // Splice the pre-rendered list in place of `"jobs":[]`.
            text = text.replacen("\"jobs\":[]", &format!("\"jobs\":{flood}"), 1);
            s.flood_sent = Some(std::time::Instant::now());
        }
        text
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        response,
    )
        .into_response()
}

async fn result(
    State((_, script)): State<AppState>,
    Path((_host, _job)): Path<(String, String)>,
    Json(result): Json<JobResult>,
) -> axum::http::StatusCode {
    let mut s = script.lock();
    s.results.push(result);
    s.last_result_at = Some(std::time::Instant::now());
    axum::http::StatusCode::NO_CONTENT
}
