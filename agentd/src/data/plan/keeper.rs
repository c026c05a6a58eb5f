//! Admits operator-signed data plans (`bosun.data-plan/v1`, namespace `bosun-policy@v1`) from
//! desired state: a plan is stored only when it parses, names this host, has a serial above
//! the stored one's and verifies against `allowed_signers`. Anything else is refused and
//! audited once per document (`data_plan.refused`); the stored plan stays. The same serial
//! offered again with other bytes is refused too: an operator raises the serial with every
//! change, so two documents under one serial are a forgery or a mistake.

use std::path::PathBuf;
use std::sync::Arc;

use bosun_proto::data_plan::{DataPlan, MAX_PLAN_DOCUMENT, PLAN_NAMESPACE};
use bosun_proto::signed::SignedDocument;
use uuid::Uuid;

use crate::clock::SharedClock;
use crate::ops::journal::{AuditEvent, JournalError, JournalHandle, StoredPlan};
use crate::trust::signing::{
    AllowedSigners, AllowedSignersError, RefusedDocuments, SignatureError, verify_signature,
};

/// Why a signed data plan is refused; its text is the `data_plan.refused` reason.
#[derive(Debug, thiserror::Error)]
enum PlanRefusal {
    /// The document is not a valid data plan, or too large.
    #[error(transparent)]
    Invalid(#[from] bosun_proto::validate::ValidationError),
    /// The plan names another host.
    #[error("the plan is for host {host_id}, not this one")]
    OtherHost {
        /// The host it names.
        host_id: Uuid,
    },
    /// The journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The serial is not above the plan in force.
    #[error(
        "serial {serial} is not above the plan in force (serial {in_force}): a replayed or re-used serial"
    )]
    SerialReused {
        /// The offered serial.
        serial: u64,
        /// The serial in force.
        in_force: u64,
    },
    /// The operator's keys could not be read.
    #[error(transparent)]
    Signers(#[from] AllowedSignersError),
    /// The signature does not verify.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// Another offer stored a higher serial meanwhile.
    #[error("serial {serial} is not above the plan in force")]
    Overtaken {
        /// The offered serial.
        serial: u64,
    },
}

/// The plan in force, as verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPlan {
    /// The document.
    pub plan: DataPlan,
    /// The signer's key fingerprint.
    pub signer: String,
}

/// What became of an offered plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanOffer {
    /// Verified and stored: it is the plan now.
    Accepted(Arc<VerifiedPlan>),
    /// The stored plan itself: nothing changes.
    Current,
    /// Refused; the stored plan stays.
    Refused(String),
}

/// Keeps the host's signed data plan.
#[derive(Debug)]
pub struct PlanKeeper {
    journal: JournalHandle,
    signers_path: PathBuf,
    host_id: Uuid,
    clock: SharedClock,
    refused: RefusedDocuments,
}

impl PlanKeeper {
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

    /// The stored plan, if any. A stored plan that no longer decodes or names another host
    /// (the journal came from a host this box replaced) counts as none: no target is used
    /// until the operator signs one for this host.
    pub async fn current(&self) -> Result<Option<Arc<VerifiedPlan>>, JournalError> {
        let Some(stored) = self.journal.plan().await? else {
            return Ok(None);
        };
        match serde_json::from_slice::<DataPlan>(&stored.document) {
            Ok(plan) if plan.host_id == self.host_id => Ok(Some(Arc::new(VerifiedPlan {
                plan,
                signer: stored.signer,
            }))),
            Ok(plan) => {
                tracing::warn!(host_id = %plan.host_id, "the stored data plan names another host; no storage target is used until one for this host is signed");
                Ok(None)
            }
            Err(e) => {
                tracing::error!(error = %e, "the stored data plan does not decode; no storage target is used");
                Ok(None)
            }
        }
    }

    /// Offers `signed` from desired state.
    pub async fn offer(&self, signed: &SignedDocument) -> PlanOffer {
        let digest = RefusedDocuments::digest(signed);
        if self.refused.contains(&digest) {
            return PlanOffer::Refused("refused before".into());
        }
        match self.admit(signed).await {
            Ok(Admitted::Stored(verified)) => {
                let plan = &verified.plan;
                let event = AuditEvent {
                    detail: serde_json::json!({
                        "serial": plan.serial,
                        "issued_at": plan.issued_at.to_string(),
                        "signer": verified.signer,
                        "targets": plan.targets.len(),
                        "tiers": 1 + plan.backup.further_tiers.len(),
                    }),
                    ..AuditEvent::new("data_plan.accepted")
                };
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::error!(error = %e, "could not audit an accepted data plan");
                }
                tracing::info!(serial = plan.serial, signer = %verified.signer, targets = plan.targets.len(), "signed data plan accepted");
                PlanOffer::Accepted(verified)
            }
            Ok(Admitted::Current) => PlanOffer::Current,
            Err(refusal) => {
                let reason = refusal.to_string();
                self.refused.remember(digest);
                tracing::warn!(reason = %reason, "signed data plan refused; the stored plan stays");
                let event = AuditEvent {
                    detail: serde_json::json!({ "reason": reason }),
                    ..AuditEvent::new("data_plan.refused")
                };
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::error!(error = %e, "could not audit a refused data plan");
                }
                PlanOffer::Refused(reason)
            }
        }
    }

    /// Checks and stores.
    async fn admit(&self, signed: &SignedDocument) -> Result<Admitted, PlanRefusal> {
        let plan = signed.data_plan()?;
        if plan.host_id != self.host_id {
            return Err(PlanRefusal::OtherHost {
                host_id: plan.host_id,
            });
        }
        let bytes = signed.bytes_within("data_plan", MAX_PLAN_DOCUMENT)?;
        let stored = self.journal.plan().await?;
        if let Some(stored) = &stored {
            if stored.serial == plan.serial && stored.document == bytes {
                return Ok(Admitted::Current);
            }
            if plan.serial <= stored.serial {
                return Err(PlanRefusal::SerialReused {
                    serial: plan.serial,
                    in_force: stored.serial,
                });
            }
        }
        let signers = AllowedSigners::load(&self.signers_path)?;
        let signer = verify_signature(
            &signers,
            PLAN_NAMESPACE,
            &bytes,
            &signed.signature,
            self.clock.now(),
        )?;
        let signer = signer.fingerprint().to_owned();
        let stored = self
            .journal
            .store_plan(StoredPlan {
                document: bytes,
                signature: signed.signature.clone(),
                serial: plan.serial,
                signer: signer.clone(),
            })
            .await?;
        if !stored {
            // Another offer stored a higher serial meanwhile.
            return Err(PlanRefusal::Overtaken {
                serial: plan.serial,
            });
        }
        Ok(Admitted::Stored(Arc::new(VerifiedPlan { plan, signer })))
    }
}

enum Admitted {
    Stored(Arc<VerifiedPlan>),
    Current,
}
