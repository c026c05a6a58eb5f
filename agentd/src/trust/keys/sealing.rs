//! The host's age X25519 identity: what operators seal storage credentials to.
//!
//! Created once, on the agent's first start (enrollment), as `storage-identity.age` in the
//! state directory (0600, the agent's user); its public half, the recipient (`age1…`), goes
//! to the hub in every full report. `bosunctl secret seal --host` encrypts to it, desired
//! state carries only the ciphertext, and only this file opens it: the hub stores and
//! forwards secrets it cannot read. Opened secrets are zeroized when dropped and never
//! logged.
//!
//! Sealing to this host says only who may open a secret, not what it is for: the hub holds
//! every ciphertext and could copy one onto a target of its own. A storage credential is
//! therefore a `bosun.sealed-credential/v1` document naming the host and the target's whole
//! identity, and [`StorageIdentity::open_credential`] gives its secret for that host and
//! target only. The tunnel's credentials are the same document naming the tunnel's UUID
//! instead of a target, and [`StorageIdentity::open_tunnel_credential`] gives them for that
//! host and tunnel only (decision 0084).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use bosun_proto::data_plan::TargetIdentity;
use bosun_proto::sealed_credential::{CredentialDocumentError, SealedCredential, TunnelCredential};
use bosun_proto::secret::SealedSecret;
use secrecy::SecretString;
use uuid::Uuid;
use zeroize::Zeroizing;

/// The identity's file name in the state directory.
pub const IDENTITY_FILE: &str = "storage-identity.age";

/// Why the identity could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SealingError {
    /// Reading or writing the identity file failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no age X25519 identity.
    #[error("{path} holds no age X25519 identity")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// The identity file is readable by others than its owner.
    #[error("{path} is mode {mode:o}; it must be 0600")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
}

/// Why a sealed storage credential is not opened for a target.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The ciphertext was not sealed to this host, or is damaged.
    #[error("the sealed credentials for {durable_id} do not open with this host's identity")]
    Open {
        /// The target they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: age::DecryptError,
    },
    /// The plaintext is not a sealed credential: a raw secret sealed before credentials were
    /// bound to their target, or another document.
    #[error(
        "the sealed credentials for {durable_id} are not bound to a target; reseal them with \
         `bosunctl secret seal --host HOST --target-file TARGET.json` (or --type and \
         --durable-id)"
    )]
    NotACredential {
        /// The target they are set on.
        durable_id: String,
        /// Cause.
        #[source]
        source: CredentialDocumentError,
    },
    /// Sealed for another host (a credential copied from another host's desired state).
    #[error(
        "the sealed credentials for {durable_id} were sealed for host {sealed_for}, not for \
         this host {host_id}"
    )]
    OtherHost {
        /// The target they are set on.
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
    /// The tunnel credentials' plaintext is not a tunnel credential (a storage credential, a
    /// raw secret, another document).
    #[error(
        "the sealed tunnel credentials are not bound to a tunnel; reseal them with \
         `bosunctl secret seal --host HOST --tunnel-id {tunnel_id}`"
    )]
    NotATunnelCredential {
        /// The tunnel the plan names.
        tunnel_id: Uuid,
        /// Cause.
        #[source]
        source: CredentialDocumentError,
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
            Self::Open { .. } | Self::NotACredential { .. } | Self::NotATunnelCredential { .. } => {
                Vec::new()
            }
        }
    }
}

/// The host's identity, loaded.
pub struct StorageIdentity {
    identity: age::x25519::Identity,
}

impl std::fmt::Debug for StorageIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageIdentity")
            .field("recipient", &self.recipient())
            .finish_non_exhaustive()
    }
}

impl StorageIdentity {
    /// Loads `state_dir/storage-identity.age`, creating it (0600) when absent.
    pub fn load_or_create(state_dir: &Path) -> Result<Self, SealingError> {
        match Self::load(state_dir)? {
            Some(identity) => Ok(identity),
            None => Self::create(&state_dir.join(IDENTITY_FILE)),
        }
    }

    /// Loads `state_dir/storage-identity.age` when it exists (the agent makes it on its first
    /// start); never creates it. What `bosun-agentctl status` shows the operator, to compare
    /// with the recipient `bosunctl` pins.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, SealingError> {
        let path = state_dir.join(IDENTITY_FILE);
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SealingError::Io {
                    what: "reading",
                    path,
                    source,
                });
            }
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SealingError::Exposed { path, mode });
        }
        let text =
            Zeroizing::new(
                std::fs::read_to_string(&path).map_err(|source| SealingError::Io {
                    what: "reading",
                    path: path.clone(),
                    source,
                })?,
            );
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("AGE-SECRET-KEY-"))
            .ok_or_else(|| SealingError::Malformed { path: path.clone() })?;
        let identity = age::x25519::Identity::from_str(line)
            .map_err(|_| SealingError::Malformed { path: path.clone() })?;
        Ok(Some(Self { identity }))
    }

    fn create(path: &Path) -> Result<Self, SealingError> {
        let identity = age::x25519::Identity::generate();
        let io = |what, source| SealingError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        // create_new: a second agent racing this one cannot overwrite the first's key.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io("creating", e))?;
        let secret = identity.to_string();
        let text = Zeroizing::new(format!(
            "# bosun host storage identity; recipient {}\n{}\n",
            identity.to_public(),
            secret.expose_secret()
        ));
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| io("writing", e))?;
        tracing::info!(recipient = %identity.to_public(), "host storage identity created");
        Ok(Self { identity })
    }

    /// The public half, `age1…`.
    pub fn recipient(&self) -> String {
        self.identity.to_public().to_string()
    }

    /// Opens the storage credential sealed for `target` on host `host_id`: its secret, if
    /// the plaintext is a `bosun.sealed-credential/v1` document naming this host and exactly
    /// this target identity; refused otherwise. The only way to open a sealed secret: none
    /// opens without naming the target it is for. The plaintext is zeroized when dropped.
    pub fn open_credential(
        &self,
        sealed: &SealedSecret,
        host_id: Uuid,
        target: &TargetIdentity,
    ) -> Result<SecretString, CredentialError> {
        let durable_id = || target.durable_id.clone();
        let plaintext = self.decrypt(sealed, durable_id)?;
        let document = SealedCredential::from_plaintext(&plaintext).map_err(|source| {
            CredentialError::NotACredential {
                durable_id: durable_id(),
                source,
            }
        })?;
        if document.host_id != host_id {
            return Err(CredentialError::OtherHost {
                durable_id: durable_id(),
                sealed_for: document.host_id,
                host_id,
            });
        }
        let fields = document.target.differences(target);
        if !fields.is_empty() {
            return Err(CredentialError::OtherTarget {
                durable_id: durable_id(),
                sealed_durable_id: document.target.durable_id,
                fields,
            });
        }
        Ok(SecretString::from(document.secret.expose().to_owned()))
    }

    /// Opens the tunnel's credentials sealed for tunnel `tunnel_id` on host `host_id`: the
    /// secret, if the plaintext is a `bosun.sealed-credential/v1` document naming this host
    /// and exactly this tunnel; refused otherwise (a storage credential included). The
    /// plaintext is zeroized when dropped.
    pub fn open_tunnel_credential(
        &self,
        sealed: &SealedSecret,
        host_id: Uuid,
        tunnel_id: Uuid,
    ) -> Result<SecretString, CredentialError> {
        let label = || format!("tunnel {tunnel_id}");
        let plaintext = self.decrypt(sealed, label)?;
        let document = TunnelCredential::from_plaintext(&plaintext)
            .map_err(|source| CredentialError::NotATunnelCredential { tunnel_id, source })?;
        if document.host_id != host_id {
            return Err(CredentialError::OtherHost {
                durable_id: label(),
                sealed_for: document.host_id,
                host_id,
            });
        }
        if document.tunnel_id != tunnel_id {
            return Err(CredentialError::OtherTunnel {
                tunnel_id,
                sealed_for: document.tunnel_id,
            });
        }
        Ok(SecretString::from(document.secret.expose().to_owned()))
    }

    /// The plaintext of `sealed`, zeroized when dropped; `what` names what it is set on.
    fn decrypt(
        &self,
        sealed: &SealedSecret,
        what: impl Fn() -> String,
    ) -> Result<Zeroizing<Vec<u8>>, CredentialError> {
        age::decrypt(&self.identity, sealed.armored().as_bytes())
            .map(Zeroizing::new)
            .map_err(|source| CredentialError::Open {
                durable_id: what(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(recipient: &str, plaintext: &[u8]) -> SealedSecret {
        let recipient = age::x25519::Recipient::from_str(recipient).unwrap();
        let armored = age::encrypt_and_armor(&recipient, plaintext).unwrap();
        SealedSecret::try_from(armored).unwrap()
    }

    #[test]
    fn the_identity_is_made_once_0600_and_opens_what_was_sealed_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = StorageIdentity::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = StorageIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(
            first.recipient(),
            again.recipient(),
            "loaded, not made again"
        );
        assert!(bosun_proto::secret::is_age_recipient(&first.recipient()));
        assert!(!format!("{first:?}").contains("AGE-SECRET-KEY"));

        use secrecy::ExposeSecret as _;
        let host = Uuid::new_v4();
        let target = pbs("backup@pbs@pbs-a.example.net:store1", None);
        let sealed = seal_credential(&first.recipient(), host, &target);
        assert_eq!(
            again
                .open_credential(&sealed, host, &target)
                .unwrap()
                .expose_secret(),
            "pbs-password-4711"
        );

        let other = tempfile::tempdir().unwrap();
        let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
        assert!(matches!(
            stranger.open_credential(&sealed, host, &target),
            Err(CredentialError::Open { .. })
        ));
    }

    fn pbs(durable_id: &str, namespace: Option<&str>) -> TargetIdentity {
        TargetIdentity {
            kind: bosun_proto::desired::StorageType::Pbs,
            durable_id: durable_id.to_owned(),
            namespace: namespace.map(str::to_owned),
            username: None,
            serial: None,
        }
    }

    fn seal_credential(recipient: &str, host_id: Uuid, target: &TargetIdentity) -> SealedSecret {
        let document = SealedCredential::new(
            host_id,
            target.clone(),
            bosun_proto::secret::SecretToken::new("pbs-password-4711"),
        );
        seal(recipient, &serde_json::to_vec(&document).unwrap())
    }

    #[test]
    fn a_credential_opens_only_for_its_host_and_its_whole_target() {
        use secrecy::ExposeSecret as _;
        let dir = tempfile::tempdir().unwrap();
        let identity = StorageIdentity::load_or_create(dir.path()).unwrap();
        let host = Uuid::new_v4();
        let a = pbs("backup@pbs@pbs-a.example.net:store1", Some("host-a"));
        let sealed = seal_credential(&identity.recipient(), host, &a);

        let opened = identity.open_credential(&sealed, host, &a).unwrap();
        assert_eq!(opened.expose_secret(), "pbs-password-4711");

        // The hub copies it onto its own server, same user and datastore.
        let b = pbs("backup@pbs@pbs-b.example.net:store1", Some("host-a"));
        let err = identity.open_credential(&sealed, host, &b).unwrap_err();
        assert!(
            matches!(&err, CredentialError::OtherTarget { fields, sealed_durable_id, .. }
                if *fields == ["durable_id"] && sealed_durable_id == &a.durable_id),
            "{err:?}"
        );
        assert!(err.to_string().contains("durable_id differ"), "{err}");

        // Same server, another namespace: another target.
        let other_namespace = pbs(&a.durable_id, Some("host-b"));
        let err = identity
            .open_credential(&sealed, host, &other_namespace)
            .unwrap_err();
        assert_eq!(err.differing_fields(), ["namespace"]);
        let mut cifs = a.clone();
        cifs.kind = bosun_proto::desired::StorageType::Cifs;
        cifs.username = Some("backup".to_owned());
        let err = identity.open_credential(&sealed, host, &cifs).unwrap_err();
        assert_eq!(err.differing_fields(), ["type", "username"]);

        // Sealed for another host (copied from its desired state).
        let elsewhere = Uuid::new_v4();
        let err = identity
            .open_credential(&sealed, elsewhere, &a)
            .unwrap_err();
        assert!(
            matches!(err, CredentialError::OtherHost { sealed_for, host_id, .. }
                if sealed_for == host && host_id == elsewhere),
            "{err:?}"
        );

        // A raw password, as sealed before credentials were bound: refused, with the fix.
        let legacy = seal(&identity.recipient(), b"pbs-password-4711");
        let err = identity.open_credential(&legacy, host, &a).unwrap_err();
        assert!(
            matches!(
                err,
                CredentialError::NotACredential {
                    source: CredentialDocumentError::NotADocument,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("bosunctl secret seal"), "{err}");

        // Sealed to another host's identity.
        let other = tempfile::tempdir().unwrap();
        let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
        let err = stranger.open_credential(&sealed, host, &a).unwrap_err();
        assert!(matches!(err, CredentialError::Open { .. }), "{err:?}");

        // No refusal says the secret.
        for err in [
            identity.open_credential(&sealed, host, &b).unwrap_err(),
            identity.open_credential(&legacy, host, &a).unwrap_err(),
        ] {
            let text = format!("{err:?} {}", bosun_errchain::error_chain(&err));
            assert!(!text.contains("4711"), "{text}");
        }
    }

    #[test]
    fn tunnel_credentials_open_only_for_their_host_and_tunnel() {
        use secrecy::ExposeSecret as _;
        let dir = tempfile::tempdir().unwrap();
        let identity = StorageIdentity::load_or_create(dir.path()).unwrap();
        let (host, tunnel) = (Uuid::new_v4(), Uuid::new_v4());
        let seal_tunnel = |host_id, tunnel_id| {
            let document = TunnelCredential::new(
                host_id,
                tunnel_id,
                bosun_proto::secret::SecretToken::new("tunnel-secret-4711"),
            );
            seal(
                &identity.recipient(),
                &serde_json::to_vec(&document).unwrap(),
            )
        };
        let sealed = seal_tunnel(host, tunnel);
        let opened = identity
            .open_tunnel_credential(&sealed, host, tunnel)
            .unwrap();
        assert_eq!(opened.expose_secret(), "tunnel-secret-4711");

        let other_tunnel = Uuid::new_v4();
        let mut refusals = Vec::new();
        let err = identity
            .open_tunnel_credential(&seal_tunnel(host, other_tunnel), host, tunnel)
            .unwrap_err();
        assert!(
            matches!(err, CredentialError::OtherTunnel { sealed_for, .. } if sealed_for == other_tunnel),
            "{err:?}"
        );
        assert_eq!(err.differing_fields(), ["tunnel_id"]);
        refusals.push(err);
        let err = identity
            .open_tunnel_credential(&seal_tunnel(Uuid::new_v4(), tunnel), host, tunnel)
            .unwrap_err();
        assert_eq!(err.differing_fields(), ["host_id"]);
        refusals.push(err);
        // A storage credential sealed to this host is not the tunnel's, nor the other way.
        let storage = seal_credential(&identity.recipient(), host, &pbs("backup@pbs@p:s", None));
        let err = identity
            .open_tunnel_credential(&storage, host, tunnel)
            .unwrap_err();
        assert!(
            matches!(err, CredentialError::NotATunnelCredential { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("--tunnel-id"), "{err}");
        refusals.push(err);
        let err = identity
            .open_credential(&sealed, host, &pbs("backup@pbs@p:s", None))
            .unwrap_err();
        assert!(
            matches!(err, CredentialError::NotACredential { .. }),
            "{err:?}"
        );
        refusals.push(err);
        let other = tempfile::tempdir().unwrap();
        let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
        let err = stranger
            .open_tunnel_credential(&sealed, host, tunnel)
            .unwrap_err();
        assert!(matches!(err, CredentialError::Open { .. }), "{err:?}");
        refusals.push(err);
        for err in refusals {
            let text = format!("{err:?} {}", bosun_errchain::error_chain(&err));
            assert!(!text.contains("4711"), "{text}");
        }
    }

    #[test]
    fn an_exposed_or_damaged_identity_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        StorageIdentity::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            StorageIdentity::load_or_create(dir.path()),
            Err(SealingError::Exposed { mode: 0o644, .. })
        ));
        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            StorageIdentity::load_or_create(dir.path()),
            Err(SealingError::Malformed { .. })
        ));
    }
}
