//! The family of `adopt` (decisions 0073, 0122): a container or a virtual machine that was on
//! the node before Bosun becomes one of the agent's guests, in its guest's queue slot, as
//! journaled steps:
//!
//! ```text
//! accepted ─► gate (AdoptGuest) ─► adopt_check ─► record_adopted ─► tag_identity ─┬─► done
//!             (read only:         (journal row,   (tags + identity,               │
//!              adopt_check.rs)     before the      with the signed                 └─► bootstrap (asked):
//!                                  Proxmox call)   digest: Proxmox's                   check_token, push_bootstrap,
//!                                                  compare-and-set)                    store_token
//! ```
//!
//! A VM's bootstrap goes through its guest agent (provisioning's own path,
//! [`write_vm_bootstrap`]): before anything is written, the running VM's agent must answer
//! within [`AGENT_WAIT`] (`agent_ping`, so a silent agent fails the job with the VM untouched and
//! no row), and after the tag, `check_token`, `write_bootstrap` (`file-write` into the signed
//! vmid alone, refused unless the journal records it as this guest and the VM carries this
//! job's identity), `store_token`.
//!
//! A VM is adopted only once the operator has put it in pool `bosun` (the agent's token cannot:
//! decision 0122); `adopt_check` reads its pool, and nothing here changes pool membership.
//!
//! From `tag_identity` on, the guest carries the identity the journal recorded, so every
//! pass and every job treat it as a provisioned guest (DESIGN §5): the gate, the backups of the
//! plan once desired state names it, `lost` and DR. What fails before the identity lands
//! leaves Proxmox as it was and takes the journal's row back; a lost answer to the tag update
//! is judged by the tag. A run a crash interrupted runs again from `accepted`: each step finds
//! what the last run did (its row, its tag, its token) and goes on.

use bosun_proto::adopt::AdoptParams;
use bosun_proto::desired::{CustomerIdentity, GuestKind};
use bosun_pve::{
    ConfigUpdate, CtConfig, CtOptions, GuestStatus, Pve, PveError, PveQemu, VmConfigUpdate,
    VmOptions, Vmid,
};
use futures::FutureExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::adopt_check::{AdoptRefusal, Found, Pins, Seen, judge};
use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use crate::guests::credentials::bootstrap::{BootstrapIssuer, IssueTarget, TokenPolicy};
use crate::guests::queue::GuestKey;
use crate::guests::reconcile::provision::{await_guest_agent, write_vm_bootstrap};
use crate::ops::journal::{AdoptedAs, JournalError, identity_tag};
use crate::ops::operation::{OpJournal, StepName};
use crate::trust::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};
use crate::trust::signing::VerifiedSigner;

/// How long a VM's adoption with a bootstrap waits for its guest agent to answer: the VM runs
/// already (`adopt_check`), so this is no first boot's wait, only a ping's.
pub(super) const AGENT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What an `adopt` job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AdoptAccepted {
    job_id: String,
    guest_id: Uuid,
    vmid: u32,
    /// The kind signed for (absent in runs accepted before VMs: a container).
    #[serde(default)]
    kind: GuestKind,
    hostname: String,
    config_digest: String,
    /// The customer a bootstrap names; `None`: no bootstrap.
    bootstrap: Option<CustomerIdentity>,
    signer: String,
    principals: String,
}

/// What `adopt` jobs use: the bootstrap issuer, when the agent has a helper and a local API
/// (without one, a job asking for a bootstrap is refused).
#[derive(Debug, Clone, Default)]
pub(super) struct AdoptSetup {
    pub(super) issuer: Option<BootstrapIssuer>,
}

/// The family of `adopt` ([`super::kind::Runs::Adopt`]).
#[derive(Debug)]
pub(super) struct AdoptJobs;

impl<P: Pve + PveQemu + 'static> JobFamily<P> for AdoptJobs {
    type Accepted = AdoptAccepted;
    type Setup = AdoptSetup;
    type Work = ();
    const MISSING: &'static str = "adoption setup";

    fn job_id(accepted: &AdoptAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(accepted: &AdoptAccepted) -> Option<(u32, Uuid)> {
        Some((accepted.vmid, accepted.guest_id))
    }

    fn signer(accepted: &AdoptAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    async fn accept(
        _context: &JobContext<P>,
        setup: &AdoptSetup,
        job: &Claimed,
    ) -> Result<(AdoptAccepted, ()), NotAccepted> {
        let Claimed {
            document,
            signer,
            row,
            ..
        } = job;
        let job_id = document.job_id;
        // check_job guarantees the guest, its vmid and (by validation) the parameters.
        let (Some(guest_id), Some(vmid), Ok(params)) = (
            document.target.guest_id,
            document.target.vmid,
            AdoptParams::from_params(&document.params),
        ) else {
            tracing::error!(%job_id, kind = row.name(), "an adopt job without its guest or pins; not run");
            return Err(NotAccepted::Dropped);
        };
        if params.bootstrap.is_some() && setup.issuer.is_none() {
            return Err(NotAccepted::Refused(JobRefusal::CannotBootstrap));
        }
        let accepted = AdoptAccepted {
            job_id: job_id.to_string(),
            guest_id,
            vmid,
            kind: params.kind,
            hostname: params.hostname,
            config_digest: params.config_digest,
            bootstrap: params.bootstrap,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        Ok((accepted, ()))
    }

    /// The steps find what the interrupted run did; a bootstrap still needs the issuer.
    fn judge_again(
        setup: &AdoptSetup,
        row: KindRow,
        accepted: &AdoptAccepted,
    ) -> Result<(), JobError> {
        if accepted.bootstrap.is_some() && setup.issuer.is_none() {
            return Err(JobError::NotSetUp {
                kind: row.name(),
                missing: "bootstrap issuer (a helper and a local API)",
            });
        }
        Ok(())
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &AdoptSetup,
        op: OpJournal,
        row: KindRow,
        accepted: AdoptAccepted,
        (): (),
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, vmid = accepted.vmid, kind = %accepted.kind, guest_id = %accepted.guest_id, op_id = %op.op_id(), "adopting a guest by signed job");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Guest {
                vmid: accepted.vmid,
            },
            accepted.job_id.clone(),
        );
        let work = Adoption {
            pve: std::sync::Arc::clone(&context.pve),
            op: op.clone(),
            job: accepted.clone(),
            issuer: setup.issuer.clone(),
        }
        .run(authority)
        .boxed();
        let result = match context
            .queue
            .run(GuestKey::guest(accepted.guest_id), work)
            .await
        {
            Ok(result) => result,
            Err(e) => Err(JobError::Queue(e)),
        };
        context
            .conclude(op, accepted.job_id, row.name(), guest, result)
            .await;
    }
}

/// One adoption under way (owned: it runs in its guest's queue slot).
struct Adoption<P> {
    pve: std::sync::Arc<P>,
    op: OpJournal,
    job: AdoptAccepted,
    issuer: Option<BootstrapIssuer>,
}

impl<P: Pve + PveQemu + 'static> Adoption<P> {
    /// The steps, in order; the job's output on success.
    async fn run(self, authority: JobAuthority) -> Result<Value, JobError> {
        let vmid = Vmid::new(self.job.vmid)?;
        let identity = identity_tag(self.op.op_id());
        self.ask_gate(authority).await?;
        let found = match self.check(vmid, &identity).await {
            Ok(found) => found,
            Err(e) => return Err(self.take_back(e).await),
        };
        let adopted = if self.job.bootstrap.is_some() {
            AdoptedAs::WithBootstrap
        } else {
            AdoptedAs::WithoutBootstrap
        };
        if self.job.kind == GuestKind::Qemu
            && self.job.bootstrap.is_some()
            && matches!(found, Found::Fresh { .. })
            && let Err(e) = await_guest_agent(&*self.pve, &self.op, vmid, AGENT_WAIT).await
        {
            // Nothing is recorded nor written yet: the VM stays as the operator left it.
            return Err(self.take_back(e.into()).await);
        }
        if let Err(e) = self.record(adopted).await {
            return Err(self.take_back(e).await);
        }
        if let Found::Fresh { tags } = found
            && let Err(e) = self.tag(vmid, &identity, tags).await
        {
            return Err(self.take_back(e).await);
        }
        let pushed = match (&self.job.bootstrap, &self.issuer) {
            (Some(customer), Some(issuer)) => {
                let target = IssueTarget {
                    guest_id: self.job.guest_id,
                    vmid,
                    customer: customer.clone(),
                };
                match self.job.kind {
                    GuestKind::Lxc => {
                        issuer
                            .run(&self.op, &target, TokenPolicy::KeepExisting)
                            .await?;
                    }
                    GuestKind::Qemu => {
                        write_vm_bootstrap(&*self.pve, &self.op, issuer, &target).await?;
                    }
                }
                true
            }
            _ => false,
        };
        Ok(json!({
            "vmid": self.job.vmid,
            "kind": self.job.kind,
            "guest_id": self.job.guest_id,
            "identity": identity,
            "bootstrap": pushed,
        }))
    }

    /// Asks the gate for `AdoptGuest`, unless the journal's row at the vmid is this job's own
    /// (a resumed run: the gate allowed it when the row was written).
    async fn ask_gate(&self, authority: JobAuthority) -> Result<(), JobError> {
        let journal = self.op.journal();
        let provenance = journal
            .provenance(self.job.vmid)
            .await
            .map_err(JobError::journal("reading the container's provenance"))?;
        if provenance
            .as_ref()
            .is_some_and(|p| p.created_by_op() == self.op.op_id())
        {
            return Ok(());
        }
        let request = GateRequest {
            action: Action::AdoptGuest,
            target: Target::Guest {
                vmid: self.job.vmid,
            },
            authority: Authority::SignedJob(authority),
            provenance: Provenance::from_journal(provenance.as_ref()),
        };
        let decision = gate::decide(&request);
        let _ = journal.append_audit(decision.audit_event(&request)).await;
        if decision.is_allowed() {
            Ok(())
        } else {
            Err(JobError::GateDenied {
                action: Action::AdoptGuest,
                reason: decision.reason(),
            })
        }
    }

    /// `adopt_check`: what the vmid holds, judged against the pins (reads only).
    async fn check(&self, vmid: Vmid, identity: &str) -> Result<Found, JobError> {
        let detail = json!({
            "vmid": self.job.vmid,
            "kind": self.job.kind,
            "hostname": self.job.hostname,
            "config_digest": self.job.config_digest,
            "bootstrap": self.job.bootstrap.is_some(),
        });
        let pins = Pins {
            kind: self.job.kind,
            hostname: &self.job.hostname,
            digest: &self.job.config_digest,
            identity,
            bootstrap: self.job.bootstrap.is_some(),
        };
        let look = async {
            let (config, seen) = match self.job.kind {
                GuestKind::Lxc => self.look_at_container(vmid, pins.bootstrap).await?,
                GuestKind::Qemu => self.look_at_vm(vmid, pins.bootstrap).await?,
            };
            judge(vmid.get(), &config, &seen, &pins).map_err(CheckError::Refused)
        };
        Ok(self
            .op
            .local_typed(StepName::AdoptCheck, detail, look)
            .await?)
    }

    /// The container at `vmid`: its config, and whether it runs when a bootstrap needs it to.
    async fn look_at_container(
        &self,
        vmid: Vmid,
        bootstrap: bool,
    ) -> Result<(CtConfig, Seen), CheckError> {
        let config = match self.pve.ct_config(vmid).await {
            Err(e) if e.is_missing() => {
                return Err(CheckError::Refused(AdoptRefusal::NoContainer {
                    vmid: vmid.get(),
                }));
            }
            other => other.map_err(CheckError::Pve)?,
        };
        let running = if bootstrap {
            let status = self.pve.ct_status(vmid).await.map_err(CheckError::Pve)?;
            status.status == GuestStatus::Running
        } else {
            false
        };
        Ok((
            config,
            Seen {
                running,
                pool: None,
            },
        ))
    }

    /// The VM at `vmid`: its config, the pool it is a member of (`/cluster/resources`), and
    /// whether it runs when a bootstrap needs its guest agent.
    async fn look_at_vm(
        &self,
        vmid: Vmid,
        bootstrap: bool,
    ) -> Result<(CtConfig, Seen), CheckError> {
        let config = match self.pve.vm_config(vmid).await {
            Err(e) if e.is_missing() => {
                return Err(CheckError::Refused(AdoptRefusal::NoVm { vmid: vmid.get() }));
            }
            other => other.map_err(CheckError::Pve)?,
        };
        let pool = self
            .pve
            .cluster_guests()
            .await
            .map_err(CheckError::Pve)?
            .into_iter()
            .find(|g| g.vmid == u64::from(vmid.get()) && g.kind == GuestKind::Qemu.as_str())
            .and_then(|g| g.pool);
        let running = if bootstrap {
            let status = self.pve.vm_status(vmid).await.map_err(CheckError::Pve)?;
            status.status == GuestStatus::Running
        } else {
            false
        };
        Ok((config, Seen { running, pool }))
    }

    /// `record_adopted`: the journal's row, before the Proxmox call that writes the identity
    /// (a row this job wrote before a crash is found and kept).
    async fn record(&self, adopted: AdoptedAs) -> Result<(), JobError> {
        let journal = self.op.journal();
        let (op_id, vmid, guest_id) = (
            self.op.op_id(),
            self.job.vmid,
            self.job.guest_id.to_string(),
        );
        let kind = self.job.kind;
        let detail = json!({ "vmid": vmid, "guest_id": guest_id });
        let write = async {
            match journal
                .record_adopted(
                    op_id,
                    vmid,
                    guest_id.clone(),
                    adopted,
                    // The kind signed for, which `adopt_check` found at the vmid (0122).
                    kind,
                )
                .await
            {
                Err(JournalError::VmidAlreadyRecorded { created_by_op, .. })
                    if created_by_op == op_id =>
                {
                    Ok(())
                }
                other => other,
            }
        };
        Ok(self
            .op
            .local_typed(StepName::RecordAdopted, detail, write)
            .await?)
    }

    /// `tag_identity`: the guest's tags with the identity added, written only onto the config
    /// the operator signed (its digest); a failed or unanswered update is judged by the tag it
    /// would have written.
    async fn tag(&self, vmid: Vmid, identity: &str, mut tags: Vec<String>) -> Result<(), JobError> {
        tags.push(identity.to_owned());
        let digest = Some(self.job.config_digest.clone());
        let detail = json!({ "vmid": self.job.vmid, "kind": self.job.kind, "identity": identity });
        let sent = match self.job.kind {
            GuestKind::Lxc => {
                let update = ConfigUpdate {
                    set: CtOptions {
                        tags,
                        ..CtOptions::default()
                    },
                    delete: Vec::new(),
                    digest,
                };
                self.op
                    .call(
                        StepName::TagIdentity,
                        detail,
                        self.pve.update_ct_config(vmid, &update),
                    )
                    .await
            }
            GuestKind::Qemu => {
                let update = VmConfigUpdate {
                    set: VmOptions {
                        tags,
                        ..VmOptions::default()
                    },
                    delete: Vec::new(),
                    digest,
                };
                self.op
                    .call(
                        StepName::TagIdentity,
                        detail,
                        self.pve.update_vm_config(vmid, &update),
                    )
                    .await
            }
        };
        let Err(failure) = sent else {
            return Ok(());
        };
        // Whatever the answer said, the tag is the truth: the update may have landed.
        match self.config_now(vmid).await {
            Ok(config) if crate::guests::reconcile::lookup::carries_identity(&config, identity) => {
                tracing::info!(
                    vmid = self.job.vmid,
                    "the identity landed although its update failed or went unanswered"
                );
                Ok(())
            }
            _ => Err(failure.into()),
        }
    }

    /// The guest's config now, read as the signed kind.
    async fn config_now(&self, vmid: Vmid) -> Result<CtConfig, PveError> {
        match self.job.kind {
            GuestKind::Lxc => self.pve.ct_config(vmid).await,
            GuestKind::Qemu => self.pve.vm_config(vmid).await,
        }
    }

    /// Takes this job's row back after a failure before the identity landed, so the
    /// container is as foreign as before; gives the failure.
    async fn take_back(&self, failure: JobError) -> JobError {
        if self.job_row_exists().await
            && let Err(e) = self
                .op
                .journal()
                .forget_guest(self.op.op_id(), self.job.vmid)
                .await
        {
            tracing::error!(vmid = self.job.vmid, error = %bosun_errchain::error_chain(&e), "could not take back the adopted container's record");
        }
        failure
    }

    /// Whether the journal's row at the vmid is this job's.
    async fn job_row_exists(&self) -> bool {
        matches!(
            self.op.journal().provenance(self.job.vmid).await,
            Ok(Some(p)) if p.created_by_op() == self.op.op_id()
        )
    }
}

/// Why `adopt_check` failed: the guest is not the signed one, or Proxmox did not answer.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    /// The guest is not adopted.
    #[error(transparent)]
    Refused(AdoptRefusal),
    /// Reading it failed.
    #[error("reading the guest from proxmox failed")]
    Pve(#[source] bosun_pve::PveError),
}
