//! `bosunctl secret seal --host HOST --target-file TARGET.json`: encrypts a secret (a CIFS or
//! PBS password) to one host's age X25519 recipient. The armored ciphertext goes into desired
//! state (`storage[].credentials`); the hub stores and forwards it but cannot open it, and no
//! other host can either. The plaintext is read from a file or standard input, never from the
//! command line (where `ps` and shell history would see it).
//!
//! The recipient is the one the operator pinned for the host ([`crate::recipients`]), or the
//! one `--recipient` names: never the hub's answer alone, since a hub that lies would answer
//! with a recipient of its own and open the secret. When the hub reports another recipient
//! than the pinned one, nothing is sealed until the operator confirms which is the host's.
//!
//! What is sealed is a `bosun.sealed-credential/v1` document naming the host id and the
//! target's whole identity (type, `durable_id`, namespace, user, serial), taken from the
//! target's JSON (`--target-file`) or given as flags (`--type`, `--durable-id`, …): the
//! agent opens it for that target on that host only, so a hub cannot move the password onto
//! a server of its own.
//!
//! Sealing is not signing: the recipient is public, so anyone (the hub included) could seal a
//! secret of their own to it. What is sealed is therefore the operator's signed statement: the
//! document above, issued now, signed with the operator's key (`--key`, through `ssh-keygen -Y
//! sign -n bosun-credential@v1`, the document handed over on standard input so the secret
//! never touches the disk), in a `bosun.signed-credential/v1` envelope. The agent takes it only
//! with a signature its `allowed_signers` trusts, and of two credentials for one target keeps
//! the one issued later (decision 0095).
//!
//! `--tunnel-id UUID` seals the tunnel's credentials instead (the credentials file
//! `cloudflared tunnel create` wrote, for desired state's `tunnel_credentials`): the same
//! document names the tunnel in place of a target, and the agent opens it for that tunnel on
//! that host only, refusing a credentials file of another tunnel (decision 0084).

use std::io::Read;
use std::path::PathBuf;
use std::str::FromStr;

use bosun_proto::admin::HostDetail;
use bosun_proto::data_plan::TargetIdentity;
use bosun_proto::desired::{StorageTarget, StorageType};
use bosun_proto::sealed_credential::{
    CREDENTIAL_NAMESPACE, CredentialEnvelope, SealedCredential, TunnelCredential,
};
use bosun_proto::secret::{SealedSecret, SecretToken};
use clap::Subcommand;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::recipients::KnownRecipients;

/// The plaintext accepted at most (its sealed form must fit [`bosun_proto::secret::MAX_SEALED_BYTES`]).
const MAX_PLAINTEXT: usize = 8 * 1024;

/// Secrets for hosts.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Seal a target's secret (or the tunnel's credentials, with --tunnel-id) to a host;
    /// prints the armored ciphertext for desired state. The secret opens on that host for
    /// that target (or tunnel) only.
    Seal {
        /// The host whose recipient seals it: its id or its hostname. The recipient is the
        /// one pinned for it (`hosts approve --recipient`, `hosts pin-recipient`).
        #[arg(long, value_name = "HOST")]
        host: String,
        /// Seal to this recipient (`age1…`, as `bosun-agentctl status` prints it on the node)
        /// instead of the pinned one; the pin is left as it is.
        #[arg(long, value_name = "AGE_RECIPIENT")]
        recipient: Option<String>,
        /// Read the secret from this file (default: standard input). A final newline is
        /// not part of the secret.
        #[arg(long)]
        file: Option<PathBuf>,
        /// The operator's private key (or its `sk-` handle file) that signs what is sealed:
        /// the host takes a credential only with a signature its `allowed_signers` trusts for
        /// `bosun-credential@v1`.
        #[arg(long, short = 'f')]
        key: PathBuf,
        /// The `ssh-keygen` program.
        #[arg(long, default_value = "ssh-keygen")]
        ssh_keygen: PathBuf,
        /// The target the secret is for.
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// The target a secret is sealed for: a target's JSON, or its identity as flags.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// The storage target as JSON (an entry of desired state's `storage` or of a data plan's
    /// `targets`); the secret is bound to its identity.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present_any = ["kind", "tunnel_id"],
        conflicts_with_all = ["kind", "durable_id", "namespace", "username", "serial", "tunnel_id"]
    )]
    pub target_file: Option<PathBuf>,
    /// Seal the tunnel's credentials (cloudflared's credentials JSON) for the tunnel with this
    /// UUID, as the signed data plan's `tunnel.tunnel_id` names it; the ciphertext goes into
    /// desired state's `tunnel_credentials`.
    #[arg(long, value_name = "UUID", conflicts_with = "kind")]
    pub tunnel_id: Option<Uuid>,
    /// The target's type (instead of --target-file).
    #[arg(
        long = "type",
        value_name = "TYPE",
        requires = "durable_id",
        value_parser = PossibleValuesParser::new(["local-dir", "usb", "nfs", "cifs", "pbs"])
            .try_map(|name| parse_type(&name))
    )]
    pub kind: Option<StorageType>,
    /// The target's `durable_id`, exactly as desired state names it (PBS: with its
    /// fingerprint, if it names one).
    #[arg(long, value_name = "ID", requires = "kind")]
    pub durable_id: Option<String>,
    /// The target's PBS namespace, if it names one.
    #[arg(long, value_name = "NAMESPACE", requires = "kind")]
    pub namespace: Option<String>,
    /// The target's CIFS user, if it names one.
    #[arg(long, value_name = "USER", requires = "kind")]
    pub username: Option<String>,
    /// The target's USB disk serial, if it names one.
    #[arg(long, value_name = "SERIAL", requires = "kind")]
    pub serial: Option<String>,
}

impl TargetArgs {
    /// The identity the secret is bound to.
    pub fn identity(&self) -> Result<TargetIdentity, CtlError> {
        let identity = match (&self.target_file, self.kind, &self.durable_id) {
            (Some(path), _, _) => target_from_file(path)?.identity(),
            (None, Some(kind), Some(durable_id)) => TargetIdentity {
                kind,
                durable_id: durable_id.clone(),
                namespace: self.namespace.clone(),
                username: self.username.clone(),
                serial: self.serial.clone(),
            },
            _ => {
                return Err(CtlError::BadArgument {
                    what: "--target-file",
                    reason: "name the target: --target-file, or --type and --durable-id".into(),
                });
            }
        };
        if identity.durable_id.trim().is_empty() {
            return Err(CtlError::BadArgument {
                what: "--durable-id",
                reason: "empty".to_owned(),
            });
        }
        Ok(identity)
    }
}

fn parse_type(name: &str) -> Result<StorageType, serde_json::Error> {
    serde_json::from_value(serde_json::Value::from(name))
}

fn target_from_file(path: &std::path::Path) -> Result<StorageTarget, CtlError> {
    let bytes = std::fs::read(path).map_err(|source| CtlError::ReadInput {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| CtlError::ParseInput {
        path: path.to_path_buf(),
        document: "storage target",
        source,
    })
}

/// What a secret is sealed for.
enum Subject {
    /// A storage target's whole identity.
    Target(TargetIdentity),
    /// The tunnel with this UUID.
    Tunnel(Uuid),
}

/// Refuses to seal what the agent would refuse: anything but cloudflared's credentials JSON
/// for `tunnel_id` (never quoting it).
fn check_tunnel_file(secret: &str, tunnel_id: Uuid) -> Result<(), CtlError> {
    bosun_proto::sealed_credential::check_cloudflared(secret, tunnel_id).map_err(|reason| {
        CtlError::BadArgument {
            what: "secret",
            reason: format!("not a cloudflared credentials file for tunnel {tunnel_id}: {reason}"),
        }
    })
}

/// Runs a secret command.
pub async fn run(
    client: &HubClient,
    global: &GlobalArgs,
    command: &SecretCommand,
) -> Result<(), CtlError> {
    match command {
        SecretCommand::Seal {
            host,
            recipient,
            file,
            key,
            ssh_keygen,
            target,
        } => {
            let subject = match target.tunnel_id {
                Some(tunnel_id) => Subject::Tunnel(tunnel_id),
                None => Subject::Target(target.identity()?),
            };
            let explicit = recipient
                .as_deref()
                .map(|r| crate::recipients::parse_recipient("--recipient", r))
                .transpose()?;
            let host = crate::resolve::host_id(client, host).await?;
            let recipient = match explicit {
                Some(recipient) => recipient,
                None => pinned_recipient(client, global, host).await?,
            };
            let plaintext = read_secret(file.as_ref())?;
            let secret = std::str::from_utf8(&plaintext).map_err(|_| CtlError::BadArgument {
                what: "secret",
                reason: "not UTF-8 text".to_owned(),
            })?;
            let issued_at = jiff::Timestamp::now();
            let document = match subject {
                Subject::Target(identity) => document_bytes(&SealedCredential::new(
                    host,
                    identity,
                    issued_at,
                    SecretToken::new(secret),
                ))?,
                Subject::Tunnel(tunnel_id) => {
                    check_tunnel_file(secret, tunnel_id)?;
                    document_bytes(&TunnelCredential::new(
                        host,
                        tunnel_id,
                        issued_at,
                        SecretToken::new(secret),
                    ))?
                }
            };
            let signature =
                crate::job_sign::sign_in_memory(ssh_keygen, CREDENTIAL_NAMESPACE, key, &document)?;
            let sealed = seal(&recipient, &CredentialEnvelope::new(&document, &signature))?;
            crate::table::block(sealed.armored())
        }
    }
}

/// The recipient pinned for `host`, checked against what the hub reports
/// ([`crate::recipients::for_sealing`]).
async fn pinned_recipient(
    client: &HubClient,
    global: &GlobalArgs,
    host: Uuid,
) -> Result<String, CtlError> {
    let known = KnownRecipients::load(&crate::recipients::path(global)?)?;
    let value = client.get(&format!("/v1/admin/hosts/{host}")).await?;
    let detail: HostDetail = decode("host detail", value)?;
    let reported = detail.last_report.and_then(|r| r.storage_recipient);
    crate::recipients::for_sealing(host, known.get(host), reported.as_deref())
}

/// The exact bytes of a credential document, wiped when dropped.
fn document_bytes<T: serde::Serialize>(document: &T) -> Result<Zeroizing<Vec<u8>>, CtlError> {
    serde_json::to_vec(document)
        .map(Zeroizing::new)
        .map_err(|_| CtlError::BadArgument {
            what: "secret",
            reason: "cannot be written as JSON".to_owned(),
        })
}

fn read_secret(file: Option<&PathBuf>) -> Result<Zeroizing<Vec<u8>>, CtlError> {
    let mut bytes = Zeroizing::new(Vec::new());
    let path = file.cloned().unwrap_or_else(|| PathBuf::from("-"));
    let read = match file {
        Some(file) => std::fs::File::open(file).and_then(|f| {
            f.take(u64::try_from(MAX_PLAINTEXT + 1).unwrap_or(u64::MAX))
                .read_to_end(&mut bytes)
        }),
        None => std::io::stdin()
            .take(u64::try_from(MAX_PLAINTEXT + 1).unwrap_or(u64::MAX))
            .read_to_end(&mut bytes),
    };
    read.map_err(|source| CtlError::ReadInput {
        path: path.clone(),
        source,
    })?;
    if bytes.len() > MAX_PLAINTEXT {
        return Err(CtlError::BadArgument {
            what: "secret",
            reason: format!("longer than {MAX_PLAINTEXT} bytes"),
        });
    }
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(CtlError::BadArgument {
            what: "secret",
            reason: "empty".to_owned(),
        });
    }
    Ok(bytes)
}

/// Seals `envelope` (a [`SealedCredential`] or [`TunnelCredential`] document and the
/// operator's signature over it) to the age recipient `recipient`.
pub fn seal(recipient: &str, envelope: &CredentialEnvelope) -> Result<SealedSecret, CtlError> {
    let bad = |reason: String| CtlError::BadArgument {
        what: "recipient",
        reason,
    };
    let recipient = age::x25519::Recipient::from_str(recipient).map_err(|e| bad(e.to_string()))?;
    let plaintext = envelope.to_plaintext();
    let armored = age::encrypt_and_armor(&recipient, &plaintext).map_err(|e| bad(e.to_string()))?;
    SealedSecret::try_from(armored).map_err(bad)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn seal_args(args: &[&str]) -> Result<TargetArgs, clap::Error> {
        let argv = [
            "bosunctl",
            "secret",
            "seal",
            "--host",
            "h1",
            "--key",
            "id_ed25519",
        ]
        .iter()
        .chain(args)
        .copied();
        match Cli::try_parse_from(argv)?.command {
            Command::Secret(SecretCommand::Seal { target, .. }) => Ok(target),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_target_is_named_by_file_or_by_flags_never_both_nor_left_out() {
        let flags = seal_args(&[
            "--type",
            "pbs",
            "--durable-id",
            "backup@pbs@pbs.example.net:store1",
            "--namespace",
            "host-a",
        ])
        .unwrap();
        assert_eq!(
            flags.identity().unwrap(),
            TargetIdentity {
                kind: StorageType::Pbs,
                durable_id: "backup@pbs@pbs.example.net:store1".to_owned(),
                namespace: Some("host-a".to_owned()),
                username: None,
                serial: None,
            }
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("target.json");
        std::fs::write(
            &file,
            serde_json::json!({
                "type": "cifs",
                "durable_id": "nas.example.net:backups",
                "class": "slow",
                "role": "vzdump-target",
                "policy": {},
                "state": "attached",
                "username": "backup",
            })
            .to_string(),
        )
        .unwrap();
        let from_file = seal_args(&["--target-file", &file.display().to_string()]).unwrap();
        let identity = from_file.identity().unwrap();
        assert_eq!(identity.kind, StorageType::Cifs);
        assert_eq!(identity.durable_id, "nas.example.net:backups");
        assert_eq!(identity.username.as_deref(), Some("backup"));

        for bad in [
            &[][..],
            &["--type", "pbs"],
            &["--durable-id", "x:y"],
            &["--type", "ftp", "--durable-id", "x:y"],
            &[
                "--target-file",
                "t.json",
                "--type",
                "pbs",
                "--durable-id",
                "x",
            ],
            &["--namespace", "ns"],
        ] {
            assert!(seal_args(bad).is_err(), "{bad:?} parsed");
        }
    }

    /// An operator key made by the stock `ssh-keygen`, and the `allowed_signers` trusting it
    /// for credentials.
    fn operator(dir: &std::path::Path) -> (PathBuf, bosun_signing::AllowedSigners) {
        let key = dir.join("id_ed25519");
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op@example", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let line = format!("op@example namespaces=\"{CREDENTIAL_NAMESPACE}\" {public}");
        (key, bosun_signing::AllowedSigners::parse(&line).unwrap())
    }

    /// Opens what `seal` made: the envelope's document, its signature checked.
    fn open_signed(
        identity: &age::x25519::Identity,
        sealed: &SealedSecret,
        signers: &bosun_signing::AllowedSigners,
    ) -> Zeroizing<Vec<u8>> {
        let plaintext = age::decrypt(identity, sealed.armored().as_bytes()).unwrap();
        let envelope = CredentialEnvelope::from_plaintext(&plaintext).unwrap();
        let document = envelope.document().unwrap();
        bosun_signing::verify_signature(
            signers,
            CREDENTIAL_NAMESPACE,
            &document,
            &envelope.signature,
            jiff::Timestamp::now(),
        )
        .unwrap();
        document
    }

    #[test]
    fn what_is_sealed_is_signed_and_names_the_host_and_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let (key, signers) = operator(dir.path());
        let identity = age::x25519::Identity::generate();
        let recipient = identity.to_public().to_string();
        let host = uuid::Uuid::new_v4();
        let target = TargetIdentity {
            kind: StorageType::Pbs,
            durable_id: "backup@pbs@pbs.example.net:store1".to_owned(),
            namespace: None,
            username: None,
            serial: None,
        };
        let issued_at = jiff::Timestamp::now();
        let document = document_bytes(&SealedCredential::new(
            host,
            target.clone(),
            issued_at,
            SecretToken::new("pbs-password-4711"),
        ))
        .unwrap();
        let signature = crate::job_sign::sign_in_memory(
            std::path::Path::new("ssh-keygen"),
            CREDENTIAL_NAMESPACE,
            &key,
            &document,
        )
        .unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(
            files.len(),
            2,
            "nothing but the key pair on disk: {files:?}"
        );
        let sealed = seal(&recipient, &CredentialEnvelope::new(&document, &signature)).unwrap();
        assert!(!sealed.armored().contains("4711"));
        let opened =
            SealedCredential::from_document(&open_signed(&identity, &sealed, &signers)).unwrap();
        assert_eq!(opened.host_id, host);
        assert_eq!(opened.target, target);
        assert_eq!(opened.issued_at, issued_at);
        assert_eq!(opened.secret.expose(), "pbs-password-4711");

        // A missing key signs nothing, and says so.
        let err = crate::job_sign::sign_in_memory(
            std::path::Path::new("ssh-keygen"),
            CREDENTIAL_NAMESPACE,
            &dir.path().join("absent"),
            &document,
        )
        .unwrap_err();
        assert!(!err.to_string().contains("4711"), "{err}");
    }

    #[test]
    fn the_tunnels_credentials_are_sealed_for_its_tunnel_only() {
        let tunnel = uuid::Uuid::new_v4();
        let args = seal_args(&["--tunnel-id", &tunnel.to_string()]).unwrap();
        assert_eq!(args.tunnel_id, Some(tunnel));
        for both in [
            &[
                "--tunnel-id",
                "6ff42ae2-765d-4adf-8112-31c55c1551ef",
                "--type",
                "pbs",
                "--durable-id",
                "x",
            ][..],
            &[
                "--tunnel-id",
                "6ff42ae2-765d-4adf-8112-31c55c1551ef",
                "--target-file",
                "t.json",
            ],
            &["--tunnel-id", "not-a-uuid"],
        ] {
            assert!(seal_args(both).is_err(), "{both:?} parsed");
        }
        let file = format!(
            r#"{{"AccountTag":"acct","TunnelSecret":"c2VjcmV0LTQ3MTE=","TunnelID":"{tunnel}"}}"#
        );
        check_tunnel_file(&file, tunnel).unwrap();
        for bad in [
            "c2VjcmV0LTQ3MTE=".to_owned(),
            file.replace(&tunnel.to_string(), &uuid::Uuid::new_v4().to_string()),
            file.replace("TunnelSecret", "Secret"),
        ] {
            let err = check_tunnel_file(&bad, tunnel).unwrap_err();
            assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
        }

        let dir = tempfile::tempdir().unwrap();
        let (key, signers) = operator(dir.path());
        let identity = age::x25519::Identity::generate();
        let host = uuid::Uuid::new_v4();
        let document = document_bytes(&TunnelCredential::new(
            host,
            tunnel,
            jiff::Timestamp::now(),
            SecretToken::new(file.clone()),
        ))
        .unwrap();
        let signature = crate::job_sign::sign_in_memory(
            std::path::Path::new("ssh-keygen"),
            CREDENTIAL_NAMESPACE,
            &key,
            &document,
        )
        .unwrap();
        let sealed = seal(
            &identity.to_public().to_string(),
            &CredentialEnvelope::new(&document, &signature),
        )
        .unwrap();
        assert!(!sealed.armored().contains("c2VjcmV0"));
        let opened =
            TunnelCredential::from_document(&open_signed(&identity, &sealed, &signers)).unwrap();
        assert_eq!((opened.host_id, opened.tunnel_id), (host, tunnel));
        assert_eq!(opened.secret.expose(), file);
    }
}
