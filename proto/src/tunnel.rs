//! The tunnel's routes, as the operator signs them in the data plan (`bosun.data-plan/v1`'s
//! `tunnel`), and the tunnel's state in a report.
//!
//! Which public hostname reaches which guest is customer-visible, so it is the operator's to
//! sign, never the hub's to say: a route pins a hostname to a guest **id** and a port. The
//! agent finds the guest's address on the bridge itself (from the guest's Proxmox config, or
//! the address Proxmox reads from the running container), so neither the hub nor the plan
//! can name an address of their own. A guest that disaster recovery restores under another
//! vmid keeps its id, and so its hostnames.

use std::collections::HashSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// Most routes one tunnel may carry.
pub const MAX_ROUTES: usize = 256;
/// Longest hostname (a DNS name).
pub const MAX_HOSTNAME: usize = 253;

/// The tunnel a host runs and the hostnames it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanTunnel {
    /// The tunnel's UUID (as `cloudflared tunnel create` printed it): its credentials are
    /// sealed bound to it.
    pub tunnel_id: Uuid,
    /// One route per public hostname.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 256))]
    pub routes: Vec<TunnelRoute>,
}

/// One public hostname and the guest it reaches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TunnelRoute {
    /// A DNS name, lowercase (`shop.example.com`); no wildcard.
    pub hostname: String,
    /// The guest it reaches.
    pub guest_id: Uuid,
    /// The guest's HTTP port (1..=65535).
    pub port: u16,
}

/// Whether `name` is a lowercase DNS hostname of at least two labels.
pub fn is_route_hostname(name: &str) -> bool {
    name.len() <= MAX_HOSTNAME
        && name.split('.').count() >= 2
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

impl PlanTunnel {
    /// Checks every route under `field`; the error names the first wrong field.
    pub fn validate_at(&self, field: &str) -> Result<(), ValidationError> {
        if self.tunnel_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: format!("{field}.tunnel_id"),
                reason: "the nil UUID is not a tunnel id".into(),
            });
        }
        validate::count(&format!("{field}.routes"), self.routes.len(), MAX_ROUTES)?;
        let mut seen = HashSet::new();
        for (i, route) in self.routes.iter().enumerate() {
            let at = format!("{field}.routes[{i}]");
            if !is_route_hostname(&route.hostname) {
                return Err(ValidationError::Invalid {
                    field: format!("{at}.hostname"),
                    reason: "expected a lowercase DNS name of two or more labels, no wildcard"
                        .into(),
                });
            }
            if route.guest_id.is_nil() {
                return Err(ValidationError::Invalid {
                    field: format!("{at}.guest_id"),
                    reason: "the nil UUID is not a guest id".into(),
                });
            }
            validate::range(|| format!("{at}.port"), route.port, 1, u16::MAX)?;
            // One hostname reaches one guest: a second rule for it would never be matched by
            // cloudflared, and which one wins would be the file's order, not the operator's.
            if !seen.insert(route.hostname.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: format!("{at}.hostname"),
                    value: route.hostname.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The tunnel's state in a report: what the agent manages (its routes, its restarts) and what
/// the tunnel itself says (readiness, edge connections, version). Never its credentials.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TunnelState {
    /// The routes in the configuration the tunnel runs with.
    #[serde(default)]
    pub routes: u32,
    /// The routes of the signed plan the agent could not place (the guest is not on this host
    /// or has no address yet).
    #[serde(default)]
    pub unplaced: u32,
    /// Edge connections the tunnel reported at the last probe (`readyConnections`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// The tunnel's version, from its metrics (`build_info`): at most 64 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Restarts the agent made because the tunnel stayed unready.
    #[serde(default)]
    pub restarts: u32,
    /// When the agent last restarted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<Timestamp>,
    /// Why the configuration could not be written or the service restarted, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why desired state's sealed tunnel credentials were not written (refused: sealed for
    /// another tunnel or host, or not to this host), when they were not. Never the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_error: Option<String>,
}

impl TunnelState {
    /// Checks the text the hub repeats.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(version) = &self.version {
            crate::health::detail(|| "tunnel.managed.version".into(), version)?;
            validate::count("tunnel.managed.version", version.len(), 64)?;
        }
        if let Some(error) = &self.error {
            crate::health::detail(|| "tunnel.managed.error".into(), error)?;
        }
        if let Some(error) = &self.credentials_error {
            crate::health::detail(|| "tunnel.managed.credentials_error".into(), error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(hostname: &str, guest: u128) -> TunnelRoute {
        TunnelRoute {
            hostname: hostname.into(),
            guest_id: Uuid::from_u128(guest),
            port: 80,
        }
    }

    fn tunnel(routes: Vec<TunnelRoute>) -> PlanTunnel {
        PlanTunnel {
            tunnel_id: Uuid::from_u128(7),
            routes,
        }
    }

    #[test]
    fn routes_are_lowercase_dns_names_each_once() {
        let ok = tunnel(vec![
            route("shop.example.com", 1),
            route("b.example.com", 1),
        ]);
        ok.validate_at("tunnel").unwrap();
        for (bad, field) in [
            ("Shop.example.com", "tunnel.routes[0].hostname"),
            ("*.example.com", "tunnel.routes[0].hostname"),
            ("localhost", "tunnel.routes[0].hostname"),
            ("a..example.com", "tunnel.routes[0].hostname"),
            ("-a.example.com", "tunnel.routes[0].hostname"),
            ("a.example.com\n", "tunnel.routes[0].hostname"),
        ] {
            let err = tunnel(vec![route(bad, 1)])
                .validate_at("tunnel")
                .unwrap_err();
            assert_eq!(err.field(), field, "{bad:?}");
        }
        let twice = tunnel(vec![route("a.example.com", 1), route("a.example.com", 2)]);
        assert_eq!(
            twice.validate_at("tunnel").unwrap_err().field(),
            "tunnel.routes[1].hostname"
        );
        let mut nil = tunnel(vec![route("a.example.com", 0)]);
        assert_eq!(
            nil.validate_at("tunnel").unwrap_err().field(),
            "tunnel.routes[0].guest_id"
        );
        nil.routes[0].guest_id = Uuid::from_u128(1);
        nil.routes[0].port = 0;
        assert_eq!(
            nil.validate_at("tunnel").unwrap_err().field(),
            "tunnel.routes[0].port"
        );
        let many = tunnel(
            (0..=MAX_ROUTES)
                .map(|i| route(&format!("h{i}.example.com"), 1))
                .collect(),
        );
        assert_eq!(
            many.validate_at("tunnel").unwrap_err().field(),
            "tunnel.routes"
        );
    }

    #[test]
    fn the_state_bounds_its_text() {
        let mut state = TunnelState {
            version: Some("2025.8.0".into()),
            ..TunnelState::default()
        };
        state.validate().unwrap();
        state.version = Some("x".repeat(65));
        assert_eq!(
            state.validate().unwrap_err().field(),
            "tunnel.managed.version"
        );
        state.version = None;
        state.error = Some("\u{1b}[2J".into());
        assert_eq!(
            state.validate().unwrap_err().field(),
            "tunnel.managed.error"
        );
    }
}
