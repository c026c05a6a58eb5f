//! Agent API: enroll, poll (long-poll), job results, escrow. Authenticated with the host key
//! (`Authorization: Bearer`), except enrollment, which presents a one-time token.

use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, post, put};
use axum::{Json, Router};
use bosun_proto::admin::ErrorBody;
use bosun_proto::desired::DesiredState;
use bosun_proto::enroll::{self, EnrollRequest, EnrollResponse};
use bosun_proto::escrow::EscrowBlob;
use bosun_proto::job::{JobResult, SignedJob};
use bosun_proto::poll::{self, AgentConfig, PollRequest, PollResponse};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{self, ActiveHost, Body};
use crate::Hub;
use crate::secret::{self, SecretHash, SecretKind};
use crate::store::{Enrollment, PollRecord, PollRecorded, PollView, ReportUpdate, StoreError};

/// Every agent route: its path and its handlers.
fn routes() -> Vec<(&'static str, MethodRouter<Hub>)> {
    vec![
        ("/v1/enroll", post(enroll)),
        ("/v1/hosts/{host_id}/poll", post(poll)),
        ("/v1/hosts/{host_id}/jobs/{job_id}/result", post(job_result)),
        (
            "/v1/hosts/{host_id}/escrow",
            put(put_escrow).get(get_escrow),
        ),
        (
            "/v1/hosts/{host_id}/artifacts/{sha256}",
            super::artifacts::download_route(),
        ),
    ]
}

/// The paths the agent routes serve (for tests that walk them all).
pub fn paths() -> Vec<&'static str> {
    routes().into_iter().map(|(path, _)| path).collect()
}

/// The agent routes; each authenticates the host itself (its key, or for enrollment the
/// one-time token in the body).
pub fn router() -> Router<Hub> {
    routes()
        .into_iter()
        .fold(Router::new(), |router, (path, handlers)| {
            router.route(path, handlers)
        })
}

fn seconds(duration: Duration) -> u32 {
    u32::try_from(duration.as_secs()).unwrap_or(u32::MAX)
}

fn agent_config(hub: &Hub, poll_interval_s: u32) -> AgentConfig {
    // The agent refuses timings outside the documented ranges.
    let poll_interval_s = poll_interval_s.clamp(
        poll::MIN_POLL_INTERVAL_SECONDS,
        poll::MAX_POLL_INTERVAL_SECONDS,
    );
    AgentConfig {
        poll_interval_seconds: poll_interval_s,
        // A held poll must end well inside the grace window (3 × interval) of the dead-man's
        // switch, so the wait never exceeds one poll interval.
        long_poll_seconds: seconds(hub.config().long_poll)
            .min(poll::MAX_WAIT_SECONDS)
            .min(poll_interval_s),
        update_window: hub.config().update_window.clone(),
    }
}

/// `POST /v1/enroll`. With a restore-mode token the box takes over the token's revoked host:
/// the answer keeps that host's id, carries a new key and names the replaced box in
/// `replaces`; a host that is not revoked (any more) refuses it with 409 `host_not_revoked`
/// and leaves the token unused.
#[utoipa::path(post, path = "/v1/enroll", tag = "agent",
    request_body(content = EnrollRequest, description = "the one-time enrollment token and the box's facts"),
    responses(
        (status = 201, description = "enrolled: the host id and its API key, shown once", body = EnrollResponse),
        (status = 400, description = "`malformed_json`, `unreadable_body`", body = ErrorBody),
        (status = 401, description = "`enrollment_token_invalid`, `enrollment_token_used`, `enrollment_token_expired`, `enrollment_token_revoked`", body = ErrorBody),
        (status = 404, description = "`unknown_host`: a restore-mode token names a host the hub no longer knows", body = ErrorBody),
        (status = 409, description = "`host_not_revoked`: a restore-mode token's host is not revoked; the token stays unused", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn enroll(
    State(hub): State<Hub>,
    body: Body,
) -> Result<(StatusCode, Json<EnrollResponse>), ApiError> {
    let request = extract::parse(&body.0, "bosun.enroll/v1 request", EnrollRequest::validate)?;
    let (host_key, key_hash) = secret::mint(SecretKind::HostKey);
    let host_id = Uuid::new_v4();
    let poll_interval_s = seconds(hub.config().poll_interval).max(1);
    let enrollment = Enrollment {
        token_hash: SecretHash::of(request.token.expose()),
        host_id,
        key_hash,
        hostname: request.hostname.clone(),
        agent_version: request.agent_version.clone(),
        pve_version: request.pve_version.clone(),
        poll_interval_s,
        now_ms: hub.clock().now_ms(),
    };
    let enrolled = hub
        .store_call(move |store| store.enroll(enrollment))
        .await?;
    let host_id = enrolled.host_id;
    match &enrolled.replaced {
        None => tracing::info!(
            %host_id,
            hostname = request.hostname,
            status = enrolled.status.as_str(),
            "host enrolled"
        ),
        Some(replaced) => {
            // The old key is gone; so is its cached hash.
            hub.forget_host_key(host_id);
            hub.signals().notify(host_id);
            tracing::info!(
                %host_id,
                hostname = request.hostname,
                replaced_hostname = replaced.hostname,
                status = enrolled.status.as_str(),
                "host taken over by a new box"
            );
        }
    }
    Ok((
        StatusCode::CREATED,
        Json(EnrollResponse {
            schema: enroll::RESPONSE_SCHEMA.to_owned(),
            host_id,
            host_key,
            status: enrolled.status,
            config: agent_config(&hub, poll_interval_s),
            replaces: enrolled.replaced,
        }),
    ))
}

/// `POST /v1/hosts/{host_id}/poll?wait=SECONDS`.
#[utoipa::path(post, path = "/v1/hosts/{host_id}/poll", tag = "agent",
    security(("host_key" = [])),
    params(("host_id" = Uuid, Path, description = "the host id from enrollment"),
        ("wait" = Option<u32>, Query, maximum = 60,
         description = "long-poll: seconds the hub may hold the request while nothing changed (0, the default, answers at once)")),
    request_body(content = PollRequest, description = "heartbeat with a full report or a delta"),
    responses(
        (status = 200, description = "the desired state when the agent's generation is stale, pending signed jobs, agent settings; at once when the poll says `stopping` (a planned stop: the host shows `stopped` until it polls again, and is paged only when the hub's stop bound passes)", body = PollResponse),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`, `bad_query`, `wait_too_long`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no key, another host's key, or a revoked host", body = ErrorBody),
        (status = 403, description = "`host_pending_approval`", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn poll(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<PollResponse>, ApiError> {
    let started = Instant::now();
    let host_id = extract::host_id(&raw_host)?;
    let wait = requested_wait(query.as_deref())?;
    let key_hash = extract::require_host_key(&hub, host_id, &headers).await?;
    let mut request = extract::parse(&body.0, "bosun.poll/v1 request", PollRequest::validate)?;
    // Names with a control character were refused; free-form words keep theirs as visible
    // text, so nothing stored drives a terminal or page that shows it.
    request.make_inert();
    if let Some(next) = request.next_host_key_sha256.as_deref() {
        stage_next_key(&hub, host_id, key_hash, next).await?;
    }
    let known = request.known_generation;
    // The agent's last poll before a planned stop is answered at once: it is shutting down.
    let stopping = request.stopping;
    let wait = if stopping { 0 } else { wait };
    let sent_seq = request
        .report
        .as_ref()
        .map(|r| r.seq)
        .or(request.delta.as_ref().map(|d| d.seq));
    let sample = crate::history::Sample::of(&request);
    let record = poll_record(&hub, host_id, key_hash, request)?;
    let now_ms = record.now_ms;
    // Subscribe before reading, so a change between the read and the wait still wakes us (a
    // poll that will not wait has nothing to subscribe to).
    let mut changes = (wait > 0).then(|| hub.signals().subscribe(host_id));
    let (recorded, view) = hub.poll_writer().record(record).await?;
    announce(&hub, host_id, &recorded, stopping, started);
    let took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    hub.history().observe(host_id, sample, now_ms, took_us);
    let full_report = recorded.full_report_required;
    let ready = |view: &PollView| view.generation != known || !view.jobs.is_empty();
    // A hub without a base for the agent's delta answers at once: the full report is due now.
    let Some(changes) = changes.as_mut().filter(|_| !full_report && !ready(&view)) else {
        return respond(&hub, known, view, sent_seq, full_report).map(Json);
    };
    let view = hold(&hub, host_id, changes, wait, ready).await?;
    respond(&hub, known, view, sent_seq, false).map(Json)
}

/// The `wait` the poll asks for, within [`poll::MAX_WAIT_SECONDS`].
fn requested_wait(query: Option<&str>) -> Result<u32, ApiError> {
    let wait = extract::query_number::<u32>(query, "wait")?.unwrap_or(0);
    if wait > poll::MAX_WAIT_SECONDS {
        return Err(ApiError::BadRequest {
            code: "wait_too_long",
            message: format!("wait={wait} exceeds {} seconds", poll::MAX_WAIT_SECONDS),
        });
    }
    Ok(wait)
}

/// What the store records of a poll: its report or delta (without the audit entries, kept
/// apart), the versions, the acknowledgements and the pins the agent trusts.
fn poll_record(
    hub: &Hub,
    host_id: Uuid,
    key_hash: SecretHash,
    request: PollRequest,
) -> Result<PollRecord, ApiError> {
    let versions = request
        .versions()
        .map(|v| (v.agent.clone(), v.controller.clone()));
    let (report, audit) = match (request.report, request.delta) {
        (Some(mut report), _) => {
            let audit = std::mem::take(&mut report.audit);
            (ReportUpdate::full(report)?, audit)
        }
        (None, Some(mut delta)) => {
            let audit = std::mem::take(&mut delta.audit);
            (ReportUpdate::Delta(Box::new(delta)), audit)
        }
        (None, None) => {
            return Err(ApiError::MalformedJson {
                document: "bosun.poll/v1 request",
                reason: "neither report nor delta".into(),
            });
        }
    };
    // The pins the agent trusts, when they changed: kept with the host, so the operator sees
    // who holds the next key before activating it.
    let hub_pins = if request.hub_pins.is_empty() {
        None
    } else {
        let mut pins = request.hub_pins;
        pins.sort();
        Some(
            serde_json::to_string(&pins).map_err(|e| ApiError::MalformedJson {
                document: "bosun.poll/v1 request",
                reason: e.to_string(),
            })?,
        )
    };
    Ok(PollRecord {
        host_id,
        key_hash,
        now_ms: hub.clock().now_ms(),
        known_generation: request.known_generation,
        applied_generation: request.applied_generation,
        acked_jobs: request.acked_jobs,
        report,
        versions,
        audit,
        operations: request.operations,
        stopping: request.stopping,
        hub_pins,
        capabilities: request.capabilities,
    })
}

/// Delivers what recording the poll raised, in the order the store recorded it, and counts
/// the poll.
fn announce(hub: &Hub, host_id: Uuid, recorded: &PollRecorded, stopping: bool, started: Instant) {
    for change in &recorded.watch {
        hub.alerts().watch(change);
    }
    for alert in &recorded.guest_alerts {
        hub.alerts().raise(alert);
    }
    if let Some(alert) = &recorded.alert {
        hub.alerts().raise(alert);
    }
    if recorded.recovered {
        tracing::info!(%host_id, "host recovered");
    }
    if stopping {
        tracing::info!(%host_id, "host stopping on purpose; shown stopped until it polls again");
    }
    hub.metrics()
        .poll_processed(started.elapsed().as_secs_f64());
    if recorded.full_report_required {
        hub.metrics().full_report_requested();
    }
}

/// Holds the long-poll until the host's view is `ready`, `wait` seconds pass or the hub
/// stops; the view to answer with.
async fn hold(
    hub: &Hub,
    host_id: Uuid,
    changes: &mut tokio::sync::watch::Receiver<u64>,
    wait: u32,
    ready: impl Fn(&PollView) -> bool,
) -> Result<PollView, ApiError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(wait));
    let shutdown = hub.shutdown_token().clone();
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                let view = hub.store_call(move |store| store.poll_view(host_id)).await?;
                if ready(&view) {
                    return Ok(view);
                }
            }
            () = tokio::time::sleep_until(deadline) => break,
            () = shutdown.cancelled() => break,
        }
    }
    Ok(hub
        .store_call(move |store| store.poll_view(host_id))
        .await?)
}

/// Keeps the hash of the key the agent made to replace the one it presented (`presented`),
/// so both are accepted until the new one is first presented (decision 0044). Sent again
/// after a lost answer, it changes nothing; presented with a key that is no longer the
/// current one, it is ignored (the answer asks again).
async fn stage_next_key(
    hub: &Hub,
    host_id: Uuid,
    presented: SecretHash,
    next: &str,
) -> Result<(), ApiError> {
    let mut hash = [0u8; 32];
    hex::decode_to_slice(next, &mut hash).map_err(|_| ApiError::BadRequest {
        code: "invalid_field",
        message: "next_host_key_sha256 is not 64 hex digits".to_owned(),
    })?;
    let now_ms = hub.clock().now_ms();
    let staged = hub
        .store_call(move |store| store.stage_host_key(host_id, presented, SecretHash(hash), now_ms))
        .await?;
    hub.forget_host_key(host_id);
    if staged {
        tracing::info!(%host_id, "host sent its next key; both keys are accepted until it is presented");
    }
    Ok(())
}

/// The answer to a poll. `full_report` is set when the poll's delta had no base here, and
/// also when the stored report is no longer the one this poll sent (another poll of the
/// same host, e.g. a stale retry, replaced it), so the agent never builds on a base the hub
/// does not hold.
fn respond(
    hub: &Hub,
    known: u64,
    view: PollView,
    sent_seq: Option<u64>,
    full_report: bool,
) -> Result<PollResponse, ApiError> {
    let full_report = full_report || view.report_seq != sent_seq;
    let (rotate_host_key, next_key) = view
        .host_key
        .answer(&hub.config().host_keys, hub.clock().now_ms());
    let desired = match (&view.desired_json, view.generation != known) {
        (Some(json), true) => Some(serde_json::from_str::<DesiredState>(json).map_err(|e| {
            ApiError::Store(StoreError::Corrupt {
                what: "desired state",
                reason: e.to_string(),
            })
        })?),
        _ => None,
    };
    Ok(PollResponse {
        schema: poll::RESPONSE_SCHEMA.to_owned(),
        generation: view.generation,
        desired,
        jobs: view
            .jobs
            .iter()
            // The oldest first; the rest follow once these are acknowledged.
            .take(poll::MAX_JOBS_PER_POLL)
            .map(|(document, signature)| SignedJob::new(document, signature))
            .collect(),
        config: agent_config(hub, view.poll_interval_s),
        audit_acked_seq: view.audit_acked_seq,
        report_seq: view.report_seq,
        full_report,
        correlation_id: view.correlation_id,
        // Agents take keys only from the operator's signed set (decision 0049).
        hub_pins: Vec::new(),
        hub_pins_signed: hub.signed_pins(),
        rotate_host_key,
        next_host_key_sha256: next_key.map(|hash| hex::encode(hash.0)),
    })
}

/// `POST /v1/hosts/{host_id}/jobs/{job_id}/result`.
#[utoipa::path(post, path = "/v1/hosts/{host_id}/jobs/{job_id}/result", tag = "agent",
    security(("host_key" = [])),
    params(("host_id" = Uuid, Path, description = "the host id from enrollment"),
        ("job_id" = Uuid, Path, description = "the job, as in its signed document")),
    request_body(content = JobResult, description = "how the job ended"),
    responses(
        (status = 204, description = "recorded"),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`, `bad_job_id`, `job_id_mismatch`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`host_pending_approval`", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `unknown_job`", body = ErrorBody),
        (status = 409, description = "`job_finished`: a different result is already recorded", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn job_result(
    State(hub): State<Hub>,
    host: ActiveHost,
    Path((_, raw_job)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let host_id = host.host_id();
    let job_id = extract::job_id(&raw_job)?;
    // The agent's sizes are not trusted: its log tail and reason are bounded (cut, escaped,
    // redacted) and its duration recomputed before the result is checked and stored.
    let mut result: JobResult =
        extract::parse(&body.0, "bosun.job-result/v1", |_: &JobResult| Ok(()))?;
    result.bound();
    result.validate().map_err(|source| ApiError::Invalid {
        document: "bosun.job-result/v1",
        source,
    })?;
    if result.job_id != job_id {
        return Err(ApiError::BadRequest {
            code: "job_id_mismatch",
            message: format!(
                "body names job {} but the path names {job_id}",
                result.job_id
            ),
        });
    }
    let now_ms = hub.clock().now_ms();
    let outcome = result.outcome;
    let refused = hub
        .store_call(move |store| store.finish_job(host_id, &result, now_ms))
        .await?;
    tracing::info!(%host_id, %job_id, ?outcome, "job finished");
    if let Some(alert) = &refused {
        hub.alerts().raise(alert);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/hosts/{host_id}/escrow`: stores the blob (last write wins) and judges the host at
/// once, so a blob wrapping the key the host reports resolves `escrow_missing` without waiting
/// for the next report. A blob naming another host (`host_id`) is refused with 400
/// `escrow_host_mismatch`.
#[utoipa::path(put, path = "/v1/hosts/{host_id}/escrow", tag = "agent",
    security(("host_key" = [])),
    params(("host_id" = Uuid, Path, description = "the host id from enrollment")),
    request_body(content = EscrowBlob, description = "the recovery-code-wrapped PBS key; stored byte-exact"),
    responses(
        (status = 204, description = "stored"),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`, `escrow_host_mismatch`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`host_pending_approval`", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn put_escrow(
    State(hub): State<Hub>,
    host: ActiveHost,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let host_id = host.host_id();
    let parsed = extract::parse(&body.0, "bosun.escrow/v1", EscrowBlob::validate)?;
    if let Some(named) = parsed.host_id.filter(|named| *named != host_id) {
        return Err(ApiError::BadRequest {
            code: "escrow_host_mismatch",
            message: format!("the escrow blob is for host {named}, not {host_id}"),
        });
    }
    // Stored exactly as sent: the hub cannot open it and does not rewrite it.
    let blob = String::from_utf8(body.0.to_vec()).map_err(|e| ApiError::MalformedJson {
        document: "bosun.escrow/v1",
        reason: e.to_string(),
    })?;
    let now_ms = hub.clock().now_ms();
    let fingerprint = parsed.key_fingerprint;
    let changes = hub
        .store_call(move |store| store.put_escrow(host_id, &blob, &fingerprint, now_ms))
        .await?;
    for change in &changes {
        hub.alerts().watch(change);
    }
    tracing::info!(%host_id, "escrow stored");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/hosts/{host_id}/escrow`: the host's own blob, exactly as stored (`bosun.escrow/v1`),
/// or 404 `no_escrow`. A box that took over a lost host fetches the lost box's blob here, so
/// the customer's recovery code can unwrap K on it.
#[utoipa::path(get, path = "/v1/hosts/{host_id}/escrow", tag = "agent",
    security(("host_key" = [])),
    params(("host_id" = Uuid, Path, description = "the host id from enrollment")),
    responses(
        (status = 200, description = "the blob exactly as stored", body = EscrowBlob),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`host_pending_approval`", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `no_escrow`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn get_escrow(State(hub): State<Hub>, host: ActiveHost) -> Result<Response, ApiError> {
    let host_id = host.host_id();
    match hub.store_call(move |store| store.escrow(host_id)).await? {
        Some(blob) => Ok(([(header::CONTENT_TYPE, "application/json")], blob).into_response()),
        None => Err(ApiError::NotFound {
            code: "no_escrow",
            message: format!("host {host_id} has not stored an escrow blob"),
        }),
    }
}
