//! The tunnel's credentials (decision 0084): cloudflared's credentials file, sealed by the
//! operator to this host and bound to the tunnel the signed plan names, opened here and
//! written where the tunnel's configuration names its `credentials-file`.
//!
//! ```text
//!  desired state's tunnel_credentials (age, sealed to this host's recipient)
//!    ─► open: a bosun.sealed-credential/v1 document naming this host and the plan's tunnel?
//!    ─► cloudflared's credentials JSON whose TunnelID is that tunnel?
//!    ─► differs from the file? ─► written atomically, mode 0640 (the tunnel's group reads it)
//! ```
//!
//! What the hub forwards it cannot read, and a blob it swaps in (another tunnel's, another
//! host's, a storage password, one sealed to another box) opens to a refusal: nothing is
//! written, the file in place stays. No error here carries the secret or the parser's words
//! about it.

use std::path::{Path, PathBuf};

use bosun_proto::secret::SealedSecret;
use secrecy::{ExposeSecret, SecretString};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::ingress::write_atomic;
use crate::trust::keys::credentials::{CredentialError, CredentialOpener};

/// Longest credentials file read back to compare (the sealed secret is bounded far below).
const MAX_FILE: u64 = 64 * 1024;

/// Why the sealed credentials were not written.
#[derive(Debug, thiserror::Error)]
pub enum TunnelCredentialsError {
    /// They do not open for this host and tunnel.
    #[error("the tunnel credentials were refused")]
    Refused(#[source] CredentialError),
    /// The secret is not cloudflared's credentials file for the plan's tunnel.
    #[error(
        "the sealed tunnel credentials are not a cloudflared credentials file for tunnel {tunnel_id}: {reason}"
    )]
    NotCloudflared {
        /// The tunnel the plan names.
        tunnel_id: Uuid,
        /// What is wrong (never the secret).
        reason: &'static str,
    },
    /// The file could not be written.
    #[error("writing the tunnel credentials {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl TunnelCredentialsError {
    /// The identity fields that differ from what the credentials were sealed for.
    pub fn differing_fields(&self) -> Vec<&'static str> {
        match self {
            Self::Refused(e) => e.differing_fields(),
            Self::NotCloudflared { .. } | Self::Write { .. } => Vec::new(),
        }
    }
}

/// Checks that `secret` is cloudflared's credentials file for `tunnel_id`: a JSON object with
/// `AccountTag`, `TunnelSecret` and `TunnelID`, the last naming the tunnel.
pub fn check_cloudflared(secret: &str, tunnel_id: Uuid) -> Result<(), TunnelCredentialsError> {
    bosun_proto::sealed_credential::check_cloudflared(secret, tunnel_id)
        .map_err(|reason| TunnelCredentialsError::NotCloudflared { tunnel_id, reason })
}

/// Opens `sealed` for `tunnel_id` on `host_id` and, when it differs from `path`'s content,
/// replaces that file atomically (mode 0640). True when the file was written (the tunnel
/// reads it only at start, so its replicas need a restart).
pub fn install(
    identity: &CredentialOpener,
    sealed: &SealedSecret,
    host_id: Uuid,
    tunnel_id: Uuid,
    path: &Path,
) -> Result<bool, TunnelCredentialsError> {
    let secret: SecretString = identity
        .open_tunnel_credential(sealed, host_id, tunnel_id)
        .map_err(TunnelCredentialsError::Refused)?
        .secret;
    check_cloudflared(secret.expose_secret(), tunnel_id)?;
    let bytes = secret.expose_secret().as_bytes();
    if read_bounded(path).is_some_and(|on_disk| on_disk.as_slice() == bytes) {
        return Ok(false);
    }
    write_atomic(path, bytes).map_err(|source| TunnelCredentialsError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(true)
}

/// The file's bytes (zeroized when dropped), when it exists and is not longer than a
/// credentials file can be.
fn read_bounded(path: &Path) -> Option<Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(MAX_FILE + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_FILE).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    use bosun_proto::sealed_credential::{CREDENTIAL_NAMESPACE, TunnelCredential};
    use bosun_proto::secret::SecretToken;

    use super::*;
    use crate::trust::keys::credentials::testing::{Operator, seal_signed};
    use crate::trust::keys::sealing::StorageIdentity;

    fn credentials(tunnel: Uuid) -> String {
        format!(
            r#"{{"AccountTag":"5ab4e9dfbd435d24068829fda0077963","TunnelSecret":"c2VjcmV0LTQ3MTE=","TunnelID":"{tunnel}"}}"#
        )
    }

    fn seal(
        opener: &CredentialOpener,
        operator: &Operator,
        host: Uuid,
        tunnel: Uuid,
        secret: &str,
    ) -> SealedSecret {
        let document = TunnelCredential::new(
            host,
            tunnel,
            jiff::Timestamp::now(),
            SecretToken::new(secret),
        );
        seal_signed(
            &opener.identity().recipient(),
            operator,
            CREDENTIAL_NAMESPACE,
            &serde_json::to_vec(&document).unwrap(),
        )
    }

    #[test]
    fn the_credentials_are_written_once_0640_and_a_swapped_blob_leaves_them() {
        let dir = tempfile::tempdir().unwrap();
        let operator = Operator::new();
        let signers = operator.signers_file(&[operator.line(CREDENTIAL_NAMESPACE)]);
        let identity = CredentialOpener::new(
            Arc::new(StorageIdentity::load_or_create(dir.path()).unwrap()),
            signers,
            Arc::new(crate::clock::SystemClock),
        );
        let (host, tunnel) = (Uuid::new_v4(), Uuid::new_v4());
        let path = dir.path().join("credentials.json");
        let good = seal(&identity, &operator, host, tunnel, &credentials(tunnel));
        assert!(install(&identity, &good, host, tunnel, &path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), credentials(tunnel));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "the tunnel's group reads it, nobody else");
        assert!(
            !install(&identity, &good, host, tunnel, &path).unwrap(),
            "unchanged: not written again"
        );

        let other = Uuid::new_v4();
        // What a hub holding this host's recipient can make: the plan's tunnel, its own
        // account and secret, sealed and "signed" with a key of its own.
        let hub = Operator::new();
        let hostile = format!(
            r#"{{"AccountTag":"ffffffffffffffffffffffffffffffff","TunnelSecret":"aHViLXNlY3JldA==","TunnelID":"{tunnel}"}}"#
        );
        let swapped = [
            seal(&identity, &operator, host, other, &credentials(other)),
            seal(
                &identity,
                &operator,
                Uuid::new_v4(),
                tunnel,
                &credentials(tunnel),
            ),
            // Bound to this tunnel, but the file inside is another tunnel's.
            seal(&identity, &operator, host, tunnel, &credentials(other)),
            seal(&identity, &operator, host, tunnel, "not json"),
            seal(&identity, &hub, host, tunnel, &hostile),
        ];
        for blob in &swapped {
            let err = install(&identity, blob, host, tunnel, &path).unwrap_err();
            let text = format!("{err:?} {}", bosun_errchain::error_chain(&err));
            assert!(
                !text.contains("c2VjcmV0") && !text.contains("aHViLXNlY3JldA"),
                "{text}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            credentials(tunnel),
            "the file in place stays"
        );
        let err = install(&identity, &swapped[0], host, tunnel, &path).unwrap_err();
        assert_eq!(err.differing_fields(), ["tunnel_id"]);
        let err = install(&identity, &swapped[4], host, tunnel, &path).unwrap_err();
        assert!(
            matches!(&err, TunnelCredentialsError::Refused(e) if e.wants_reseal()),
            "{err:?}"
        );
    }

    #[test]
    fn only_a_cloudflared_credentials_file_for_the_tunnel_passes() {
        let tunnel = Uuid::new_v4();
        check_cloudflared(&credentials(tunnel), tunnel).unwrap();
        let id = tunnel.to_string();
        let upper = credentials(tunnel).replace(&id, &id.to_uppercase());
        check_cloudflared(&upper, tunnel).unwrap();
        for (bad, reason) in [
            ("not json".to_owned(), "not a JSON object"),
            (
                r#"{"TunnelSecret":"x","TunnelID":"x"}"#.to_owned(),
                "no AccountTag",
            ),
            (
                format!(r#"{{"AccountTag":"a","TunnelID":"{tunnel}"}}"#),
                "no TunnelSecret",
            ),
            (
                r#"{"AccountTag":"a","TunnelSecret":"s"}"#.to_owned(),
                "no TunnelID",
            ),
            (
                credentials(Uuid::new_v4()),
                "its TunnelID names another tunnel",
            ),
        ] {
            let err = check_cloudflared(&bad, tunnel).unwrap_err();
            assert!(
                matches!(err, TunnelCredentialsError::NotCloudflared { reason: r, .. } if r == reason),
                "{bad}: {err}"
            );
        }
    }
}
