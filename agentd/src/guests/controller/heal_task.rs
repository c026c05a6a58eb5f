//! [`HealTask`]: heals a crashed controller in place (DESIGN §5: restart it inside its existing
//! guest, never destroy or recreate the guest).
//!
//! A controller that runs a committed (or rolled-back-to) digest, or the signed digest its
//! golden base was provisioned with, reports health every `report_interval`. One silent for
//! `heal_after` — since its last healthy report, the task's start, when the task first saw its
//! record (a guest provisioned meanwhile) or the last restart, whichever is latest — is restarted through the helper's closed
//! verb `restart_controller` (`pct exec <vmid> -- systemctl restart bosun-bootstrap.service`;
//! Proxmox's API cannot run a command in a container). After `max_restarts` restarts without a
//! healthy report in between it is `broken`: audited (the hub alerts), and left alone until it
//! reports healthy again (`recovered`) or a new rollout is signed. A rollout whose new
//! controller stayed silent through its window ends `broken` too (after one in-place restart
//! of its own, `restart_in_place`); only a healthy report after that recovers it. A guest
//! that is not running
//! (stopped by desired state, or by its customer) has a silent controller for a reason: it is
//! left alone, and its silence counts from when it runs again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::helper::{Output, Request, RestartController, Vmid as HelperVmid};
use bosun_pve::{GuestStatus, Pve, Vmid};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::board::{Announced, ControllerBoard};
use super::{BROKEN_ACTION, ControllerSettings, RECOVERED_ACTION, RESTARTED_ACTION};
use crate::links::helper::HelperClient;
use crate::ops::journal::{AuditEvent, ControllerRecord, ControllerState, JournalHandle};
use crate::trust::gate::{self, Action, Authority, GateRequest, Provenance, Target};

/// What the heal task does about one controller on one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealAction {
    /// Nothing.
    Nothing,
    /// Restart it in place.
    Restart,
    /// Give up: `broken`.
    Break,
    /// It reported healthy since its last restart: clear the count (`running`).
    Settle,
    /// A broken one reported healthy again: `running`.
    Recover,
}

/// The decision for one controller: `state` and `restarts` from the journal; `healthy_since_act`
/// whether a healthy report arrived after the last thing the task did about it; `silent_for`
/// since the latest of its last healthy report, the task's start and the last restart.
pub fn judge(
    state: ControllerState,
    restarts: u32,
    healthy_since_act: bool,
    silent_for: Duration,
    settings: &ControllerSettings,
) -> HealAction {
    match state {
        // A rollout in flight judges its own controller.
        ControllerState::RollingOut => HealAction::Nothing,
        ControllerState::Broken if healthy_since_act => HealAction::Recover,
        ControllerState::Broken => HealAction::Nothing,
        ControllerState::Running | ControllerState::RolledBack => {
            if healthy_since_act && restarts > 0 {
                HealAction::Settle
            } else if silent_for < settings.heal_after {
                HealAction::Nothing
            } else if restarts >= settings.max_restarts {
                HealAction::Break
            } else {
                HealAction::Restart
            }
        }
    }
}

/// The task.
#[derive(Debug)]
pub struct HealTask<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    board: ControllerBoard,
    helper: Option<HelperClient>,
    settings: ControllerSettings,
    /// When the task last acted on each guest (restart, break, recover).
    acted: HashMap<String, Instant>,
    /// When the task first saw each guest's record: a guest provisioned while the agent runs
    /// has its silence counted from then, not from the task's start.
    seen: HashMap<String, Instant>,
    started: Instant,
}

impl<P: Pve> HealTask<P> {
    /// A task healing through `helper` (without one, every restart fails and counts).
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        board: ControllerBoard,
        helper: Option<HelperClient>,
        settings: ControllerSettings,
    ) -> Self {
        Self {
            pve,
            journal,
            board,
            helper,
            settings,
            acted: HashMap::new(),
            seen: HashMap::new(),
            started: Instant::now(),
        }
    }

    /// How often the controllers are looked at.
    fn period(&self) -> Duration {
        (self.settings.heal_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(15))
    }

    /// Looks at every controller each period until `stop`, from when the board first names
    /// one (a host without controllers has nothing to look at).
    pub async fn run(mut self, stop: CancellationToken) {
        let mut named = self.board.names_controllers();
        tokio::select! {
            () = stop.cancelled() => return,
            // The board that sends it lives as long as the task.
            _ = named.wait_for(|named| *named) => {}
        }
        let mut tick = tokio::time::interval(self.period());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => self.pass().await,
            }
        }
    }

    /// One look at every controller.
    pub async fn pass(&mut self) {
        let records = match self.journal.controllers().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read the controllers; healing waits");
                return;
            }
        };
        let now = Instant::now();
        self.seen
            .retain(|guest, _| records.iter().any(|r| &r.guest_id == guest));
        for record in records {
            let acted = self.acted.get(&record.guest_id).copied();
            let seen = *self.seen.entry(record.guest_id.clone()).or_insert(now);
            let healthy = self.board.last_healthy(&record.guest_id);
            let since_act = acted.unwrap_or(self.started);
            let healthy_since_act = healthy.is_some_and(|h| h > since_act);
            let last = [Some(self.started), Some(seen), acted, healthy]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(now);
            let action = judge(
                record.state,
                record.restarts,
                healthy_since_act,
                now.saturating_duration_since(last),
                &self.settings,
            );
            if matches!(action, HealAction::Restart | HealAction::Break)
                && !self.runs(record.vmid).await
            {
                // Not running: silent for a reason; counted again from when it runs.
                self.acted.insert(record.guest_id.clone(), now);
                continue;
            }
            match action {
                HealAction::Nothing => {}
                HealAction::Restart => self.restart(&record).await,
                HealAction::Break => self.set(&record, ControllerState::Broken).await,
                HealAction::Settle | HealAction::Recover => {
                    self.set(&record, ControllerState::Running).await;
                }
            }
        }
    }

    /// Whether the guest runs (an unreadable status counts as running: the restart says more).
    async fn runs(&self, vmid: u32) -> bool {
        let Ok(vmid) = Vmid::new(vmid) else {
            return false;
        };
        match self.pve.ct_status(vmid).await {
            Ok(status) => status.status == GuestStatus::Running,
            Err(e) => {
                tracing::warn!(%vmid, error = %error_chain(&e), "could not read the guest's status before healing its controller");
                true
            }
        }
    }

    async fn restart(&mut self, record: &ControllerRecord) {
        self.acted.insert(record.guest_id.clone(), Instant::now());
        let attempt = match self
            .journal
            .controller_restarted(record.guest_id.clone())
            .await
        {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(guest_id = %record.guest_id, error = %error_chain(&e), "could not count a controller restart; not restarting");
                return;
            }
        };
        let (helper, board) = (self.helper.as_ref(), &self.board);
        let guest = (record.guest_id.as_str(), record.vmid);
        let result = restart_in_place(&self.journal, (helper, board), guest).await;
        match &result {
            Ok(()) => {
                tracing::warn!(guest_id = %record.guest_id, vmid = record.vmid, attempt, "controller silent; restarted in place");
            }
            Err(e) => {
                tracing::warn!(guest_id = %record.guest_id, vmid = record.vmid, attempt, error = %e, "controller silent; the in-place restart failed");
            }
        }
        let mut event = AuditEvent::new(RESTARTED_ACTION);
        event.guest_id = Some(record.guest_id.clone());
        event.vmid = Some(record.vmid);
        event.detail = json!({
            "guest_id": record.guest_id,
            "vmid": record.vmid,
            "attempt": attempt,
            "max_restarts": self.settings.max_restarts,
            "ok": result.is_ok(),
            "error": result.err(),
        });
        let _ = self.journal.append_audit(event).await;
    }

    async fn set(&mut self, record: &ControllerRecord, state: ControllerState) {
        self.acted.insert(record.guest_id.clone(), Instant::now());
        if let Err(e) = self
            .journal
            .controller_set_state(record.guest_id.clone(), state)
            .await
        {
            tracing::error!(guest_id = %record.guest_id, error = %error_chain(&e), "could not record the controller's state");
            return;
        }
        self.board.announce(
            &record.guest_id,
            record.vmid,
            Announced {
                digest: record.digest.clone(),
                state,
                op_id: record.op_id,
            },
        );
        let action = match (record.state, state) {
            (_, ControllerState::Broken) => BROKEN_ACTION,
            (ControllerState::Broken, _) => RECOVERED_ACTION,
            // Healthy again after a restart: the count is cleared, nothing to tell the hub.
            _ => return,
        };
        if state == ControllerState::Broken {
            tracing::error!(guest_id = %record.guest_id, vmid = record.vmid, restarts = record.restarts, "controller broken: silent through every in-place restart");
        } else {
            tracing::info!(guest_id = %record.guest_id, vmid = record.vmid, "broken controller reports healthy again");
        }
        let mut event = AuditEvent::new(action);
        event.guest_id = Some(record.guest_id.clone());
        event.vmid = Some(record.vmid);
        event.detail = json!({
            "guest_id": record.guest_id,
            "vmid": record.vmid,
            "digest": record.digest,
            "restarts": record.restarts,
        });
        let _ = self.journal.append_audit(event).await;
    }
}

/// Restarts `vmid`'s controller inside its guest through the helper's `restart_controller`,
/// once the gate allows it (heal in place only); used by the task and by a rollout whose
/// controller stayed silent. A denial is audited; the caller audits the restart. What the
/// helper measured of the guest's controller image is kept on `board` for `guest_id`.
pub(super) async fn restart_in_place(
    journal: &JournalHandle,
    (helper, board): (Option<&HelperClient>, &ControllerBoard),
    (guest_id, vmid): (&str, u32),
) -> Result<(), String> {
    let request = GateRequest {
        action: Action::HealControllerInPlace,
        target: Target::Guest { vmid },
        authority: Authority::DesiredState,
        provenance: Provenance::unknown(),
    };
    let decision = gate::decide(&request);
    if !decision.is_allowed() {
        let _ = journal.append_audit(decision.audit_event(&request)).await;
        return Err(format!("gate denied: {}", decision.reason()));
    }
    let helper = helper.ok_or("no [helper] configured: cannot restart the controller")?;
    let vmid = HelperVmid::new(u64::from(vmid)).map_err(|e| e.to_string())?;
    let request = Request::RestartController(RestartController { vmid, image: None });
    let output = helper.call(&request).await.map_err(|e| error_chain(&e))?;
    if let Output::ControllerRestarted { measured, .. } = output {
        super::board::keep_measurement(journal, board, guest_id, measured).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_restarts_a_bounded_number_of_times_then_breaks() {
        use ControllerState::*;
        use HealAction::*;
        let s = ControllerSettings {
            heal_after: Duration::from_secs(10),
            max_restarts: 3,
            ..ControllerSettings::default()
        };
        let quiet = Duration::from_secs(11);
        let recent = Duration::from_secs(1);
        assert_eq!(judge(Running, 0, false, recent, &s), Nothing);
        assert_eq!(judge(Running, 0, false, quiet, &s), Restart);
        assert_eq!(judge(RolledBack, 2, false, quiet, &s), Restart);
        assert_eq!(judge(Running, 3, false, quiet, &s), Break);
        assert_eq!(judge(Running, 2, true, recent, &s), Settle);
        assert_eq!(judge(Running, 0, true, recent, &s), Nothing);
        assert_eq!(
            judge(Broken, 3, false, quiet, &s),
            Nothing,
            "broken stays put"
        );
        assert_eq!(judge(Broken, 3, true, recent, &s), Recover);
        assert_eq!(
            judge(RollingOut, 0, false, quiet, &s),
            Nothing,
            "the rollout judges"
        );
    }
}
