//! The data plan's gate: every desired state the hub sends is held to the signed plan
//! ([`crate::data::plan`]) and only then published, so a storage target or tier the plan
//! does not name reaches no task, and each of the plan's targets and its tunnel carries the
//! operator-signed credential the [`CredentialKeeper`] holds for it, not whatever the hub
//! offered or left out. A refusal is audited once (`storage.refused`) while it holds.

use std::collections::HashSet;
use std::sync::Arc;

use bosun_errchain::error_chain;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::DesiredSnapshot;
use crate::data::plan::{CredentialKeeper, Effective, PlanKeeper, Refusal, apply};
use crate::ops::journal::{AuditEvent, JournalHandle};

/// Holds every desired state from `raw` to the signed plan and publishes what the agent acts
/// on; the first snapshot is published before this returns, so no task ever sees the hub's
/// document unheld.
pub async fn spawn_gate(
    tasks: &crate::runtime::supervisor::Supervisor,
    mut raw: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    keeper: Arc<PlanKeeper>,
    credentials: CredentialKeeper,
    journal: JournalHandle,
    cancel: CancellationToken,
) -> watch::Receiver<Option<Arc<DesiredSnapshot>>> {
    let mut gate = Gate {
        keeper,
        credentials,
        journal,
        audited: HashSet::new(),
    };
    let first = raw.borrow_and_update().clone();
    let held = gate.hold(first.as_deref()).await;
    let (tx, rx) = watch::channel(held);
    tasks.spawn("data_plan_gate", async move {
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                changed = raw.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
            let snapshot = raw.borrow_and_update().clone();
            let held = gate.hold(snapshot.as_deref()).await;
            tx.send_replace(held);
        }
    });
    rx
}

/// The gate's state: the plan, the held credentials and the refusals already audited.
#[derive(Debug)]
struct Gate {
    keeper: Arc<PlanKeeper>,
    credentials: CredentialKeeper,
    journal: JournalHandle,
    audited: HashSet<Refusal>,
}

impl Gate {
    async fn hold(&mut self, raw: Option<&DesiredSnapshot>) -> Option<Arc<DesiredSnapshot>> {
        let raw = raw?;
        if let Some(signed) = &raw.state.data_plan {
            // Refusals are audited by the keeper; the stored plan stays either way.
            self.keeper.offer(signed).await;
        }
        let plan = match self.keeper.current().await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "the data plan is unreadable; no storage target is used");
                None
            }
        };
        let Effective {
            mut state,
            mut refused,
        } = apply(&raw.state, plan.as_ref().map(|p| &p.plan));
        let held = self
            .credentials
            .hold(&mut state, plan.as_ref().map(|p| &p.plan))
            .await;
        refused.extend(held);
        self.audit(&refused).await;
        Some(Arc::new(DesiredSnapshot {
            generation: raw.generation,
            state,
            request_id: raw.request_id.clone(),
            correlation_id: raw.correlation_id.clone(),
            plan,
            refused,
            unknown_kinds: raw.unknown_kinds.clone(),
        }))
    }

    /// Audits each refusal not audited while it held; forgets the ones that no longer hold,
    /// so one that comes back is audited again.
    async fn audit(&mut self, refused: &[Refusal]) {
        let now: HashSet<Refusal> = refused.iter().cloned().collect();
        for refusal in refused {
            if self.audited.contains(refusal) {
                continue;
            }
            tracing::warn!(durable_id = %refusal.durable_id, reason = refusal.reason.as_str(), fields = ?refusal.fields, tier = refusal.tier, "storage target refused: the signed data plan does not allow it");
            let event = AuditEvent {
                detail: serde_json::json!({
                    "durable_id": refusal.durable_id,
                    "type": refusal.kind,
                    "reason": refusal.reason.as_str(),
                    "fields": (!refusal.fields.is_empty()).then(|| refusal.fields.join(", ")),
                    "tier": refusal.tier,
                }),
                ..AuditEvent::new("storage.refused")
            };
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::error!(error = %error_chain(&e), "could not audit a refused storage target");
            }
        }
        self.audited = now;
    }
}
