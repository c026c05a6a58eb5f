//! Login with an operator token (any role: every role may read the dashboard), and logout.
//!
//! Cross-site request forgery: the session cookie is `SameSite=Strict`, so a form posted from
//! another site carries no session; and both forms must come from this hub's own pages
//! (`Origin`, or `Sec-Fetch-Site` where the browser sends `Origin: null`), so another site
//! cannot post a login either. The login body is bounded ([`MAX_LOGIN_BODY`]); failed
//! logins draw on their source address's allowance and on a hub-wide ceiling
//! ([`LoginLimiter`]) before the token is even checked;
//! the check itself is the admin API's ([`crate::api::caller::Caller::verify`]): a hash
//! compared in constant time. A login is an event in the hub's log naming the token
//! (`dashboard_login`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use parking_lot::Mutex;
use serde::Deserialize;

use super::error::UiError;
use super::{Ui, layout, session};
use crate::api::caller::Caller;
use crate::secret::SecretHash;

/// Largest login body read; a longer one is refused before it is parsed.
pub const MAX_LOGIN_BODY: usize = 4 * 1024;

/// Failed logins one source address may make at once before it has to wait.
const FAILURE_BURST: f64 = 10.0;

/// One more failed login is allowed per address per this interval.
const FAILURE_REFILL: Duration = Duration::from_secs(6);

/// Failed logins the whole hub allows at once, from every address together: the ceiling a
/// guesser spread over many addresses meets.
const GLOBAL_BURST: f64 = 100.0;

/// One more failed login is allowed hub-wide per this interval.
const GLOBAL_REFILL: Duration = Duration::from_secs(1);

/// Most source addresses whose failures are remembered; past it, the ones that have waited
/// their allowance back are forgotten first, then the longest quiet.
const MAX_TRACKED: usize = 4_096;

/// A token bucket of failed logins.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    /// Refills it up to `now`; `Err(wait)` when it holds less than one failure.
    fn admit(&mut self, (burst, refill): (f64, Duration), now: Instant) -> Result<(), Duration> {
        let refilled = now.duration_since(self.at).as_secs_f64() / refill.as_secs_f64();
        *self = Self {
            tokens: (self.tokens + refilled).min(burst),
            at: now,
        };
        if self.tokens >= 1.0 {
            Ok(())
        } else {
            Err(refill.mul_f64(1.0 - self.tokens))
        }
    }

    fn take(&mut self) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }
}

/// Where a login comes from, as the limiter counts it: an IPv4 address, or an IPv6 address's
/// /64 (one subscriber's network: a guesser holding a /64 is still one source). `None` when
/// the server did not record the peer.
fn source(peer: Option<IpAddr>) -> Option<IpAddr> {
    match peer? {
        IpAddr::V4(v4) => Some(IpAddr::V4(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => Some(IpAddr::V4(v4)),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Some(IpAddr::V6(prefix.into()))
            }
        },
    }
}

/// The allowance of failed logins: each source address has a bucket of [`FAILURE_BURST`]
/// refilling one every [`FAILURE_REFILL`], and all of them together draw on a hub-wide bucket of
/// [`GLOBAL_BURST`] refilling one every [`GLOBAL_REFILL`]. While either is empty a login from
/// that address is refused without looking at the token; one address that runs dry locks out
/// itself, not the operators elsewhere (the admin API's bearer tokens keep working throughout).
/// Behind a TCP load balancer every login comes from its address, and the allowance is, in
/// effect, the hub-wide one of the address alone.
#[derive(Debug)]
pub(crate) struct LoginLimiter {
    state: Mutex<Limits>,
}

#[derive(Debug)]
struct Limits {
    global: Bucket,
    by_source: HashMap<Option<IpAddr>, Bucket>,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        Self {
            state: Mutex::new(Limits {
                global: Bucket::full(GLOBAL_BURST, Instant::now()),
                by_source: HashMap::new(),
            }),
        }
    }
}

impl LoginLimiter {
    /// `Ok` when a login from `peer` may be tried now, else how long to wait.
    fn admit(&self, peer: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let mut state = self.state.lock();
        let global = state.global.admit((GLOBAL_BURST, GLOBAL_REFILL), now);
        let own = match state.by_source.get_mut(&source(peer)) {
            Some(bucket) => bucket.admit((FAILURE_BURST, FAILURE_REFILL), now),
            None => Ok(()),
        };
        own.and(global)
    }

    /// Takes one failed login from `peer`'s allowance and from the hub's.
    fn failed(&self, peer: Option<IpAddr>) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.global.take();
        let key = source(peer);
        if !state.by_source.contains_key(&key) && state.by_source.len() >= MAX_TRACKED {
            state.forget_one(now);
        }
        state
            .by_source
            .entry(key)
            .or_insert_with(|| Bucket::full(FAILURE_BURST, now))
            .take();
    }
}

impl Limits {
    /// Makes room for one more source: drops every bucket that has refilled (it remembers
    /// nothing), else the one quiet the longest.
    fn forget_one(&mut self, now: Instant) {
        self.by_source.retain(|_, bucket| {
            let mut probe = *bucket;
            let _ = probe.admit((FAILURE_BURST, FAILURE_REFILL), now);
            probe.tokens < FAILURE_BURST
        });
        if self.by_source.len() >= MAX_TRACKED
            && let Some(oldest) = self
                .by_source
                .iter()
                .min_by_key(|(_, bucket)| bucket.at)
                .map(|(key, _)| *key)
        {
            self.by_source.remove(&oldest);
        }
    }
}

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
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let form = read_form(request).await?;
    if let Err(wait) = ui.limiter.admit(peer) {
        tracing::warn!(
            peer = peer.map(tracing::field::display),
            retry_after_s = wait.as_secs() + 1,
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

/// Reads the bounded urlencoded body.
async fn read_form(request: Request) -> Result<LoginForm, UiError> {
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
            message: "the login form is sent as application/x-www-form-urlencoded".to_owned(),
        });
    }
    let too_large = UiError::TooLarge {
        limit: MAX_LOGIN_BODY,
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_LOGIN_BODY as u64) {
        return Err(too_large);
    }
    // Without a length, reading stops at the limit: a longer body (or one cut off) is refused.
    let body = axum::body::to_bytes(request.into_body(), MAX_LOGIN_BODY)
        .await
        .map_err(|_| too_large)?;
    serde_urlencoded::from_bytes(&body).map_err(|_| UiError::BadRequest {
        message: "the login form has no token field".to_owned(),
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
fn same_origin(headers: &HeaderMap, uri: &Uri) -> Result<(), UiError> {
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

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn one_address_runs_dry_after_a_burst_and_the_others_do_not() {
        let limiter = LoginLimiter::default();
        for _ in 0..10 {
            assert!(limiter.admit(ip("192.0.2.1")).is_ok());
            limiter.failed(ip("192.0.2.1"));
        }
        let wait = limiter.admit(ip("192.0.2.1")).unwrap_err();
        assert!(wait <= FAILURE_REFILL && wait > Duration::ZERO, "{wait:?}");
        assert!(limiter.admit(ip("192.0.2.2")).is_ok());
        // An IPv6 /64 is one source; its neighbour /64 is another.
        for _ in 0..10 {
            limiter.failed(ip("2001:db8:0:1::1"));
        }
        assert!(limiter.admit(ip("2001:db8:0:1::ffff")).is_err());
        assert!(limiter.admit(ip("2001:db8:0:2::1")).is_ok());
        // An IPv4 peer seen through an IPv6 socket is the same IPv4 source.
        assert!(limiter.admit(ip("::ffff:192.0.2.1")).is_err());
    }

    #[test]
    fn failures_spread_over_many_addresses_meet_the_hub_wide_ceiling() {
        let limiter = LoginLimiter::default();
        for n in 0..100u32 {
            let peer = Some(IpAddr::V4(std::net::Ipv4Addr::from(0xc633_6400 + n)));
            assert!(limiter.admit(peer).is_ok(), "failure {n}");
            limiter.failed(peer);
        }
        assert!(limiter.admit(ip("203.0.113.200")).is_err());
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let limiter = LoginLimiter::default();
        for n in 0..u32::try_from(MAX_TRACKED + 500).unwrap() {
            limiter.failed(Some(IpAddr::V4(std::net::Ipv4Addr::from(n))));
        }
        assert!(limiter.state.lock().by_source.len() <= MAX_TRACKED);
    }
}
