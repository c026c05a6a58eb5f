//! The plan's credentials: which sealed credential each of the plan's targets, and its
//! tunnel, uses (DESIGN §5, "Sealing is not signing" and "Withholding is not revoking";
//! decision 0095).
//!
//! ```text
//!  hub's offer for a plan subject (a target of the plan, the plan's tunnel)
//!    ─► the ciphertext held already?                      ─► nothing to do
//!    ─► opens, operator-signed, for this host and subject? ─► no: refused, audited once
//!    ─► issued after the held one (or none held)?         ─► held in the journal, audited
//!       the held one's own document sealed again?          ─► nothing to do
//!       older, or another document issued at the same time ─► refused, audited once
//!  what every task reads: the held credential, whatever the hub offered or left out
//! ```
//!
//! The hub may forward a credential but never make one take effect: only an operator's
//! signature does. Nor can it take one away: a desired state without the credential, or
//! without the target, leaves the held one in use for backups, verification, restore tests
//! and DR. A held credential goes only when the plan in force stops naming its subject, or a
//! later one replaces it.
//!
//! Where a refusal shows:
//!
//! - a target's offer refused while a credential is held: the held one is used, and the
//!   refusal joins the plan gate's (audited once as `storage.refused`, reported as a refused
//!   entry beside the working target);
//! - a target's offer refused while nothing is held, and a tunnel offer that does not open:
//!   passed on as it came. Every task opens through [`CredentialOpener`], which refuses it the
//!   same way where it is used: the storage watcher reports the target refused
//!   (`credentials_refused` or `credentials_unsigned`), the tunnel task leaves the credentials
//!   file in place and reports why. No task can use what does not open;
//! - a tunnel offer that opens but is older than the held one (the operator's previous
//!   credentials, replayed): the held one is passed on, and the refusal audited here
//!   (`tunnel.credentials_refused`), since the tunnel task would take it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::data_plan::{DataPlan, TargetIdentity};
use bosun_proto::desired::{DesiredState, StorageType};
use bosun_proto::report::TargetReason;
use bosun_proto::secret::SealedSecret;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::Refusal;
use crate::ops::journal::{AuditEvent, HeldCredential, JournalError, JournalHandle};
use crate::trust::keys::credentials::{CredentialError, CredentialOpener, OpenedCredential};

/// The audit event of refused tunnel credentials: the tunnel task's for what does not open,
/// this keeper's for an older one it never passes on.
pub const TUNNEL_CREDENTIALS_REFUSED: &str = "tunnel.credentials_refused";

/// What a credential is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    /// One of the plan's storage targets.
    Target { identity: TargetIdentity },
    /// The plan's tunnel.
    Tunnel { tunnel_id: Uuid },
}

impl Subject {
    /// The journal's key: the target identity's digest, or the tunnel's id.
    fn key(&self) -> String {
        match self {
            Self::Target { identity } => {
                format!(
                    "target:{}",
                    hex::encode(Sha256::digest(identity.canonical_bytes()))
                )
            }
            Self::Tunnel { tunnel_id } => format!("tunnel:{tunnel_id}"),
        }
    }

    /// How a refusal names it: the target's `durable_id`, or `tunnel UUID`.
    fn label(&self) -> String {
        match self {
            Self::Target { identity } => identity.durable_id.clone(),
            Self::Tunnel { tunnel_id } => format!("tunnel {tunnel_id}"),
        }
    }

    fn kind(&self) -> Option<StorageType> {
        match self {
            Self::Target { identity } => Some(identity.kind),
            Self::Tunnel { .. } => None,
        }
    }
}

/// Why an offered credential is not the one used.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused {
    reason: TargetReason,
    fields: Vec<&'static str>,
    /// It opened (operator-signed, for this subject) but is older than the held one.
    older: bool,
}

/// Keeps, for each subject of the plan in force, the newest operator-signed credential.
#[derive(Debug)]
pub struct CredentialKeeper {
    opener: Arc<CredentialOpener>,
    journal: JournalHandle,
    host_id: Uuid,
    /// The offers refused in the last pass, by digest of subject and ciphertext: audited once
    /// while the hub keeps offering them, bounded by the plan's subjects.
    refused: HashMap<[u8; 32], Refused>,
}

impl CredentialKeeper {
    /// A keeper for `host_id`, opening with `opener` and holding in `journal`.
    pub fn new(opener: Arc<CredentialOpener>, journal: JournalHandle, host_id: Uuid) -> Self {
        Self {
            opener,
            journal,
            host_id,
            refused: HashMap::new(),
        }
    }

    /// Sets the credentials of `state` (the hub's document held to `plan`, the hub's offers
    /// merged in) to the held ones, taking an offer only as the module says; gives the
    /// refused offers that left a held credential in use, for the report.
    pub async fn hold(
        &mut self,
        state: &mut DesiredState,
        plan: Option<&DataPlan>,
    ) -> Vec<Refusal> {
        let Some(plan) = plan else {
            // No plan, no target; the tunnel is the plan's too.
            state.tunnel_credentials = None;
            return Vec::new();
        };
        let mut held = match self.held().await {
            Ok(held) => held,
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "the held credentials are unreadable; the hub's offers pass unheld and are checked where they are used");
                return Vec::new();
            }
        };
        let tunnel = plan.tunnel.as_ref().map(|t| Subject::Tunnel {
            tunnel_id: t.tunnel_id,
        });
        let subjects: Vec<Subject> = state
            .storage
            .iter()
            .map(|t| Subject::Target {
                identity: t.identity(),
            })
            .chain(tunnel.clone())
            .collect();
        self.release_others(&subjects, &mut held).await;

        let mut refusals = Vec::new();
        let mut refused_now = HashMap::new();
        for target in &mut state.storage {
            let subject = Subject::Target {
                identity: target.identity(),
            };
            let offer = target.credentials.take();
            target.credentials = self
                .settle(&subject, offer, &mut held, &mut refused_now, &mut refusals)
                .await;
        }
        let offer = state.tunnel_credentials.take();
        state.tunnel_credentials = match &tunnel {
            Some(subject) => {
                self.settle(subject, offer, &mut held, &mut refused_now, &mut refusals)
                    .await
            }
            None => None,
        };
        self.refused = refused_now;
        refusals
    }

    /// The credential `subject` uses, given the hub's `offer`.
    async fn settle(
        &self,
        subject: &Subject,
        offer: Option<SealedSecret>,
        held: &mut HashMap<String, HeldCredential>,
        refused_now: &mut HashMap<[u8; 32], Refused>,
        refusals: &mut Vec<Refusal>,
    ) -> Option<SealedSecret> {
        let key = subject.key();
        let in_use = |held: &HashMap<String, HeldCredential>| {
            held.get(&key)
                .and_then(|h| SealedSecret::try_from(h.sealed.clone()).ok())
        };
        let Some(offer) = offer else {
            return in_use(held);
        };
        if held.get(&key).is_some_and(|h| h.sealed == offer.armored()) {
            return in_use(held);
        }
        let digest = offer_digest(&key, &offer);
        let refused = match self.refused.get(&digest) {
            Some(refused) => Some(refused.clone()),
            None => self.consider(subject, &offer, held).await,
        };
        let Some(refused) = refused else {
            return in_use(held);
        };
        let first = refused_now.insert(digest, refused.clone()).is_none()
            && !self.refused.contains_key(&digest);
        match subject {
            Subject::Target { .. } if held.contains_key(&key) => {
                refusals.push(Refusal {
                    durable_id: subject.label(),
                    kind: subject.kind(),
                    reason: refused.reason,
                    fields: refused.fields,
                    tier: false,
                });
                in_use(held)
            }
            Subject::Tunnel { tunnel_id } if refused.older => {
                if first {
                    self.audit_older_tunnel(*tunnel_id).await;
                }
                in_use(held)
            }
            // Refused where it is opened, the same way.
            Subject::Target { .. } | Subject::Tunnel { .. } => Some(offer),
        }
    }

    /// Opens a new offer and holds it when it is newer; gives why not otherwise.
    async fn consider(
        &self,
        subject: &Subject,
        offer: &SealedSecret,
        held: &mut HashMap<String, HeldCredential>,
    ) -> Option<Refused> {
        let key = subject.key();
        let opened = match self.open(subject, offer) {
            Ok(opened) => opened,
            Err(e) => {
                let reason = if e.wants_reseal() {
                    TargetReason::CredentialsUnsigned
                } else {
                    TargetReason::CredentialsRefused
                };
                tracing::warn!(subject = %subject.label(), reason = reason.as_str(), error = %error_chain(&e), "sealed credential refused");
                return Some(Refused {
                    reason,
                    fields: e.differing_fields(),
                    older: false,
                });
            }
        };
        if let Some(current) = held.get(&key) {
            if current.digest == opened.digest {
                // The held document, sealed again: nothing changes.
                return None;
            }
            if opened.issued_at <= current.issued_at {
                tracing::warn!(subject = %subject.label(), issued_at = %opened.issued_at, in_use = %current.issued_at, "signed credential refused: not issued after the one in use");
                return Some(Refused {
                    reason: TargetReason::CredentialsRefused,
                    fields: vec!["issued_at"],
                    older: true,
                });
            }
        }
        let record = HeldCredential {
            subject: key.clone(),
            sealed: offer.armored().to_owned(),
            issued_at: opened.issued_at,
            digest: opened.digest,
            signer: opened.signer.clone(),
        };
        match self.journal.hold_credential(record.clone()).await {
            Ok(true) => {
                self.audit_accepted(subject, &opened).await;
                held.insert(key, record);
                None
            }
            Ok(false) => Some(Refused {
                reason: TargetReason::CredentialsRefused,
                fields: vec!["issued_at"],
                older: true,
            }),
            Err(e) => {
                tracing::error!(subject = %subject.label(), error = %error_chain(&e), "could not hold a signed credential; the one in use stays");
                Some(Refused {
                    reason: TargetReason::Failed,
                    fields: Vec::new(),
                    older: true,
                })
            }
        }
    }

    fn open(
        &self,
        subject: &Subject,
        offer: &SealedSecret,
    ) -> Result<OpenedCredential, CredentialError> {
        match subject {
            Subject::Target { identity } => {
                self.opener.open_credential(offer, self.host_id, identity)
            }
            Subject::Tunnel { tunnel_id } => {
                self.opener
                    .open_tunnel_credential(offer, self.host_id, *tunnel_id)
            }
        }
    }

    /// The held credentials by subject key.
    async fn held(&self) -> Result<HashMap<String, HeldCredential>, JournalError> {
        Ok(self
            .journal
            .held_credentials()
            .await?
            .into_iter()
            .map(|h| (h.subject.clone(), h))
            .collect())
    }

    /// Releases what is held for subjects the plan in force no longer names.
    async fn release_others(
        &self,
        subjects: &[Subject],
        held: &mut HashMap<String, HeldCredential>,
    ) {
        let named: HashSet<String> = subjects.iter().map(Subject::key).collect();
        let gone: Vec<String> = held
            .keys()
            .filter(|k| !named.contains(*k))
            .cloned()
            .collect();
        if gone.is_empty() {
            return;
        }
        match self.journal.release_credentials(gone.clone()).await {
            Ok(_) => {
                for key in &gone {
                    held.remove(key);
                }
                tracing::info!(
                    released = gone.len(),
                    "credentials released: the signed plan no longer names their targets"
                );
                let event = AuditEvent {
                    detail: serde_json::json!({ "subjects": gone }),
                    ..AuditEvent::new("credential.released")
                };
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::error!(error = %error_chain(&e), "could not audit released credentials");
                }
            }
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "could not release credentials the plan no longer names");
            }
        }
    }

    async fn audit_accepted(&self, subject: &Subject, opened: &OpenedCredential) {
        tracing::info!(subject = %subject.label(), issued_at = %opened.issued_at, signer = %opened.signer, "signed credential accepted");
        let event = AuditEvent {
            detail: serde_json::json!({
                "subject": subject.label(),
                "type": subject.kind(),
                "issued_at": opened.issued_at.to_string(),
                "signer": opened.signer,
            }),
            ..AuditEvent::new("credential.accepted")
        };
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit an accepted credential");
        }
    }

    /// Audits an older tunnel credential the held one stood in for (the tunnel task never
    /// sees it).
    async fn audit_older_tunnel(&self, tunnel_id: Uuid) {
        let event = AuditEvent {
            detail: serde_json::json!({
                "tunnel_id": tunnel_id,
                "reason": "not issued after the credentials in use",
                "fields": "issued_at",
            }),
            ..AuditEvent::new(TUNNEL_CREDENTIALS_REFUSED)
        };
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit refused tunnel credentials");
        }
    }
}

/// Identifies one offer for one subject.
fn offer_digest(key: &str, offer: &SealedSecret) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(key.as_bytes());
    hash.update([0]);
    hash.update(offer.armored().as_bytes());
    hash.finalize().into()
}
