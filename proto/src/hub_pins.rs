//! `bosun.hub-pins/v1`: the hub keys agents trust, as the operator signed them.
//!
//! Holding the hub's key for a while must never buy a way in that outlives it (decision 0049).
//! So an agent takes a new set of hub key pins only from this document, signed by a key in its
//! `allowed_signers` under the policy namespace (`ssh-keygen -Y sign -n bosun-policy@v1`, as a
//! data plan is): `bosun-hubd cert rotate stage` writes it unsigned, the operator signs it, and
//! the hub stores the signed bytes and carries them in every poll answer
//! ([`PollResponse::hub_pins_signed`](crate::poll::PollResponse::hub_pins_signed)). The serial
//! only rises, so a hub replaying an older set (one naming a key since found compromised) moves
//! nothing. A document is fleet-wide, or bound to one host by `host_id`.
//!
//! The agent trusts the pins `agent.toml` gives **and** those of the newest signed set: the
//! configured key always gets back in.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::retention::POLICY_NAMESPACE;
use crate::validate::{self, ValidationError};

/// Schema of [`HubPinsDocument`].
pub const HUB_PINS_SCHEMA: &str = "bosun.hub-pins/v1";

/// The SSHSIG namespace a pin set is signed under (the policy namespace, shared with data
/// plans and retention floors; the schema tells the documents apart).
pub const HUB_PINS_NAMESPACE: &str = POLICY_NAMESPACE;

/// Most pins one signed set names: the staged, active and retiring keys, with room to spare.
pub const MAX_SIGNED_PINS: usize = 8;

/// Longest signed pin document accepted (bytes).
pub const MAX_HUB_PINS_DOCUMENT: usize = 4096;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HubPinsDocument {
    /// Always [`HUB_PINS_SCHEMA`].
    pub schema: String,
    /// Only rises: a set with a serial at or below the agent's is not taken.
    pub serial: u64,
    /// When it was issued (shown; the serial orders sets).
    pub issued_at: Timestamp,
    /// The one host this set is for; absent: every host of the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<Uuid>,
    /// The hub key pins to trust (`spki:` key pins or certificate fingerprints, lowercase), 1 to
    /// [`MAX_SIGNED_PINS`], none twice.
    pub pins: Vec<String>,
}

impl HubPinsDocument {
    /// Checks every field; the error names the first field that is wrong.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, HUB_PINS_SCHEMA)?;
        if self.serial == 0 {
            return Err(ValidationError::Invalid {
                field: "serial".into(),
                reason: "a pin set's serial starts at 1".into(),
            });
        }
        if self.host_id.is_some_and(|id| id.is_nil()) {
            return Err(ValidationError::Invalid {
                field: "host_id".into(),
                reason: "the nil UUID is not a host id".into(),
            });
        }
        if self.pins.is_empty() {
            return Err(ValidationError::Invalid {
                field: "pins".into(),
                reason: "a pin set names at least one key".into(),
            });
        }
        validate::count("pins", self.pins.len(), MAX_SIGNED_PINS)?;
        for (i, pin) in self.pins.iter().enumerate() {
            if !crate::validate::is_pin(pin) {
                return Err(ValidationError::Invalid {
                    field: format!("pins[{i}]"),
                    reason: "not a pin: `spki:` and 64 lowercase hex digits, or 64 lowercase hex \
                             digits"
                        .into(),
                });
            }
            if self.pins[..i].contains(pin) {
                return Err(ValidationError::Invalid {
                    field: format!("pins[{i}]"),
                    reason: "named twice".into(),
                });
            }
        }
        Ok(())
    }

    /// Whether the set is for `host` (fleet-wide, or bound to it).
    pub fn is_for(&self, host: Uuid) -> bool {
        self.host_id.is_none_or(|id| id == host)
    }
}

impl crate::signed::SignedDocument {
    /// Checks sizes and that the document decodes to a valid [`HubPinsDocument`]; gives it.
    /// The signature itself is checked by the agent against its `allowed_signers`.
    pub fn hub_pins(&self) -> Result<HubPinsDocument, ValidationError> {
        let doc: HubPinsDocument =
            self.decode("hub_pins_signed", HUB_PINS_SCHEMA, MAX_HUB_PINS_DOCUMENT)?;
        doc.validate()?;
        Ok(doc)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::signed::SignedDocument;

    fn doc(pins: &[&str]) -> HubPinsDocument {
        HubPinsDocument {
            schema: HUB_PINS_SCHEMA.into(),
            serial: 1,
            issued_at: Timestamp::UNIX_EPOCH,
            host_id: None,
            pins: pins.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn a_set_is_checked_field_by_field() {
        let key = format!("spki:{}", "a".repeat(64));
        let leaf = "b".repeat(64);
        assert!(doc(&[&key, &leaf]).validate().is_ok());
        let wrong = |d: HubPinsDocument| d.validate().unwrap_err().field().to_owned();
        assert_eq!(wrong(doc(&[])), "pins");
        assert_eq!(wrong(doc(&[&key, &key])), "pins[1]");
        assert_eq!(wrong(doc(&["spki:ABC"])), "pins[0]");
        assert_eq!(
            wrong(HubPinsDocument {
                serial: 0,
                ..doc(&[&key])
            }),
            "serial"
        );
        let nine: Vec<String> = (0..9).map(|i| format!("{i:064}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(wrong(doc(&nine)), "pins");
        let host = Uuid::new_v4();
        let bound = HubPinsDocument {
            host_id: Some(host),
            ..doc(&[&key])
        };
        assert!(bound.is_for(host) && !bound.is_for(Uuid::new_v4()));
        assert!(doc(&[&key]).is_for(host));
    }

    #[test]
    fn a_signed_set_decodes_only_as_itself() {
        let key = format!("spki:{}", "a".repeat(64));
        let bytes = serde_json::to_vec(&doc(&[&key])).unwrap();
        let signed = SignedDocument::new(&bytes, "sig");
        assert_eq!(signed.hub_pins().unwrap().pins, vec![key]);
        // A data plan (or anything else) signed under the same namespace is not a pin set.
        let other = SignedDocument::new(br#"{"schema":"bosun.data-plan/v1","serial":1}"#, "sig");
        assert!(other.hub_pins().is_err());
    }
}
