//! Provisioning by restore (DESIGN §8) as a sequence of named, journaled steps.
//!
//! ```text
//!  restore ─► reset_identity ─► size ─► resize_rootfs ─► [extensions…] ─► start ─► [post-start…]
//!  (fresh vmid,  (net0 without   (cores,   (grow only;                      (if desired  (only once the
//!   provenance    hwaddr,         memory,   a shrink is                       power is     guest runs: the
//!   recorded      hostname)       swap)     reported)                         running)     bootstrap, mint
//!   first)                                                                                token + pct push
//!                                                                                         the bootstrap)
//! ```
//!
//! A DR restore whose source may still run adds the guest-side identity reset between the
//! extensions and `start` ([`dr_identity`]: every link down from `reset_identity`
//! on, then `start_isolated`, `reset_guest_identity`, `shutdown_isolated`, `links_up`).
//!
//! Right after `reset_identity`, `guard_net` and `guard_firewall` put the network guard on
//! ([`super::network_guard`]: `firewall=1` on every interface, the guest's firewall on, and
//! `ipfilter` when its addresses are static).
//!
//! Each step writes its intent before its Proxmox call and its outcome after
//! (see [`crate::ops::operation::steps`]). A failure at any step after `restore` compensates:
//! the guest is stopped and destroyed **only** if the gate agrees that this
//! operation created it ([`crate::trust::gate`], `Authority::Compensation`).
//! A failed final `start` is the exception: the guest is complete, so it is
//! kept and the reconciler's bounded restart retries take over.
//!
//! ## Extension point
//!
//! Later steps plug in as [`ProvisionExtension`]s, run in the order given to
//! [`Provisioner::with_extension`] between `resize_rootfs` and `start`, or to
//! [`Provisioner::with_post_start_extension`] after `start` (work that needs a
//! running guest, such as `pct push`). An extension gets a [`ProvisionContext`] with the Proxmox client,
//! the operation's journal ([`OpJournal`]: use `local`/`call`/`task` so its own
//! steps are journaled too), the guest's spec and its vmid. An error from an
//! extension rolls the whole provisioning back like any other step's failure,
//! so an extension needs no compensation of its own for Proxmox state; it
//! should make its own side effects (tokens, files) idempotent because the
//! next pass provisions again.
//!
//! A post-start extension runs only when the guest is running after `start`, and
//! its failure does **not** roll the guest back: the guest is complete, the failed
//! step stays in the journal, and the reconciler delivers the missing piece on a
//! later pass (for the bootstrap: a running provisioned guest without a token).

pub mod dr_identity;
mod dr_restore;

pub use dr_restore::Recovery;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::{GuestSpec, Power};
use serde_json::json;

use super::golden::GoldenCheck;
use super::observe::volume_size_gib;
use crate::data::recovery::identity::{Scenario, identity_for};
use crate::guests::credentials::bootstrap::{BootstrapIssuer, IssueTarget, TokenPolicy};
use crate::links::helper::HelperClient;
use crate::ops::operation::{OpJournal, Origin, StepError};

use super::compensate::compensate_with_retries;
pub use super::compensate::{compensate, op_tag};
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::naming::target_storage_id;
use crate::ops::journal::{AuditEvent, JournalHandle, NewOperation, OpStatus};
use crate::ops::operation::OpKind;
use bosun_proto::desired::BulkVolume;
use bosun_pve::{
    ConfigUpdate, CtDisk, CtOptions, DiskSize, NewMountPoint, Op, Pve, RestoreRequest, SizeUnit,
    StorageId, Vmid, VolumeId, net_without_hwaddr,
};
use parking_lot::Mutex;
use tokio::sync::watch;

/// How a sent restore ended, when it did not fail outright.
enum Sent {
    /// The guest was restored at this vmid.
    Restored(Vmid),
    /// Someone else holds the vmid (the step recorded failed, the vmid forgotten).
    Taken(StepError),
}

/// What a bring-up restores and which identity it gives the guest.
#[derive(Debug, Clone)]
enum Bringup {
    /// A new guest from the golden archive: fresh identity, fresh bootstrap.
    Provision,
    /// A lost guest from its backup: continuity identity, the backup's bootstrap.
    Recover(Box<Recovery>),
}

/// The names of the front half's steps, in order.
pub const FRONT_HALF_STEPS: &[&str] = &[
    "restore",
    "reset_identity",
    "guard_net",
    "guard_firewall",
    "size",
    "resize_rootfs",
];

/// A boxed future returned by an extension.
pub type ExtensionFuture<'a> = Pin<Box<dyn Future<Output = Result<(), StepError>> + Send + 'a>>;

/// What an extension step sees.
#[derive(Debug)]
pub struct ProvisionContext<'a, P: Pve> {
    /// Proxmox.
    pub pve: &'a P,
    /// The provisioning operation's journal.
    pub op: &'a OpJournal,
    /// The guest being provisioned.
    pub spec: &'a GuestSpec,
    /// Its vmid.
    pub vmid: Vmid,
}

/// A step appended to provisioning (see the module docs).
pub trait ProvisionExtension<P: Pve>: Send + Sync + fmt::Debug {
    /// The step's name in the journal.
    fn name(&self) -> &'static str;
    /// Runs the step.
    fn run<'a>(&'a self, cx: &'a ProvisionContext<'a, P>) -> ExtensionFuture<'a>;
}

/// Why provisioning did not produce a guest.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// Beginning the operation in the journal failed.
    #[error("beginning the provision operation for guest {guest_id}")]
    Begin {
        /// The guest.
        guest_id: String,
        /// The cause.
        #[source]
        source: crate::ops::journal::JournalError,
    },
    /// A step failed; what this operation created was rolled back.
    #[error("provisioning guest {guest_id} failed; rolled back")]
    RolledBack {
        /// The guest.
        guest_id: String,
        /// The failed step.
        #[source]
        source: StepError,
    },
    /// A post-start step of an existing guest failed (the guest is kept).
    #[error("delivering the post-start steps to guest {guest_id} failed")]
    PostStart {
        /// The guest.
        guest_id: String,
        /// The failed step.
        #[source]
        source: StepError,
    },
    /// A step failed and so did the rollback; the operation stays unfinished
    /// for replay.
    #[error("provisioning guest {guest_id} failed and its rollback failed too ({rollback})")]
    RollbackFailed {
        /// The guest.
        guest_id: String,
        /// The rollback's failure.
        rollback: String,
        /// The failed step.
        #[source]
        source: StepError,
    },
}

/// Builds guests.
pub struct Provisioner<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    storage: StorageId,
    swap_mib: u64,
    extensions: Vec<Arc<dyn ProvisionExtension<P>>>,
    post_start: Vec<Arc<dyn ProvisionExtension<P>>>,
    /// Vmids handed to restores that Proxmox may not list yet, so parallel
    /// provisions never race for the id `nextid` offered both.
    reserved: Arc<Mutex<BTreeSet<u32>>>,
    /// The provenance check of the golden archive.
    golden: Arc<GoldenCheck>,
    /// The desired state acted on: where bulk volumes are placed.
    placement: Option<watch::Receiver<Option<Arc<DesiredSnapshot>>>>,
    /// The helper that resets a restored guest's identity inside it, when its source may
    /// still run ([`dr_identity`]).
    guest_helper: Option<HelperClient>,
}

/// Releases a reserved vmid when the restore step is over.
struct Reservation {
    reserved: Arc<Mutex<BTreeSet<u32>>>,
    vmid: u32,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.reserved.lock().remove(&self.vmid);
    }
}

impl<P: Pve> fmt::Debug for Provisioner<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provisioner")
            .field("storage", &self.storage)
            .field("swap_mib", &self.swap_mib)
            .field("extensions", &self.extensions)
            .field("post_start", &self.post_start)
            .field("guest_helper", &self.guest_helper)
            .finish()
    }
}

impl<P: Pve> Clone for Provisioner<P> {
    fn clone(&self) -> Self {
        Self {
            pve: Arc::clone(&self.pve),
            journal: self.journal.clone(),
            storage: self.storage.clone(),
            swap_mib: self.swap_mib,
            extensions: self.extensions.clone(),
            post_start: self.post_start.clone(),
            reserved: Arc::clone(&self.reserved),
            golden: Arc::clone(&self.golden),
            placement: self.placement.clone(),
            guest_helper: self.guest_helper.clone(),
        }
    }
}

/// How long a restore whose answer was lost is waited for before it counts as failed.
const UNKNOWN_RESTORE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// How many fresh vmids a restore tries when the offered one was taken meanwhile.
const VMID_ATTEMPTS: u32 = 5;

impl<P: Pve + 'static> Provisioner<P> {
    /// A provisioner restoring onto `storage`, giving guests `swap_mib` of swap.
    /// Every provisioning restore first passes `golden` (DESIGN §5, provenance of what is
    /// restored).
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        storage: StorageId,
        swap_mib: u64,
        golden: Arc<GoldenCheck>,
    ) -> Self {
        Self {
            pve,
            journal,
            storage,
            swap_mib,
            golden,
            extensions: Vec::new(),
            post_start: Vec::new(),
            reserved: Arc::default(),
            placement: None,
            guest_helper: None,
        }
    }

    /// Resets the machine id and SSH host keys of a guest DR restores while its source may
    /// still run through `helper`; without it such a DR is refused.
    pub fn with_guest_helper(mut self, helper: Option<HelperClient>) -> Self {
        self.guest_helper = helper;
        self
    }

    /// Places bulk volumes on the targets of the desired state `desired` holds.
    pub fn with_placement(
        mut self,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        self.placement = Some(desired);
        self
    }

    /// The storage `volume` goes on: its `bulk-data` target of the volume's class in the
    /// desired state acted on (never one of another class), or why there is none.
    fn place(&self, volume: &BulkVolume) -> Result<StorageId, String> {
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

    /// Refuses `spec` when one of its bulk volumes has no target of its class.
    #[expect(
        clippy::result_large_err,
        reason = "StepError is the one error of every journaled step"
    )]
    fn check_placement(&self, op: &OpJournal, spec: &GuestSpec) -> Result<(), StepError> {
        for volume in &spec.bulk_volumes {
            self.place(volume).map_err(|why| StepError::Other {
                op_id: op.op_id(),
                step: "bulk_volume".into(),
                reason: format!("bulk volume {}: {why}", volume.name),
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
                "read_config",
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
            let mut set = CtOptions::default();
            set.mount_points.insert(
                index,
                NewMountPoint {
                    storage: storage.clone(),
                    size_gib: volume.size_gib,
                    path: volume.path.clone(),
                },
            );
            let update = ConfigUpdate {
                set,
                ..ConfigUpdate::default()
            };
            op.call(
                "bulk_volume",
                json!({
                    "vmid": vmid.get(),
                    "name": volume.name,
                    "mp": key,
                    "storage": storage.as_str(),
                    "size_gib": volume.size_gib,
                    "path": volume.path,
                    "backup": volume.backup,
                }),
                pve.update_ct_config(vmid, &update),
            )
            .await?;
        }
        Ok(())
    }

    /// Reserves the first vmid at or above `offered` no parallel provision holds.
    #[expect(
        clippy::result_large_err,
        reason = "StepError is the one error of every journaled step"
    )]
    fn reserve_from(&self, op: &OpJournal, offered: u32) -> Result<Vmid, StepError> {
        let mut reserved = self.reserved.lock();
        let mut candidate = offered;
        while reserved.contains(&candidate) {
            candidate = candidate.saturating_add(1);
        }
        reserved.insert(candidate);
        Vmid::new(candidate).map_err(|e| StepError::Other {
            op_id: op.op_id(),
            step: "restore".into(),
            reason: format!("no usable vmid: {e}"),
        })
    }

    /// Appends an extension step (run after `resize_rootfs`, before `start`).
    pub fn with_extension(mut self, extension: Arc<dyn ProvisionExtension<P>>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Appends a post-start extension step (run after `start`, once the guest runs).
    pub fn with_post_start_extension(mut self, extension: Arc<dyn ProvisionExtension<P>>) -> Self {
        self.post_start.push(extension);
        self
    }

    /// The names of every step, in order.
    pub fn step_names(&self) -> Vec<&'static str> {
        let mut names = FRONT_HALF_STEPS.to_vec();
        names.extend(self.extensions.iter().map(|e| e.name()));
        names.push("start");
        names.extend(self.post_start.iter().map(|e| e.name()));
        names
    }

    /// Provisions `spec`; gives the new guest's vmid.
    pub async fn provision(
        &self,
        spec: &GuestSpec,
        origin: impl Into<Origin>,
    ) -> Result<Vmid, ProvisionError> {
        let op = self
            .begin(OpKind::Provision, spec, spec.vmid, origin.into())
            .await?;
        self.drive(&op, spec, None, &Bringup::Provision).await
    }

    /// Opens the journaled operation `kind` for `spec`'s guest.
    async fn begin(
        &self,
        kind: OpKind,
        spec: &GuestSpec,
        vmid: Option<u32>,
        origin: Origin,
    ) -> Result<OpJournal, ProvisionError> {
        let guest_id = spec.guest_id.to_string();
        OpJournal::begin_correlated(
            &self.journal,
            NewOperation {
                kind,
                guest_id: Some(guest_id.clone()),
                vmid,
                job_id: None,
                request_id: origin.request_id,
            },
            origin.correlation_id,
        )
        .await
        .map_err(|source| ProvisionError::Begin { guest_id, source })
    }

    /// Continues provisioning `spec` in operation `op` (found unfinished at
    /// start) after its `restore` step produced `vmid`: the remaining steps
    /// run again (each is idempotent), or the guest is rolled back if one fails.
    pub async fn resume(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<Vmid, ProvisionError> {
        tracing::info!(guest_id = %spec.guest_id, vmid = vmid.get(), op_id = %op.op_id(), "resuming an interrupted provision");
        self.drive(op, spec, Some(vmid), &Bringup::Provision).await
    }

    async fn drive(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        restored: Option<Vmid>,
        bringup: &Bringup,
    ) -> Result<Vmid, ProvisionError> {
        let guest_id = spec.guest_id.to_string();
        let mut created: Option<Vmid> = restored;
        match self.steps(op, spec, &mut created, bringup).await {
            Ok(vmid) => {
                if let Bringup::Recover(recovery) = bringup {
                    self.recovered(op, spec, vmid, recovery).await;
                }
                op.finish(OpStatus::Done, None).await.map_err(|source| {
                    ProvisionError::RolledBack {
                        guest_id: guest_id.clone(),
                        source,
                    }
                })?;
                tracing::info!(%guest_id, vmid = vmid.get(), op_id = %op.op_id(), "guest provisioned");
                Ok(vmid)
            }
            Err(failure) => {
                tracing::warn!(%guest_id, op_id = %op.op_id(), error = %error_chain(&failure), "provisioning failed; rolling back");
                match compensate_with_retries(&*self.pve, op, created).await {
                    Ok(()) => {
                        let _ = op
                            .finish(OpStatus::Compensated, Some(error_chain(&failure)))
                            .await;
                        Err(ProvisionError::RolledBack {
                            guest_id,
                            source: failure,
                        })
                    }
                    Err(rollback) => Err(ProvisionError::RollbackFailed {
                        guest_id,
                        rollback: error_chain(&rollback),
                        source: failure,
                    }),
                }
            }
        }
    }

    async fn steps(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
        bringup: &Bringup,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let mut scenario = match bringup {
            Bringup::Provision => Scenario::Provision,
            Bringup::Recover(_) => Scenario::GuestLossDr {
                source_may_be_live: false,
            },
        };
        if created.is_none() {
            // Every bulk volume has a target of its class before anything is built.
            self.check_placement(op, spec)?;
        }
        let vmid = match (*created, bringup) {
            (Some(vmid), Bringup::Recover(r)) => {
                scenario = Scenario::GuestLossDr {
                    source_may_be_live: vmid.get() != r.lost_vmid,
                };
                vmid
            }
            (Some(vmid), Bringup::Provision) => vmid,
            (None, Bringup::Provision) => self.restore(op, spec, created).await?,
            (None, Bringup::Recover(recovery)) => {
                let (vmid, may_be_live) = self.restore_backup(op, spec, recovery, created).await?;
                scenario = Scenario::GuestLossDr {
                    source_may_be_live: may_be_live,
                };
                vmid
            }
        };
        let identity_plan = identity_for(scenario);

        // reset_identity: a fresh MAC (net0 set again without hwaddr) and the hostname.
        let config = op
            .call(
                "read_config",
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        let mut identity = CtOptions {
            hostname: Some(spec.hostname.clone()),
            ..CtOptions::default()
        };
        // The MAC rule: a restored guest keeps the archive's MAC only if it is the one the
        // journal recorded for this guest; an archive that brings another MAC (another
        // guest's, planted) gets a fresh one.
        let mut fresh_mac = identity_plan.fresh_mac;
        if !fresh_mac {
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
                fresh_mac = true;
            }
        }
        if identity_plan.reset_in_guest {
            // Every link down (and fresh MACs) until the guest's identity is its own.
            identity.net =
                dr_identity::isolated_nets(&config).map_err(|reason| StepError::Other {
                    op_id: op.op_id(),
                    step: "reset_identity".into(),
                    reason,
                })?;
        } else if let Some(net0) = config.get_str("net0").filter(|_| fresh_mac) {
            let net = net_without_hwaddr(&net0).map_err(|reason| StepError::Other {
                op_id: op.op_id(),
                step: "reset_identity".into(),
                reason,
            })?;
            identity.net.insert(0, net);
        }
        let update = ConfigUpdate {
            set: identity,
            ..ConfigUpdate::default()
        };
        op.call(
            "reset_identity",
            json!({ "vmid": vmid.get(), "hostname": spec.hostname, "net0": if fresh_mac { "without hwaddr" } else { "kept" }, "links": if identity_plan.reset_in_guest { "down" } else { "kept" } }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;

        // guard_net, guard_firewall: the guest speaks only from its own MAC (and addresses).
        super::network_guard::guard(pve, op, vmid).await?;

        // size: cores, memory, swap.
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
            "size",
            json!({ "vmid": vmid.get(), "cores": want.cores, "memory_mib": want.memory_mib, "swap_mib": self.swap_mib }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;

        // resize_rootfs: grow only.
        let have = config.get_str("rootfs").and_then(|r| volume_size_gib(&r));
        match have {
            Some(have) if have < want.rootfs_gib => {
                op.task(
                    pve,
                    Op::ResizeDisk,
                    "resize_rootfs",
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
                    "resize_rootfs",
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

        self.bulk_volumes(op, spec, vmid).await?;

        let cx = ProvisionContext {
            pve,
            op,
            spec,
            vmid,
        };
        for extension in &self.extensions {
            extension.run(&cx).await?;
        }
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

        let running = pve
            .ct_status(vmid)
            .await
            .is_ok_and(|s| s.status == bosun_pve::GuestStatus::Running);
        if spec.power == Power::Running && !running {
            // A built guest that fails to start is kept: the reconciler's
            // bounded restart retries take over (and report it broken after
            // too many), rather than destroying and rebuilding it.
            let started = op
                .task(
                    pve,
                    Op::StartCt,
                    "start",
                    json!({ "vmid": vmid.get() }),
                    pve.start_ct(vmid),
                )
                .await;
            match started {
                Ok(_) => {}
                Err(e @ StepError::Pve { .. }) => {
                    tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "new guest did not start; reconcile retries");
                }
                Err(e) => return Err(e),
            }
        }
        if identity_plan.fresh_bootstrap && !self.post_start.is_empty() {
            self.post_start(&cx).await;
        }
        Ok(vmid)
    }

    /// Sends `request` as the `restore` step (its vmid recorded in `created` first) and
    /// follows its task. A restore whose answer was lost is looked up before anything is
    /// decided; a vmid someone else took meanwhile is forgotten and given back as
    /// [`Sent::Taken`], so the caller may try another.
    async fn send_restore(
        &self,
        op: &OpJournal,
        request: &RestoreRequest,
        detail: serde_json::Value,
        created: &mut Option<Vmid>,
    ) -> Result<Sent, StepError> {
        let pve = &*self.pve;
        let vmid = request.vmid;
        let seq = op.intent("restore", detail).await?;
        *created = Some(vmid);
        // Proxmox stamps its tasks with the host's wall clock, not the agent's clock seam.
        let asked_at = jiff::Timestamp::now();
        let e = match pve.restore_ct(request).await {
            Ok(upid) => {
                op.sent("restore", seq, &upid).await?;
                op.wait(pve, Op::RestoreCt, "restore", seq, &upid).await?;
                return Ok(Sent::Restored(vmid));
            }
            Err(e) if e.is_outcome_unknown() => {
                return self
                    .after_unknown_restore(op, seq, (vmid, asked_at), created, e)
                    .await
                    .map(Sent::Restored);
            }
            Err(e) => e,
        };
        let taken = e.is_already_exists();
        if taken {
            // Someone else holds the id: it is not ours, forget it.
            *created = None;
            let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
        }
        op.finished(
            "restore",
            seq,
            crate::ops::journal::StepOutcome::Failed {
                error: error_chain(&e),
            },
        )
        .await?;
        let failed = StepError::Pve {
            op_id: op.op_id(),
            step: "restore".into(),
            source: e,
        };
        if taken {
            Ok(Sent::Taken(failed))
        } else {
            Err(failed)
        }
    }

    /// Whether provisioning has post-start steps (the guest's bootstrap) to deliver.
    pub fn has_post_start(&self) -> bool {
        !self.post_start.is_empty()
    }

    /// Runs the post-start steps for an existing, running guest in their own journaled
    /// operation (`deliver_bootstrap`): how a guest whose start or push failed during
    /// provisioning gets its bootstrap on a later reconcile pass.
    pub async fn deliver_post_start(
        &self,
        spec: &GuestSpec,
        vmid: Vmid,
        origin: impl Into<Origin>,
    ) -> Result<(), ProvisionError> {
        let op = self
            .begin(
                OpKind::DeliverBootstrap,
                spec,
                Some(vmid.get()),
                origin.into(),
            )
            .await?;
        let cx = ProvisionContext {
            pve: &*self.pve,
            op: &op,
            spec,
            vmid,
        };
        let mut result = Ok(());
        for extension in &self.post_start {
            result = extension.run(&cx).await;
            if result.is_err() {
                break;
            }
        }
        let (status, error) = match &result {
            Ok(()) => (OpStatus::Done, None),
            Err(e) => (OpStatus::Failed, Some(error_chain(e))),
        };
        if let Err(e) = op.finish(status, error).await {
            tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "could not journal the end of a bootstrap delivery");
        }
        result.map_err(|source| ProvisionError::PostStart {
            guest_id: spec.guest_id.to_string(),
            source,
        })
    }

    /// Runs the post-start extensions when the guest runs. A failure keeps the guest
    /// (it is complete) and is left to a later reconcile pass.
    async fn post_start(&self, cx: &ProvisionContext<'_, P>) {
        let vmid = cx.vmid.get();
        let running = cx
            .pve
            .ct_status(cx.vmid)
            .await
            .is_ok_and(|s| s.status == bosun_pve::GuestStatus::Running);
        if !running {
            tracing::info!(
                vmid,
                "guest not running; post-start steps wait for a later pass"
            );
            return;
        }
        for extension in &self.post_start {
            if let Err(e) = extension.run(cx).await {
                tracing::warn!(vmid, step = extension.name(), error = %error_chain(&e), "post-start step failed; the guest is kept and a later pass retries");
                return;
            }
        }
    }

    /// A restore (asked for at `asked_at`) whose answer was lost: the operation stays open
    /// while the request may still land ([`super::lookup::await_landing`]: the guest, or the
    /// node's task list, proves it ran; or the landing window passes), then continues with
    /// the guest if it carries this operation's tag, forgets the vmid if another guest holds
    /// it, and fails the step otherwise (the rollback then finds nothing, or waits out a
    /// restore still running). A restore that did not land in its window is watched for
    /// afterwards ([`super::late_landing`]).
    async fn after_unknown_restore(
        &self,
        op: &OpJournal,
        seq: u32,
        (vmid, asked_at): (Vmid, jiff::Timestamp),
        created: &mut Option<Vmid>,
        error: bosun_pve::PveError,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let window = super::lookup::landing_window(pve.retry_policy());
        let seen = super::lookup::await_landing(
            pve,
            vmid,
            &op_tag(op),
            asked_at,
            window,
            UNKNOWN_RESTORE_WAIT,
        )
        .await;
        tracing::info!(vmid = vmid.get(), op_id = %op.op_id(), ?seen, "looked at a restore whose answer was lost");
        if matches!(seen, Ok(super::lookup::RestoreSeen::Unlanded)) {
            super::late_landing::watch(op, vmid, asked_at)
                .await
                .map_err(|source| StepError::Journal {
                    op_id: op.op_id(),
                    step: "restore".into(),
                    source,
                })?;
        }
        if matches!(seen, Ok(super::lookup::RestoreSeen::Ours)) {
            op.finished(
                "restore",
                seq,
                crate::ops::journal::StepOutcome::Ok { warnings: 0 },
            )
            .await?;
            return Ok(vmid);
        }
        if matches!(seen, Ok(super::lookup::RestoreSeen::Foreign)) {
            *created = None;
            let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
        }
        op.finished(
            "restore",
            seq,
            crate::ops::journal::StepOutcome::Failed {
                error: error_chain(&error),
            },
        )
        .await?;
        Err(StepError::Pve {
            op_id: op.op_id(),
            step: "restore".into(),
            source: error,
        })
    }

    /// The `restore` step: picks a vmid, records provenance *before* the call,
    /// restores the golden archive, and takes another vmid if the one offered
    /// was claimed in the meantime.
    async fn restore(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let other = |reason: String| StepError::Other {
            op_id: op.op_id(),
            step: "restore".into(),
            reason,
        };
        // Only an archive of known provenance seeds a guest: a hub cannot point a new
        // guest at another customer's backup. A golden version maps to this host's build.
        let detail = json!({
            "volid": spec.golden.volid,
            "sha256": spec.golden.sha256,
            "version": spec.golden.version,
        });
        let record = op
            .local("check_golden", detail, async {
                self.golden
                    .check(&spec.golden)
                    .await
                    .map_err(|e| error_chain(&e))
            })
            .await?;
        let archive =
            VolumeId::new(record.volid.clone()).map_err(|e| other(format!("golden volid: {e}")))?;
        let mut attempt = 0;
        // Ids at or below this one are held by an older operation's provenance row (its
        // guest may exist: its outcome was unknown and its rollback has not finished), so
        // the next attempt looks above it instead of being offered the same id again.
        let mut floor = 0;
        loop {
            attempt += 1;
            let vmid = match spec.vmid {
                Some(v) => Vmid::new(v).map_err(|e| other(format!("pinned vmid: {e}")))?,
                None => {
                    let offered = op.call("next_id", json!({}), pve.next_id()).await?;
                    self.reserve_from(op, offered.get().max(floor))?
                }
            };
            let _release = Reservation {
                reserved: Arc::clone(&self.reserved),
                vmid: vmid.get(),
            };
            let mut request = RestoreRequest::new(vmid, archive.clone(), self.storage.clone());
            request.options.tags = vec![op_tag(op)];
            // Provenance first: a guest that appears without a row could never
            // be cleaned up without an operator signature.
            if let Err(source) = op
                .journal()
                .record_created(op.op_id(), vmid.get(), Some(spec.guest_id.to_string()))
                .await
            {
                if matches!(
                    source,
                    crate::ops::journal::JournalError::VmidAlreadyRecorded { .. }
                ) && spec.vmid.is_none()
                    && attempt < VMID_ATTEMPTS
                {
                    floor = vmid.get().saturating_add(1);
                    continue;
                }
                return Err(StepError::Journal {
                    op_id: op.op_id(),
                    step: "restore".into(),
                    source,
                });
            }
            let detail = json!({ "vmid": vmid.get(), "archive": archive.to_string(), "storage": self.storage.to_string(), "tag": op_tag(op) });
            match self.send_restore(op, &request, detail, created).await? {
                Sent::Restored(vmid) => return Ok(vmid),
                // Another id is offered next time round, unless the operator pinned this one.
                Sent::Taken(_) if spec.vmid.is_none() && attempt < VMID_ATTEMPTS => {}
                Sent::Taken(e) => return Err(e),
            }
        }
    }
}
/// The guest's bootstrap (credentials/bootstrap.rs) is provisioning's post-start step: the
/// guest must run for `pct push` to reach it.
impl<P: Pve> ProvisionExtension<P> for BootstrapIssuer {
    fn name(&self) -> &'static str {
        // The step's name in journals and failpoints since the first release; it never
        // changes, so older journals replay.
        "back_half"
    }

    fn run<'a>(&'a self, cx: &'a ProvisionContext<'a, P>) -> ExtensionFuture<'a> {
        Box::pin(async move {
            let target = IssueTarget {
                guest_id: cx.spec.guest_id,
                vmid: cx.vmid,
                customer: cx.spec.customer.clone(),
            };
            BootstrapIssuer::run(self, cx.op, &target, TokenPolicy::KeepExisting)
                .await
                .map(|_| ())
        })
    }
}
