//! Artifacts for agent self-update: operators upload opaque bytes under their SHA-256
//! (`PUT /v1/admin/artifacts/{sha256}`, up to [`MAX_ARTIFACT_BYTES`]); an enrolled, active host
//! fetches them with its own key (`GET /v1/hosts/{host_id}/artifacts/{sha256}`). The hub
//! checks the digest on upload and again before serving (a damaged copy is refused with 500
//! `artifact_corrupt`, never served); the agent stages nothing whose bytes do not hash to the
//! digest an operator signed either. A file beside a SQLite database is streamed.

use axum::Json;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, get, put};
use bosun_proto::admin::{ArtifactInfo, ErrorBody};
use bosun_proto::update::{MAX_ARTIFACT_BYTES, check_sha256};
use sha2::{Digest as _, Sha256};

use super::error::ApiError;
use super::extract::{ActiveHost, Body};
use crate::Hub;
use crate::store::ArtifactBytes;

fn digest(raw: &str) -> Result<String, ApiError> {
    check_sha256(raw).map_err(|reason| ApiError::BadRequest {
        code: "bad_sha256",
        message: format!("`{}` {reason}", raw.chars().take(80).collect::<String>()),
    })?;
    Ok(raw.to_owned())
}

fn body_limit() -> usize {
    usize::try_from(MAX_ARTIFACT_BYTES).unwrap_or(usize::MAX)
}

/// The time an artifact's upload has to arrive whole: 256 MiB at 150 kB/s.
const UPLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The upload route, with its own body limit (the hub's default is far smaller).
pub fn upload_route() -> MethodRouter<Hub> {
    put(put_artifact)
        .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(body_limit()))
        .layer::<_, std::convert::Infallible>(axum::Extension(super::extract::BodyLimit {
            bytes: body_limit(),
            within: UPLOAD_TIMEOUT,
        }))
}

/// The agents' download route.
pub fn download_route() -> MethodRouter<Hub> {
    get(get_artifact)
}

/// `PUT /v1/admin/artifacts/{sha256}`: stores the body under its SHA-256, which must be the
/// one the path names (400 `sha256_mismatch` otherwise). Storing the same bytes again is a
/// no-op; the newest few artifacts are kept.
#[utoipa::path(put, path = "/v1/admin/artifacts/{sha256}", tag = "admin",
    params(("sha256" = String, Path, pattern = "^[0-9a-f]{64}$", description = "SHA-256 of the body, lowercase hex")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the artifact's bytes, at most 256 MiB"),
    responses(
        (status = 201, description = "stored", body = ArtifactInfo),
        (status = 400, description = "`bad_sha256`, `sha256_mismatch`, `unreadable_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn put_artifact(
    State(hub): State<Hub>,
    Path(sha256): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let sha256 = digest(&sha256)?;
    let found: String = Sha256::digest(&body.0)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if found != sha256 {
        return Err(ApiError::BadRequest {
            code: "sha256_mismatch",
            message: format!("the body hashes to {found}, not {sha256}"),
        });
    }
    let now_ms = hub.clock().now_ms();
    let bytes = body.0;
    let info = hub
        .store_call(move |store| store.put_artifact(&sha256, &bytes, now_ms))
        .await?;
    tracing::info!(sha256 = %info.sha256, size = info.size, "artifact stored");
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

/// `GET /v1/admin/artifacts?limit=N`: the newest stored artifacts, newest first.
#[utoipa::path(get, path = "/v1/admin/artifacts", tag = "admin",
    params(("limit" = Option<u32>, Query, maximum = 10000, description = "most artifacts to list, newest first (default and most 10000)")),
    responses(
        (status = 200, description = "the newest stored artifacts, newest first", body = Vec<ArtifactInfo>),
        (status = 400, description = "`bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_artifacts(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<ArtifactInfo>>, ApiError> {
    let limit = super::listing::list_limit(query.as_deref(), super::listing::MAX_LISTED)?;
    Ok(Json(
        hub.store_call(move |store| store.list_artifacts(limit))
            .await?,
    ))
}

/// `GET /v1/hosts/{host_id}/artifacts/{sha256}`: the bytes stored under `sha256`, for an
/// enrolled, active host presenting its own key; 404 `no_artifact` when none are.
#[utoipa::path(get, path = "/v1/hosts/{host_id}/artifacts/{sha256}", tag = "agent",
    security(("host_key" = [])),
    params(
        ("host_id" = uuid::Uuid, Path, description = "the host id from enrollment"),
        ("sha256" = String, Path, pattern = "^[0-9a-f]{64}$", description = "the digest a signed job names: SHA-256, lowercase hex")),
    responses(
        (status = 200, description = "the artifact's bytes", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, description = "`bad_host_id`, `bad_sha256`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`host_pending_approval`", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `no_artifact`", body = ErrorBody),
        (status = 500, description = "`internal`, `artifact_corrupt`: the stored bytes no longer hash to the name (upload it again)", body = ErrorBody)))]
pub async fn get_artifact(
    State(hub): State<Hub>,
    host: ActiveHost,
    Path((_, sha256)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let sha256 = digest(&sha256)?;
    let wanted = sha256.clone();
    match hub.store_call(move |store| store.artifact(&wanted)).await? {
        Some(stored) => {
            let (size, body) = match stored {
                ArtifactBytes::Inline(bytes) => (bytes.len() as u64, axum::body::Body::from(bytes)),
                ArtifactBytes::File { file, size } => (size, stream(file)),
            };
            tracing::info!(host_id = %host.host_id(), %sha256, size, "artifact served");
            Ok((
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                    (header::CONTENT_LENGTH, size.to_string()),
                ],
                body,
            )
                .into_response())
        }
        None => Err(ApiError::NotFound {
            code: "no_artifact",
            message: format!("the hub holds no artifact {sha256}"),
        }),
    }
}

/// A body that reads `file` a chunk at a time.
fn stream(file: std::fs::File) -> axum::body::Body {
    use tokio::io::AsyncReadExt as _;
    let chunks = futures::stream::try_unfold(tokio::fs::File::from_std(file), |mut file| async {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = file.read(&mut chunk).await?;
        if n == 0 {
            return Ok::<_, std::io::Error>(None);
        }
        chunk.truncate(n);
        Ok(Some((bytes::Bytes::from(chunk), file)))
    });
    axum::body::Body::from_stream(chunks)
}
