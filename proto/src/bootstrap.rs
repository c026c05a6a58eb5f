//! `bosun.bootstrap/v1`: the `bootstrap.json` the agent pushes (0600, container root) into a
//! running guest at `/etc/bosun-bootstrap/bootstrap.json` so its controller can reach the hub
//! and the local API.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::CustomerIdentity;
use crate::secret::SecretToken;
use crate::validate::{self, ValidationError};

/// The schema name of [`Bootstrap`].
pub const SCHEMA: &str = "bosun.bootstrap/v1";

/// Everything a controller needs on first start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bootstrap {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The guest this file belongs to.
    pub guest_id: Uuid,
    /// The customer the guest serves.
    pub customer: CustomerIdentity,
    /// The hub.
    pub hub: PinnedEndpoint,
    /// The agent's local API.
    pub local_api: LocalApi,
    /// The OpenSSH keys the guest's `root` trusts, from the operator's signed data plan
    /// (decision 0107); the controller writes them to the guest's Bosun-managed
    /// `authorized_keys`. Absent: no key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<crate::ssh_public_key::SshPublicKey>,
}

/// An HTTPS endpoint and the SHA-256 fingerprint of its leaf certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedEndpoint {
    /// `https://host:port`.
    pub url: String,
    /// 64 lowercase hex digits.
    pub fingerprint: String,
}

/// The local API endpoint, its pin and this guest's token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalApi {
    /// `https://bridge-ip:8443`.
    pub url: String,
    /// 64 lowercase hex digits.
    pub fingerprint: String,
    /// The guest's bearer token.
    pub token: SecretToken,
}

impl Bootstrap {
    /// Checks the document.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, SCHEMA)?;
        validate::ident(
            || "customer.customer_id".into(),
            &self.customer.customer_id,
            64,
        )?;
        validate::text(
            || "customer.display_name".into(),
            &self.customer.display_name,
            200,
        )?;
        endpoint("hub", &self.hub.url, &self.hub.fingerprint)?;
        endpoint(
            "local_api",
            &self.local_api.url,
            &self.local_api.fingerprint,
        )?;
        crate::guest_access::validate_keys("ssh_authorized_keys", &self.ssh_authorized_keys)?;
        validate::text(
            || "local_api.token".into(),
            self.local_api.token.expose(),
            256,
        )
    }
}

fn endpoint(name: &str, url: &str, fingerprint: &str) -> Result<(), ValidationError> {
    validate::text(|| format!("{name}.url"), url, 512)?;
    if !url.starts_with("https://") || url.len() <= "https://".len() {
        return Err(ValidationError::Invalid {
            field: format!("{name}.url"),
            reason: "expected an https:// URL".into(),
        });
    }
    if !crate::validate::is_pin(fingerprint) {
        return Err(ValidationError::Invalid {
            field: format!("{name}.fingerprint"),
            reason: "expected a pin: 64 lowercase hex digits, or spki: and 64 lowercase hex digits"
                .into(),
        });
    }
    Ok(())
}
