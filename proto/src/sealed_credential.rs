//! `bosun.sealed-credential/v1`: the plaintext inside a sealed credential.
//!
//! Sealing to a host's recipient only says who can open a secret, not what it is for: a hub
//! holding the ciphertext could copy it onto a target of its own choosing. So what the
//! operator seals (`bosunctl secret seal --host … --target-file …`) names the host and what
//! the secret is for, and the agent opens it for that on that host only (DESIGN §5):
//!
//! - a storage credential ([`SealedCredential`]) names the whole identity of its target;
//! - the tunnel's credentials ([`TunnelCredential`], `bosunctl secret seal --tunnel-id`) name
//!   the tunnel's UUID (decision 0084).
//!
//! Both are one schema: the field that names what the secret is for (`target` or
//! `tunnel_id`) tells them apart, and each parser refuses the other's document, so a storage
//! password cannot become the tunnel's credentials or the other way round. The document lives
//! in its own module, above both [`crate::secret`] and [`crate::data_plan`], which it joins.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data_plan::TargetIdentity;
use crate::secret::SecretToken;

/// Schema of [`SealedCredential`].
pub const CREDENTIAL_SCHEMA: &str = "bosun.sealed-credential/v1";

/// What is sealed for storage: one target's secret (a CIFS or PBS password), bound to a host and to the
/// target's whole identity. `Debug` redacts the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedCredential {
    /// Always [`CREDENTIAL_SCHEMA`].
    pub schema: String,
    /// The host that may open it.
    pub host_id: Uuid,
    /// The target it is for.
    pub target: TargetIdentity,
    /// The secret itself.
    pub secret: SecretToken,
}

/// Why a plaintext is not a sealed credential. Never carries the parser's message: it may
/// quote the plaintext, which is a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialDocumentError {
    /// The plaintext is no JSON object with a `schema` (a raw secret sealed before
    /// credentials were bound to their target).
    #[error("the plaintext is not a {CREDENTIAL_SCHEMA} document")]
    NotADocument,
    /// Another schema.
    #[error("the document's schema is {found:?}, not {CREDENTIAL_SCHEMA}")]
    Schema {
        /// The schema it names (at most 64 characters of it).
        found: String,
    },
    /// The schema is right but a field is missing, unknown or of the wrong type.
    #[error("the {CREDENTIAL_SCHEMA} document is malformed")]
    Malformed,
}

impl SealedCredential {
    /// The document binding `secret` to `host_id` and `target`.
    pub fn new(host_id: Uuid, target: TargetIdentity, secret: SecretToken) -> Self {
        Self {
            schema: CREDENTIAL_SCHEMA.to_owned(),
            host_id,
            target,
            secret,
        }
    }

    /// Parses an opened plaintext.
    pub fn from_plaintext(plaintext: &[u8]) -> Result<Self, CredentialDocumentError> {
        check_schema(plaintext)?;
        serde_json::from_slice(plaintext).map_err(|_| CredentialDocumentError::Malformed)
    }
}

/// What is sealed for the tunnel: its credentials (the credentials file `cloudflared tunnel
/// create` wrote), bound to a host and to the tunnel's UUID. `Debug` redacts the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelCredential {
    /// Always [`CREDENTIAL_SCHEMA`].
    pub schema: String,
    /// The host that may open it.
    pub host_id: Uuid,
    /// The tunnel it is for.
    pub tunnel_id: Uuid,
    /// The secret itself.
    pub secret: SecretToken,
}

impl TunnelCredential {
    /// The document binding `secret` to `host_id` and `tunnel_id`.
    pub fn new(host_id: Uuid, tunnel_id: Uuid, secret: SecretToken) -> Self {
        Self {
            schema: CREDENTIAL_SCHEMA.to_owned(),
            host_id,
            tunnel_id,
            secret,
        }
    }

    /// Parses an opened plaintext; a storage credential is [`CredentialDocumentError::Malformed`]
    /// here (it names a `target`, not a `tunnel_id`).
    pub fn from_plaintext(plaintext: &[u8]) -> Result<Self, CredentialDocumentError> {
        check_schema(plaintext)?;
        serde_json::from_slice(plaintext).map_err(|_| CredentialDocumentError::Malformed)
    }
}

/// Whether `plaintext` is a JSON object whose `schema` is [`CREDENTIAL_SCHEMA`].
fn check_schema(plaintext: &[u8]) -> Result<(), CredentialDocumentError> {
    /// Only the schema: tells a legacy raw secret from another document.
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<String>,
    }
    let probe: Probe =
        serde_json::from_slice(plaintext).map_err(|_| CredentialDocumentError::NotADocument)?;
    let schema = probe.schema.ok_or(CredentialDocumentError::NotADocument)?;
    if schema != CREDENTIAL_SCHEMA {
        return Err(CredentialDocumentError::Schema {
            found: schema.chars().take(64).collect(),
        });
    }
    Ok(())
}

/// The fields of cloudflared's credentials file Bosun checks; borrowed from the secret (no copy
/// of it outlives the check).
#[derive(Deserialize)]
struct CloudflaredFile<'a> {
    #[serde(rename = "AccountTag", borrow, default)]
    account: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "TunnelSecret", borrow, default)]
    secret: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "TunnelID", borrow, default)]
    tunnel: Option<std::borrow::Cow<'a, str>>,
}

/// Checks that `secret` is cloudflared's credentials file for `tunnel_id`: a JSON object with
/// `AccountTag`, `TunnelSecret` and `TunnelID`, the last naming the tunnel. The error says what
/// is wrong, never quoting the secret. The operator's `bosunctl secret seal` and the agent
/// that opens it check the same.
pub fn check_cloudflared(secret: &str, tunnel_id: Uuid) -> Result<(), &'static str> {
    let file: CloudflaredFile<'_> =
        serde_json::from_str(secret).map_err(|_| "not a JSON object")?;
    if file.account.as_deref().is_none_or(str::is_empty) {
        return Err("no AccountTag");
    }
    if file.secret.as_deref().is_none_or(str::is_empty) {
        return Err("no TunnelSecret");
    }
    let named = file
        .tunnel
        .as_deref()
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or("no TunnelID")?;
    if named != tunnel_id {
        return Err("its TunnelID names another tunnel");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::StorageType;

    fn pbs() -> TargetIdentity {
        TargetIdentity {
            kind: StorageType::Pbs,
            durable_id: "backup@pbs@pbs.example.net:store1".to_owned(),
            namespace: Some("host-a".to_owned()),
            username: None,
            serial: None,
        }
    }

    #[test]
    fn a_credential_round_trips_and_its_debug_hides_the_secret() {
        let host = Uuid::new_v4();
        let doc = SealedCredential::new(host, pbs(), SecretToken::new("hunter2-4711"));
        let bytes = serde_json::to_vec(&doc).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["schema"], CREDENTIAL_SCHEMA);
        assert_eq!(json["host_id"], host.to_string());
        assert_eq!(json["target"]["type"], "pbs");
        assert_eq!(json["target"]["namespace"], "host-a");
        assert_eq!(json["secret"], "hunter2-4711");
        assert_eq!(SealedCredential::from_plaintext(&bytes).unwrap(), doc);
        assert!(!format!("{doc:?}").contains("hunter2"));
    }

    #[test]
    fn what_is_not_a_v1_credential_is_told_apart_without_quoting_it() {
        for legacy in [&b"hunter2"[..], b"4711", b"\"hunter2\"", b"{}", b"[1]", b""] {
            assert_eq!(
                SealedCredential::from_plaintext(legacy),
                Err(CredentialDocumentError::NotADocument),
                "{}",
                String::from_utf8_lossy(legacy)
            );
        }
        let other = br#"{"schema":"bosun.sealed-credential/v2","secret":"hunter2"}"#;
        assert_eq!(
            SealedCredential::from_plaintext(other),
            Err(CredentialDocumentError::Schema {
                found: "bosun.sealed-credential/v2".to_owned()
            })
        );
        let host = Uuid::new_v4();
        let mut json = serde_json::to_value(SealedCredential::new(
            host,
            pbs(),
            SecretToken::new("hunter2"),
        ))
        .unwrap();
        json["secret"] = serde_json::json!(4711);
        let err = SealedCredential::from_plaintext(json.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, CredentialDocumentError::Malformed);
        assert!(!err.to_string().contains("4711"));
        json["secret"] = serde_json::json!("hunter2");
        json["extra"] = serde_json::json!(true);
        assert_eq!(
            SealedCredential::from_plaintext(json.to_string().as_bytes()),
            Err(CredentialDocumentError::Malformed)
        );
    }

    #[test]
    fn a_tunnel_credential_and_a_storage_credential_are_never_taken_for_each_other() {
        let host = Uuid::new_v4();
        let tunnel = TunnelCredential::new(host, Uuid::from_u128(7), SecretToken::new("s3cr3t"));
        let bytes = serde_json::to_vec(&tunnel).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["schema"], CREDENTIAL_SCHEMA);
        assert_eq!(json["tunnel_id"], Uuid::from_u128(7).to_string());
        assert_eq!(TunnelCredential::from_plaintext(&bytes).unwrap(), tunnel);
        assert!(!format!("{tunnel:?}").contains("s3cr3t"));
        assert_eq!(
            SealedCredential::from_plaintext(&bytes),
            Err(CredentialDocumentError::Malformed)
        );
        let storage = serde_json::to_vec(&SealedCredential::new(
            host,
            pbs(),
            SecretToken::new("s3cr3t"),
        ))
        .unwrap();
        assert_eq!(
            TunnelCredential::from_plaintext(&storage),
            Err(CredentialDocumentError::Malformed)
        );
        assert_eq!(
            TunnelCredential::from_plaintext(b"s3cr3t"),
            Err(CredentialDocumentError::NotADocument)
        );
    }
}
