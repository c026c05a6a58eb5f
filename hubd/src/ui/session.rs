//! Dashboard sessions: an opaque random id in a `__Host-` cookie (`HttpOnly`, `Secure`,
//! `SameSite=Strict`, `Path=/`, `Max-Age`), of which the hub keeps only the SHA-256, in memory,
//! with an absolute expiry on the hub's clock, the name and role of the operator token that
//! logged in and that token's hash. [`Operator`] is the only way a page handler runs: it is
//! the route layer in front of every page, and it checks the token against the store on each
//! page, so a session ends when its token is revoked, rotated or expires.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use rand::RngCore as _;
use secrecy::{ExposeSecret as _, SecretString};

use bosun_proto::operator_token::Role;

use super::Ui;
use crate::api::caller::Caller;
use crate::secret::SecretHash;

/// The session cookie's name. The `__Host-` prefix makes browsers refuse it unless it is
/// `Secure`, has `Path=/` and no `Domain`, so no other host can plant it.
pub const COOKIE_NAME: &str = "__Host-bosun-session";

/// How long a session lasts from login, whatever happens in between.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Most sessions held at once; a login beyond it ends the session closest to expiry.
const MAX_SESSIONS: usize = 256;

/// Length of an encoded session id (32 random bytes, base64url without padding).
const ID_LEN: usize = 43;

/// Longest `Cookie` header read; a larger one is treated as carrying no session.
const MAX_COOKIE_HEADER: usize = 8 * 1024;

/// The live sessions, by the SHA-256 of their id.
#[derive(Default)]
pub(crate) struct Sessions {
    live: Mutex<HashMap<[u8; 32], Session>>,
}

/// One session: its expiry (Unix ms on the hub's clock), the token that logged in, and the
/// session's form token ([`Acting::csrf`]).
#[derive(Debug, Clone)]
struct Session {
    expires_ms: i64,
    token: SecretHash,
    name: String,
    role: Role,
    csrf: FormToken,
}

/// A session's form token: random, made at login, sent in the pages' forms that change state
/// and compared in constant time when one is posted. `Debug` does not show it.
#[derive(Clone)]
pub(crate) struct FormToken(String);

impl FormToken {
    fn new() -> Self {
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        Self(URL_SAFE_NO_PAD.encode(raw))
    }

    /// The value a page puts in its forms' hidden `csrf` field.
    pub(crate) fn value(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token (compared in constant time).
    pub(crate) fn matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(self.0.as_bytes().ct_eq(presented.as_bytes()))
    }
}

impl std::fmt::Debug for FormToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FormToken(..)")
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("held", &self.live.lock().len())
            .finish()
    }
}

/// A new session's id, to be sent once in the cookie. `Debug` does not show it.
#[derive(Debug)]
pub(crate) struct NewSession {
    id: SecretString,
}

impl NewSession {
    /// The `Set-Cookie` value that hands the id to the browser.
    pub(crate) fn cookie(&self) -> String {
        format!(
            "{COOKIE_NAME}={}; Max-Age={}; Path=/; Secure; HttpOnly; SameSite=Strict",
            self.id.expose_secret(),
            SESSION_TTL.as_secs()
        )
    }
}

/// The `Set-Cookie` value that makes the browser drop the session cookie.
pub(crate) fn clearing_cookie() -> String {
    format!("{COOKIE_NAME}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict")
}

impl Sessions {
    /// Starts a session at `now_ms` for the token `caller` presented (`token` its hash).
    pub(crate) fn start(&self, now_ms: i64, caller: &Caller, token: SecretHash) -> NewSession {
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let id = URL_SAFE_NO_PAD.encode(raw);
        let hash = SecretHash::of(&id);
        let ttl_ms = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        let mut live = self.live.lock();
        live.retain(|_, session| session.expires_ms > now_ms);
        while live.len() >= MAX_SESSIONS {
            let Some(soonest) = live
                .iter()
                .min_by_key(|(_, session)| session.expires_ms)
                .map(|(k, _)| *k)
            else {
                break;
            };
            live.remove(&soonest);
        }
        live.insert(
            hash.0,
            Session {
                expires_ms: now_ms.saturating_add(ttl_ms),
                token,
                name: caller.name().to_owned(),
                role: caller.role(),
                csrf: FormToken::new(),
            },
        );
        NewSession {
            id: SecretString::from(id),
        }
    }

    /// The session `id` names if it is live at `now_ms`; an expired one is forgotten.
    fn check(&self, id: &str, now_ms: i64) -> Option<Session> {
        let hash = SecretHash::of(id).0;
        let mut live = self.live.lock();
        match live.get(&hash) {
            Some(session) if session.expires_ms > now_ms => Some(session.clone()),
            Some(_) => {
                live.remove(&hash);
                None
            }
            None => None,
        }
    }

    /// Ends the session `id`, if it is one.
    fn end(&self, id: &str) -> bool {
        self.live.lock().remove(&SecretHash::of(id).0).is_some()
    }

    /// How many sessions are held (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.lock().len()
    }
}

/// The session id a request presents: the value of our cookie when it has the shape of an id.
fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter(|value| value.len() <= MAX_COOKIE_HEADER)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)
        .filter(|value| {
            value.len() == ID_LEN
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The live session the request carries, if any, with its token still valid: a session whose
/// token was revoked, rotated or has expired is ended here. The token's name and role are read
/// again from the store, so a changed role counts from the next page on.
async fn logged_in(ui: &Ui, headers: &HeaderMap) -> Option<Acting> {
    let id = presented(headers)?;
    let session = ui.sessions.check(id, ui.hub.clock().now_ms())?;
    let token = session.token;
    let now_ms = ui.hub.clock().now_ms();
    let current = match ui
        .hub
        .store_call(move |store| store.operator_token(token))
        .await
    {
        Ok(current) => current,
        Err(err) => {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "could not check a dashboard session's token"
            );
            return None;
        }
    };
    match current {
        Some(record) if record.hash.matches(&token) && record.live_at(now_ms) => Some(Acting {
            name: record.name,
            role: record.role,
            csrf: session.csrf,
        }),
        _ => {
            ui.sessions.end(id);
            tracing::info!(
                token = %session.name,
                role = session.role.as_str(),
                "dashboard session ended: its token no longer works"
            );
            None
        }
    }
}

/// Whether the request carries a live session.
pub(crate) async fn is_logged_in(ui: &Ui, headers: &HeaderMap) -> bool {
    logged_in(ui, headers).await.is_some()
}

/// Ends the request's session, if it carries one; returns whether one ended.
pub(crate) fn end(ui: &Ui, headers: &HeaderMap) -> bool {
    presented(headers).is_some_and(|id| ui.sessions.end(id))
}

/// Proof that the request carries a live dashboard session whose token still works: only
/// this extractor makes one, and the dashboard router runs it as a route layer in front of
/// every page. The token's name goes on the request's span, and who acts ([`Acting`]) into the
/// request's extensions for the page to read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operator {
    _proof: (),
}

impl FromRequestParts<Ui> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &Ui) -> Result<Self, Self::Rejection> {
        match logged_in(ui, &parts.headers).await {
            Some(acting) => {
                tracing::Span::current().record("token", acting.name.as_str());
                parts.extensions.insert(acting);
                Ok(Self { _proof: () })
            }
            None => Err(Redirect::to("/ui/login").into_response()),
        }
    }
}

/// Who a page acts for: the session's operator token (name and role, as the store holds them
/// now) and the session's form token. Only [`Operator`] makes one, so a handler that takes it
/// runs behind a checked session.
#[derive(Debug, Clone)]
pub(crate) struct Acting {
    /// The operator token's name.
    pub(crate) name: String,
    /// Its role.
    pub(crate) role: Role,
    /// The session's form token.
    pub(crate) csrf: FormToken,
}

impl Acting {
    /// Whether the token may change alerts (acknowledge, silence): `operator` and `admin`, as
    /// the admin API's routes allow them.
    pub(crate) fn may_triage(&self) -> bool {
        self.role.allows(Role::Operator)
    }
}

impl FromRequestParts<Ui> for Acting {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &Ui) -> Result<Self, Self::Rejection> {
        if let Some(acting) = parts.extensions.get::<Acting>() {
            return Ok(acting.clone());
        }
        match logged_in(ui, &parts.headers).await {
            Some(acting) => Ok(acting),
            None => Err(Redirect::to("/ui/login").into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    fn cookie_headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn id_of(session: &NewSession) -> String {
        session.id.expose_secret().to_owned()
    }

    fn start(sessions: &Sessions, now_ms: i64) -> NewSession {
        let caller = Caller::for_tests("alice", Role::Viewer);
        sessions.start(now_ms, &caller, SecretHash::of("bsa_alice"))
    }

    #[test]
    fn a_session_lives_until_its_expiry_and_not_after() {
        let sessions = Sessions::default();
        let session = start(&sessions, 1_000);
        let id = id_of(&session);
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
        let session = sessions.check(&id, 1_000 + ttl - 1).unwrap();
        assert_eq!(
            (session.name.as_str(), session.role),
            ("alice", Role::Viewer)
        );
        assert!(session.csrf.matches(session.csrf.value()));
        assert!(!session.csrf.matches(""));
        assert!(!format!("{session:?}").contains(session.csrf.value()));
        assert!(sessions.check(&id, 1_000 + ttl).is_none());
        assert_eq!(sessions.len(), 0, "an expired session is forgotten");
    }

    #[test]
    fn only_the_hash_is_kept_and_debug_hides_the_id() {
        let sessions = Sessions::default();
        let session = start(&sessions, 0);
        let id = id_of(&session);
        assert!(!format!("{session:?}").contains(&id));
        assert!(!format!("{sessions:?}").contains(&id));
        assert!(sessions.live.lock().contains_key(&SecretHash::of(&id).0));
    }

    #[test]
    fn ending_a_session_and_forged_ids() {
        let sessions = Sessions::default();
        let id = id_of(&start(&sessions, 0));
        assert!(sessions.check(&"A".repeat(ID_LEN), 1).is_none());
        assert!(sessions.end(&id));
        assert!(sessions.check(&id, 1).is_none());
        assert!(!sessions.end(&id));
    }

    #[test]
    fn the_cookie_is_found_among_others_and_bad_shapes_are_ignored() {
        let id = "a".repeat(ID_LEN);
        let headers = cookie_headers(&format!("x=1; {COOKIE_NAME}={id}; y=2"));
        assert_eq!(presented(&headers), Some(id.as_str()));
        for bad in [
            format!("{COOKIE_NAME}={}", "a".repeat(ID_LEN - 1)),
            format!("{COOKIE_NAME}={}!", "a".repeat(ID_LEN - 1)),
            format!("bosun-session={id}"),
        ] {
            assert_eq!(presented(&cookie_headers(&bad)), None, "{bad}");
        }
    }

    #[test]
    fn the_store_is_bounded() {
        let sessions = Sessions::default();
        let first = id_of(&start(&sessions, 0));
        for i in 1..=i64::try_from(MAX_SESSIONS).unwrap() {
            start(&sessions, i);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(
            sessions.check(&first, 1).is_none(),
            "the oldest session made room"
        );
    }

    #[test]
    fn the_cookie_has_every_attribute() {
        let cookie = start(&Sessions::default(), 0).cookie();
        for part in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=43200",
        ] {
            assert!(cookie.contains(part), "{cookie}");
        }
        assert!(clearing_cookie().contains("Max-Age=0"));
    }
}
