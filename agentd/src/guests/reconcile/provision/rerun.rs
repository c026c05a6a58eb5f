//! The steps after a guest's restore run again in place when one failed in a way that may
//! clear up by itself ([`StepError::may_clear_up`]: not sent, answer lost, busy, a handler's
//! 5xx that is not "missing"). Every step after the restore is idempotent — replay runs them
//! again after a kill — so a hiccup answering one config write costs a pause, not the restore
//! of the whole archive again. The steps that build the guest roll back at once: nothing of
//! it is known to stand.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{Pve, Vmid};

use super::{Bringup, Provisioner};
use crate::ops::operation::{OpJournal, StepError};

/// How many more times the steps run, in place, after a failure that may clear up.
const STEPS_AGAIN: u32 = 2;

/// The pause before the steps run again, times the attempt.
const STEPS_AGAIN_PAUSE: Duration = Duration::from_secs(1);

/// The steps that build the guest: a failure there rolls back at once.
const BUILDING_STEPS: [&str; 3] = ["assign_address", "next_id", "restore"];

/// Whether the steps run again after `failure`: the guest was built (`created`), the failure
/// was not in a step that builds it, and it may clear up by itself.
fn runs_again(failure: &StepError, created: Option<Vmid>) -> bool {
    created.is_some() && !BUILDING_STEPS.contains(&failure.step()) && failure.may_clear_up()
}

impl<P: Pve + 'static> Provisioner<P> {
    /// Runs the provisioning steps, and again in place at most [`STEPS_AGAIN`] more times
    /// while a failure after the guest was built may clear up. `created` holds the guest once
    /// it is built, for the caller's rollback.
    pub(super) async fn steps_in_place(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
        bringup: &Bringup,
    ) -> Result<Vmid, StepError> {
        let mut again = 0;
        loop {
            let outcome = self.steps(op, spec, created, bringup).await;
            match &outcome {
                Err(failure) if again < STEPS_AGAIN && runs_again(failure, *created) => {
                    again += 1;
                    let pause = STEPS_AGAIN_PAUSE * again;
                    tracing::warn!(
                        guest_id = %spec.guest_id,
                        op_id = %op.op_id(),
                        attempt = again,
                        pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                        error = %error_chain(failure),
                        "a provisioning step failed after the guest was built; running the steps again"
                    );
                    tokio::time::sleep(pause).await;
                }
                _ => return outcome,
            }
        }
    }
}
