//! A new golden build's boot test (DESIGN §8): before guests are provisioned from a build,
//! its archive is restored into a scratch guest through the Proxmox API as a restore test
//! does — a vmid recorded scratch in the journal before Proxmox is asked, every link down,
//! `onboot=0`, a scratch hostname — started, seen running for `stay_up`, and destroyed as the
//! operation's own creation. The whole test is bounded by `timeout`; the only guest it
//! touches is the one it recorded. A test the agent was stopped in is cleaned up at the next
//! start by the restore tester's replay (`golden_verify` operations).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_pve::{ConfigUpdate, CtOptions, Op, Pve, RestoreRequest, StorageId, Vmid, VolumeId};
use serde_json::json;

use crate::guests::reconcile::compensate::compensate_with_retries;
use crate::guests::reconcile::replay::wait_unlocked;
use crate::ops::journal::{GoldenBuild, JournalHandle, NewOperation, OpStatus};
use crate::ops::operation::scratch::{links_down, other, restore, scratch_vmid, stay_up};
use crate::ops::operation::{OpJournal, OpKind, StepError, StepName};

/// Tries at a vmid no older operation's record holds.
const VMID_TRIES: u32 = 5;

/// Why a build did not pass its boot test.
#[derive(Debug, thiserror::Error)]
pub enum BootTestError {
    /// The journal could not begin the test.
    #[error("beginning the boot test of {volid}")]
    Begin {
        /// The build's archive.
        volid: String,
        /// Cause.
        #[source]
        source: crate::ops::journal::JournalError,
    },
    /// A step failed (the restore, the start, the guest stopping).
    #[error("the boot test of {volid} failed")]
    Step {
        /// The build's archive.
        volid: String,
        /// Cause.
        #[source]
        source: StepError,
    },
    /// The test ran past its bound.
    #[error("the boot test of {volid} took longer than {seconds} s")]
    TimedOut {
        /// The build's archive.
        volid: String,
        /// The bound.
        seconds: u64,
    },
    /// The scratch guest could not be destroyed; the next start's replay destroys it.
    #[error("the boot test's scratch guest could not be destroyed")]
    Cleanup(#[source] StepError),
}

/// A future the boot test gives.
pub type BootFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BootTestError>> + Send + 'a>>;

/// What verifies a build by booting it ([`BootTester`]; a trait so the builder need not
/// name the Proxmox client's type).
pub trait BootTest: Send + Sync + std::fmt::Debug {
    /// Boots `build` in a scratch guest and destroys it.
    fn boot<'a>(&'a self, build: &'a GoldenBuild) -> BootFuture<'a>;
}

/// Boots golden builds in scratch guests through `pve`.
pub struct BootTester<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    /// Where the scratch guest's volumes go.
    pub storage: StorageId,
    /// How long the scratch guest must stay running.
    pub stay_up: Duration,
    /// How often its status is read meanwhile.
    pub poll: Duration,
    /// The bound on the whole test.
    pub timeout: Duration,
}

impl<P: Pve> std::fmt::Debug for BootTester<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootTester")
            .field("storage", &self.storage)
            .field("stay_up", &self.stay_up)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<P: Pve> BootTester<P> {
    /// A tester restoring onto `storage`, 30 s up, 15 minutes at most.
    pub fn new(pve: Arc<P>, journal: JournalHandle, storage: StorageId) -> Self {
        Self {
            pve,
            journal,
            storage,
            stay_up: Duration::from_secs(30),
            poll: Duration::from_secs(2),
            timeout: Duration::from_secs(900),
        }
    }
}

impl<P: Pve + Send + Sync + 'static> BootTest for BootTester<P> {
    fn boot<'a>(&'a self, build: &'a GoldenBuild) -> BootFuture<'a> {
        Box::pin(self.run(build))
    }
}

impl<P: Pve + Send + Sync + 'static> BootTester<P> {
    async fn run(&self, build: &GoldenBuild) -> Result<(), BootTestError> {
        let volid = build.volid.clone();
        let new = NewOperation {
            kind: OpKind::GoldenVerify,
            guest_id: None,
            vmid: None,
            job_id: None,
            request_id: None,
        };
        let op = OpJournal::begin(&self.journal, new)
            .await
            .map_err(|source| BootTestError::Begin {
                volid: volid.clone(),
                source,
            })?;
        let mut scratch = None;
        let steps = tokio::time::timeout(self.timeout, self.steps(&op, build, &mut scratch)).await;
        if steps.is_err()
            && let Ok(all) = self.journal.unfinished_operations().await
            && let Some(open) = all.iter().find(|u| u.operation.op_id == op.op_id())
        {
            // Cut off mid-step: the step's task is followed to its end first.
            crate::ops::operation::replay::close_open_step(&*self.pve, &op, open).await;
        }
        if let Some(vmid) = scratch
            && let Err(e) = wait_unlocked(&*self.pve, vmid).await
        {
            tracing::warn!(vmid = vmid.get(), error = %e, "the golden scratch guest stays locked; destroying it anyway");
        }
        // The op stays running when this fails: the next start's replay destroys the guest.
        compensate_with_retries(&*self.pve, &op, scratch)
            .await
            .map_err(BootTestError::Cleanup)?;
        let result = match steps {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(BootTestError::Step { volid, source }),
            Err(_) => Err(BootTestError::TimedOut {
                volid,
                seconds: self.timeout.as_secs(),
            }),
        };
        let (status, error) = match &result {
            Ok(()) => (OpStatus::Done, None),
            Err(e) => (OpStatus::Failed, Some(error_chain(e))),
        };
        if let Err(e) = op.finish(status, error).await {
            tracing::warn!(error = %error_chain(&e), "could not close the golden boot test's operation");
        }
        result
    }

    async fn steps(
        &self,
        op: &OpJournal,
        build: &GoldenBuild,
        scratch: &mut Option<Vmid>,
    ) -> Result<(), StepError> {
        let pve = &*self.pve;
        let vmid = scratch_vmid(pve, &self.journal, op, VMID_TRIES).await?;
        *scratch = Some(vmid);
        let archive = VolumeId::new(build.volid.clone())
            .map_err(|e| other(op, "restore", format!("golden volid: {e}")))?;
        let request = RestoreRequest::new(vmid, archive, self.storage.clone());
        restore(pve, op, request, false, &build.volid).await?;
        self.isolate(op, vmid).await?;
        op.task(
            pve,
            Op::StartCt,
            StepName::Start,
            json!({ "vmid": vmid.get() }),
            pve.start_ct(vmid),
        )
        .await?;
        stay_up(pve, op, vmid, (self.stay_up, self.poll), |_| {
            "the golden base stopped after its start".into()
        })
        .await?;
        op.local(
            StepName::StayedUp,
            json!({ "vmid": vmid.get(), "seconds": self.stay_up.as_secs() }),
            async { Ok::<(), String>(()) },
        )
        .await
    }

    /// Every network link of the restored base down before its first start.
    async fn isolate(&self, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        let set = links_down(op, &config)?;
        if set == CtOptions::default() {
            return Ok(());
        }
        let update = ConfigUpdate {
            set,
            ..ConfigUpdate::default()
        };
        op.call(
            StepName::Isolate,
            json!({ "vmid": vmid.get(), "links_down": update.set.net.len() }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;
        Ok(())
    }
}
