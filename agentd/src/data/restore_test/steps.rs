//! A restore test's steps, as one fixed list ([`RestoreTester::steps`]): the archive chosen,
//! a scratch vmid recorded, the restore, the isolation (every link down, no mount point),
//! the start, the stay-up watch and the guest's own check of its data.

use bosun_errchain::error_chain;
use bosun_proto::helper::SCRATCH_HOSTNAME_PREFIX;
use bosun_pve::{
    ConfigUpdate, CtOptions, GuestStatus, Op, Pve, RestoreRequest, Vmid, net_without_hwaddr,
};
use serde_json::json;

use super::{RestoreTester, check};
use crate::data::recovery::identity::{IdentityPlan, Scenario, identity_for};
use crate::data::recovery::source::BackupSource;
use crate::guests::reconcile::compensate::op_tag;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

impl<P: Pve + 'static> RestoreTester<P> {
    /// The test's steps; `scratch` is set once a scratch guest may exist.
    pub(super) async fn steps(
        &self,
        op: &OpJournal,
        source: &BackupSource,
        scratch: &mut Option<Vmid>,
    ) -> Result<check::Verdict, StepError> {
        op.local(
            StepName::ChooseArchive,
            json!({ "storage": source.storage.as_str(), "archive": source.archive.to_string(), "tier": source.tier }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        let identity = identity_for(Scenario::RestoreTest);
        let vmid = self.scratch_vmid(op).await?;
        *scratch = Some(vmid);
        self.restore(op, source, vmid, &identity).await?;
        self.isolate(op, vmid, &identity).await?;
        op.task(
            &*self.pve,
            Op::StartCt,
            StepName::Start,
            json!({ "vmid": vmid.get() }),
            self.pve.start_ct(vmid),
        )
        .await?;
        self.stay_up(op, vmid).await?;
        op.local(
            StepName::StayedUp,
            json!({ "vmid": vmid.get(), "seconds": self.config.stay_up.as_secs() }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        // Links still down: the guest checks its own data.
        check::run(op, self.helper.as_ref(), vmid, self.config.check_timeout).await
    }

    /// `next_id`, then the scratch guest's vmid recorded as this test's; an id an older
    /// operation's record holds is passed over (five tries).
    async fn scratch_vmid(&self, op: &OpJournal) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let mut floor = 0;
        for _ in 0..5 {
            let offered = op.call(StepName::NextId, json!({}), pve.next_id()).await?;
            let candidate = offered.get().max(floor);
            let candidate =
                Vmid::new(candidate).map_err(|e| other(op, "next_id", e.to_string()))?;
            match self
                .journal
                .record_scratch(op.op_id(), candidate.get())
                .await
            {
                Ok(()) => return Ok(candidate),
                Err(crate::ops::journal::JournalError::VmidAlreadyRecorded { .. }) => {
                    floor = candidate.get().saturating_add(1);
                }
                Err(source) => {
                    return Err(StepError::Journal {
                        op_id: op.op_id(),
                        step: "record_scratch".into(),
                        source,
                    });
                }
            }
        }
        Err(other(op, "next_id", "no free vmid".into()))
    }

    /// `restore`: the archive onto the scratch vmid. An archive of a retired key is read
    /// through the storage that holds that key.
    async fn restore(
        &self,
        op: &OpJournal,
        source: &BackupSource,
        vmid: Vmid,
        identity: &IdentityPlan,
    ) -> Result<(), StepError> {
        let pve = &*self.pve;
        let mut request =
            RestoreRequest::new(vmid, source.restore_volume(), self.config.storage.clone());
        request.unique = identity.fresh_mac;
        request.options.tags = vec![op_tag(op)];
        request.options.hostname = Some(format!("{SCRATCH_HOSTNAME_PREFIX}{vmid}"));
        request.options.onboot = Some(identity.onboot);
        op.task(
            pve,
            Op::RestoreCt,
            StepName::Restore,
            json!({ "vmid": vmid.get(), "archive": source.archive.to_string(), "storage": self.config.storage.as_str(), "scratch": true }),
            pve.restore_ct(&request),
        )
        .await?;
        Ok(())
    }

    /// `read_config`, then `isolate` before the first start: every link down, no mount point.
    async fn isolate(
        &self,
        op: &OpJournal,
        vmid: Vmid,
        identity: &IdentityPlan,
    ) -> Result<(), StepError> {
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        let mut update = ConfigUpdate::default();
        let mut set = CtOptions::default();
        for (key, value) in &config.values {
            if let Some(index) = key.strip_prefix("net").and_then(|i| i.parse::<u8>().ok())
                && let Some(value) = value.as_str()
            {
                let mut net = net_without_hwaddr(value).map_err(|r| other(op, "isolate", r))?;
                net.link_down = Some(true);
                set.net.insert(index, net);
            }
            if key.starts_with("mp") && key[2..].parse::<u8>().is_ok() && !identity.mounts {
                update.delete.push(key.clone());
            }
        }
        update.set = set;
        if update.set != CtOptions::default() || !update.delete.is_empty() {
            op.call(
                StepName::Isolate,
                json!({ "vmid": vmid.get(), "links_down": update.set.net.len(), "mounts_removed": update.delete }),
                pve.update_ct_config(vmid, &update),
            )
            .await?;
        }
        Ok(())
    }

    /// The scratch guest must stay running for the configured time.
    async fn stay_up(&self, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
        let deadline = tokio::time::Instant::now() + self.config.stay_up;
        loop {
            let status = self
                .pve
                .ct_status(vmid)
                .await
                .map_err(|e| other(op, "stay_up", error_chain(&e)))?;
            if status.status != GuestStatus::Running {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                return Err(other(
                    op,
                    "stay_up",
                    format!(
                        "the restored guest stopped {} s after its start",
                        self.config.stay_up.saturating_sub(left).as_secs()
                    ),
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(self.config.poll.min(self.config.stay_up)).await;
        }
    }
}

fn other(op: &OpJournal, step: &str, reason: String) -> StepError {
    StepError::Other {
        op_id: op.op_id(),
        step: step.to_owned(),
        reason,
    }
}
