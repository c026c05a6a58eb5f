//! Which kind of guest — a container or a QEMU VM — holds a vmid a signed job names, and
//! whether it is the journal's guest (DESIGN §5, §8b).
//!
//! The journal records a guest's vmid and the identity tag the agent wrote into its config,
//! not its kind: Proxmox keeps one vmid space for both, so the config that exists at the vmid
//! says which it is. A guest is the journal's only while its config carries the identity; a
//! job never acts on a vmid whose config (of either kind) lacks it.

use bosun_pve::{GuestStatus, Pve, PveError, PveQemu, Vmid};

use crate::guests::reconcile::lookup::has_tag;

/// The kind of guest at a vmid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Machine {
    /// An LXC container (`/nodes/{node}/lxc/{vmid}`).
    Container,
    /// A QEMU virtual machine (`/nodes/{node}/qemu/{vmid}`).
    Vm,
}

impl Machine {
    /// The word the job's results and logs use.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Container => "lxc",
            Self::Vm => "qemu",
        }
    }

    /// The kind of guest it is, as the journal records kinds.
    pub(super) fn kind(self) -> bosun_proto::desired::GuestKind {
        match self {
            Self::Container => bosun_proto::desired::GuestKind::Lxc,
            Self::Vm => bosun_proto::desired::GuestKind::Qemu,
        }
    }
}

/// What holds a vmid the journal records, by the identity the agent wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// No guest of either kind has the vmid.
    Nobody,
    /// The guest carries the journaled identity: it is the journal's guest, of this kind.
    Ours(Machine),
    /// A guest (of this kind) without the journaled identity: never touched on the
    /// journal's behalf.
    Stranger(Machine),
}

/// Looks at `vmid` as a container, then as a VM, and says whether it holds the guest with
/// `identity`.
pub(super) async fn held<P: Pve + PveQemu>(
    pve: &P,
    vmid: Vmid,
    identity: &str,
) -> Result<Held, PveError> {
    match pve.ct_config(vmid).await {
        Ok(config) if has_tag(config.get_str("tags").as_deref(), identity) => {
            return Ok(Held::Ours(Machine::Container));
        }
        Ok(_) => return Ok(Held::Stranger(Machine::Container)),
        Err(e) if e.is_missing() => {}
        Err(e) => return Err(e),
    }
    match pve.vm_config(vmid).await {
        Ok(config) if has_tag(config.get_str("tags").as_deref(), identity) => {
            Ok(Held::Ours(Machine::Vm))
        }
        Ok(_) => Ok(Held::Stranger(Machine::Vm)),
        Err(e) if e.is_missing() => Ok(Held::Nobody),
        Err(e) => Err(e),
    }
}

/// Whether any guest, container or VM, holds `vmid`.
pub(super) async fn occupied<P: Pve + PveQemu>(pve: &P, vmid: Vmid) -> Result<bool, PveError> {
    match pve.ct_config(vmid).await {
        Ok(_) => return Ok(true),
        Err(e) if e.is_missing() => {}
        Err(e) => return Err(e),
    }
    match pve.vm_config(vmid).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_missing() => Ok(false),
        Err(e) => Err(e),
    }
}

/// A guest's run state and lock, whichever its kind.
pub(super) struct State {
    /// Running, stopped …
    pub(super) status: GuestStatus,
    /// Its config lock, if any.
    pub(super) lock: Option<String>,
}

/// The run state of `vmid` as `machine`.
pub(super) async fn state<P: Pve + PveQemu>(
    pve: &P,
    machine: Machine,
    vmid: Vmid,
) -> Result<State, PveError> {
    Ok(match machine {
        Machine::Container => {
            let s = pve.ct_status(vmid).await?;
            State {
                status: s.status,
                lock: s.lock,
            }
        }
        Machine::Vm => {
            let s = pve.vm_status(vmid).await?;
            State {
                status: s.status,
                lock: s.lock,
            }
        }
    })
}
