//! What is sealed inside a credential's ciphertext: the operator's signed statement of what a
//! secret is for.
//!
//! Sealing to a host's recipient only says who can open a secret, not who made it or what it
//! is for: the recipient is public (the hub holds every host's), so a hub could seal a secret
//! of its own for a plan's target, or copy a ciphertext onto a target of its choosing. So what
//! the operator seals (`bosunctl secret seal --host … --target-file … --key …`) is a
//! [`CredentialEnvelope`] (`bosun.signed-credential/v1`): the exact bytes of a credential
//! document and the operator's SSH signature over them in the namespace
//! [`CREDENTIAL_NAMESPACE`]. The document names the host, what the secret is for and when it
//! was issued, and the agent takes it for that on that host only, and only with a signature
//! its `allowed_signers` trusts (DESIGN §5, "Sealing is not signing"; decision 0095):
//!
//! - a storage credential ([`SealedCredential`]) names the whole identity of its target;
//! - the tunnel's credentials ([`TunnelCredential`], `bosunctl secret seal --tunnel-id`) name
//!   the tunnel's UUID (decision 0084).
//!
//! Both documents are one schema ([`CREDENTIAL_SCHEMA`]): the field that names what the
//! secret is for (`target` or `tunnel_id`) tells them apart, and each parser refuses the
//! other's document, so a storage password cannot become the tunnel's credentials or the
//! other way round. `issued_at` orders two credentials for one subject: the agent keeps the
//! newest it accepted and refuses an older one. A plaintext that is a credential document
//! without the envelope (`bosun.sealed-credential/v1`, sealed before signatures) is
//! [`CredentialDocumentError::Unsigned`]: refused until the operator reseals it.
//!
//! The module lives above both [`crate::secret`] and [`crate::data_plan`], which it joins.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use zeroize::{Zeroize, Zeroizing};

use crate::data_plan::TargetIdentity;
use crate::secret::SecretToken;

/// Schema of [`SealedCredential`] and [`TunnelCredential`]: the signed document.
pub const CREDENTIAL_SCHEMA: &str = "bosun.sealed-credential/v2";

/// Schema of a credential document sealed without a signature, before signatures: refused as
/// [`CredentialDocumentError::Unsigned`].
pub const UNSIGNED_CREDENTIAL_SCHEMA: &str = "bosun.sealed-credential/v1";

/// Schema of [`CredentialEnvelope`]: what is sealed.
pub const ENVELOPE_SCHEMA: &str = "bosun.signed-credential/v1";

/// The SSHSIG namespace of credential signatures.
pub const CREDENTIAL_NAMESPACE: &str = "bosun-credential@v1";

/// Longest signature an envelope may carry.
const MAX_ENVELOPE_SIGNATURE: usize = crate::signed::MAX_SIGNATURE;

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
    /// When the operator issued it: of two credentials for one target, the later one counts.
    pub issued_at: Timestamp,
    /// The secret itself.
    pub secret: SecretToken,
}

/// Why a plaintext is not a sealed credential. Never carries the parser's message: it may
/// quote the plaintext, which is a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialDocumentError {
    /// The plaintext is no JSON object with a `schema` (a raw secret sealed before
    /// credentials were bound to their target).
    #[error("the plaintext is not a {ENVELOPE_SCHEMA} document")]
    NotADocument,
    /// A credential document sealed without the operator's signature (before signatures):
    /// refused until resealed with `bosunctl secret seal --key`.
    #[error(
        "the credential is not signed by an operator; reseal it with `bosunctl secret seal --key`"
    )]
    Unsigned,
    /// Another schema.
    #[error("the document's schema is {found:?}, not {ENVELOPE_SCHEMA} or {CREDENTIAL_SCHEMA}")]
    Schema {
        /// The schema it names (at most 64 characters of it).
        found: String,
    },
    /// The schema is right but a field is missing, unknown or of the wrong type.
    #[error("the {CREDENTIAL_SCHEMA} document is malformed")]
    Malformed,
}

impl SealedCredential {
    /// The document binding `secret` to `host_id` and `target`, issued at `issued_at`.
    pub fn new(
        host_id: Uuid,
        target: TargetIdentity,
        issued_at: Timestamp,
        secret: SecretToken,
    ) -> Self {
        Self {
            schema: CREDENTIAL_SCHEMA.to_owned(),
            host_id,
            target,
            issued_at,
            secret,
        }
    }

    /// Parses the signed document bytes of an envelope.
    pub fn from_document(document: &[u8]) -> Result<Self, CredentialDocumentError> {
        check_schema(document, CREDENTIAL_SCHEMA)?;
        serde_json::from_slice(document).map_err(|_| CredentialDocumentError::Malformed)
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
    /// When the operator issued it: of two credentials for one tunnel, the later one counts.
    pub issued_at: Timestamp,
    /// The secret itself.
    pub secret: SecretToken,
}

impl TunnelCredential {
    /// The document binding `secret` to `host_id` and `tunnel_id`, issued at `issued_at`.
    pub fn new(host_id: Uuid, tunnel_id: Uuid, issued_at: Timestamp, secret: SecretToken) -> Self {
        Self {
            schema: CREDENTIAL_SCHEMA.to_owned(),
            host_id,
            tunnel_id,
            issued_at,
            secret,
        }
    }

    /// Parses the signed document bytes of an envelope; a storage credential is
    /// [`CredentialDocumentError::Malformed`] here (it names a `target`, not a `tunnel_id`).
    pub fn from_document(document: &[u8]) -> Result<Self, CredentialDocumentError> {
        check_schema(document, CREDENTIAL_SCHEMA)?;
        serde_json::from_slice(document).map_err(|_| CredentialDocumentError::Malformed)
    }
}

/// What the operator seals: a credential document's exact bytes and the operator's signature
/// over them in [`CREDENTIAL_NAMESPACE`]. The document holds the secret, so `Debug` shows
/// neither and the base64 is wiped when dropped.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialEnvelope {
    /// Always [`ENVELOPE_SCHEMA`].
    pub schema: String,
    /// The signed document bytes (a [`SealedCredential`] or [`TunnelCredential`]), standard
    /// base64.
    document: String,
    /// The armored SSH signature over the document bytes.
    pub signature: String,
}

impl std::fmt::Debug for CredentialEnvelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialEnvelope")
            .field("schema", &self.schema)
            .field("document", &"[REDACTED]")
            .finish_non_exhaustive()
    }
}

impl Drop for CredentialEnvelope {
    fn drop(&mut self) {
        self.document.zeroize();
    }
}

impl CredentialEnvelope {
    /// Wraps the exact `document` bytes that were signed and their armored `signature`.
    pub fn new(document: &[u8], signature: &str) -> Self {
        Self {
            schema: ENVELOPE_SCHEMA.to_owned(),
            document: STANDARD.encode(document),
            signature: signature.to_owned(),
        }
    }

    /// Parses an opened plaintext. A credential document sealed without an envelope is
    /// [`CredentialDocumentError::Unsigned`].
    pub fn from_plaintext(plaintext: &[u8]) -> Result<Self, CredentialDocumentError> {
        match check_schema(plaintext, ENVELOPE_SCHEMA) {
            Err(CredentialDocumentError::Schema { found })
                if found == UNSIGNED_CREDENTIAL_SCHEMA =>
            {
                return Err(CredentialDocumentError::Unsigned);
            }
            other => other?,
        }
        let envelope: Self =
            serde_json::from_slice(plaintext).map_err(|_| CredentialDocumentError::Malformed)?;
        if envelope.signature.len() > MAX_ENVELOPE_SIGNATURE {
            return Err(CredentialDocumentError::Malformed);
        }
        Ok(envelope)
    }

    /// The signed document bytes, wiped when dropped.
    pub fn document(&self) -> Result<Zeroizing<Vec<u8>>, CredentialDocumentError> {
        STANDARD
            .decode(self.document.as_bytes())
            .map(Zeroizing::new)
            .map_err(|_| CredentialDocumentError::Malformed)
    }

    /// The plaintext to seal: this envelope as JSON, wiped when dropped.
    pub fn to_plaintext(&self) -> Zeroizing<Vec<u8>> {
        // Serializing a struct of strings cannot fail.
        Zeroizing::new(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// Whether `bytes` is a JSON object whose `schema` is `expected`.
fn check_schema(bytes: &[u8], expected: &str) -> Result<(), CredentialDocumentError> {
    /// Only the schema: tells a legacy raw secret from another document.
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<String>,
    }
    let probe: Probe =
        serde_json::from_slice(bytes).map_err(|_| CredentialDocumentError::NotADocument)?;
    let schema = probe.schema.ok_or(CredentialDocumentError::NotADocument)?;
    if schema != expected {
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

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn a_credential_round_trips_and_its_debug_hides_the_secret() {
        let host = Uuid::new_v4();
        let doc = SealedCredential::new(
            host,
            pbs(),
            at(1_800_000_000),
            SecretToken::new("hunter2-4711"),
        );
        let bytes = serde_json::to_vec(&doc).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["schema"], CREDENTIAL_SCHEMA);
        assert_eq!(json["host_id"], host.to_string());
        assert_eq!(json["target"]["type"], "pbs");
        assert_eq!(json["target"]["namespace"], "host-a");
        assert_eq!(json["issued_at"], "2027-01-15T08:00:00Z");
        assert_eq!(json["secret"], "hunter2-4711");
        assert_eq!(SealedCredential::from_document(&bytes).unwrap(), doc);
        assert!(!format!("{doc:?}").contains("hunter2"));

        let envelope = CredentialEnvelope::new(&bytes, "-----BEGIN SSH SIGNATURE-----\n");
        let plaintext = envelope.to_plaintext();
        let opened = CredentialEnvelope::from_plaintext(&plaintext).unwrap();
        assert_eq!(opened, envelope);
        assert_eq!(opened.document().unwrap().as_slice(), bytes.as_slice());
        let shown = format!("{opened:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains(&envelope.document),
            "{shown}"
        );
    }

    #[test]
    fn what_is_not_a_signed_credential_is_told_apart_without_quoting_it() {
        for legacy in [&b"hunter2"[..], b"4711", b"\"hunter2\"", b"{}", b"[1]", b""] {
            assert_eq!(
                CredentialEnvelope::from_plaintext(legacy),
                Err(CredentialDocumentError::NotADocument),
                "{}",
                String::from_utf8_lossy(legacy)
            );
        }
        // A credential sealed before signatures: refused as unsigned, with the fix.
        let unsigned = br#"{"schema":"bosun.sealed-credential/v1","host_id":"00000000-0000-0000-0000-000000000001","target":{},"secret":"hunter2"}"#;
        let err = CredentialEnvelope::from_plaintext(unsigned).unwrap_err();
        assert_eq!(err, CredentialDocumentError::Unsigned);
        assert!(err.to_string().contains("reseal"), "{err}");
        assert!(!err.to_string().contains("hunter2"));
        // A bare v2 document, sealed without its envelope, is no envelope.
        let host = Uuid::new_v4();
        let bare = serde_json::to_vec(&SealedCredential::new(
            host,
            pbs(),
            at(1),
            SecretToken::new("hunter2"),
        ))
        .unwrap();
        assert_eq!(
            CredentialEnvelope::from_plaintext(&bare),
            Err(CredentialDocumentError::Schema {
                found: CREDENTIAL_SCHEMA.to_owned()
            })
        );
        let other = br#"{"schema":"bosun.signed-credential/v9","document":"aHVudGVyMg=="}"#;
        assert_eq!(
            CredentialEnvelope::from_plaintext(other),
            Err(CredentialDocumentError::Schema {
                found: "bosun.signed-credential/v9".to_owned()
            })
        );
        let extra = br#"{"schema":"bosun.signed-credential/v1","document":"aHVudGVyMg==","signature":"s","x":1}"#;
        assert_eq!(
            CredentialEnvelope::from_plaintext(extra),
            Err(CredentialDocumentError::Malformed)
        );
        let long = serde_json::json!({
            "schema": ENVELOPE_SCHEMA, "document": "aHVudGVyMg==",
            "signature": "s".repeat(MAX_ENVELOPE_SIGNATURE + 1),
        });
        assert_eq!(
            CredentialEnvelope::from_plaintext(long.to_string().as_bytes()),
            Err(CredentialDocumentError::Malformed)
        );

        let mut json = serde_json::to_value(SealedCredential::new(
            host,
            pbs(),
            at(1),
            SecretToken::new("hunter2"),
        ))
        .unwrap();
        json["secret"] = serde_json::json!(4711);
        let err = SealedCredential::from_document(json.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, CredentialDocumentError::Malformed);
        assert!(!err.to_string().contains("4711"));
        json["secret"] = serde_json::json!("hunter2");
        json["extra"] = serde_json::json!(true);
        assert_eq!(
            SealedCredential::from_document(json.to_string().as_bytes()),
            Err(CredentialDocumentError::Malformed)
        );
        // Without `issued_at`, a document cannot be ordered: malformed.
        json.as_object_mut().unwrap().remove("extra");
        json.as_object_mut().unwrap().remove("issued_at");
        assert_eq!(
            SealedCredential::from_document(json.to_string().as_bytes()),
            Err(CredentialDocumentError::Malformed)
        );
    }

    #[test]
    fn a_tunnel_credential_and_a_storage_credential_are_never_taken_for_each_other() {
        let host = Uuid::new_v4();
        let tunnel =
            TunnelCredential::new(host, Uuid::from_u128(7), at(2), SecretToken::new("s3cr3t"));
        let bytes = serde_json::to_vec(&tunnel).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["schema"], CREDENTIAL_SCHEMA);
        assert_eq!(json["tunnel_id"], Uuid::from_u128(7).to_string());
        assert_eq!(TunnelCredential::from_document(&bytes).unwrap(), tunnel);
        assert!(!format!("{tunnel:?}").contains("s3cr3t"));
        assert_eq!(
            SealedCredential::from_document(&bytes),
            Err(CredentialDocumentError::Malformed)
        );
        let storage = serde_json::to_vec(&SealedCredential::new(
            host,
            pbs(),
            at(2),
            SecretToken::new("s3cr3t"),
        ))
        .unwrap();
        assert_eq!(
            TunnelCredential::from_document(&storage),
            Err(CredentialDocumentError::Malformed)
        );
        assert_eq!(
            TunnelCredential::from_document(b"s3cr3t"),
            Err(CredentialDocumentError::NotADocument)
        );
    }
}
