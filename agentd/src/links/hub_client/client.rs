//! The HTTPS client for the hub's agent API: enroll, poll, job results.
//!
//! No call follows a redirect (a 3xx is an error answer), and no answer is read
//! past a size limit ([`MAX_RESPONSE_BYTES`] for a poll): the body is streamed and
//! the read stops at the limit.
//!
//! Errors say whether the request was **not sent** (retry freely) or **sent,
//! outcome unknown**, or what the hub answered. Each request carries an
//! `x-request-id`, which the agent also writes into its journal operations.

use std::time::Duration;

use bosun_proto::admin::ErrorBody;
use bosun_proto::enroll::{EnrollRequest, EnrollResponse};
use bosun_proto::escrow::EscrowBlob;
use bosun_proto::job::JobResult;
use bosun_proto::poll::{MAX_JOBS_PER_POLL, MAX_RESPONSE_BYTES, PollRequest};
use bosun_proto::secret::SecretToken;
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use url::Url;
use uuid::Uuid;

use super::tls::client_config;

/// The request id header.
pub const REQUEST_ID: &str = "x-request-id";

/// Why a hub call failed.
#[derive(Debug, thiserror::Error)]
pub enum HubClientError {
    /// Building the client failed.
    #[error("setting up the hub client")]
    Setup(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The request never reached the hub; retry freely.
    #[error("{call}: request to the hub not sent")]
    NotSent {
        /// The call.
        call: &'static str,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// Sent, but the answer was lost.
    #[error("{call}: request sent to the hub, outcome unknown")]
    OutcomeUnknown {
        /// The call.
        call: &'static str,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The hub answered with an error.
    #[error("{call}: the hub answered {status}: {body}")]
    Status {
        /// The call.
        call: &'static str,
        /// The status.
        status: u16,
        /// The answer's body (an error document, never a secret of ours), cut to 500
        /// characters.
        body: String,
        /// The error document's `code`, when the body is one.
        code: Option<String>,
    },
    /// The answer is larger than the agent reads.
    #[error("{call}: the hub's answer exceeds {limit} bytes")]
    TooLarge {
        /// The call.
        call: &'static str,
        /// The limit, bytes.
        limit: usize,
    },
    /// The answer was not the expected document.
    #[error("{call}: the hub's answer is malformed")]
    Decode {
        /// The call.
        call: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

impl HubClientError {
    /// Whether the hub holds the host until an operator approves it (403
    /// `host_pending_approval`): the key is right, the host is not active yet.
    pub fn is_pending_approval(&self) -> bool {
        matches!(
            self,
            Self::Status {
                status: 403,
                code: Some(code),
                ..
            } if code == "host_pending_approval"
        )
    }

    /// Whether the hub refused the host's credentials (revoked, or never enrolled).
    pub fn is_unauthorized(&self) -> bool {
        matches!(
            self,
            Self::Status {
                status: 401 | 403,
                ..
            }
        )
    }
}

/// The raw poll answer: the envelope is decoded, desired state and jobs are
/// left for the caller to validate one by one (a malformed job must not stop
/// the desired state from arriving, nor the other way round).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct RawPollResponse {
    /// The schema name.
    pub schema: String,
    /// The current generation.
    pub generation: u64,
    /// The desired state, when it changed.
    #[serde(default)]
    pub desired: Option<serde_json::Value>,
    /// Pending signed jobs: at most [`MAX_JOBS_PER_POLL`] are kept, the rest only
    /// counted.
    #[serde(default)]
    pub jobs: CappedJobs,
    /// Agent settings.
    pub config: bosun_proto::poll::AgentConfig,
    /// The hub's highest stored audit sequence.
    #[serde(default)]
    pub audit_acked_seq: Option<u64>,
    /// The number of the report the hub holds.
    #[serde(default)]
    pub report_seq: Option<u64>,
    /// The hub has no base for a delta: send a full report now.
    #[serde(default)]
    pub full_report: bool,
    /// The operator's correlation id of the current generation (checked by the intake).
    #[serde(default)]
    pub correlation_id: Option<String>,
    /// Key pins announced unsigned: never taken, reported once (the answer's own size bound
    /// bounds them).
    #[serde(default)]
    pub hub_pins: Vec<String>,
    /// The operator's signed set of hub key pins (checked when taken: a malformed one is
    /// refused, it does not spoil the answer).
    #[serde(default)]
    pub hub_pins_signed: Option<serde_json::Value>,
    /// The hub asks for a new host key (see [`super::host_key`]).
    #[serde(default)]
    pub rotate_host_key: bool,
    /// The hash of the next host key the hub holds (checked when taken).
    #[serde(default)]
    pub next_host_key_sha256: Option<String>,
}

/// The jobs of a poll answer: the first [`MAX_JOBS_PER_POLL`] kept, every other one
/// skipped while parsing (never held in memory) and counted.
#[derive(Debug, Clone, Default)]
pub struct CappedJobs {
    /// The jobs kept, in the hub's order.
    pub kept: Vec<serde_json::Value>,
    /// How many jobs the answer carried in all.
    pub offered: usize,
}

impl<'de> serde::Deserialize<'de> for CappedJobs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = CappedJobs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of signed jobs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<CappedJobs, A::Error> {
                let mut jobs = CappedJobs::default();
                while jobs.kept.len() < MAX_JOBS_PER_POLL {
                    match seq.next_element::<serde_json::Value>()? {
                        Some(job) => jobs.kept.push(job),
                        None => {
                            jobs.offered = jobs.kept.len();
                            return Ok(jobs);
                        }
                    }
                }
                let mut offered = jobs.kept.len();
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    offered += 1;
                }
                jobs.offered = offered;
                Ok(jobs)
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
}

/// The largest answer read from any other hub call (enroll, job result), bytes.
const MAX_OTHER_RESPONSE_BYTES: usize = 64 * 1024;

/// The client.
#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    base: Url,
    pins: Option<std::sync::Arc<bosun_pin::PinSet>>,
}

fn classify(call: &'static str, source: reqwest::Error) -> HubClientError {
    if source.is_connect() || source.is_builder() {
        HubClientError::NotSent { call, source }
    } else {
        HubClientError::OutcomeUnknown { call, source }
    }
}

impl HubClient {
    /// A client for `base` that trusts the hub by one pin (a key pin, or the certificate's
    /// SHA-256).
    pub fn new(base: Url, pin: &str) -> Result<Self, HubClientError> {
        let pin = bosun_pin::Pin::parse(pin).map_err(|e| HubClientError::Setup(Box::new(e)))?;
        Self::with_trust(base, &bosun_pin::Trust::Pins(vec![pin]))
    }

    /// A client for `base` that trusts the hub as `trust` says.
    pub fn with_trust(base: Url, trust: &bosun_pin::Trust) -> Result<Self, HubClientError> {
        let (tls, pins) = client_config(trust).map_err(|e| HubClientError::Setup(Box::new(e)))?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            // A redirect could lead the report, and the host key, anywhere (even to
            // plain http): every answer is taken from the pinned hub or refused.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| HubClientError::Setup(Box::new(e)))?;
        Ok(Self { http, base, pins })
    }

    /// The pins the hub is trusted by, when pins alone decide (not a CA).
    pub fn pins(&self) -> Option<&std::sync::Arc<bosun_pin::PinSet>> {
        self.pins.as_ref()
    }

    fn url(&self, path: &str) -> Result<Url, HubClientError> {
        self.base
            .join(path)
            .map_err(|e| HubClientError::Setup(Box::new(e)))
    }

    /// Sends `request` and reads at most `limit` bytes of the answer, chunk by chunk
    /// (an answer announcing or sending more is refused without being buffered).
    async fn send(
        &self,
        call: &'static str,
        request: reqwest::RequestBuilder,
        limit: usize,
    ) -> Result<Vec<u8>, HubClientError> {
        let mut answer = Self::open(call, request, limit).await?;
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Sends `request` and opens its answer, whose body is read chunk by chunk, `limit` bytes
    /// at most in all; an error answer is read (at most [`MAX_ERROR_BODY`] of it) and given as
    /// [`HubClientError::Status`].
    async fn open(
        call: &'static str,
        request: reqwest::RequestBuilder,
        limit: usize,
    ) -> Result<AnswerBody, HubClientError> {
        let response = request.send().await.map_err(|e| classify(call, e))?;
        if response
            .content_length()
            .is_some_and(|len| usize::try_from(len).map_or(true, |len| len > limit))
        {
            return Err(HubClientError::TooLarge { call, limit });
        }
        let status = response.status();
        let mut answer = AnswerBody {
            call,
            response,
            limit,
            read: 0,
        };
        if status.is_success() {
            return Ok(answer);
        }
        answer.limit = limit.min(MAX_ERROR_BODY);
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await? {
            body.extend_from_slice(&chunk);
        }
        let code = serde_json::from_slice::<ErrorBody>(&body)
            .ok()
            .map(|e| e.code.chars().take(64).collect());
        Err(HubClientError::Status {
            call,
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body).chars().take(500).collect(),
            code,
        })
    }

    /// Presents a one-time enrollment token.
    pub async fn enroll(
        &self,
        token: &SecretString,
        hostname: &str,
        pve_version: Option<String>,
    ) -> Result<EnrollResponse, HubClientError> {
        let body = EnrollRequest {
            schema: bosun_proto::enroll::REQUEST_SCHEMA.to_owned(),
            token: SecretToken::new(token.expose_secret().to_owned()),
            hostname: hostname.to_owned(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            pve_version,
        };
        let request = self
            .http
            .post(self.url("/v1/enroll")?)
            .timeout(Duration::from_secs(30))
            .header(REQUEST_ID, Uuid::new_v4().to_string())
            .json(&body);
        let bytes = self
            .send("enroll", request, MAX_OTHER_RESPONSE_BYTES)
            .await?;
        serde_json::from_slice(&bytes).map_err(|source| HubClientError::Decode {
            call: "enroll",
            source,
        })
    }

    /// One long-poll.
    pub async fn poll(
        &self,
        host_id: Uuid,
        host_key: &SecretString,
        wait: Duration,
        request: &PollRequest,
        request_id: &str,
    ) -> Result<RawPollResponse, HubClientError> {
        let mut url = self.url(&format!("/v1/hosts/{host_id}/poll"))?;
        url.query_pairs_mut()
            .append_pair("wait", &wait.as_secs().to_string());
        let request = self
            .http
            .post(url)
            .bearer_auth(host_key.expose_secret())
            .header(REQUEST_ID, request_id)
            .timeout(wait + Duration::from_secs(30))
            .json(request);
        let bytes = self.send("poll", request, MAX_RESPONSE_BYTES).await?;
        serde_json::from_slice(&bytes).map_err(|source| HubClientError::Decode {
            call: "poll",
            source,
        })
    }

    /// Reports a job's outcome.
    pub async fn job_result(
        &self,
        host_id: Uuid,
        host_key: &SecretString,
        result: &JobResult,
    ) -> Result<(), HubClientError> {
        let request = self
            .http
            .post(self.url(&format!(
                "/v1/hosts/{host_id}/jobs/{}/result",
                result.job_id
            ))?)
            .bearer_auth(host_key.expose_secret())
            .header(REQUEST_ID, Uuid::new_v4().to_string())
            .timeout(Duration::from_secs(30))
            .json(result);
        match self
            .send("job result", request, MAX_OTHER_RESPONSE_BYTES)
            .await
        {
            Ok(_) => Ok(()),
            // The hub already holds a result for this job: nothing to resend.
            Err(HubClientError::Status { status, .. })
                if status == StatusCode::CONFLICT.as_u16() =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Stores the escrow blob at the hub (last write wins).
    pub async fn put_escrow(
        &self,
        host_id: Uuid,
        host_key: &SecretString,
        blob: &EscrowBlob,
    ) -> Result<(), HubClientError> {
        let request = self
            .http
            .put(self.url(&format!("/v1/hosts/{host_id}/escrow"))?)
            .bearer_auth(host_key.expose_secret())
            .header(REQUEST_ID, Uuid::new_v4().to_string())
            .timeout(Duration::from_secs(30))
            .json(blob);
        self.send("store escrow", request, MAX_OTHER_RESPONSE_BYTES)
            .await
            .map(|_| ())
    }

    /// The escrow blob the hub holds for this host; `None` when it holds none.
    pub async fn escrow(
        &self,
        host_id: Uuid,
        host_key: &SecretString,
    ) -> Result<Option<EscrowBlob>, HubClientError> {
        let request = self
            .http
            .get(self.url(&format!("/v1/hosts/{host_id}/escrow"))?)
            .bearer_auth(host_key.expose_secret())
            .header(REQUEST_ID, Uuid::new_v4().to_string())
            .timeout(Duration::from_secs(30));
        // The blob is at most 64 KiB of ciphertext plus its envelope.
        match self
            .send("fetch escrow", request, 2 * MAX_OTHER_RESPONSE_BYTES)
            .await
        {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| HubClientError::Decode {
                        call: "fetch escrow",
                        source,
                    })
            }
            Err(HubClientError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the artifact the hub holds under `sha256` (at most `limit` bytes), to be read
    /// chunk by chunk: an agent binary is written to disk as it comes, never held whole in
    /// memory. What it serves is not trusted: the caller checks the digest.
    pub async fn artifact(
        &self,
        host_id: &Uuid,
        host_key: &SecretString,
        sha256: &str,
        limit: u64,
    ) -> Result<AnswerBody, HubClientError> {
        let request = self
            .http
            .get(self.url(&format!("/v1/hosts/{host_id}/artifacts/{sha256}"))?)
            .bearer_auth(host_key.expose_secret())
            .header(REQUEST_ID, Uuid::new_v4().to_string())
            .timeout(Duration::from_secs(600));
        Self::open(
            "fetch artifact",
            request,
            usize::try_from(limit).unwrap_or(usize::MAX),
        )
        .await
    }
}

/// Most bytes of an error answer the agent reads.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A successful answer whose body is still being read, bounded by its limit.
#[derive(Debug)]
pub struct AnswerBody {
    call: &'static str,
    response: reqwest::Response,
    limit: usize,
    read: usize,
}

impl AnswerBody {
    /// The body's next chunk, `None` at its end; [`HubClientError::TooLarge`] once the body
    /// passes its limit, [`HubClientError::OutcomeUnknown`] when the connection fails.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, HubClientError> {
        let call = self.call;
        let chunk = self
            .response
            .chunk()
            .await
            .map_err(|source| HubClientError::OutcomeUnknown { call, source })?;
        if let Some(chunk) = &chunk {
            self.read = self.read.saturating_add(chunk.len());
            if self.read > self.limit {
                return Err(HubClientError::TooLarge {
                    call,
                    limit: self.limit,
                });
            }
        }
        Ok(chunk)
    }
}
