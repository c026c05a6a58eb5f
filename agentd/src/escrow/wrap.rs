//! K wrapped under R: an `age` file with an scrypt (passphrase) recipient, the passphrase
//! being the code's 12 words joined by single spaces.
//!
//! The plaintext is a small JSON document binding the key to its host:
//! `{"schema":"bosun.escrow-key/v1","host_id":"…","key_file":"<K's key file text>"}`. The
//! blob's outer `host_id` and `key_fingerprint` are for the hub's bookkeeping and are
//! checked against the unwrapped contents, which the hub cannot forge without R.
//!
//! Unwrapping bounds the scrypt work factor ([`MAX_WORK_FACTOR`]): the blob comes from the
//! hub, and a hub that raised the factor could otherwise make recovery take days.

use std::io::Read as _;
use std::path::Path;

use age::secrecy::SecretString;
use bosun_proto::escrow::{EscrowBlob, EscrowFormat, SCHEMA};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::code::RecoveryCode;
use crate::pbs_key::{PbsKey, PbsKeyError};

/// The scrypt work factor (log2 N) escrows are made with: unwrapping takes about a second
/// on a 2-core machine of the project's kind (figure in docs/benchmarks.md).
pub const WORK_FACTOR: u8 = 18;

/// The largest work factor a blob may demand when unwrapped (each step doubles the time).
pub const MAX_WORK_FACTOR: u8 = 20;

/// The schema of the wrapped plaintext.
const PAYLOAD_SCHEMA: &str = "bosun.escrow-key/v1";

/// The wrapped plaintext is a few hundred bytes.
const MAX_PAYLOAD: u64 = 4096;

#[derive(Serialize)]
struct Payload<'a> {
    schema: &'a str,
    host_id: Uuid,
    key_file: &'a str,
}

/// [`Payload`] as read: the key file's text is JSON-escaped inside, so it is copied out
/// (and zeroized with the rest).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadPayload {
    schema: String,
    host_id: Uuid,
    key_file: String,
}

/// Why an escrow could not be made or opened. No variant carries key material or words.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// `age` could not encrypt.
    #[error("wrapping the key")]
    Encrypt(#[source] age::EncryptError),
    /// The blob is not a well-formed escrow.
    #[error("the escrow blob is malformed: {0}")]
    Malformed(String),
    /// The blob names another host.
    #[error("the escrow blob belongs to host {found}, not to this host ({expected})")]
    OtherHost {
        /// This host.
        expected: Uuid,
        /// The host the blob names.
        found: Uuid,
    },
    /// The words do not open the blob.
    #[error(
        "these words do not unlock this escrow (a wrong word that still fits the checksum, words from another sheet, or a damaged blob)"
    )]
    WrongCode,
    /// The blob demands more scrypt work than any escrow Bosun makes.
    #[error("the escrow blob demands an scrypt work factor above {MAX_WORK_FACTOR}; refused")]
    ExcessiveWork,
    /// The unwrapped key is not a PBS key file.
    #[error("the unwrapped key is unusable")]
    Key(#[source] PbsKeyError),
    /// The unwrapped key's fingerprint is not the one the blob states.
    #[error("the unwrapped key has fingerprint {computed}, the blob states {stated}")]
    Fingerprint {
        /// From the blob.
        stated: String,
        /// Of the unwrapped key.
        computed: String,
    },
}

/// Wraps `key` (the host's K) under `code` for host `host_id`.
pub fn wrap(
    key: &PbsKey,
    host_id: Uuid,
    code: &RecoveryCode,
    work_factor: u8,
    now: Timestamp,
) -> Result<EscrowBlob, WrapError> {
    let key_file = key.key_file_json();
    let payload = Payload {
        schema: PAYLOAD_SCHEMA,
        host_id,
        key_file: key_file.as_str(),
    };
    let plaintext = Zeroizing::new(
        serde_json::to_vec(&payload).map_err(|e| WrapError::Malformed(e.to_string()))?,
    );
    let mut recipient =
        age::scrypt::Recipient::new(SecretString::from(code.phrase().as_str().to_owned()));
    recipient.set_work_factor(work_factor);
    let ciphertext = age::encrypt_and_armor(&recipient, &plaintext).map_err(WrapError::Encrypt)?;
    Ok(EscrowBlob {
        schema: SCHEMA.to_owned(),
        format: EscrowFormat::AgeScrypt,
        host_id: Some(host_id),
        key_fingerprint: key.fingerprint(),
        created_at: now,
        ciphertext,
    })
}

/// Opens `blob` with `code` and returns K, after checking that the blob and its contents
/// belong to `host_id` and that K has the fingerprint the blob states.
pub fn unwrap(blob: &EscrowBlob, code: &RecoveryCode, host_id: Uuid) -> Result<PbsKey, WrapError> {
    blob.validate()
        .map_err(|e| WrapError::Malformed(e.to_string()))?;
    if let Some(found) = blob.host_id
        && found != host_id
    {
        return Err(WrapError::OtherHost {
            expected: host_id,
            found,
        });
    }
    let key = unwrap_armored(&blob.ciphertext, code, host_id)?;
    if key.fingerprint() != blob.key_fingerprint {
        return Err(WrapError::Fingerprint {
            stated: blob.key_fingerprint.clone(),
            computed: key.fingerprint(),
        });
    }
    Ok(key)
}

/// Opens a bare armored block (as printed on a sheet, without the hub's envelope) with
/// `code`; the host id sealed inside must be `host_id`.
pub fn unwrap_armored(
    armored: &str,
    code: &RecoveryCode,
    host_id: Uuid,
) -> Result<PbsKey, WrapError> {
    if armored.len() > bosun_proto::escrow::MAX_CIPHERTEXT_BYTES {
        return Err(WrapError::Malformed("the ciphertext is too large".into()));
    }
    let mut identity =
        age::scrypt::Identity::new(SecretString::from(code.phrase().as_str().to_owned()));
    identity.set_max_work_factor(MAX_WORK_FACTOR);
    let decryptor =
        age::Decryptor::new_buffered(age::armor::ArmoredReader::new(armored.as_bytes()))
            .map_err(|e| WrapError::Malformed(e.to_string()))?;
    let reader = decryptor
        .decrypt(std::iter::once(&identity as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::ExcessiveWork { .. } => WrapError::ExcessiveWork,
            age::DecryptError::DecryptionFailed | age::DecryptError::NoMatchingKeys => {
                WrapError::WrongCode
            }
            other => WrapError::Malformed(other.to_string()),
        })?;
    let mut plaintext = Zeroizing::new(Vec::with_capacity(512));
    reader
        .take(MAX_PAYLOAD + 1)
        .read_to_end(&mut plaintext)
        // The header opened, so the words were right: the payload itself is damaged (a
        // block copied off paper with a mistake in it).
        .map_err(|_| WrapError::Malformed("the wrapped key is damaged".into()))?;
    if plaintext.len() as u64 > MAX_PAYLOAD {
        return Err(WrapError::Malformed(
            "the wrapped payload is too large".into(),
        ));
    }
    let payload: ReadPayload = serde_json::from_slice(&plaintext)
        .map_err(|_| WrapError::Malformed("the wrapped payload is not an escrow key".into()))?;
    let key_file = Zeroizing::new(payload.key_file);
    if payload.schema != PAYLOAD_SCHEMA {
        return Err(WrapError::Malformed(format!(
            "the wrapped payload has schema {:?}",
            payload.schema
        )));
    }
    if payload.host_id != host_id {
        return Err(WrapError::OtherHost {
            expected: host_id,
            found: payload.host_id,
        });
    }
    PbsKey::from_key_file_json(Path::new("the escrow"), &key_file).map_err(WrapError::Key)
}

#[cfg(test)]
mod tests;
