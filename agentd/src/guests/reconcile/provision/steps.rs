//! Provisioning's steps after `restore`, as one fixed list ([`Provisioner::steps`]): each
//! step a function of its own that writes its intent before its Proxmox call and its outcome
//! after, in the order the module's drawing shows.

use bosun_errchain::error_chain;
use bosun_proto::desired::{BulkVolume, GuestSpec, Power};
use bosun_pve::{
    ConfigUpdate, CtConfig, CtDisk, CtOptions, DiskSize, NewMountPoint, Op, Pve, SizeUnit,
    StorageId, Vmid, net_without_hwaddr,
};
use serde_json::json;

use super::{Bringup, ProvisionContext, Provisioner, dr_identity};
use crate::data::recovery::identity::{IdentityPlan, Scenario, identity_for};
use crate::data::storage::naming::target_storage_id;
use crate::guests::controller::Announced;
use crate::guests::reconcile::observe::volume_size_gib;
use crate::ops::journal::{AuditEvent, ControllerState};
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

impl<P: Pve + 'static> Provisioner<P> {
    /// The steps of a bring-up, in order: its addresses chosen, the guest restored (or the one
    /// an interrupted operation restored taken up), its identity reset, its addresses written,
    /// the network guard put on, sized,
    /// its root volume grown, its bulk and hot volumes attached, the extensions, the in-guest
    /// identity reset of a DR whose source may still run, `start`, and the post-start
    /// steps. `created` holds the vmid this operation restored, for the rollback.
    pub(super) async fn steps(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
        bringup: &Bringup,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        // Chosen before anything is built; an interrupted operation finds them journaled.
        let addresses = self.assign_addresses(op, spec, bringup).await?;
        let (vmid, scenario) = self.restored(op, spec, created, bringup).await?;
        let identity_plan = identity_for(scenario);
        let config = self.reset_identity(op, spec, vmid, &identity_plan).await?;
        self.set_address(op, vmid, &addresses).await?;
        crate::guests::reconcile::network_guard::guard(pve, op, vmid).await?;
        self.size(op, spec, vmid).await?;
        self.resize_rootfs(op, spec, vmid, &config).await?;
        self.bulk_volumes(op, spec, vmid).await?;
        self.hot_volumes(op, spec, vmid).await?;
        let cx = ProvisionContext {
            pve,
            op,
            spec,
            vmid,
        };
        for extension in &self.extensions {
            extension.run(&cx).await?;
        }
        self.manage_controller(op, spec, vmid, bringup).await?;
        if identity_plan.reset_in_guest {
            dr_identity::reset_in_guest(
                pve,
                op,
                self.guest_helper.as_ref(),
                vmid,
                identity_plan.onboot,
            )
            .await?;
        }
        self.start(op, spec, vmid).await?;
        if identity_plan.fresh_bootstrap && !self.post_start.is_empty() {
            self.post_start(&cx).await;
        }
        Ok(vmid)
    }

    /// `manage_controller`: a provisioned guest's controller record is its golden base's
    /// signed controller digest from the start (DESIGN §8), so it is reported, health-gated
    /// and healed in place like a rolled-out one; a DR-restored guest keeps its record, at
    /// its new vmid.
    async fn manage_controller(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        bringup: &Bringup,
    ) -> Result<(), StepError> {
        let guest_id = spec.guest_id.to_string();
        let journal = op.journal();
        let detail = json!({ "vmid": vmid.get() });
        match bringup {
            Bringup::Provision => {
                let digest = op
                    .local(StepName::ManageController, detail, async {
                        journal
                            .controller_provisioned(op.op_id(), guest_id.clone(), vmid.get())
                            .await
                            .map_err(|e| error_chain(&e))
                    })
                    .await?;
                match (digest, &self.controllers) {
                    (Some(digest), Some(board)) => {
                        // A new guest: nothing was measured in it yet.
                        board.measured(&guest_id, None);
                        board.announce(
                            &guest_id,
                            vmid.get(),
                            Announced {
                                digest: Some(digest),
                                state: ControllerState::Running,
                                op_id: Some(op.op_id()),
                            },
                        );
                    }
                    (None, _) => {
                        tracing::info!(%guest_id, vmid = vmid.get(), "the golden archive names no signed controller digest; the guest's controller is not managed");
                    }
                    (Some(_), None) => {}
                }
            }
            Bringup::Recover(_) => {
                op.local(StepName::ManageController, detail, async {
                    journal
                        .controller_moved(guest_id.clone(), vmid.get())
                        .await
                        .map_err(|e| error_chain(&e))
                })
                .await?;
                // The recovered guest runs what its backup held: measured again at its next
                // restart through the helper, not taken from the guest it replaced.
                if let Some(board) = &self.controllers {
                    board.measured(&guest_id, None);
                }
            }
        }
        Ok(())
    }

    /// A rolled-back provisioning's controller record goes with its guest.
    pub(super) async fn forget_controller(&self, op: &OpJournal, guest_id: &str) {
        if let Err(e) = op
            .journal()
            .controller_forget(guest_id.to_owned(), op.op_id())
            .await
        {
            tracing::warn!(%guest_id, error = %error_chain(&e), "could not forget the controller record of a rolled-back guest");
        }
        if let Some(board) = &self.controllers
            && board
                .announced(guest_id)
                .is_some_and(|a| a.op_id == Some(op.op_id()))
        {
            board.forget(guest_id);
        }
    }

    /// The guest the later steps work on and the identity scenario it is brought up in: the
    /// vmid an interrupted operation already restored, or a `restore` (of the golden
    /// archive, or of a lost guest's backup) now.
    async fn restored(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
        bringup: &Bringup,
    ) -> Result<(Vmid, Scenario), StepError> {
        if created.is_none() {
            // Every bulk volume has a target of its class before anything is built.
            self.check_placement(op, spec)?;
        }
        Ok(match (*created, bringup) {
            (Some(vmid), Bringup::Recover(r)) => (
                vmid,
                Scenario::GuestLossDr {
                    source_may_be_live: vmid.get() != r.lost_vmid,
                },
            ),
            (Some(vmid), Bringup::Provision) => (vmid, Scenario::Provision),
            (None, Bringup::Provision) => {
                (self.restore(op, spec, created).await?, Scenario::Provision)
            }
            (None, Bringup::Recover(recovery)) => {
                let (vmid, may_be_live) = self.restore_backup(op, spec, recovery, created).await?;
                (
                    vmid,
                    Scenario::GuestLossDr {
                        source_may_be_live: may_be_live,
                    },
                )
            }
        })
    }

    /// `read_config`, then `reset_identity`: a fresh MAC (net0 set again without hwaddr) and
    /// the hostname; every link down when the identity is reset inside the guest. Gives the
    /// configuration read, for the later steps.
    async fn reset_identity(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        identity_plan: &IdentityPlan,
    ) -> Result<CtConfig, StepError> {
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        let mut identity = CtOptions {
            hostname: Some(spec.hostname.clone()),
            ..CtOptions::default()
        };
        let fresh_mac = self
            .fresh_mac(op, spec, vmid, identity_plan, &config)
            .await?;
        let failed = |reason| StepError::Other {
            op_id: op.op_id(),
            step: "reset_identity".into(),
            reason,
        };
        if identity_plan.reset_in_guest {
            // Every link down (and fresh MACs) until the guest's identity is its own.
            identity.net = dr_identity::isolated_nets(&config).map_err(failed)?;
        } else if let Some(net0) = config.get_str("net0").filter(|_| fresh_mac) {
            let net = net_without_hwaddr(&net0).map_err(failed)?;
            identity.net.insert(0, net);
        }
        let update = ConfigUpdate {
            set: identity,
            ..ConfigUpdate::default()
        };
        op.call(
            StepName::ResetIdentity,
            json!({ "vmid": vmid.get(), "hostname": spec.hostname, "net0": if fresh_mac { "without hwaddr" } else { "kept" }, "links": if identity_plan.reset_in_guest { "down" } else { "kept" } }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;
        Ok(config)
    }

    /// Whether the guest gets a fresh MAC. The MAC rule: a restored guest keeps the archive's
    /// MAC only if it is the one the journal recorded for this guest; an archive that brings
    /// another MAC (another guest's, planted) gets a fresh one.
    async fn fresh_mac(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        identity_plan: &IdentityPlan,
        config: &CtConfig,
    ) -> Result<bool, StepError> {
        if identity_plan.fresh_mac {
            return Ok(true);
        }
        let archive_mac = config
            .get_str("net0")
            .and_then(|n| bosun_pve::hwaddr_of(&n));
        let recorded = self
            .journal
            .guest_mac(spec.guest_id.to_string())
            .await
            .map_err(|source| StepError::Journal {
                op_id: op.op_id(),
                step: "reset_identity".into(),
                source,
            })?;
        if archive_mac.is_some() && archive_mac != recorded {
            tracing::warn!(guest_id = %spec.guest_id, vmid = vmid.get(), ?archive_mac, ?recorded, "the archive's MAC is not the one recorded for the guest; it gets a fresh one");
            return Ok(true);
        }
        Ok(false)
    }

    /// `size`: cores, memory, swap.
    async fn size(&self, op: &OpJournal, spec: &GuestSpec, vmid: Vmid) -> Result<(), StepError> {
        let pve = &*self.pve;
        let want = spec.resources;
        let update = ConfigUpdate {
            set: CtOptions {
                cores: Some(u32::from(want.cores)),
                memory: Some(u64::from(want.memory_mib)),
                swap: Some(self.swap_mib),
                ..CtOptions::default()
            },
            ..ConfigUpdate::default()
        };
        op.call(
            StepName::Size,
            json!({ "vmid": vmid.get(), "cores": want.cores, "memory_mib": want.memory_mib, "swap_mib": self.swap_mib }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;
        Ok(())
    }

    /// `resize_rootfs`: grow only; a shrink is recorded refused and audited, never attempted.
    async fn resize_rootfs(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        config: &CtConfig,
    ) -> Result<(), StepError> {
        let pve = &*self.pve;
        let want = spec.resources;
        let have = config.get_str("rootfs").and_then(|r| volume_size_gib(&r));
        match have {
            Some(have) if have < want.rootfs_gib => {
                op.task(
                    pve,
                    Op::ResizeDisk,
                    StepName::ResizeRootfs,
                    json!({ "vmid": vmid.get(), "from_gib": have, "to_gib": want.rootfs_gib }),
                    pve.resize_disk(
                        vmid,
                        CtDisk::RootFs,
                        DiskSize::Absolute(u64::from(want.rootfs_gib), SizeUnit::G),
                    ),
                )
                .await?;
            }
            Some(have) if have > want.rootfs_gib => {
                op.local(
                    StepName::ResizeRootfs,
                    json!({ "vmid": vmid.get(), "have_gib": have, "want_gib": want.rootfs_gib, "shrink": "refused" }),
                    async { Ok::<(), String>(()) },
                )
                .await?;
                let mut event = AuditEvent::new("provision.shrink_refused");
                event.op_id = Some(op.op_id());
                event.vmid = Some(vmid.get());
                event.guest_id = Some(spec.guest_id.to_string());
                event.detail = json!({ "have_gib": have, "want_gib": want.rootfs_gib });
                let _ = op.journal().append_audit(event).await;
                tracing::warn!(
                    vmid = vmid.get(),
                    have_gib = have,
                    want_gib = want.rootfs_gib,
                    "rootfs shrink requested; never attempted"
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// `start`, when the guest should run and does not. A built guest that fails to start is
    /// kept: the reconciler's bounded restart retries take over (and report it broken after
    /// too many), rather than destroying and rebuilding it.
    async fn start(&self, op: &OpJournal, spec: &GuestSpec, vmid: Vmid) -> Result<(), StepError> {
        let pve = &*self.pve;
        let running = pve
            .ct_status(vmid)
            .await
            .is_ok_and(|s| s.status == bosun_pve::GuestStatus::Running);
        if spec.power != Power::Running || running {
            return Ok(());
        }
        let started = op
            .task(
                pve,
                Op::StartCt,
                StepName::Start,
                json!({ "vmid": vmid.get() }),
                pve.start_ct(vmid),
            )
            .await;
        match started {
            Ok(_) => Ok(()),
            Err(e @ StepError::Pve { .. }) => {
                tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "new guest did not start; reconcile retries");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The storage `volume` goes on: its `bulk-data` target of the volume's class in the
    /// desired state acted on (never one of another class), or why there is none.
    pub(super) fn place(&self, volume: &BulkVolume) -> Result<StorageId, String> {
        let desired = self
            .placement
            .as_ref()
            .and_then(|placement| placement.borrow().clone())
            .ok_or("no desired state to place it by")?;
        desired
            .state
            .place_bulk(volume)
            .map(target_storage_id)
            .map_err(|refusal| refusal.describe(volume.class))
    }

    /// Refuses `spec` when one of its bulk volumes has no target of its class or one of its
    /// hot volumes no `fast` storage.
    #[expect(
        clippy::result_large_err,
        reason = "StepError is the one error of every journaled step"
    )]
    pub(super) fn check_placement(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
    ) -> Result<(), StepError> {
        for volume in &spec.bulk_volumes {
            self.place(volume).map_err(|why| StepError::Other {
                op_id: op.op_id(),
                step: "bulk_volume".into(),
                reason: format!("bulk volume {}: {why}", volume.name),
            })?;
        }
        for volume in &spec.hot_volumes {
            self.place_hot(volume).map_err(|why| StepError::Other {
                op_id: op.op_id(),
                step: "hot_volume".into(),
                reason: format!("hot volume {}: {why}", volume.name),
            })?;
        }
        Ok(())
    }

    /// The `bulk_volumes` step: each bulk volume becomes a `backup=0` mount point
    /// (`mp<index>`) allocated on its target's storage. A mount point already there with
    /// the volume's path (a resumed operation) is left as it is.
    async fn bulk_volumes(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<(), StepError> {
        if spec.bulk_volumes.is_empty() {
            return Ok(());
        }
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        for (index, volume) in spec.bulk_volumes.iter().enumerate() {
            let index = u8::try_from(index).unwrap_or(u8::MAX);
            let key = format!("mp{index}");
            let there = config
                .get_str(&key)
                .is_some_and(|v| v.split(',').any(|p| p == format!("mp={}", volume.path)));
            if there {
                continue;
            }
            let storage = self.place(volume).map_err(|why| StepError::Other {
                op_id: op.op_id(),
                step: "bulk_volume".into(),
                reason: format!("bulk volume {}: {why}", volume.name),
            })?;
            let mount = NewMountPoint {
                storage,
                size_gib: volume.size_gib,
                path: volume.path.clone(),
                backup: false,
            };
            let extra = [("backup", json!(volume.backup))];
            self.add_mount_point(
                op,
                StepName::BulkVolume,
                vmid,
                (index, &volume.name),
                mount,
                &extra,
            )
            .await?;
        }
        Ok(())
    }
}
