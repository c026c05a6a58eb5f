//! Customer access to a guest: the OpenSSH public keys a guest trusts for its `root` account
//! (decision 0107). Which keys may sign in to a guest decides who reaches its data, so the
//! list is the operator's signed decision: it travels in the host's data plan
//! ([`crate::data_plan::DataPlan::guest_access`]), never in unsigned desired state, and the
//! agent hands a guest its keys only in the bootstrap it pushes ([`crate::bootstrap`]). A hub
//! can neither add a key nor move one to another guest; withholding the plan changes nothing,
//! and a replayed older plan is refused by its serial.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ssh_public_key::SshPublicKey;
use crate::validate::{self, ValidationError};

/// The most keys one guest trusts.
pub const MAX_GUEST_KEYS: usize = 16;

/// One guest's keys, as the operator signs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestAccess {
    /// The guest (desired state's `guest_id`).
    pub guest_id: Uuid,
    /// The customer the guest serves (desired state's `customer.customer_id`): the keys are
    /// handed over only while the guest serves that customer, so a hub that re-uses the
    /// guest id for another customer's guest gives it no key.
    pub customer_id: String,
    /// The keys that may sign in as the guest's `root`, each `<algorithm> <base64>`
    /// (a comment is dropped, options are refused). An empty list takes every key away.
    pub ssh_keys: Vec<SshPublicKey>,
}

/// Checks a list of keys at `field`: at most [`MAX_GUEST_KEYS`], none twice.
pub fn validate_keys(field: &str, keys: &[SshPublicKey]) -> Result<(), ValidationError> {
    validate::count(field, keys.len(), MAX_GUEST_KEYS)?;
    let mut seen = HashSet::new();
    for (i, key) in keys.iter().enumerate() {
        if !seen.insert(key.as_str()) {
            return Err(ValidationError::Duplicate {
                field: format!("{field}[{i}]"),
                value: key.fingerprint().to_owned(),
            });
        }
    }
    Ok(())
}

/// Checks a plan's `guest_access` at `field`: at most `max_guests` entries, one per guest,
/// no nil guest id, each key list valid.
pub fn validate_all(
    field: &str,
    access: &[GuestAccess],
    max_guests: usize,
) -> Result<(), ValidationError> {
    validate::count(field, access.len(), max_guests)?;
    let mut guests = HashSet::new();
    for (i, entry) in access.iter().enumerate() {
        if entry.guest_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: format!("{field}[{i}].guest_id"),
                reason: "the nil UUID is not a guest id".into(),
            });
        }
        if !guests.insert(entry.guest_id) {
            return Err(ValidationError::Duplicate {
                field: format!("{field}[{i}].guest_id"),
                value: entry.guest_id.to_string(),
            });
        }
        validate::ident(
            || format!("{field}[{i}].customer_id"),
            &entry.customer_id,
            64,
        )?;
        validate_keys(&format!("{field}[{i}].ssh_keys"), &entry.ssh_keys)?;
    }
    Ok(())
}

/// The SHA-256 of [`authorized_keys_file`] of `keys`: what the agent records as delivered.
pub fn keys_sha256(keys: &[SshPublicKey]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(authorized_keys_file(keys).as_bytes()).into()
}

/// The `authorized_keys` file a guest writes for the keys: one key a line, nothing else (no
/// options, no comments), so the file says exactly what the plan says.
pub fn authorized_keys_file(keys: &[SshPublicKey]) -> String {
    keys.iter().map(|k| format!("{}\n", k.as_str())).collect()
}
