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
//! Before `restore`, `assign_address` chooses and journals the guest's addresses (from the
//! host's pool, or the ones desired state names inside it: `address.rs`); a refused address
//! builds nothing. Right after `reset_identity`, `set_address` writes them into `net0` as
//! static `ip=`/`ip6=`, and `guard_net` and `guard_firewall` put the network guard on
//! ([`super::network_guard`]: `firewall=1` on every interface, the guest's firewall on, and
//! `ipfilter`, which holds now that its addresses are static).
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

mod address;
pub mod dr_identity;
mod dr_restore;
mod hot;
mod rerun;
mod restore;
mod steps;
pub mod vm;
mod vm_dr;
mod vm_lookup;
mod vm_steps;
mod vm_volumes;

pub use dr_restore::Recovery;
pub use vm::{VmBringup, VmProvisioner};
/// A VM's rollback, shared with the restore tester's scratch VMs.
pub(crate) use vm_steps::{await_guest_agent, compensate_vm_with_retries, write_vm_bootstrap};

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::{GuestKind, GuestSpec};

use super::golden::GoldenCheck;
use crate::config::addresses::AddressPool;
use crate::guests::controller::ControllerBoard;
use crate::guests::credentials::bootstrap::{BootstrapIssuer, IssueTarget, TokenPolicy};
use crate::links::helper::HelperClient;
use crate::ops::operation::{OpJournal, Origin, StepError};

use super::compensate::compensate_with_retries;
pub use super::compensate::{compensate, op_tag};
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{JournalHandle, NewOperation, OpStatus};
use crate::ops::operation::OpKind;
use bosun_pve::{Pve, StorageId, Vmid};
use parking_lot::Mutex;
use tokio::sync::watch;

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
    "assign_address",
    "restore",
    "reset_identity",
    "set_address",
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
    /// The guest is of a kind this agent builds no guest of (a `qemu` guest on an agent
    /// without the VM provisioner).
    #[error("guest {guest_id} is a {kind} guest, which this agent does not provision")]
    Unsupported {
        /// The guest.
        guest_id: String,
        /// Its kind.
        kind: bosun_proto::desired::GuestKind,
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

/// Told when a guest's container is about to be made (its vmid recorded): the reconciler
/// reports the guest `provisioning` until the pass that makes it ends.
pub type ProvisioningHook = Arc<dyn Fn(&GuestSpec, u32) + Send + Sync>;

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
    /// Who is told of a guest being made (shared by every clone).
    progress: Arc<Mutex<Option<ProvisioningHook>>>,
    /// Where a provisioned guest's controller record is announced to the local API.
    controllers: Option<ControllerBoard>,
    /// The host's pool of guest addresses (`[addresses]`; `address.rs`).
    addresses: Option<AddressPool>,
    /// What builds `qemu` guests ([`vm`]); none: they are refused.
    vms: Option<Arc<dyn VmBringup>>,
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
            .field("vms", &self.vms)
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
            progress: Arc::clone(&self.progress),
            controllers: self.controllers.clone(),
            addresses: self.addresses.clone(),
            vms: self.vms.clone(),
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
            progress: Arc::default(),
            controllers: None,
            addresses: None,
            vms: None,
        }
    }

    /// Builds `qemu` guests with `vms` (decision 0114).
    pub fn with_vms(mut self, vms: Arc<dyn VmBringup>) -> Self {
        self.vms = Some(vms);
        self
    }

    /// What builds `qemu` guests, if anything.
    pub fn vms(&self) -> Option<&Arc<dyn VmBringup>> {
        self.vms.as_ref()
    }

    /// `vms`, or the refusal of `spec`'s guest.
    #[expect(
        clippy::result_large_err,
        reason = "ProvisionError is the one error of a provisioning"
    )]
    fn vms_for(&self, spec: &GuestSpec) -> Result<&Arc<dyn VmBringup>, ProvisionError> {
        self.vms
            .as_ref()
            .ok_or_else(|| ProvisionError::Unsupported {
                guest_id: spec.guest_id.to_string(),
                kind: spec.kind,
            })
    }

    /// Tells `hook` of every guest this provisioner (and each of its clones) starts making.
    pub fn on_provisioning(&self, hook: ProvisioningHook) {
        *self.progress.lock() = Some(hook);
    }

    /// Tells the hook, if any, that `spec`'s container is about to be made as `vmid`.
    fn provisioning(&self, spec: &GuestSpec, vmid: u32) {
        let hook = self.progress.lock().clone();
        if let Some(hook) = hook {
            hook(spec, vmid);
        }
    }

    /// Announces each provisioned guest's controller record (its golden base's signed
    /// digest, `manage_controller`) on `board`, which the local API and the heal task read.
    pub fn with_controllers(mut self, board: ControllerBoard) -> Self {
        self.controllers = Some(board);
        self
    }

    /// Gives every new guest a static address from `pool` (or the one desired state names
    /// inside it), written into its `net0` so `ipfilter` holds it (decision 0101); without a
    /// pool a new guest keeps the golden image's DHCP.
    pub fn with_addresses(mut self, pool: Option<AddressPool>) -> Self {
        self.addresses = pool;
        self
    }

    /// Resets the machine id and SSH host keys of a guest DR restores while its source may
    /// still run through `helper`; without it such a DR is refused.
    pub fn with_guest_helper(mut self, helper: Option<HelperClient>) -> Self {
        self.guest_helper = helper;
        self
    }

    /// The storage root volumes are restored onto (where a hot volume that names no storage
    /// goes).
    pub fn root_storage(&self) -> &StorageId {
        &self.storage
    }

    /// Places bulk volumes on the targets of the desired state `desired` holds.
    pub fn with_placement(
        mut self,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        self.placement = Some(desired);
        self
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
        if spec.kind == GuestKind::Qemu {
            return self.vms_for(spec)?.provision(spec, origin.into()).await;
        }
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
        let outcome = self.steps_in_place(op, spec, &mut created, bringup).await;
        match outcome {
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
                        self.forget_controller(op, &guest_id).await;
                        if let Bringup::Provision = bringup {
                            // Nothing of the new guest is left: its addresses go back to the
                            // pool (a lost guest's DR keeps them).
                            self.release_addresses(op, &guest_id).await;
                        }
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
        if spec.kind == GuestKind::Qemu {
            return self
                .vms_for(spec)?
                .deliver_bootstrap(spec, vmid, origin.into())
                .await;
        }
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
