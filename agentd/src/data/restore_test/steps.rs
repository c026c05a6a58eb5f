//! A restore test's steps, as one fixed list ([`RestoreTester::steps`]): the archive chosen,
//! a scratch vmid recorded, the restore, the isolation (every link down, no mount point),
//! the start, the stay-up watch and the guest's own check of its data.

use bosun_pve::{ConfigUpdate, CtOptions, Op, PveQemu, RestoreRequest, Vmid};
use serde_json::json;

use super::{RestoreTester, check};
use crate::data::recovery::identity::{IdentityPlan, Scenario, identity_for};
use crate::data::recovery::source::BackupSource;
use crate::ops::operation::StepName;
use crate::ops::operation::scratch::{links_down, restore, scratch_vmid, stay_up};
use crate::ops::operation::{OpJournal, StepError};

/// How many vmids `next_id` may offer before the test gives up: one an older operation's
/// record holds is passed over.
pub(super) const VMID_TRIES: u32 = 5;

impl<P: PveQemu + 'static> RestoreTester<P> {
    /// The test's steps; `scratch` is set once a scratch guest may exist.
    pub(super) async fn steps(
        &self,
        op: &OpJournal,
        source: &BackupSource,
        scratch: &mut Option<Vmid>,
    ) -> Result<check::Verdict, StepError> {
        op.local(
            StepName::ChooseArchive,
            json!({ "storage": source.storage.as_str(), "archive": source.archive.to_string(), "tier": source.tier, "kind": "lxc" }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        let identity = identity_for(Scenario::RestoreTest);
        let vmid = scratch_vmid(&*self.pve, &self.journal, op, VMID_TRIES).await?;
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
        let watch = (self.config.stay_up, self.config.poll);
        stay_up(&*self.pve, op, vmid, watch, |ran| {
            format!(
                "the restored guest stopped {} s after its start",
                ran.as_secs()
            )
        })
        .await?;
        op.local(
            StepName::StayedUp,
            json!({ "vmid": vmid.get(), "seconds": self.config.stay_up.as_secs() }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        // Links still down: the guest checks its own data.
        check::run(op, self.helper.as_ref(), vmid, self.config.check_timeout).await
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
        let mut request =
            RestoreRequest::new(vmid, source.restore_volume(), self.config.storage.clone());
        request.unique = identity.fresh_mac;
        let archive = source.archive.to_string();
        restore(&*self.pve, op, request, identity.onboot, &archive).await
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
        let mut update = ConfigUpdate {
            set: links_down(op, &config)?,
            ..ConfigUpdate::default()
        };
        for key in config.values.keys() {
            if key.starts_with("mp") && key[2..].parse::<u8>().is_ok() && !identity.mounts {
                update.delete.push(key.clone());
            }
        }
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
}
