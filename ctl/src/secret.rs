//! `bosunctl secret seal --host HOST`: encrypts a secret (a CIFS or PBS password) to one
//! host's age X25519 recipient, which the host reported to the hub. The armored ciphertext
//! goes into desired state (`storage[].credentials`); the hub stores and forwards it but
//! cannot open it, and no other host can either. The plaintext is read from a file or
//! standard input, never from the command line (where `ps` and shell history would see it).

use std::io::Read;
use std::path::PathBuf;
use std::str::FromStr;

use bosun_proto::admin::HostDetail;
use bosun_proto::secret::{SealedSecret, is_age_recipient};
use clap::Subcommand;
use zeroize::Zeroizing;

use crate::client::{HubClient, decode};
use crate::error::CtlError;

/// The plaintext accepted at most (its sealed form must fit [`bosun_proto::secret::MAX_SEALED_BYTES`]).
const MAX_PLAINTEXT: usize = 8 * 1024;

/// Secrets for hosts.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Seal a secret to a host; prints the armored ciphertext for desired state.
    Seal {
        /// The host whose recipient seals it: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// Read the secret from this file (default: standard input). A final newline is
        /// not part of the secret.
        #[arg(long)]
        file: Option<PathBuf>,
    },
}

/// Runs a secret command.
pub async fn run(client: &HubClient, command: &SecretCommand) -> Result<(), CtlError> {
    match command {
        SecretCommand::Seal { host, file } => {
            let host = crate::resolve::host_id(client, host).await?;
            let value = client.get(&format!("/v1/admin/hosts/{host}")).await?;
            let detail: HostDetail = decode("host detail", value)?;
            let recipient = detail
                .last_report
                .and_then(|r| r.storage_recipient)
                .filter(|r| is_age_recipient(r))
                .ok_or_else(|| CtlError::BadArgument {
                    what: "--host",
                    reason: format!(
                        "host {host} has not reported a storage recipient yet (an agent reports it once it polls)"
                    ),
                })?;
            let plaintext = read_secret(file.as_ref())?;
            let sealed = seal(&recipient, &plaintext)?;
            crate::outln!("{}", sealed.armored().trim_end())
        }
    }
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

/// Seals `plaintext` to the age recipient `recipient`.
pub fn seal(recipient: &str, plaintext: &[u8]) -> Result<SealedSecret, CtlError> {
    let bad = |reason: String| CtlError::BadArgument {
        what: "recipient",
        reason,
    };
    let recipient = age::x25519::Recipient::from_str(recipient).map_err(|e| bad(e.to_string()))?;
    let armored = age::encrypt_and_armor(&recipient, plaintext).map_err(|e| bad(e.to_string()))?;
    SealedSecret::try_from(armored).map_err(bad)
}
