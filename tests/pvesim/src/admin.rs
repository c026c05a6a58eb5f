//! The admin endpoint outside `/api2`: the request log and fault injection, authorized by
//! `Authorization: Bearer <admin_token>`.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};

use crate::LoggedRequest;
use crate::config::FaultConfig;
use crate::server::App;

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/_sim/requests", get(requests).delete(clear_requests))
        .route("/_sim/faults", get(get_faults).post(set_faults))
        .route("/_sim/pct", post(pct))
}

/// `pct set …` as root@pam on the node (see `crate::pct`). Answers `{"data": …}` like the
/// config route, or the route's error status with its message.
async fn pct(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let command: crate::pct::PctCommand = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid pct command: {e}\n"),
        )
    })?;
    let set = crate::pct::parse(&command.args).map_err(|e| (StatusCode::BAD_REQUEST, e + "\n"))?;
    match crate::pct::apply(&app.shared, &set).await {
        Ok(data) => Ok(Json(serde_json::json!({ "data": data }))),
        Err(err) => Err((
            StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            serde_json::json!({ "data": null, "message": err.message, "errors": err.errors })
                .to_string(),
        )),
    }
}

fn authorized(app: &App, headers: &HeaderMap) -> Result<(), StatusCode> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if token.as_bytes() == app.admin_token.as_bytes() => Ok(()),
        _ => Err(StatusCode::UNAUTHORIZED),
    }
}

async fn requests(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<Vec<LoggedRequest>>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().requests.clone()))
}

async fn clear_requests(State(app): State<App>, headers: HeaderMap) -> StatusCode {
    if let Err(status) = authorized(&app, &headers) {
        return status;
    }
    app.shared.state.lock().requests.clear();
    StatusCode::NO_CONTENT
}

async fn get_faults(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<FaultConfig>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().faults.clone()))
}

/// Authorization comes before the body is even parsed.
async fn set_faults(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<FaultConfig>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let faults: FaultConfig = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid fault config: {e}\n"),
        )
    })?;
    tracing::info!(
        rules = faults.endpoints.len(),
        "faults replaced over the admin endpoint"
    );
    let mut st = app.shared.state.lock();
    st.faults = faults;
    st.apply_stale_locks();
    Ok(Json(st.faults.clone()))
}
