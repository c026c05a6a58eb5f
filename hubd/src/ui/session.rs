//! Dashboard sessions: an opaque random id in a `__Host-` cookie (`HttpOnly`, `Secure`,
//! `SameSite=Strict`, `Path=/`, `Max-Age`), of which the hub keeps only the SHA-256, in memory,
//! with an absolute expiry on the hub's clock. [`Operator`] is the only way a page handler
//! runs: it is the route layer in front of every page.

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

use super::Ui;
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

/// The live sessions: SHA-256 of the id → expiry (Unix ms on the hub's clock).
#[derive(Default)]
pub(crate) struct Sessions {
    live: Mutex<HashMap<[u8; 32], i64>>,
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
    /// Starts a session at `now_ms`.
    pub(crate) fn start(&self, now_ms: i64) -> NewSession {
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let id = URL_SAFE_NO_PAD.encode(raw);
        let hash = SecretHash::of(&id);
        let ttl_ms = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        let mut live = self.live.lock();
        live.retain(|_, expires| *expires > now_ms);
        while live.len() >= MAX_SESSIONS {
            let Some(soonest) = live
                .iter()
                .min_by_key(|(_, expires)| **expires)
                .map(|(k, _)| *k)
            else {
                break;
            };
            live.remove(&soonest);
        }
        live.insert(hash.0, now_ms.saturating_add(ttl_ms));
        NewSession {
            id: SecretString::from(id),
        }
    }

    /// Whether `id` names a live session at `now_ms`; an expired one is forgotten.
    fn check(&self, id: &str, now_ms: i64) -> bool {
        let hash = SecretHash::of(id).0;
        let mut live = self.live.lock();
        match live.get(&hash) {
            Some(expires) if *expires > now_ms => true,
            Some(_) => {
                live.remove(&hash);
                false
            }
            None => false,
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

/// Whether the request carries a live session.
pub(crate) fn is_logged_in(ui: &Ui, headers: &HeaderMap) -> bool {
    presented(headers).is_some_and(|id| ui.sessions.check(id, ui.hub.clock().now_ms()))
}

/// Ends the request's session, if it carries one; returns whether one ended.
pub(crate) fn end(ui: &Ui, headers: &HeaderMap) -> bool {
    presented(headers).is_some_and(|id| ui.sessions.end(id))
}

/// Proof that the request carries a live dashboard session: only this extractor makes one,
/// and the dashboard router runs it as a route layer in front of every page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operator {
    _proof: (),
}

impl FromRequestParts<Ui> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &Ui) -> Result<Self, Self::Rejection> {
        if is_logged_in(ui, &parts.headers) {
            Ok(Self { _proof: () })
        } else {
            Err(Redirect::to("/ui/login").into_response())
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

    #[test]
    fn a_session_lives_until_its_expiry_and_not_after() {
        let sessions = Sessions::default();
        let session = sessions.start(1_000);
        let id = id_of(&session);
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
        assert!(sessions.check(&id, 1_000 + ttl - 1));
        assert!(!sessions.check(&id, 1_000 + ttl));
        assert_eq!(sessions.len(), 0, "an expired session is forgotten");
    }

    #[test]
    fn only_the_hash_is_kept_and_debug_hides_the_id() {
        let sessions = Sessions::default();
        let session = sessions.start(0);
        let id = id_of(&session);
        assert!(!format!("{session:?}").contains(&id));
        assert!(!format!("{sessions:?}").contains(&id));
        assert!(sessions.live.lock().contains_key(&SecretHash::of(&id).0));
    }

    #[test]
    fn ending_a_session_and_forged_ids() {
        let sessions = Sessions::default();
        let id = id_of(&sessions.start(0));
        assert!(!sessions.check(&"A".repeat(ID_LEN), 1));
        assert!(sessions.end(&id));
        assert!(!sessions.check(&id, 1));
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
        let first = id_of(&sessions.start(0));
        for i in 1..=i64::try_from(MAX_SESSIONS).unwrap() {
            sessions.start(i);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(!sessions.check(&first, 1), "the oldest session made room");
    }

    #[test]
    fn the_cookie_has_every_attribute() {
        let cookie = Sessions::default().start(0).cookie();
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
