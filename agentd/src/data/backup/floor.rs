//! Admits operator-signed retention floors (`bosun.retention-floor/v1`, namespace
//! `bosun-policy@v1`) from desired state: a floor is stored only when it parses, names this
//! host, verifies against `allowed_signers` and was issued after the stored one. Anything
//! else is refused and audited once per document; the stored floor stays.

use std::path::PathBuf;

use bosun_proto::retention::{FLOOR_SCHEMA, MAX_FLOOR_DOCUMENT, POLICY_NAMESPACE, RetentionFloor};
use bosun_proto::signed::SignedDocument;
use uuid::Uuid;

use crate::clock::SharedClock;
use crate::ops::journal::{AuditEvent, JournalError, JournalHandle, StoredFloor};
use crate::trust::signing::{AllowedSigners, RefusedDocuments, verify_signature};

/// What became of an offered floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloorOffer {
    /// Verified and stored: it is the floor now.
    Accepted(RetentionFloor),
    /// The stored floor, or one issued before it: nothing changes.
    NotNewer,
    /// Refused; the stored floor stays.
    Refused(String),
}

/// Keeps the host's signed retention floor.
#[derive(Debug)]
pub struct FloorKeeper {
    journal: JournalHandle,
    signers_path: PathBuf,
    host_id: Uuid,
    clock: SharedClock,
    refused: RefusedDocuments,
}

impl FloorKeeper {
    /// A keeper for `host_id`, verifying against the `allowed_signers` file at `signers_path`.
    pub fn new(
        journal: JournalHandle,
        signers_path: PathBuf,
        host_id: Uuid,
        clock: SharedClock,
    ) -> Self {
        Self {
            journal,
            signers_path,
            host_id,
            clock,
            refused: RefusedDocuments::default(),
        }
    }

    /// The host floors must name.
    pub fn host_id(&self) -> Uuid {
        self.host_id
    }

    /// The stored floor. A stored floor that no longer decodes (it was verified when
    /// stored) counts as none: nothing is pruned then.
    pub async fn current(&self) -> Result<Option<RetentionFloor>, JournalError> {
        let Some(stored) = self.journal.floor().await? else {
            return Ok(None);
        };
        match serde_json::from_slice::<RetentionFloor>(&stored.document) {
            Ok(floor) => Ok(Some(floor)),
            Err(e) => {
                tracing::error!(error = %e, "the stored retention floor does not decode; pruning nothing");
                Ok(None)
            }
        }
    }

    /// Offers `signed` from desired state.
    pub async fn offer(&self, signed: &SignedDocument) -> FloorOffer {
        let digest = RefusedDocuments::digest(signed);
        if self.refused.contains(&digest) {
            return FloorOffer::Refused("refused before".into());
        }
        match self.admit(signed).await {
            Ok(Some(floor)) => {
                let event = AuditEvent {
                    detail: serde_json::json!({
                        "issued_at": floor.issued_at.to_string(),
                        "tiers": floor.tiers.len(),
                    }),
                    ..AuditEvent::new("retention.floor_accepted")
                };
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::error!(error = %e, "could not audit an accepted retention floor");
                }
                tracing::info!(issued_at = %floor.issued_at, "signed retention floor accepted");
                FloorOffer::Accepted(floor)
            }
            Ok(None) => FloorOffer::NotNewer,
            Err(reason) => {
                self.refused.remember(digest);
                tracing::warn!(reason = %reason, "signed retention floor refused; the stored floor stays");
                let event = AuditEvent {
                    detail: serde_json::json!({ "reason": reason }),
                    ..AuditEvent::new("retention.floor_refused")
                };
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::error!(error = %e, "could not audit a refused retention floor");
                }
                FloorOffer::Refused(reason)
            }
        }
    }

    /// Checks and stores; `Ok(None)` when it is not newer than the stored floor.
    async fn admit(&self, signed: &SignedDocument) -> Result<Option<RetentionFloor>, String> {
        let floor: RetentionFloor = signed
            .decode("backup_policy.floor", FLOOR_SCHEMA, MAX_FLOOR_DOCUMENT)
            .map_err(|e| e.to_string())?;
        floor.validate().map_err(|e| e.to_string())?;
        if floor.host_id != self.host_id {
            return Err(format!(
                "the floor is for host {}, not this one",
                floor.host_id
            ));
        }
        let stored = self.journal.floor().await.map_err(|e| e.to_string())?;
        if stored
            .as_ref()
            .is_some_and(|s| s.issued_at >= floor.issued_at)
        {
            return Ok(None);
        }
        let bytes = signed
            .bytes_within("backup_policy.floor", MAX_FLOOR_DOCUMENT)
            .map_err(|e| e.to_string())?;
        let signers = AllowedSigners::load(&self.signers_path).map_err(|e| e.to_string())?;
        let signer = verify_signature(
            &signers,
            POLICY_NAMESPACE,
            &bytes,
            &signed.signature,
            self.clock.now(),
        )
        .map_err(|e| e.to_string())?;
        let stored = self
            .journal
            .store_floor(StoredFloor {
                document: bytes,
                signature: signed.signature.clone(),
                issued_at: floor.issued_at,
                signer: signer.fingerprint().to_owned(),
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(stored.then_some(floor))
    }
}
