//! `bosun.golden/v1`: an operator's signed statement that a golden archive may seed new
//! guests. The exact document bytes are signed with `ssh-keygen -Y sign -n bosun-golden@v1`
//! and travel inside the desired state's `golden` entry ([`crate::desired::GoldenArchive`]),
//! so the hub forwards the operator's choice but cannot make one (DESIGN §5: the golden
//! archive is code and data baked into customer guests).
//!
//! A document may be narrowed: `host_id` binds it to one host (any other host refuses it)
//! and `expires_at` ends it (no guest is provisioned from it afterwards; guests already
//! provisioned are not touched). Both are optional, and a document without them serializes
//! exactly as before they existed. Without an expiry, a signed choice lasts as long as its
//! signer stays trusted for `bosun-golden@v1` in the agent's `allowed_signers`: the agent
//! checks the signature again before every use, so removing the operator's line revokes it.
//!
//! A document carries a `serial` that only rises (decision 0092): once a host holds a signed
//! golden document, no document with a lower serial seeds another guest there
//! ([`check_serial`]), so a hub cannot bring back a base the operator has since replaced.
//! Equal serials stand side by side (several bases signed as one choice); a rollback is a new
//! signature with a higher serial naming the older archive. A document signed before the
//! field has none and counts as serial 0: usable until the host holds one with a serial.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::signed::SignedDocument;
use crate::validate::ValidationError;

/// The largest serial a golden document or recipe may carry (agents journal it as a signed
/// 64-bit integer).
pub const MAX_GOLDEN_SERIAL: u64 = i64::MAX.unsigned_abs();

/// A signed golden document or recipe older than one this host already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "serial {serial} is below serial {held}, which this host already holds: an older signed choice came back"
)]
pub struct Superseded {
    /// The document's serial (0 for one signed before serials).
    pub serial: u64,
    /// The highest serial of its kind this host holds.
    pub held: u64,
}

/// The ordering rule of golden documents and recipes: a document whose serial is below the
/// highest `held` serial of its kind is refused; an equal or higher one is admitted (and then
/// raises what is held to its own serial).
pub fn check_serial(serial: u64, held: u64) -> Result<(), Superseded> {
    if serial < held {
        Err(Superseded { serial, held })
    } else {
        Ok(())
    }
}

/// Checks a signed serial's bound, naming `field` when it is out of range.
pub(crate) fn validate_serial(field: &str, serial: Option<u64>) -> Result<(), ValidationError> {
    match serial {
        Some(serial) if serial > MAX_GOLDEN_SERIAL => Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: format!("expected at most {MAX_GOLDEN_SERIAL}"),
        }),
        _ => Ok(()),
    }
}

/// Schema of [`GoldenDocument`].
pub const GOLDEN_SCHEMA: &str = "bosun.golden/v1";

/// The SSHSIG namespace of golden-archive signatures.
pub const GOLDEN_NAMESPACE: &str = "bosun-golden@v1";

/// Longest signed document accepted (bytes, before base64).
pub const MAX_GOLDEN_DOCUMENT: usize = 4096;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GoldenDocument {
    /// Always [`GOLDEN_SCHEMA`].
    pub schema: String,
    /// The archive's Proxmox volume id.
    pub volid: String,
    /// SHA-256 of the archive's bytes, 64 lowercase hex digits.
    pub sha256: String,
    /// The one host that may provision from this archive; absent: every host that trusts
    /// the signer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<Uuid>,
    /// When the choice ends: from then on no guest is provisioned from it. Absent: it lasts
    /// as long as the signer is trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Rises with every choice the operator signs ([`check_serial`]); absent in documents
    /// signed before the field, which count as serial 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u64>,
    /// The kind of guest the archive seeds: `lxc` (absent, as in every document signed
    /// before VMs) or `qemu`. Signed with the rest, so a container base is never restored as
    /// a VM nor a VM base as a container (decision 0114).
    #[serde(default, skip_serializing_if = "crate::desired::GuestKind::is_lxc")]
    pub kind: crate::desired::GuestKind,
}

/// Why a valid golden document does not let a host provision from its archive now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoldenScopeError {
    /// The document is bound to another host.
    #[error("the golden document is for host {bound}, not this host ({host})")]
    OtherHost {
        /// The host the document names.
        bound: Uuid,
        /// The host checking it.
        host: Uuid,
    },
    /// The document's `expires_at` has passed.
    #[error("the golden document expired at {expires_at}")]
    Expired {
        /// When it expired.
        expires_at: Timestamp,
    },
}

impl GoldenDocument {
    /// A document naming `volid` with `sha256`, for every host and without an expiry.
    pub fn new(volid: &str, sha256: &str) -> Self {
        Self {
            schema: GOLDEN_SCHEMA.to_owned(),
            volid: volid.to_owned(),
            sha256: sha256.to_ascii_lowercase(),
            host_id: None,
            expires_at: None,
            serial: None,
            kind: crate::desired::GuestKind::Lxc,
        }
    }

    /// The same document for guests of `kind`.
    #[must_use]
    pub fn for_kind(mut self, kind: crate::desired::GuestKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same document with `serial`.
    #[must_use]
    pub fn with_serial(mut self, serial: u64) -> Self {
        self.serial = Some(serial);
        self
    }

    /// The serial the ordering rule reads: 0 for a document signed before serials.
    pub fn serial(&self) -> u64 {
        self.serial.unwrap_or(0)
    }

    /// The same document bound to `host`.
    #[must_use]
    pub fn for_host(mut self, host: Uuid) -> Self {
        self.host_id = Some(host);
        self
    }

    /// The same document ending at `expires_at`.
    #[must_use]
    pub fn expiring_at(mut self, expires_at: Timestamp) -> Self {
        self.expires_at = Some(expires_at);
        self
    }

    /// Whether host `host` may provision from this document's archive at `now`: the
    /// document is not bound to another host and has not expired (`expires_at` itself is
    /// already too late). The signature is checked separately, by the agent.
    pub fn check_scope(&self, host: Uuid, now: Timestamp) -> Result<(), GoldenScopeError> {
        if let Some(bound) = self.host_id
            && bound != host
        {
            return Err(GoldenScopeError::OtherHost { bound, host });
        }
        if let Some(expires_at) = self.expires_at
            && now >= expires_at
        {
            return Err(GoldenScopeError::Expired { expires_at });
        }
        Ok(())
    }

    /// Checks the schema and the hash's shape.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.schema != GOLDEN_SCHEMA {
            return Err(ValidationError::WrongSchema {
                expected: GOLDEN_SCHEMA,
                found: self.schema.chars().take(64).collect(),
            });
        }
        if !is_sha256(&self.sha256) {
            return Err(ValidationError::Invalid {
                field: "sha256".into(),
                reason: "expected 64 lowercase hex digits".into(),
            });
        }
        if self.volid.is_empty() || self.volid.len() > 255 || !self.volid.contains(':') {
            return Err(ValidationError::Invalid {
                field: "volid".into(),
                reason: "expected a Proxmox volume id `storage:path`".into(),
            });
        }
        if self.host_id.is_some_and(|h| h.is_nil()) {
            return Err(ValidationError::Invalid {
                field: "host_id".into(),
                reason: "the nil uuid names no host; leave host_id out for every host".into(),
            });
        }
        validate_serial("serial", self.serial)
    }
}

/// A signed [`GoldenDocument`] as it travels.
pub type SignedGolden = SignedDocument;

impl SignedDocument {
    /// The exact signed bytes of a golden document, within [`MAX_GOLDEN_DOCUMENT`].
    pub fn golden_bytes(&self) -> Result<Vec<u8>, ValidationError> {
        self.bytes_within(FIELD, MAX_GOLDEN_DOCUMENT)
    }

    /// Checks sizes and that the document decodes to a valid [`GoldenDocument`]; gives it.
    /// The signature itself is checked by the agent against its `allowed_signers`.
    pub fn golden(&self) -> Result<GoldenDocument, ValidationError> {
        let document: GoldenDocument = self.decode(FIELD, GOLDEN_SCHEMA, MAX_GOLDEN_DOCUMENT)?;
        document.validate()?;
        Ok(document)
    }
}

/// The field a signed golden document travels in, named in errors.
const FIELD: &str = "golden.signed";

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "5f2b6c0d8e1a4b3c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";

    #[test]
    fn the_kind_is_signed_and_absent_means_a_container() {
        use crate::desired::GuestKind;
        let lxc = GoldenDocument::new("local:backup/vzdump-lxc-9000-x.tar.zst", HASH);
        let text = serde_json::to_string(&lxc).unwrap();
        assert!(!text.contains("kind"), "{text}");
        let old: GoldenDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(old.kind, GuestKind::Lxc);
        let vm = GoldenDocument::new("local:backup/vzdump-qemu-9001-x.vma.zst", HASH)
            .for_kind(GuestKind::Qemu);
        let text = serde_json::to_string(&vm).unwrap();
        assert!(text.contains(r#""kind":"qemu""#), "{text}");
        let back = SignedGolden::new(text.as_bytes(), "sig").golden().unwrap();
        assert_eq!(back.kind, GuestKind::Qemu);
        let bad = text.replace(r#""qemu""#, r#""kvm""#);
        assert!(SignedGolden::new(bad.as_bytes(), "sig").golden().is_err());
    }

    #[test]
    fn a_signed_document_round_trips_and_bad_ones_name_their_field() {
        let doc = GoldenDocument::new("local:backup/vzdump-lxc-9000-x.tar.zst", HASH);
        let bytes = serde_json::to_vec(&doc).unwrap();
        let signed = SignedGolden::new(&bytes, "-----BEGIN SSH SIGNATURE-----");
        assert_eq!(signed.golden().unwrap(), doc);

        let mut bad = doc.clone();
        bad.sha256 = HASH.to_ascii_uppercase();
        let signed = SignedGolden::new(&serde_json::to_vec(&bad).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap_err().field(), "sha256");

        let signed = SignedGolden::new(br#"{"schema":"bosun.job/v1"}"#, "sig");
        assert_eq!(
            signed.golden().unwrap_err().field(),
            "golden.signed.document"
        );
        let huge = SignedGolden::new(&vec![b' '; MAX_GOLDEN_DOCUMENT + 1], "sig");
        assert!(huge.golden().is_err());
        let long_sig = SignedGolden::new(&bytes, &"x".repeat(crate::signed::MAX_SIGNATURE + 1));
        assert_eq!(
            long_sig.golden().unwrap_err().field(),
            "golden.signed.signature"
        );
    }

    #[test]
    fn an_unscoped_document_keeps_its_old_bytes_and_scoped_ones_round_trip() {
        let doc = GoldenDocument::new("local:backup/vzdump-lxc-9000-x.tar.zst", HASH);
        let text = String::from_utf8(serde_json::to_vec(&doc).unwrap()).unwrap();
        assert!(
            !text.contains("host_id") && !text.contains("expires_at"),
            "{text}"
        );
        let old = format!(
            r#"{{"schema":"bosun.golden/v1","volid":"local:backup/vzdump-lxc-9000-x.tar.zst","sha256":"{HASH}"}}"#
        );
        assert_eq!(
            text, old,
            "documents signed before the scope fields still verify"
        );

        let host = Uuid::from_u128(7);
        let until: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let scoped = doc.clone().for_host(host).expiring_at(until);
        let signed = SignedGolden::new(&serde_json::to_vec(&scoped).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap(), scoped);

        let nil = doc.for_host(Uuid::nil());
        let signed = SignedGolden::new(&serde_json::to_vec(&nil).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap_err().field(), "host_id");
    }

    #[test]
    fn a_serial_below_the_held_one_is_superseded_and_equal_or_higher_ones_are_not() {
        assert_eq!(check_serial(0, 0), Ok(()), "before any serial: as before");
        assert_eq!(check_serial(1, 0), Ok(()));
        assert_eq!(check_serial(2, 2), Ok(()), "two bases signed as one choice");
        assert_eq!(check_serial(3, 2), Ok(()), "a rollback is a higher serial");
        assert_eq!(check_serial(1, 2), Err(Superseded { serial: 1, held: 2 }));
        assert_eq!(
            check_serial(0, 1),
            Err(Superseded { serial: 0, held: 1 }),
            "a document from before serials, once one with a serial is held"
        );

        let doc = GoldenDocument::new("local:backup/x.tar.zst", HASH);
        assert_eq!(doc.serial(), 0);
        let text = String::from_utf8(serde_json::to_vec(&doc).unwrap()).unwrap();
        assert!(!text.contains("serial"), "{text}");
        let numbered = doc.clone().with_serial(7);
        assert_eq!(numbered.serial(), 7);
        let signed = SignedGolden::new(&serde_json::to_vec(&numbered).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap(), numbered);
        let huge = doc.with_serial(MAX_GOLDEN_SERIAL + 1);
        let signed = SignedGolden::new(&serde_json::to_vec(&huge).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap_err().field(), "serial");
    }

    #[test]
    fn the_scope_admits_its_host_before_the_expiry_only() {
        let host = Uuid::from_u128(7);
        let other = Uuid::from_u128(8);
        let until: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let before = until - jiff::SignedDuration::from_secs(1);
        let doc = GoldenDocument::new("local:backup/x.tar.zst", HASH);
        assert_eq!(
            doc.check_scope(other, until),
            Ok(()),
            "unscoped: any host, any time"
        );
        let bound = doc.clone().for_host(host);
        assert_eq!(bound.check_scope(host, before), Ok(()));
        assert_eq!(
            bound.check_scope(other, before),
            Err(GoldenScopeError::OtherHost {
                bound: host,
                host: other
            })
        );
        let ending = doc.expiring_at(until);
        assert_eq!(ending.check_scope(other, before), Ok(()));
        for late in [until, until + jiff::SignedDuration::from_hours(1)] {
            assert_eq!(
                ending.check_scope(host, late),
                Err(GoldenScopeError::Expired { expires_at: until })
            );
        }
    }
}
