//! Sealed credentials, opened: a secret the operator sealed to this host *and signed*, taken
//! for the one subject (storage target or tunnel) its signed document names.
//!
//! ```text
//!  armored age ─► decrypt with the host's identity (sealing.rs)
//!              ─► bosun.signed-credential/v1 envelope? (a bare v1 document: Unsigned, reseal)
//!              ─► SSH signature over the document in bosun-credential@v1 from allowed_signers?
//!              ─► the document names this host and exactly this target (or tunnel)?
//!              ─► the secret, its issued_at, the signer and the document's digest
//! ```
//!
//! Sealing only says who can open a secret: the host's recipient is public (the hub holds
//! it), so anyone can seal to it. What makes a credential the operator's is the signature, so
//! no secret opens without one (DESIGN §5, "Sealing is not signing"; decision 0095), and it is
//! checked again at every open: removing the operator's line from `allowed_signers` revokes
//! every credential they signed. Which credential a target uses is the
//! [`crate::data::plan::credentials`] keeper's: the newest one accepted, kept in the journal.

use std::path::PathBuf;
use std::sync::Arc;

use bosun_proto::data_plan::TargetIdentity;
use bosun_proto::sealed_credential::{
    CREDENTIAL_NAMESPACE, CredentialDocumentError, CredentialEnvelope, SealedCredential,
    TunnelCredential,
};
use bosun_proto::secret::SealedSecret;
use jiff::Timestamp;
use secrecy::SecretString;
use sha2::{Digest, Sha256};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::sealing::StorageIdentity;
use crate::clock::SharedClock;
use crate::trust::signing::{
    AllowedSigners, AllowedSignersError, SignatureError, verify_signature,
};

/// Why a sealed credential is not opened for a subject.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The ciphertext was not sealed to this host, or is damaged.
    #[error("the sealed credentials for {durable_id} do not open with this host's identity")]
    Open {
        /// The target (or tunnel) they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: age::DecryptError,
    },
    /// Sealed without the operator's signature (before signatures): refused until resealed.
    #[error(
        "the sealed credentials for {durable_id} are not signed by an operator; reseal them with \
         `bosunctl secret seal --key KEY`"
    )]
    Unsigned {
        /// The target (or tunnel) they are set on.
        durable_id: String,
    },
    /// The plaintext is not a signed credential: a raw secret, another document.
    #[error(
        "the sealed credentials for {durable_id} are not a signed credential; reseal them with \
         `bosunctl secret seal --host HOST --key KEY --target-file TARGET.json` (or --type and \
         --durable-id, or --tunnel-id)"
    )]
    NotACredential {
        /// The target (or tunnel) they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: CredentialDocumentError,
    },
    /// The tunnel credentials' document is not a tunnel credential (a storage credential,
    /// another document).
    #[error(
        "the sealed tunnel credentials are not bound to a tunnel; reseal them with \
         `bosunctl secret seal --host HOST --key KEY --tunnel-id {tunnel_id}`"
    )]
    NotATunnelCredential {
        /// The tunnel the plan names.
        tunnel_id: Uuid,
        /// Cause.
        #[source]
        source: CredentialDocumentError,
    },
    /// The operator's keys could not be read.
    #[error("the sealed credentials for {durable_id} could not be checked")]
    Signers {
        /// The target (or tunnel) they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: AllowedSignersError,
    },
    /// The signature does not verify against `allowed_signers` (a credential the hub sealed
    /// itself, or one whose signer is no longer trusted).
    #[error("the sealed credentials for {durable_id} carry no signature this host trusts")]
    Signature {
        /// The target (or tunnel) they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: SignatureError,
    },
    /// Sealed for another host (a credential copied from another host's desired state).
    #[error(
        "the sealed credentials for {durable_id} were sealed for host {sealed_for}, not for \
         this host {host_id}"
    )]
    OtherHost {
        /// The target (or tunnel) they are set on.
        durable_id: String,
        /// The host the document names.
        sealed_for: Uuid,
        /// This host.
        host_id: Uuid,
    },
    /// Sealed for another target: never sent to a server it was not meant for.
    #[error(
        "the sealed credentials set on target {durable_id} were sealed for target \
         {sealed_durable_id}; {} differ",
        fields.join(", ")
    )]
    OtherTarget {
        /// The target they are set on.
        durable_id: String,
        /// The target the document names.
        sealed_durable_id: String,
        /// The identity fields that differ (`type`, `durable_id`, `namespace`, …).
        fields: Vec<&'static str>,
    },
    /// Sealed for another tunnel: never handed to this one.
    #[error(
        "the sealed tunnel credentials were sealed for tunnel {sealed_for}, not for the \
         tunnel {tunnel_id} the signed plan names"
    )]
    OtherTunnel {
        /// The tunnel the plan names.
        tunnel_id: Uuid,
        /// The tunnel the document names.
        sealed_for: Uuid,
    },
}

impl CredentialError {
    /// The identity fields that differ from what the credential was sealed for (`host_id`
    /// for another host), for the audit entry; empty when nothing was compared.
    pub fn differing_fields(&self) -> Vec<&'static str> {
        match self {
            Self::OtherHost { .. } => vec!["host_id"],
            Self::OtherTarget { fields, .. } => fields.clone(),
            Self::OtherTunnel { .. } => vec!["tunnel_id"],
            Self::Open { .. }
            | Self::Unsigned { .. }
            | Self::NotACredential { .. }
            | Self::NotATunnelCredential { .. }
            | Self::Signers { .. }
            | Self::Signature { .. } => Vec::new(),
        }
    }

    /// Whether the credential only lacks the operator's signature (sealed before signatures,
    /// or by someone who cannot sign): the operator reseals it.
    pub fn wants_reseal(&self) -> bool {
        matches!(self, Self::Unsigned { .. } | Self::Signature { .. })
    }
}

/// A credential that opened for its subject, with what orders it against another.
#[derive(Debug)]
pub struct OpenedCredential {
    /// The secret (zeroized when dropped, redacted in `Debug`).
    pub secret: SecretString,
    /// When the operator issued it.
    pub issued_at: Timestamp,
    /// The fingerprint of the key that signed it.
    pub signer: String,
    /// SHA-256 of the signed document: the same credential sealed twice has one digest.
    pub digest: [u8; 32],
}

/// Opens sealed credentials: the host's identity decrypts, the operator's `allowed_signers`
/// (read at every open) decides whether what was decrypted is the operator's.
#[derive(Debug)]
pub struct CredentialOpener {
    identity: Arc<StorageIdentity>,
    signers_path: PathBuf,
    clock: SharedClock,
}

impl CredentialOpener {
    /// An opener decrypting with `identity` and trusting the signers of `signers_path` for
    /// `bosun-credential@v1`.
    pub fn new(identity: Arc<StorageIdentity>, signers_path: PathBuf, clock: SharedClock) -> Self {
        Self {
            identity,
            signers_path,
            clock,
        }
    }

    /// The host's identity.
    pub fn identity(&self) -> &StorageIdentity {
        &self.identity
    }

    /// Opens the storage credential sealed for `target` on host `host_id`: its secret, if it
    /// is an operator-signed `bosun.sealed-credential/v2` document naming this host and
    /// exactly this target identity; refused otherwise.
    pub fn open_credential(
        &self,
        sealed: &SealedSecret,
        host_id: Uuid,
        target: &TargetIdentity,
    ) -> Result<OpenedCredential, CredentialError> {
        let durable_id = || target.durable_id.clone();
        let (document, signer) = self.open_signed(sealed, durable_id)?;
        let credential = SealedCredential::from_document(&document).map_err(|source| {
            CredentialError::NotACredential {
                durable_id: durable_id(),
                source,
            }
        })?;
        if credential.host_id != host_id {
            return Err(CredentialError::OtherHost {
                durable_id: durable_id(),
                sealed_for: credential.host_id,
                host_id,
            });
        }
        let fields = credential.target.differences(target);
        if !fields.is_empty() {
            return Err(CredentialError::OtherTarget {
                durable_id: durable_id(),
                sealed_durable_id: credential.target.durable_id.clone(),
                fields,
            });
        }
        Ok(OpenedCredential {
            secret: SecretString::from(credential.secret.expose().to_owned()),
            issued_at: credential.issued_at,
            signer,
            digest: Sha256::digest(document.as_slice()).into(),
        })
    }

    /// Opens the tunnel's credentials sealed for tunnel `tunnel_id` on host `host_id`: the
    /// secret, if it is an operator-signed document naming this host and exactly this tunnel;
    /// refused otherwise (a storage credential included).
    pub fn open_tunnel_credential(
        &self,
        sealed: &SealedSecret,
        host_id: Uuid,
        tunnel_id: Uuid,
    ) -> Result<OpenedCredential, CredentialError> {
        let label = || format!("tunnel {tunnel_id}");
        let (document, signer) = self.open_signed(sealed, label)?;
        let credential = TunnelCredential::from_document(&document)
            .map_err(|source| CredentialError::NotATunnelCredential { tunnel_id, source })?;
        if credential.host_id != host_id {
            return Err(CredentialError::OtherHost {
                durable_id: label(),
                sealed_for: credential.host_id,
                host_id,
            });
        }
        if credential.tunnel_id != tunnel_id {
            return Err(CredentialError::OtherTunnel {
                tunnel_id,
                sealed_for: credential.tunnel_id,
            });
        }
        Ok(OpenedCredential {
            secret: SecretString::from(credential.secret.expose().to_owned()),
            issued_at: credential.issued_at,
            signer,
            digest: Sha256::digest(document.as_slice()).into(),
        })
    }

    /// Decrypts `sealed`, checks the envelope's signature and gives the signed document bytes
    /// and the signer's fingerprint; `what` names what it is set on.
    fn open_signed(
        &self,
        sealed: &SealedSecret,
        what: impl Fn() -> String,
    ) -> Result<(Zeroizing<Vec<u8>>, String), CredentialError> {
        let plaintext = self
            .identity
            .decrypt(sealed)
            .map_err(|source| CredentialError::Open {
                durable_id: what(),
                source,
            })?;
        let not_a_credential = |source| match source {
            CredentialDocumentError::Unsigned => CredentialError::Unsigned { durable_id: what() },
            source => CredentialError::NotACredential {
                durable_id: what(),
                source,
            },
        };
        let envelope = CredentialEnvelope::from_plaintext(&plaintext).map_err(not_a_credential)?;
        let document = envelope.document().map_err(not_a_credential)?;
        let signers = AllowedSigners::load(&self.signers_path).map_err(|source| {
            CredentialError::Signers {
                durable_id: what(),
                source,
            }
        })?;
        let signer = verify_signature(
            &signers,
            CREDENTIAL_NAMESPACE,
            &document,
            &envelope.signature,
            self.clock.now(),
        )
        .map_err(|source| CredentialError::Signature {
            durable_id: what(),
            source,
        })?;
        Ok((document, signer.fingerprint().to_owned()))
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
