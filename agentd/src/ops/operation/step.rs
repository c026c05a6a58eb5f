//! The closed table of journaled step names, beside [`OpKind`](crate::ops::op_kind::OpKind)'s: every step any operation
//! writes is a [`StepName`] here, with the exact name the journal stores and how replay
//! closes it when a crash left it open (the client operation its task is waited on as, and
//! the task type it is looked up by when its answer never arrived). `OpJournal` takes a
//! `StepName`, never a string, so no step can be written that replay does not know; the
//! replayers that read a kind's steps back match them without a wildcard.
//!
//! The names are what journals on disk hold and what failpoints are named after
//! (`<kind>.<step>.<phase>`, [`OpKind`](crate::ops::op_kind::OpKind)'s name first); they
//! never change, so older journals replay. A stored name no entry holds (a journal written by another version) parses to
//! `None`, which every replayer reports rather than skips.

use std::fmt;

use bosun_pve::Op;

macro_rules! step_names {
    ($($(#[$doc:meta])* $step:ident => $name:literal, waited as $op:ident, found as $found:expr,)*) => {
        /// A journaled step.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum StepName {
            $($(#[$doc])* $step,)*
        }

        impl StepName {
            /// Every step, in table order.
            pub const ALL: &'static [StepName] = &[$(StepName::$step,)*];

            /// The name the journal stores.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(StepName::$step => $name,)*
                }
            }

            /// The client operation a sent task of this step is waited on as at replay (its
            /// retry policy and error names); [`Op::TaskStatus`] for a step whose task has
            /// no operation of its own.
            pub const fn task_op(self) -> Op {
                match self {
                    $(StepName::$step => Op::$op,)*
                }
            }

            /// The task type this step's call starts, for the steps whose task can be looked
            /// up in the node's task list by type when the answer never arrived; `None` for
            /// steps judged another way (provisioning looks at the guest's tag).
            pub const fn task_type(self) -> Option<&'static str> {
                match self {
                    $(StepName::$step => $found,)*
                }
            }
        }
    };
}

step_names! {
    // Provisioning and DR restores (reconcile).
    /// The golden archive's provenance checked before it seeds a guest.
    CheckGolden => "check_golden", waited as TaskStatus, found as None,
    /// A fresh vmid asked of Proxmox.
    NextId => "next_id", waited as TaskStatus, found as None,
    /// A restore of an archive onto a vmid.
    Restore => "restore", waited as RestoreCt, found as None,
    /// A guest's configuration read.
    ReadConfig => "read_config", waited as TaskStatus, found as None,
    /// A fresh MAC and the hostname (and every link down for an in-guest reset).
    ResetIdentity => "reset_identity", waited as TaskStatus, found as None,
    /// The guest's addresses chosen and journaled (named by desired state, or from the host's
    /// pool), before anything is built.
    AssignAddress => "assign_address", waited as TaskStatus, found as None,
    /// The journaled addresses written into the new guest's `net0` as static `ip=`/`ip6=`.
    SetAddress => "set_address", waited as TaskStatus, found as None,
    /// `firewall=1` (and `ipfilter`) on every interface.
    GuardNet => "guard_net", waited as TaskStatus, found as None,
    /// The guest's firewall on.
    GuardFirewall => "guard_firewall", waited as TaskStatus, found as None,
    /// The guest's firewall options read.
    ReadFirewall => "read_firewall", waited as TaskStatus, found as None,
    /// Cores, memory, swap.
    Size => "size", waited as TaskStatus, found as None,
    /// The root volume grown (or a shrink refused).
    ResizeRootfs => "resize_rootfs", waited as ResizeDisk, found as None,
    /// A bulk volume attached as a mount point.
    BulkVolume => "bulk_volume", waited as TaskStatus, found as None,
    /// A hot volume attached as a mount point on a `fast` storage.
    HotVolume => "hot_volume", waited as TaskStatus, found as None,
    /// A VM's hot or bulk volume added as a disk whose serial names it (a synchronous
    /// config update; a lost answer is judged by the serial).
    VmVolume => "vm_volume", waited as TaskStatus, found as None,
    /// A guest started.
    Start => "start", waited as StartCt, found as None,
    /// A provisioned guest's controller record set to its golden base's signed digest (a
    /// DR-restored guest's record follows it to its vmid).
    ManageController => "manage_controller", waited as TaskStatus, found as None,
    /// The DR source chosen (the replayer reads it back).
    ChooseSource => "choose_source", waited as TaskStatus, found as None,
    /// A guest started with every link down, for its identity reset.
    StartIsolated => "start_isolated", waited as StartCt, found as None,
    /// The machine id and SSH host keys reset inside the guest.
    ResetGuestIdentity => "reset_guest_identity", waited as TaskStatus, found as None,
    /// The isolated guest shut down again.
    ShutdownIsolated => "shutdown_isolated", waited as ShutdownCt, found as None,
    /// The guest's links up again.
    LinksUp => "links_up", waited as TaskStatus, found as None,
    /// A guest's local-API token looked at before a bootstrap is issued.
    CheckToken => "check_token", waited as TaskStatus, found as None,
    /// A guest's old local-API token revoked.
    RevokeToken => "revoke_token", waited as TaskStatus, found as None,
    /// A guest's new local-API token stored.
    StoreToken => "store_token", waited as TaskStatus, found as None,
    /// A guest's bootstrap pushed into it.
    PushBootstrap => "push_bootstrap", waited as TaskStatus, found as None,
    /// A guest shut down.
    Shutdown => "shutdown", waited as ShutdownCt, found as None,
    /// A guest stopped.
    Stop => "stop", waited as TaskStatus, found as None,
    /// A guest's hostname, memory, cores, CPU weight or CPU limit changed.
    SetSpec => "set_spec", waited as TaskStatus, found as None,
    /// A guest's interfaces' rate limit changed (decision 0100).
    SetNetRate => "set_net_rate", waited as TaskStatus, found as None,
    /// A vmid replay found not ours, forgotten.
    ForgetUnclaimed => "forget_unclaimed", waited as TaskStatus, found as None,
    /// A guest destroyed (a signed decommission).
    Destroy => "destroy", waited as TaskStatus, found as None,
    /// A restore that landed after its operation gave it up, destroyed.
    LateLanding => "late_landing", waited as TaskStatus, found as None,
    /// A rollback's stop of what the operation created.
    CompensateStop => "compensate_stop", waited as StopCt, found as None,
    /// A rollback's destroy of what the operation created.
    CompensateDestroy => "compensate_destroy", waited as DestroyCt, found as None,
    /// A VM restored from its golden archive with its identity (decision 0114).
    RestoreVm => "restore_vm", waited as RestoreVm, found as None,
    /// A new VM's identity and guard read back from its config.
    CheckVmIdentity => "check_vm_identity", waited as TaskStatus, found as None,
    /// A VM started.
    StartVm => "start_vm", waited as StartVm, found as None,
    /// A new VM's guest agent waited for (`agent/ping`, bounded).
    AgentPing => "agent_ping", waited as TaskStatus, found as None,
    /// A VM's bootstrap written through its guest agent (`agent/file-write`).
    WriteBootstrap => "write_bootstrap", waited as TaskStatus, found as None,
    /// A VM shut down (the timeout, then forced off, as a container's `shutdown`).
    ShutdownVm => "shutdown_vm", waited as ShutdownVm, found as None,
    /// A VM's root disk grown (a shrink is never sent).
    ResizeVmDisk => "resize_vm_disk", waited as ResizeVmDisk, found as None,
    /// A rollback's stop of the VM the operation created.
    CompensateStopVm => "compensate_stop_vm", waited as StopVm, found as None,
    /// A rollback's destroy of the VM the operation created.
    CompensateDestroyVm => "compensate_destroy_vm", waited as DestroyVm, found as None,

    // Snapshots, rollbacks and controller rollouts.
    /// A snapshot taken.
    Snapshot => "snapshot", waited as CreateSnapshot, found as Some("vzsnapshot"),
    /// A guest rolled back to a snapshot.
    Rollback => "rollback", waited as RollbackSnapshot, found as Some("vzrollback"),
    /// The bootstrap a rollback brought back looked at.
    CheckBootstrap => "check_bootstrap", waited as TaskStatus, found as None,
    /// The new controller digest announced to the guest.
    Announce => "announce", waited as TaskStatus, found as None,
    /// The signed controller image placed in the guest and the controller restarted on it
    /// (the helper's `restart_controller` with the digest).
    Place => "place", waited as TaskStatus, found as None,
    /// The controller's health report waited for.
    AwaitHealth => "await_health", waited as TaskStatus, found as None,
    /// The rollout committed.
    Commit => "commit", waited as TaskStatus, found as None,
    /// The rollout reverted.
    Revert => "revert", waited as TaskStatus, found as None,
    /// A silent guest restarted in place.
    Heal => "heal", waited as TaskStatus, found as None,
    /// A guest that stayed silent reported broken.
    Break => "break", waited as TaskStatus, found as None,

    // Backups and restore tests.
    /// A signed force-backup's vzdump.
    Backup => "backup", waited as TaskStatus, found as None,
    /// A vzdump.
    Vzdump => "vzdump", waited as Vzdump, found as Some("vzdump"),
    /// The archive a restore test restores chosen.
    ChooseArchive => "choose_archive", waited as TaskStatus, found as None,
    /// The scratch guest isolated before its first start.
    Isolate => "isolate", waited as TaskStatus, found as None,
    /// The scratch guest stayed up for its time.
    StayedUp => "stayed_up", waited as TaskStatus, found as None,
    /// The scratch guest checked its own data.
    RestoreCheck => "restore_check", waited as TaskStatus, found as None,

    // Signed jobs.
    /// A signed job accepted (the first step of every job).
    Accepted => "accepted", waited as TaskStatus, found as None,
    /// A signed restore's DR restore.
    DrRestore => "dr_restore", waited as TaskStatus, found as None,
    /// A signed restore over a guest in place.
    RestoreOverwrite => "restore_overwrite", waited as TaskStatus, found as None,
    /// A storage detached: its Proxmox storage deleted.
    DeleteStorage => "delete_storage", waited as TaskStatus, found as None,
    /// A storage detached: its mount taken down through the helper.
    Unmount => "unmount", waited as TaskStatus, found as None,
    /// A storage wiped: one archive the journal recorded on it deleted (task `imgdel`, whose
    /// id is `<vmid>@<storage>`, not a vmid: the wipe looks for it among the node's running
    /// tasks itself).
    DeleteArchive => "delete_archive", waited as DeleteVolume, found as None,
    /// A bulk volume's archive re-hashed and put back by the helper's `bulk_restore`
    /// (asked once more when its answer was lost: the helper finishes or redoes it).
    RestoreBulk => "restore_bulk", waited as TaskStatus, found as None,
    /// An agent update downloaded.
    Download => "download", waited as TaskStatus, found as None,
    /// An agent update staged through the helper.
    Stage => "stage", waited as TaskStatus, found as None,
    /// A break-glass session opened through the helper.
    HelperOpen => "helper.open", waited as TaskStatus, found as None,
    /// A break-glass session closed through the helper.
    HelperClose => "helper.close", waited as TaskStatus, found as None,
    /// An adopted container checked against what the operator signed (a read only).
    AdoptCheck => "adopt_check", waited as TaskStatus, found as None,
    /// An adopted container recorded in the journal as this agent's guest.
    RecordAdopted => "record_adopted", waited as TaskStatus, found as None,
    /// The agent's identity written into an adopted container's tags (a synchronous config
    /// update; a lost answer is judged by the tag).
    TagIdentity => "tag_identity", waited as TaskStatus, found as None,
}

impl StepName {
    /// Whether a job's signed timeout holds this step back once it has passed
    /// ([`crate::ops::operation::Deadline`]): every step that begins new work does; the
    /// steps that only finish or undo what the job began (or only read) do not, so a timed
    /// out job leaves the host as a failure at the same point would.
    pub const fn held_to_deadline(self) -> bool {
        !matches!(
            self,
            StepName::Start
                | StepName::ReadConfig
                | StepName::ReadFirewall
                | StepName::CheckBootstrap
                | StepName::AwaitHealth
                | StepName::Commit
                | StepName::Revert
                | StepName::Rollback
                | StepName::Heal
                | StepName::Break
                | StepName::CompensateStop
                | StepName::CompensateDestroy
                | StepName::CompensateStopVm
                | StepName::CompensateDestroyVm
                | StepName::CheckVmIdentity
                | StepName::HelperClose
        )
    }
}

impl StepName {
    /// The step a stored name stands for; `None` for a name no step has (a journal written
    /// by another version), which the replayers report.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for StepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<StepName> for String {
    fn eq(&self, other: &StepName) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<StepName> for str {
    fn eq(&self, other: &StepName) -> bool {
        self == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::StepName;

    /// Every name journals on disk hold today, written out byte for byte: each still parses
    /// to its step, so an older journal replays; and the table holds no step beyond them
    /// (a new one is added here too, as a visible diff).
    const ON_DISK: &[(&str, StepName)] = &[
        ("check_golden", StepName::CheckGolden),
        ("next_id", StepName::NextId),
        ("restore", StepName::Restore),
        ("read_config", StepName::ReadConfig),
        ("reset_identity", StepName::ResetIdentity),
        ("assign_address", StepName::AssignAddress),
        ("set_address", StepName::SetAddress),
        ("guard_net", StepName::GuardNet),
        ("guard_firewall", StepName::GuardFirewall),
        ("read_firewall", StepName::ReadFirewall),
        ("size", StepName::Size),
        ("resize_rootfs", StepName::ResizeRootfs),
        ("bulk_volume", StepName::BulkVolume),
        ("hot_volume", StepName::HotVolume),
        ("vm_volume", StepName::VmVolume),
        ("start", StepName::Start),
        ("choose_source", StepName::ChooseSource),
        ("start_isolated", StepName::StartIsolated),
        ("reset_guest_identity", StepName::ResetGuestIdentity),
        ("shutdown_isolated", StepName::ShutdownIsolated),
        ("links_up", StepName::LinksUp),
        ("push_bootstrap", StepName::PushBootstrap),
        ("shutdown", StepName::Shutdown),
        ("stop", StepName::Stop),
        ("set_spec", StepName::SetSpec),
        ("set_net_rate", StepName::SetNetRate),
        ("forget_unclaimed", StepName::ForgetUnclaimed),
        ("compensate_stop", StepName::CompensateStop),
        ("compensate_destroy", StepName::CompensateDestroy),
        ("snapshot", StepName::Snapshot),
        ("rollback", StepName::Rollback),
        ("check_bootstrap", StepName::CheckBootstrap),
        ("announce", StepName::Announce),
        ("place", StepName::Place),
        ("await_health", StepName::AwaitHealth),
        ("commit", StepName::Commit),
        ("revert", StepName::Revert),
        ("heal", StepName::Heal),
        ("break", StepName::Break),
        ("vzdump", StepName::Vzdump),
        ("choose_archive", StepName::ChooseArchive),
        ("isolate", StepName::Isolate),
        ("stayed_up", StepName::StayedUp),
        ("restore_check", StepName::RestoreCheck),
        ("accepted", StepName::Accepted),
        ("dr_restore", StepName::DrRestore),
        ("download", StepName::Download),
        ("stage", StepName::Stage),
        ("helper.open", StepName::HelperOpen),
        ("helper.close", StepName::HelperClose),
        ("destroy", StepName::Destroy),
        ("late_landing", StepName::LateLanding),
        ("check_token", StepName::CheckToken),
        ("revoke_token", StepName::RevokeToken),
        ("store_token", StepName::StoreToken),
        ("backup", StepName::Backup),
        ("restore_overwrite", StepName::RestoreOverwrite),
        ("delete_storage", StepName::DeleteStorage),
        ("unmount", StepName::Unmount),
        ("delete_archive", StepName::DeleteArchive),
        ("restore_bulk", StepName::RestoreBulk),
        ("manage_controller", StepName::ManageController),
        ("adopt_check", StepName::AdoptCheck),
        ("record_adopted", StepName::RecordAdopted),
        ("tag_identity", StepName::TagIdentity),
        ("restore_vm", StepName::RestoreVm),
        ("check_vm_identity", StepName::CheckVmIdentity),
        ("start_vm", StepName::StartVm),
        ("agent_ping", StepName::AgentPing),
        ("write_bootstrap", StepName::WriteBootstrap),
        ("compensate_stop_vm", StepName::CompensateStopVm),
        ("compensate_destroy_vm", StepName::CompensateDestroyVm),
        ("shutdown_vm", StepName::ShutdownVm),
        ("resize_vm_disk", StepName::ResizeVmDisk),
    ];

    #[test]
    fn every_name_on_disk_parses_to_its_step() {
        for (name, step) in ON_DISK {
            assert_eq!(StepName::parse(name), Some(*step), "{name}");
            assert_eq!(step.as_str(), *name);
        }
        assert_eq!(
            ON_DISK.len(),
            StepName::ALL.len(),
            "a step of the table is missing from the names on disk"
        );
    }

    #[test]
    fn every_step_has_one_name() {
        let mut names: Vec<&str> = StepName::ALL.iter().map(|s| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), StepName::ALL.len(), "two steps share a name");
    }

    #[test]
    fn a_name_no_step_has_is_refused() {
        for name in [
            "",
            "Restore",
            "restore ",
            "resize-rootfs",
            "helper",
            "helper.open.x",
        ] {
            assert_eq!(StepName::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn only_steps_with_a_findable_task_are_looked_up() {
        assert_eq!(StepName::Snapshot.task_type(), Some("vzsnapshot"));
        assert_eq!(StepName::Rollback.task_type(), Some("vzrollback"));
        assert_eq!(StepName::Vzdump.task_type(), Some("vzdump"));
        assert_eq!(StepName::Restore.task_type(), None);
        assert_eq!(StepName::CheckBootstrap.task_type(), None);
    }
}
