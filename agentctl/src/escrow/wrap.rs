//! The host's keys wrapped under R: an `age` file with an scrypt (passphrase) recipient, the
//! passphrase being the code's 12 words joined by single spaces.
//!
//! The plaintext is a small JSON document binding the keys to their host:
//!
//! - `bosun.escrow-keyring/v2` (what is wrapped now): `{"schema":…,"host_id":"…",
//!   "keys":[{"data":"<K, base64>","created":"…"},{"data":…,"created":…,"retired_at":"…"},
//!   …]}`: the current K first, then every key a rotation retired, newest first, so one
//!   code opens every archive the host still has. Only the raw keys are wrapped (their
//!   fingerprints are computed again), which keeps the blob short enough to print.
//! - `bosun.escrow-key/v1` (blobs made before rotations made keys): `{"schema":…,
//!   "host_id":"…","key_file":"<K's key file text>"}`, one key. Still opened.
//!
//! The blob's outer `host_id` and `key_fingerprint` (the current K's) are for the hub's
//! bookkeeping and are checked against the unwrapped contents, which the hub cannot forge
//! without R.
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
use bosun_agentd::trust::keys::pbs_key::keyring::MAX_KEYS;
use bosun_agentd::trust::keys::pbs_key::{PbsKey, PbsKeyError, PbsKeyring, RetiredKey};

/// The scrypt work factor (log2 N) escrows are made with: unwrapping takes about a second
/// on a 2-core machine of the project's kind (figure in docs/benchmarks.md).
pub const WORK_FACTOR: u8 = 18;

/// The largest work factor a blob may demand when unwrapped (each step doubles the time).
pub const MAX_WORK_FACTOR: u8 = 20;

/// The schema of a single wrapped key (blobs made before keyrings).
const KEY_SCHEMA: &str = "bosun.escrow-key/v1";

/// The schema of a wrapped keyring.
const KEYRING_SCHEMA: &str = "bosun.escrow-keyring/v2";

/// The wrapped plaintext is about a hundred bytes per key.
const MAX_PAYLOAD: u64 = 16 * 1024;

#[derive(Serialize)]
struct Payload<'a> {
    schema: &'a str,
    host_id: Uuid,
    keys: Vec<Entry<'a>>,
}

#[derive(Serialize)]
struct Entry<'a> {
    data: &'a str,
    created: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    retired_at: Option<Timestamp>,
}

/// A payload as read, of either schema: the key material is copied out (and zeroized with
/// the rest).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadPayload {
    schema: String,
    host_id: Uuid,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    keys: Option<Vec<ReadEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadEntry {
    data: String,
    created: Timestamp,
    #[serde(default)]
    retired_at: Option<Timestamp>,
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

/// Wraps `ring` (the host's K and the keys it replaced) under `code` for host `host_id`.
pub fn wrap(
    ring: &PbsKeyring,
    host_id: Uuid,
    code: &RecoveryCode,
    work_factor: u8,
    now: Timestamp,
) -> Result<EscrowBlob, WrapError> {
    let current = ring.current().data_base64();
    let retired: Vec<(Zeroizing<String>, &RetiredKey)> = ring
        .retired()
        .iter()
        .map(|r| (r.key.data_base64(), r))
        .collect();
    let mut keys = Vec::with_capacity(ring.len());
    keys.push(Entry {
        data: current.as_str(),
        created: ring.current().created(),
        retired_at: None,
    });
    keys.extend(retired.iter().map(|(data, r)| Entry {
        data: data.as_str(),
        created: r.key.created(),
        retired_at: Some(r.retired_at),
    }));
    let payload = Payload {
        schema: KEYRING_SCHEMA,
        host_id,
        keys,
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
        key_fingerprint: ring.current().fingerprint(),
        created_at: now,
        ciphertext,
    })
}

/// Opens `blob` with `code` and returns the keys it wraps, after checking that the blob and
/// its contents belong to `host_id` and that the current K has the fingerprint the blob
/// states.
pub fn unwrap(
    blob: &EscrowBlob,
    code: &RecoveryCode,
    host_id: Uuid,
) -> Result<PbsKeyring, WrapError> {
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
    let ring = unwrap_armored(&blob.ciphertext, code, host_id)?;
    if ring.current().fingerprint() != blob.key_fingerprint {
        return Err(WrapError::Fingerprint {
            stated: blob.key_fingerprint.clone(),
            computed: ring.current().fingerprint(),
        });
    }
    Ok(ring)
}

/// Opens a bare armored block (as printed on a sheet, without the hub's envelope) with
/// `code`; the host id sealed inside must be `host_id`.
pub fn unwrap_armored(
    armored: &str,
    code: &RecoveryCode,
    host_id: Uuid,
) -> Result<PbsKeyring, WrapError> {
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
    let key_file = payload.key_file.map(Zeroizing::new);
    let entries: Vec<(Zeroizing<String>, Timestamp, Option<Timestamp>)> = payload
        .keys
        .unwrap_or_default()
        .into_iter()
        .map(|e| (Zeroizing::new(e.data), e.created, e.retired_at))
        .collect();
    if payload.schema != KEY_SCHEMA && payload.schema != KEYRING_SCHEMA {
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
    let origin = Path::new("the escrow");
    if payload.schema == KEY_SCHEMA {
        let key_file = key_file
            .ok_or_else(|| WrapError::Malformed("the wrapped payload holds no key file".into()))?;
        let key = PbsKey::from_key_file_json(origin, &key_file).map_err(WrapError::Key)?;
        return Ok(PbsKeyring::new(key, Vec::new()));
    }
    if entries.is_empty() || entries.len() > MAX_KEYS {
        return Err(WrapError::Malformed(format!(
            "the wrapped keyring holds {} keys (1 to {MAX_KEYS} expected)",
            entries.len()
        )));
    }
    let mut current = None;
    let mut retired = Vec::with_capacity(entries.len() - 1);
    for (index, (data, created, retired_at)) in entries.iter().enumerate() {
        let key = PbsKey::from_data_base64(origin, data, *created).map_err(WrapError::Key)?;
        match (index, retired_at) {
            (0, None) => current = Some(key),
            (0, Some(_)) | (_, None) => {
                return Err(WrapError::Malformed(
                    "the wrapped keyring's first key must be the current one, and only it".into(),
                ));
            }
            (_, Some(at)) => retired.push(RetiredKey {
                key,
                retired_at: *at,
            }),
        }
    }
    let current =
        current.ok_or_else(|| WrapError::Malformed("the wrapped keyring is empty".into()))?;
    Ok(PbsKeyring::new(current, retired))
}

#[cfg(test)]
mod tests;
