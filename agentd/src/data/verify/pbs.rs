//! The PBS API calls a verification makes, straight to the backup server the signed plan names
//! (decision 0079): `POST /api2/json/admin/datastore/{store}/verify` for one group in the
//! target's namespace, then `GET /api2/json/nodes/localhost/tasks/{upid}/status` until the
//! task stops. The server's certificate is pinned to the plan's fingerprint (no fingerprint, no
//! call), the token is the target's sealed credential, no redirect is followed and every
//! answer is read to a bound.

use std::sync::Arc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use crate::data::storage::target::PbsRepository;

/// The most bytes of a PBS answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// Why a verification could not run or finish: its `Display` is the reported detail (fixed
/// words, never the server's text but for the task status, bounded by the caller).
#[derive(Debug, thiserror::Error)]
pub enum PbsError {
    /// The plan's target names no certificate fingerprint, so the server cannot be pinned.
    #[error("the target names no certificate fingerprint")]
    NoFingerprint,
    /// The target's user is not an API token (`user@realm!token`).
    #[error("verification needs an API token (user@realm!token), not a password user")]
    NotAToken,
    /// The HTTP client could not be built.
    #[error("could not set up the PBS client")]
    Setup(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server could not be reached, or the connection broke.
    #[error("PBS unreachable")]
    Unreachable(#[source] reqwest::Error),
    /// The server refused the token.
    #[error("PBS refused the credentials (HTTP {status})")]
    AuthFailed {
        /// The status.
        status: u16,
    },
    /// The server refused the request (the group is absent, a parameter is wrong).
    #[error("PBS refused the verify request (HTTP {status})")]
    Refused {
        /// The status.
        status: u16,
    },
    /// The answer was not what PBS sends.
    #[error("PBS answered something unexpected")]
    BadAnswer,
}

/// A client of one PBS server, pinned and authenticated.
#[derive(Clone)]
pub struct PbsClient {
    http: reqwest::Client,
    base: String,
    auth: Arc<SecretString>,
}

impl std::fmt::Debug for PbsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PbsClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A verify task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Still running.
    Running,
    /// Stopped with this exit status (`OK` for a pass).
    Stopped(String),
}

impl PbsClient {
    /// A client of `repo`'s server with `secret` (the token's), each call bounded by `timeout`.
    pub fn new(
        repo: &PbsRepository,
        secret: &SecretString,
        timeout: Duration,
    ) -> Result<Self, PbsError> {
        let fingerprint = repo.fingerprint.as_deref().ok_or(PbsError::NoFingerprint)?;
        if !repo.username.contains('!') {
            return Err(PbsError::NotAToken);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = bosun_pin::PinSet::leaf(fingerprint, Arc::clone(&provider))
            .map_err(|e| PbsError::Setup(Box::new(e)))?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PbsError::Setup(Box::new(e)))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()
            .map_err(|e| PbsError::Setup(Box::new(e)))?;
        let host = if repo.server.contains(':') && !repo.server.starts_with('[') {
            format!("[{}]", repo.server)
        } else {
            repo.server.clone()
        };
        Ok(Self {
            http,
            base: format!("https://{host}:{}/api2/json", repo.port.unwrap_or(8007)),
            auth: Arc::new(SecretString::from(format!(
                "PBSAPIToken={}:{}",
                repo.username,
                secret.expose_secret()
            ))),
        })
    }

    /// Starts verifying group `ct/<vmid>` of `store` in namespace `ns` (every snapshot, verified
    /// before or not); gives the task's UPID.
    pub async fn start_verify(
        &self,
        store: &str,
        ns: Option<&str>,
        vmid: u32,
    ) -> Result<String, PbsError> {
        let mut form = vec![
            ("backup-type", "ct".to_owned()),
            ("backup-id", vmid.to_string()),
            ("ignore-verified", "false".to_owned()),
        ];
        if let Some(ns) = ns.filter(|n| !n.is_empty()) {
            form.push(("ns", ns.to_owned()));
        }
        let url = format!("{}/admin/datastore/{}/verify", self.base, path_part(store));
        let request = self.http.post(url).form(&form);
        let data = self.call(request).await?;
        let upid = data.as_str().ok_or(PbsError::BadAnswer)?;
        if !upid.starts_with("UPID:") || upid.len() > 512 {
            return Err(PbsError::BadAnswer);
        }
        Ok(upid.to_owned())
    }

    /// The state of task `upid`.
    pub async fn task(&self, upid: &str) -> Result<TaskState, PbsError> {
        let url = format!(
            "{}/nodes/localhost/tasks/{}/status",
            self.base,
            path_part(upid)
        );
        let data = self.call(self.http.get(url)).await?;
        match data.get("status").and_then(|s| s.as_str()) {
            Some("running") => Ok(TaskState::Running),
            Some("stopped") => Ok(TaskState::Stopped(
                data.get("exitstatus")
                    .and_then(|s| s.as_str())
                    .unwrap_or("unknown")
                    .to_owned(),
            )),
            _ => Err(PbsError::BadAnswer),
        }
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<serde_json::Value, PbsError> {
        let resp = request
            .header(reqwest::header::AUTHORIZATION, self.auth.expose_secret())
            .send()
            .await
            .map_err(PbsError::Unreachable)?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(PbsError::AuthFailed { status });
        }
        if !resp.status().is_success() {
            return Err(PbsError::Refused { status });
        }
        let mut resp = resp;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(PbsError::Unreachable)? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(PbsError::BadAnswer);
            }
            body.extend_from_slice(&chunk);
        }
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| PbsError::BadAnswer)?;
        value.get("data").cloned().ok_or(PbsError::BadAnswer)
    }
}

/// Percent-encodes one path segment.
fn path_part(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
