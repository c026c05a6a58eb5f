//! The kinds of journaled operation and the replay registry: one closed table naming, for
//! every kind, the name the journal stores and who replays it at start. A kind cannot be
//! added without its replay entry, and no code can begin an operation of a kind the table
//! does not hold ([`crate::ops::journal::NewOperation`] takes an [`OpKind`]).
//!
//! The names are what the journal stores and what failpoints are named after
//! (`<kind>.<step>.<phase>`); they never change, so older journals replay.

use std::fmt;

/// Who finishes an operation of a kind that a crash or stop left `running`
/// ([`crate::ops::operation::replay`] dispatches on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replayer {
    /// [`crate::guests::reconcile::replay`]: provisioning resumed or rolled back, reconcile actions
    /// closed for the next pass, before the first pass.
    Reconcile,
    /// [`crate::ops::jobs::runner::JobRunner::resume`]: a signed job runs on from its `accepted` step.
    Job,
    /// The backup service's start-up pass: a sent vzdump is followed to its end.
    Backup,
    /// The local API's start-up pass: an interrupted snapshot or rollback is looked up in
    /// Proxmox and closed with what happened.
    LocalApi,
    /// The restore tester's start-up pass: the scratch guest of an interrupted test is
    /// destroyed and the test recorded `interrupted`.
    RestoreTest,
}

macro_rules! op_kinds {
    ($($(#[$doc:meta])* $kind:ident => $name:literal by $replayer:ident,)*) => {
        /// What a journaled operation does.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum OpKind {
            $($(#[$doc])* $kind,)*
        }

        impl OpKind {
            /// Every kind, in table order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind,)*];

            /// The name the journal stores.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(OpKind::$kind => $name,)*
                }
            }

            /// Who replays an unfinished operation of this kind.
            pub const fn replayer(self) -> Replayer {
                match self {
                    $(OpKind::$kind => Replayer::$replayer,)*
                }
            }
        }
    };
}

op_kinds! {
    /// Provisioning a guest from the golden archive.
    Provision => "provision" by Reconcile,
    /// Provisioning a QEMU guest from its signed VM golden archive (decision 0114).
    ProvisionVm => "provision_vm" by Reconcile,
    /// Changing a guest's hostname, memory or cores.
    SetSpec => "set_spec" by Reconcile,
    /// Growing a guest's root volume.
    GrowRootfs => "grow_rootfs" by Reconcile,
    /// Starting a guest.
    Start => "start" by Reconcile,
    /// Stopping a guest.
    Stop => "stop" by Reconcile,
    /// Pushing a guest's bootstrap on a later pass.
    DeliverBootstrap => "deliver_bootstrap" by Reconcile,
    /// Re-issuing a guest's bootstrap with a fresh token.
    ReissueBootstrap => "reissue_bootstrap" by Reconcile,
    /// Putting the network guard (firewall, `ipfilter`) on a guest that lacks it.
    GuardNetwork => "guard_network" by Reconcile,
    /// A signed `restore-now` job.
    RestoreJob => "restore_job" by Job,
    /// A signed `decommission` job.
    DecommissionJob => "decommission_job" by Job,
    /// A signed `force-backup` job.
    ForceBackupJob => "force_backup_job" by Job,
    /// A signed `storage-detach` job.
    StorageDetachJob => "storage_detach_job" by Job,
    /// A signed `storage-wipe` job.
    StorageWipeJob => "storage_wipe_job" by Job,
    /// A signed `restore-bulk` job: a bulk volume's archive put back (decision 0108).
    RestoreBulkJob => "restore_bulk_job" by Job,
    /// A backup asked for by a guest's controller or the policy scheduler.
    Backup => "backup" by Backup,
    /// A snapshot asked for by a guest's controller.
    Snapshot => "localapi.snapshot" by LocalApi,
    /// A rollback asked for by a guest's controller.
    Rollback => "localapi.rollback" by LocalApi,
    /// A restore test: a guest's backup restored into a scratch guest, started, destroyed.
    RestoreTest => "restore_test" by RestoreTest,
    /// A new golden build's boot test: the archive restored into a scratch guest, started,
    /// seen running, destroyed, before guests are provisioned from it.
    GoldenVerify => "golden_verify" by RestoreTest,
    /// Disaster recovery of a lost guest from its fastest surviving backup tier.
    Recover => "dr_restore" by Reconcile,
    /// Disaster recovery of a lost QEMU guest from its newest archive proven as a VM's
    /// (decision 0121).
    RecoverVm => "dr_restore_vm" by Reconcile,
    /// A signed `controller-update` job: snapshot, announce the digest, wait for the
    /// controller's health report, commit or roll back to the snapshot.
    ControllerUpdateJob => "controller_update_job" by Job,
    /// A signed `break-glass-enable` or `break-glass-disable` job.
    BreakGlassJob => "break_glass_job" by Job,
    /// A signed `agent-update` job: download, check, stage through the helper.
    AgentUpdateJob => "agent_update_job" by Job,
    /// Destroying a guest that a restore, taken as never carried out, created after all
    /// (a late landing): the sending operation's own creation, through the gate.
    LateLandingSweep => "late_landing_sweep" by Reconcile,
    /// A signed `adopt` job: a container that was on the node before Bosun checked against
    /// what the operator signed, given the agent's identity and recorded as its guest.
    AdoptJob => "adopt_job" by Job,
}

impl OpKind {
    /// The kind a stored name stands for; `None` for a name no kind has (a journal written
    /// by another version), which replay closes as failed.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::{OpKind, Replayer};

    #[test]
    fn every_kind_has_one_name_and_round_trips() {
        for kind in OpKind::ALL {
            assert_eq!(OpKind::parse(kind.as_str()), Some(*kind));
        }
        let mut names: Vec<&str> = OpKind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OpKind::ALL.len(), "two kinds share a name");
    }

    #[test]
    fn a_name_no_kind_has_is_unregistered() {
        assert_eq!(OpKind::parse("restore-test"), None);
        assert_eq!(OpKind::parse(""), None);
        assert_eq!(OpKind::parse("PROVISION"), None);
    }

    #[test]
    fn every_replayer_owns_a_kind() {
        for replayer in [
            Replayer::Reconcile,
            Replayer::Job,
            Replayer::Backup,
            Replayer::LocalApi,
        ] {
            assert!(
                OpKind::ALL.iter().any(|k| k.replayer() == replayer),
                "{replayer:?} replays nothing"
            );
        }
    }
}
