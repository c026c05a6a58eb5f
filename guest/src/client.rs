//! The local API client: HTTPS that accepts exactly the pinned leaf certificate.

use std::time::Duration;

use bosun_proto::bootstrap::Bootstrap;
use bosun_proto::secret::SecretToken;
use serde::{Deserialize, Serialize};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The pin in the bootstrap is not a SHA-256.
    #[error("the pinned fingerprint {fingerprint:?} is not 64 hex digits")]
    BadPin {
        /// What the bootstrap holds.
        fingerprint: String,
    },
    /// The HTTP client could not be built.
    #[error("failed to build the https client")]
    Build(#[source] reqwest::Error),
    /// The request did not complete (connection, TLS pin, timeout).
    #[error("{method} {path} failed")]
    Transport {
        /// The method.
        method: &'static str,
        /// The path.
        path: &'static str,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The agent answered with an error.
    #[error("{method} {path} answered {status}: {code}: {message}")]
    Api {
        /// The method.
        method: &'static str,
        /// The path.
        path: &'static str,
        /// The HTTP status.
        status: u16,
        /// The stable error code.
        code: String,
        /// The message.
        message: String,
    },
    /// The agent's answer does not hold what the API promises (too many items, text with
    /// control characters, an overdue flag the items contradict).
    #[error("{path} answered something invalid")]
    Invalid {
        /// The path.
        path: &'static str,
        /// What is wrong.
        #[source]
        source: bosun_proto::ValidationError,
    },
}

/// `GET /v1/backup/due`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BackupDue {
    /// A policy backup is due.
    pub due: bool,
    /// The vzdump mode.
    pub mode: String,
    /// When the agent backs up without waiting (RFC 3339).
    pub deadline: Option<String>,
}

/// One backup run.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BackupRun {
    /// The run id.
    pub run_id: String,
    /// `queued`, `running`, `snapshotted`, `archived`, `done` or `failed`.
    pub phase: String,
    /// `pending`, `taken` or `unavailable`.
    pub storage_snapshot: String,
    /// Why it failed.
    pub error: Option<String>,
}

impl BackupRun {
    /// Whether the backup's copy is consistent already, so apps may run again.
    pub fn apps_may_restart(&self) -> bool {
        matches!(self.phase.as_str(), "snapshotted" | "archived" | "done")
    }
}

/// `GET /v1/controller`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DesiredController {
    /// The image digest to run, when a signed rollout chose one.
    pub digest: Option<String>,
    /// `unmanaged`, `rolling_out`, `running`, `rolled_back` or `broken`.
    pub status: String,
    /// How often to report health, in seconds.
    pub report_interval_s: u64,
}

/// `POST /v1/controller/health`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HealthRecorded {
    /// The digest this guest should run, if chosen.
    pub desired_digest: Option<String>,
    /// Whether the reported digest is it.
    pub matches: bool,
}

#[derive(Debug, Deserialize)]
struct StatusBody {
    run: Option<BackupRun>,
}

#[derive(Debug, Serialize)]
struct BackupBody {
    quiesced: bool,
    max_quiesce_s: u32,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    code: String,
    message: String,
}

/// A client of one guest's local API.
#[derive(Debug, Clone)]
pub struct LocalApiClient {
    http: reqwest::Client,
    base: String,
    token: SecretToken,
}

impl LocalApiClient {
    /// A client for the endpoint, pin and token in `bootstrap`.
    pub fn from_bootstrap(bootstrap: &Bootstrap) -> Result<Self, ClientError> {
        Self::new(
            &bootstrap.local_api.url,
            &bootstrap.local_api.fingerprint,
            bootstrap.local_api.token.clone(),
        )
    }

    /// A client for `base` (`https://host:port`) that accepts only the leaf whose SHA-256 is
    /// `fingerprint`.
    pub fn new(base: &str, fingerprint: &str, token: SecretToken) -> Result<Self, ClientError> {
        let tls = bosun_pin::client_config(fingerprint).map_err(|_| ClientError::BadPin {
            fingerprint: fingerprint.to_owned(),
        })?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &'static str,
        body: Option<serde_json::Value>,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "POST" => self.http.post(url).json(&body),
            _ => self.http.get(url),
        };
        request = request.bearer_auth(self.token.expose());
        let transport = |source| ClientError::Transport {
            method,
            path,
            source,
        };
        let resp = request.send().await.map_err(transport)?;
        let status = resp.status();
        if status.is_success() {
            return resp.json().await.map_err(transport);
        }
        let text = resp.text().await.map_err(transport)?;
        let (code, message) = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(e) => (e.code, e.message),
            Err(_) => ("unknown".to_owned(), text),
        };
        Err(ClientError::Api {
            method,
            path,
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// Whether a policy backup is due.
    pub async fn backup_due(&self) -> Result<BackupDue, ClientError> {
        self.send("GET", "/v1/backup/due", None).await
    }

    /// Asks for a backup, declaring the apps quiesced for at most `max_quiesce_s`.
    pub async fn start_quiesced_backup(
        &self,
        max_quiesce_s: u32,
    ) -> Result<BackupRun, ClientError> {
        let body = BackupBody {
            quiesced: true,
            max_quiesce_s,
        };
        self.send("POST", "/v1/backup", serde_json::to_value(body).ok())
            .await
    }

    /// The image digest this guest's controller should run.
    pub async fn desired_controller(&self) -> Result<DesiredController, ClientError> {
        self.send("GET", "/v1/controller", None).await
    }

    /// Reports the digest the controller runs and whether it is healthy.
    pub async fn report_controller_health(
        &self,
        digest: &str,
        healthy: bool,
        detail: Option<&str>,
    ) -> Result<HealthRecorded, ClientError> {
        let body = serde_json::json!({ "digest": digest, "healthy": healthy, "detail": detail });
        self.send("POST", "/v1/controller/health", Some(body)).await
    }

    /// The guest's own protection (`GET /v1/protection`), checked against the API's bounds.
    pub async fn protection(
        &self,
    ) -> Result<bosun_proto::protection::GuestProtection, ClientError> {
        const PATH: &str = "/v1/protection";
        let answer: bosun_proto::protection::GuestProtection = self.send("GET", PATH, None).await?;
        answer
            .validate()
            .map_err(|source| ClientError::Invalid { path: PATH, source })?;
        Ok(answer)
    }

    /// The current or latest backup run.
    pub async fn backup_status(&self) -> Result<Option<BackupRun>, ClientError> {
        let body: StatusBody = self.send("GET", "/v1/backup/status", None).await?;
        Ok(body.run)
    }
}
