//! Login with an operator token (any role: every role may read the dashboard), and logout.
//!
//! Cross-site request forgery: the session cookie is `SameSite=Strict`, so a form posted from
//! another site carries no session; and both forms must come from this hub's own pages
//! (`Origin`, or `Sec-Fetch-Site` where the browser sends `Origin: null`), so another site
//! cannot post a login either. The login body is bounded ([`MAX_LOGIN_BODY`]); a login from a
//! source address whose allowance of failures is spent ([`crate::auth_limit`], shared with the
//! admin API's bearer tokens; nothing hub-wide) is refused 429 before the token is even checked;
//! the check itself is the admin API's ([`crate::api::caller::Caller::verify`]): a hash
//! compared in constant time. A login is an event in the hub's log naming the token
//! (`dashboard_login`).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::error::UiError;
use super::{Ui, layout, session};
use crate::api::caller::Caller;
use crate::api::extract::BodyLimit;
use crate::secret::SecretHash;

/// Largest login body read; a longer one is refused before it is parsed.
pub const MAX_LOGIN_BODY: usize = 4 * 1024;

/// The login form's fields.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// `GET /ui/login`: the form, or the fleet for a browser already logged in.
pub(crate) async fn form(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    if session::is_logged_in(&ui, &headers).await {
        return Redirect::to("/ui/").into_response();
    }
    login_page(StatusCode::OK, None)
}

fn login_page(status: StatusCode, problem: Option<&str>) -> Response {
    let body = html! {
        main class="login" {
            h1 { "Bosun hub" }
            p { "Log in with an operator token (" code { "bosunctl tokens create" } " makes one; "
                code { "bosun-hubd init" } " printed the first)." }
            @if let Some(problem) = problem {
                p class="banner danger" role="alert" { (problem) }
            }
            form method="post" action="/ui/login" {
                label for="token" { "Operator token" }
                input id="token" name="token" type="password" autocomplete="current-password"
                    required maxlength="256" autofocus;
                button type="submit" { "Log in" }
            }
        }
    };
    (status, layout::bare("Log in", body)).into_response()
}

/// `POST /ui/login`: a right token starts a session and goes to the fleet; a wrong one shows
/// the form again with a message.
pub(crate) async fn submit(State(ui): State<Ui>, request: Request) -> Result<Response, UiError> {
    same_origin(request.headers(), request.uri())?;
    let peer = crate::auth_limit::peer(request.extensions());
    let form: LoginForm = read_form(request, MAX_LOGIN_BODY, "login").await?;
    if let Err(wait) = ui.limiter.admit(peer) {
        tracing::warn!(
            peer = peer.map(tracing::field::display),
            retry_after_s = crate::auth_limit::retry_after_secs(wait),
            "dashboard login refused: too many failed logins"
        );
        return Err(UiError::TooManyLogins { wait });
    }
    let presented = form.token.trim();
    let Some(caller) = Caller::verify(&ui.hub, presented).await? else {
        ui.limiter.failed(peer);
        tracing::info!(
            peer = peer.map(tracing::field::display),
            "dashboard login with a wrong token"
        );
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            Some("That is not a valid operator token of this hub."),
        ));
    };
    let now_ms = ui.hub.clock().now_ms();
    let name = caller.name().to_owned();
    ui.hub
        .store_call(move |store| store.record_dashboard_login(&name, now_ms))
        .await?;
    let session = ui
        .sessions
        .start(now_ms, &caller, SecretHash::of(presented));
    tracing::info!(
        token = caller.name(),
        role = caller.role().as_str(),
        "dashboard login"
    );
    Ok((
        [(header::SET_COOKIE, session.cookie())],
        Redirect::to("/ui/"),
    )
        .into_response())
}

/// Reads a form's bounded urlencoded body (at most `limit` bytes); `what` names the form.
pub(crate) async fn read_form<T: serde::de::DeserializeOwned>(
    request: Request,
    limit: usize,
    what: &'static str,
) -> Result<T, UiError> {
    let urlencoded = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim() == "application/x-www-form-urlencoded")
        });
    if !urlencoded {
        return Err(UiError::BadRequest {
            message: format!("the {what} form is sent as application/x-www-form-urlencoded"),
        });
    }
    let too_large = UiError::TooLarge { what, limit };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large);
    }
    let within = request
        .extensions()
        .get::<BodyLimit>()
        .map_or(BodyLimit::UNSET_WITHIN, |limit| limit.within);
    // Without a length, reading stops at the limit: a longer body (or one cut off) is refused.
    let read = axum::body::to_bytes(request.into_body(), limit);
    let body = tokio::time::timeout(within, read)
        .await
        .map_err(|_| UiError::TooSlow { what, within })?
        .map_err(|_| too_large)?;
    serde_urlencoded::from_bytes(&body).map_err(|e| UiError::BadRequest {
        message: format!("the {what} form lacks a field or has a bad one: {e}"),
    })
}

/// `POST /ui/logout`: ends the session and clears the cookie.
pub(crate) async fn logout(
    State(ui): State<Ui>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    same_origin(&headers, &uri)?;
    if session::end(&ui, &headers) {
        tracing::info!("dashboard logout");
    }
    Ok((
        [(header::SET_COOKIE, session::clearing_cookie())],
        Redirect::to("/ui/login"),
    )
        .into_response())
}

/// Requires a form posted from this hub's own pages. A browser says so in one of two ways:
/// an `Origin` naming this hub (`https://` and the host the request was sent to: `Host` in
/// HTTP/1.1, the URI's authority in HTTP/2); or, because the pages' `Referrer-Policy` is
/// `no-referrer` and browsers then send `Origin: null` on a form post, `Sec-Fetch-Site:
/// same-origin`, a header no page can set. A request that names another site in either is
/// refused, and so is one that names no site at all.
pub(crate) fn same_origin(headers: &HeaderMap, uri: &Uri) -> Result<(), UiError> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let host = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| text(header::HOST.as_str()))
        .ok_or(UiError::CrossOrigin)?;
    let expected = format!("https://{host}");
    let origin = text(header::ORIGIN.as_str()).filter(|o| *o != "null");
    let fetch_site = text("sec-fetch-site");
    let origin_ok = origin.map(|o| o.eq_ignore_ascii_case(&expected));
    let site_ok = fetch_site.map(|s| s == "same-origin");
    match (origin_ok, site_ok) {
        (Some(true), None | Some(true)) | (None, Some(true)) => Ok(()),
        _ => Err(UiError::CrossOrigin),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    fn check(origin: Option<&str>, host: &str) -> Result<(), UiError> {
        same_origin(&headers(origin, host), &Uri::from_static("/ui/login"))
    }

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    fn fetched(origin: Option<&str>, site: &str) -> Result<(), UiError> {
        let mut headers = headers(origin, "hub:8443");
        headers.insert("sec-fetch-site", HeaderValue::from_str(site).unwrap());
        same_origin(&headers, &Uri::from_static("/ui/login"))
    }

    #[test]
    fn a_browser_that_hides_the_origin_is_judged_by_fetch_metadata() {
        assert!(fetched(Some("null"), "same-origin").is_ok());
        assert!(fetched(None, "same-origin").is_ok());
        assert!(fetched(Some("https://hub:8443"), "same-origin").is_ok());
        assert!(fetched(Some("null"), "cross-site").is_err());
        assert!(fetched(Some("null"), "same-site").is_err());
        assert!(fetched(Some("https://evil.example"), "same-origin").is_err());
        assert!(fetched(Some("https://hub:8443"), "cross-site").is_err());
    }

    #[test]
    fn only_this_hubs_origin_may_post() {
        assert!(check(Some("https://hub:8443"), "hub:8443").is_ok());
        let h2 = Uri::from_static("https://hub:8443/ui/login");
        assert!(same_origin(&headers(Some("https://hub:8443"), "other"), &h2).is_ok());
        for origin in [
            None,
            Some("https://evil.example"),
            Some("http://hub:8443"),
            Some("https://hub:8444"),
            Some("null"),
        ] {
            assert!(check(origin, "hub:8443").is_err(), "{origin:?}");
        }
    }
}
