//! Who calls the admin API, and what they may do. [`Caller`] is the only way to the admin
//! handlers: `admin::router` runs [`authenticate`] in front of the whole admin tree (fallbacks
//! included), which makes a `Caller` from the bearer token or answers 401 `unauthorized`; and
//! in front of each route [`require_role`] with the role the route table gives it, which
//! answers 403 `forbidden` to a token whose role is too low. A route added to the table
//! cannot skip either.
//!
//! Tokens are checked against the store on every request (replicas share them; a revoked
//! token stops working at once), compared as SHA-256 in constant time. Before any of that,
//! [`limit`] holds a bearer token from a source address that failed too often lately to 429
//! (the allowance of [`crate::auth_limit`], shared with the dashboard's login).

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use bosun_proto::operator_token::Role;

use super::error::ApiError;
use super::extract::bearer;
use crate::Hub;
use crate::auth_limit::{self, AuthLimiter};
use crate::secret::SecretHash;
use crate::store::StoreError;
use crate::store::operator_tokens::LAST_USED_GRANULARITY_MS;

/// The operator token a request presented, checked: its name and role. Only this type's
/// extractor makes one; handlers take it to say who acts (it is in the request's extensions
/// once [`authenticate`] ran, and read from there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    name: String,
    role: Role,
}

impl Caller {
    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// A caller made up for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, role: Role) -> Self {
        Self {
            name: name.to_owned(),
            role,
        }
    }

    /// Checks a presented operator token: known, unexpired, its hash equal in constant time.
    /// `Ok(None)` for any other token. The one check behind the bearer header and the
    /// dashboard's login form (`ui::login`) and sessions (`ui::session`).
    pub(crate) async fn verify(hub: &Hub, presented: &str) -> Result<Option<Self>, StoreError> {
        let hash = SecretHash::of(presented);
        let now_ms = hub.clock().now_ms();
        let Some(record) = hub
            .store_call(move |store| store.operator_token(hash))
            .await?
        else {
            return Ok(None);
        };
        if !record.hash.matches(&hash) || !record.live_at(now_ms) {
            return Ok(None);
        }
        let stale = record
            .last_used_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= LAST_USED_GRANULARITY_MS);
        if stale {
            let name = record.name.clone();
            if let Err(err) = hub
                .store_call(move |store| store.touch_operator_token(&name, now_ms))
                .await
            {
                tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    token = %record.name,
                    "could not note an operator token's use"
                );
            }
        }
        Ok(Some(Self {
            name: record.name,
            role: record.role,
        }))
    }
}

impl FromRequestParts<Hub> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, hub: &Hub) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let presented = bearer(&parts.headers).ok_or(ApiError::Unauthorized)?;
        let caller = Self::verify(hub, presented)
            .await?
            .ok_or(ApiError::Unauthorized)?;
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// The layer in front of the whole admin tree: a request without a valid operator token gets
/// 401 before it is routed. The caller goes into the request's extensions and onto its span
/// (`token`), the call runs as it ([`crate::actor`]: the events it writes say `by`), and the
/// call is logged with its name.
pub async fn authenticate(caller: Caller, request: Request, next: Next) -> Response {
    tracing::Span::current().record("token", caller.name());
    let method = request.method().clone();
    let response = crate::actor::scope(caller.name.clone(), next.run(request)).await;
    tracing::info!(
        token = %caller.name,
        role = caller.role.as_str(),
        %method,
        status = response.status().as_u16(),
        "admin call"
    );
    response
}

/// The outermost layer of the admin tree: a request that presents a bearer token from a source
/// whose allowance of failures is spent gets 429 `too_many_attempts` with `Retry-After`,
/// without the token being hashed or looked up; a token [`authenticate`] refuses (401) takes
/// one failure from its source's allowance. A request with no token costs nothing to refuse
/// and is not counted.
pub async fn limit(
    State(limiter): State<Arc<AuthLimiter>>,
    request: Request,
    next: Next,
) -> Response {
    if bearer(request.headers()).is_none() {
        return next.run(request).await;
    }
    let peer = auth_limit::peer(request.extensions());
    if let Err(wait) = limiter.admit(peer) {
        tracing::warn!(
            peer = peer.map(tracing::field::display),
            retry_after_s = auth_limit::retry_after_secs(wait),
            "admin call refused: too many failed authentications from its address"
        );
        return ApiError::TooManyAttempts { wait }.into_response();
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        limiter.failed(peer);
        tracing::info!(
            peer = peer.map(tracing::field::display),
            "admin call with a wrong operator token"
        );
    }
    response
}

/// The layer in front of one admin route: the caller's role must allow `needed`.
pub async fn require_role(State(needed): State<Role>, request: Request, next: Next) -> Response {
    match request.extensions().get::<Caller>() {
        Some(caller) if caller.role.allows(needed) => next.run(request).await,
        Some(caller) => ApiError::Forbidden {
            needed,
            token: caller.name.clone(),
            role: caller.role,
        }
        .into_response(),
        None => ApiError::Unauthorized.into_response(),
    }
}
