//! Bearer tokens: checking their shape (minted in [`crate::guests::credentials::token`]), hashing, resolving the caller's guest, per-token rate limits and
//! the "own guest only" check.
//!
//! A token is 256 random bits (`blt_` + 43 base64url characters). The journal keeps only
//! its SHA-256; a request's token is hashed and looked up by that digest, so neither the
//! plaintext nor a comparison over it is ever kept, and the lookup's timing depends on the
//! digest, never on how much of a guessed token was right.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use bosun_proto::desired::GuestKind;
use bosun_pve::Vmid;
use parking_lot::Mutex;
use secrecy::SecretString;
use subtle::ConstantTimeEq as _;

use super::LocalApi;
use super::error::ApiError;
use super::refusals::{Counted, RefusalKey};
use crate::data::backup::GuestRef;
use crate::guests::credentials::token::{TOKEN_LEN, TOKEN_PREFIX};
use crate::ops::journal::{AuditEvent, TokenHash};

/// Extracts the token from an `Authorization: Bearer …` value, refusing anything that
/// cannot be a minted token before it is hashed.
pub fn parse_bearer(value: &[u8]) -> Option<SecretString> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    let well_formed = token.len() == TOKEN_LEN
        && token.starts_with(TOKEN_PREFIX)
        && token[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then(|| SecretString::from(token.to_owned()))
}

/// The guest a request acts for, resolved from its token alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The hub's guest id.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: Vmid,
    /// Its kind, as the journal recorded it when the agent created the guest (decision 0123).
    pub kind: GuestKind,
}

impl Caller {
    /// As the backup service names a guest.
    pub fn guest_ref(&self) -> GuestRef {
        GuestRef {
            guest_id: self.guest_id.clone(),
            vmid: self.vmid,
            kind: self.kind,
        }
    }

    /// Whether an explicit `vmid` value names this guest.
    pub fn is_own_vmid(&self, value: &str) -> bool {
        value.trim().parse::<u32>().ok() == Some(self.vmid.get())
    }

    /// Whether an explicit `guest_id` value names this guest (compared in constant time).
    pub fn is_own_guest_id(&self, value: &str) -> bool {
        value.trim().len() == self.guest_id.len()
            && bool::from(value.trim().as_bytes().ct_eq(self.guest_id.as_bytes()))
    }
}

impl FromRequestParts<LocalApi> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &LocalApi) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| parse_bearer(v.as_bytes()))
            .ok_or(ApiError::Unauthorized)?;
        let hash = TokenHash::of(&token);
        drop(token);
        let owner = api
            .inner
            .journal
            .token_owner(hash)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "token lookup failed");
                ApiError::Unavailable { what: "journal" }
            })?
            .ok_or(ApiError::Unauthorized)?;
        let vmid = Vmid::new(owner.vmid).map_err(|_| ApiError::Unauthorized)?;
        // The guest's kind is the one the agent recorded for it at its vmid, never the hub's
        // word; a token with no such record (none is minted without one) is a container's.
        let kind = api
            .inner
            .journal
            .provenance(owner.vmid)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "provenance lookup failed");
                ApiError::Unavailable { what: "journal" }
            })?
            .filter(|p| p.guest_id() == Some(owner.guest_id.as_str()))
            .map_or(GuestKind::Lxc, |p| p.kind());
        // The connection belongs to this guest from now on: its address is learned for the
        // guest and the connection counted in the guest's slots (`slots.rs`).
        if let Some(slot) = parts.extensions.get::<super::ConnSlot>() {
            slot.attribute(&owner.guest_id);
        }
        api.inner.limiter.check(&owner.guest_id)?;
        Ok(Caller {
            guest_id: owner.guest_id,
            vmid,
            kind,
        })
    }
}

/// The explicit guest ids a request carries (query and body), checked against the caller.
#[derive(Debug, Default, Clone)]
pub struct NamedGuests {
    vmids: Vec<String>,
    guest_ids: Vec<String>,
}

impl NamedGuests {
    /// Collects `vmid` and `guest_id` from a raw query string.
    pub fn from_query(query: Option<&str>) -> Result<Self, ApiError> {
        let mut named = Self::default();
        if let Some(q) = query {
            let pairs: Vec<(String, String)> =
                serde_urlencoded::from_str(q).map_err(|_| ApiError::BadRequest {
                    reason: "the query string is malformed".to_owned(),
                })?;
            for (k, v) in pairs {
                named.add(&k, v);
            }
        }
        Ok(named)
    }

    /// Adds a named id (`vmid` or `guest_id`); other keys are ignored.
    pub fn add(&mut self, key: &str, value: String) {
        match key {
            "vmid" => self.vmids.push(value),
            "guest_id" => self.guest_ids.push(value),
            _ => {}
        }
    }

    /// Adds the `vmid`/`guest_id` fields of a JSON body, whatever their JSON type.
    pub fn add_json(
        &mut self,
        vmid: Option<&serde_json::Value>,
        guest_id: Option<&serde_json::Value>,
    ) {
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if let Some(v) = vmid {
            self.vmids.push(text(v));
        }
        if let Some(v) = guest_id {
            self.guest_ids.push(text(v));
        }
    }

    /// Refuses (403, audited) a request naming any guest but the caller's own.
    pub async fn check(
        &self,
        api: &LocalApi,
        caller: &Caller,
        endpoint: &str,
    ) -> Result<(), ApiError> {
        let foreign_vmid = self.vmids.iter().find(|v| !caller.is_own_vmid(v));
        let foreign_guest = self.guest_ids.iter().find(|g| !caller.is_own_guest_id(g));
        if foreign_vmid.is_none() && foreign_guest.is_none() {
            return Ok(());
        }
        let key = RefusalKey {
            guest_id: caller.guest_id.clone(),
            vmid: caller.vmid.get(),
            reason: "foreign_guest",
            endpoint: endpoint.to_owned(),
        };
        let (counted, ended_window) = api.inner.refusals.count(&key, api.inner.clock.now());
        if let Some(summary) = ended_window {
            api.audit_refusal(summary).await;
        }
        if counted == Counted::Repeated {
            tracing::debug!(guest_id = %caller.guest_id, endpoint, "cross-guest request refused again; counted");
            return Err(ApiError::ForeignGuest);
        }
        tracing::warn!(
            guest_id = %caller.guest_id,
            vmid = %caller.vmid,
            endpoint,
            repeats_counted_for_s = api.inner.refusals.window().as_secs(),
            "local api request named another guest; refused"
        );
        let mut event = AuditEvent::new("localapi.foreign_guest");
        event.guest_id = Some(caller.guest_id.clone());
        event.vmid = Some(caller.vmid.get());
        event.detail = serde_json::json!({
            "endpoint": endpoint,
            "named_vmid": foreign_vmid.map(|v| truncate(v, 64)),
            "named_guest_id": foreign_guest.map(|g| truncate(g, 64)),
        });
        api.audit_refusal(event).await;
        Err(ApiError::ForeignGuest)
    }
}

fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Per-token token buckets: `rate` requests per second sustained, `burst` at once.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// A limiter allowing `rate_per_s` sustained and `burst` at once per token.
    pub fn new(rate_per_s: u32, burst: u32) -> Self {
        Self {
            rate: f64::from(rate_per_s.max(1)),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `key`'s bucket.
    pub fn check(&self, key: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate);
            Err(ApiError::RateLimited {
                retry_after_s: wait.as_secs().max(1),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;
    use crate::guests::credentials::token::mint_token;

    #[test]
    fn minted_tokens_parse_and_differ() {
        let a = mint_token();
        let b = mint_token();
        assert_ne!(a.expose_secret(), b.expose_secret());
        let header = format!("Bearer {}", a.expose_secret());
        let parsed = parse_bearer(header.as_bytes()).unwrap();
        assert_eq!(parsed.expose_secret(), a.expose_secret());
        assert_eq!(TokenHash::of(&parsed), TokenHash::of(&a));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let good = mint_token().expose_secret().to_owned();
        for bad in [
            String::new(),
            good.clone(),
            format!("Basic {good}"),
            format!("Bearer {}", &good[..20]),
            format!("Bearer {good}x"),
            format!("Bearer {}", good.replace("blt_", "xxx_")),
            "Bearer blt_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!".to_owned(),
        ] {
            assert!(parse_bearer(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(parse_bearer(&[0xff, 0xfe]).is_none());
    }

    #[test]
    fn the_bucket_refills_at_its_rate() {
        // 4 per second: a refill takes 250 ms, far longer than the four checks below take
        // even on a loaded machine (at 1,000 per second a busy scheduler refilled the bucket
        // between them).
        let limiter = RateLimiter::new(4, 3);
        for _ in 0..3 {
            limiter.check("a").unwrap();
        }
        assert!(matches!(
            limiter.check("a"),
            Err(ApiError::RateLimited { .. })
        ));
        // Another token is not affected.
        limiter.check("b").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        limiter.check("a").unwrap();
    }

    #[test]
    fn own_ids_match_only_exactly() {
        let caller = Caller {
            guest_id: "0195a0e0-0000-7000-8000-000000000001".to_owned(),
            vmid: Vmid::new(101).unwrap(),
            kind: GuestKind::Lxc,
        };
        assert!(caller.is_own_vmid("101"));
        assert!(!caller.is_own_vmid("102"));
        assert!(!caller.is_own_vmid("abc"));
        assert!(caller.is_own_guest_id("0195a0e0-0000-7000-8000-000000000001"));
        assert!(!caller.is_own_guest_id("0195a0e0-0000-7000-8000-000000000002"));
        assert!(!caller.is_own_guest_id(""));
    }
}
