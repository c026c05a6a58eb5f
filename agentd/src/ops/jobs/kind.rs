//! The job kinds this agent runs: one closed table, one row ([`KindRow`]) per kind of the
//! signed document ([`WireKind`]), stating
//!
//! - the journaled operation kind a run of it is recorded as ([`OpKind`]; its replay entry
//!   sends an interrupted run back to [`super::runner::JobRunner::resume`]);
//! - its gate rule: the [`GateKind`] its [`crate::trust::gate::JobAuthority`] carries, which says
//!   what destructive actions the signature covers;
//! - how it runs ([`Runs`]): the family ([`super::family::JobFamily`]) that reads its
//!   typed parameters into the `accepted` step it journals, runs it once claimed and resumes
//!   it after a crash.
//!
//! The rows are the table: [`KindRow::of`] and [`KindRow::ALL`] are generated from them, so
//! a wire kind without a row does not compile, and every dispatch on a kind matches on
//! [`Runs`] without a wildcard. Nothing dispatches on a kind's name: a name no row has is
//! refused by the check ([`super::check`]) and never runs as another kind.
//!
//! | kind | operation | gate | runs |
//! |---|---|---|---|
//! | `restore-now` | `restore_job` | `Restore` | on its guest: `RestoreOverGuest` |
//! | `decommission` | `decommission_job` | `Decommission` | on its guest: `DecommissionGuest` |
//! | `force-backup` | `force_backup_job` | `ForceBackup` | on its guest: `Backup` |
//! | `storage-detach` | `storage_detach_job` | `StorageDetach` | the detach ([`super::detach`]) |
//! | `storage-wipe` | `storage_wipe_job` | `StorageWipe` | the wipe ([`super::wipe`]) |
//! | `controller-update` | `controller_update_job` | `ControllerUpdate` | a rollout |
//! | `break-glass-enable` | `break_glass_job` | `BreakGlassEnable` | the door, opened |
//! | `break-glass-disable` | `break_glass_job` | `BreakGlassDisable` | the door, closed |
//! | `agent-update` | `agent_update_job` | `AgentUpdate` | download and stage |
//! | `adopt` | `adopt_job` | `Adopt` | the adoption (`adopt_run`) |
//! | `restore-bulk` | `restore_bulk_job` | `RestoreBulk` | the bulk restore (`bulk_restore_run`) |

use bosun_proto::job::JobKind as WireKind;

use crate::ops::operation::OpKind;
use crate::trust::gate::{Action, JobKind as GateKind};

/// What a job on one guest does ([`super::execute`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuestAction {
    /// Restore a backup over the guest (or bring a lost guest back).
    Restore,
    /// Destroy the guest with purge and retire its record.
    Decommission,
    /// Back the guest up now.
    ForceBackup,
}

impl GuestAction {
    /// The action it asks the gate for.
    pub(crate) const fn asks(self) -> Action {
        match self {
            GuestAction::Restore => Action::RestoreOverGuest,
            GuestAction::Decommission => Action::DecommissionGuest,
            GuestAction::ForceBackup => Action::Backup,
        }
    }
}

/// What a break-glass job does with the door ([`crate::trust::break_glass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// Open it for the job's key until its deadline.
    Open,
    /// Close it before its deadline.
    Close,
}

/// How a kind runs: which family reads its parameters, runs and resumes it
/// ([`super::dispatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runs {
    /// On one guest, in its queue slot ([`super::guest_run`]).
    Guest(GuestAction),
    /// A storage detach ([`super::detach`]).
    StorageDetach,
    /// A storage wipe ([`super::wipe`]).
    StorageWipe,
    /// A controller rollout ([`super::controller_run`]).
    ControllerUpdate,
    /// The break-glass door ([`super::break_glass_run`]).
    BreakGlass(Door),
    /// An agent update ([`super::update_run`]).
    AgentUpdate,
    /// A container adopted (`adopt_run`).
    Adopt,
    /// A bulk volume's archive put back (`bulk_restore_run`).
    RestoreBulk,
}

impl Runs {
    /// What a guest kind does; `None` for the other families.
    pub(crate) const fn guest_action(self) -> Option<GuestAction> {
        match self {
            Runs::Guest(action) => Some(action),
            Runs::StorageDetach
            | Runs::StorageWipe
            | Runs::ControllerUpdate
            | Runs::BreakGlass(_)
            | Runs::AgentUpdate
            | Runs::Adopt
            | Runs::RestoreBulk => None,
        }
    }

    /// The door a break-glass kind opens or closes; `None` for the other families.
    pub(crate) const fn door(self) -> Option<Door> {
        match self {
            Runs::BreakGlass(door) => Some(door),
            Runs::Guest(_)
            | Runs::StorageDetach
            | Runs::StorageWipe
            | Runs::ControllerUpdate
            | Runs::AgentUpdate
            | Runs::Adopt
            | Runs::RestoreBulk => None,
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KindRow {
    /// The kind, as the signed document names it.
    pub(crate) kind: WireKind,
    /// The operation a run of it is journaled as.
    pub(crate) op: OpKind,
    /// The job kind the gate sees.
    pub(crate) gate: GateKind,
    /// How it runs.
    pub(crate) runs: Runs,
}

macro_rules! job_kinds {
    ($($kind:ident => op $op:ident, gate $gate:ident, runs $runs:expr;)*) => {
        impl KindRow {
            /// Every row, in table order.
            pub(crate) const ALL: &'static [KindRow] = &[$(KindRow::of(WireKind::$kind),)*];

            /// The row of `kind`.
            pub(crate) const fn of(kind: WireKind) -> KindRow {
                match kind {
                    $(WireKind::$kind => KindRow {
                        kind: WireKind::$kind,
                        op: OpKind::$op,
                        gate: GateKind::$gate,
                        runs: $runs,
                    },)*
                }
            }
        }
    };
}

job_kinds! {
    RestoreNow => op RestoreJob, gate Restore, runs Runs::Guest(GuestAction::Restore);
    Decommission => op DecommissionJob, gate Decommission, runs Runs::Guest(GuestAction::Decommission);
    ForceBackup => op ForceBackupJob, gate ForceBackup, runs Runs::Guest(GuestAction::ForceBackup);
    StorageDetach => op StorageDetachJob, gate StorageDetach, runs Runs::StorageDetach;
    ControllerUpdate => op ControllerUpdateJob, gate ControllerUpdate, runs Runs::ControllerUpdate;
    BreakGlassEnable => op BreakGlassJob, gate BreakGlassEnable, runs Runs::BreakGlass(Door::Open);
    BreakGlassDisable => op BreakGlassJob, gate BreakGlassDisable, runs Runs::BreakGlass(Door::Close);
    AgentUpdate => op AgentUpdateJob, gate AgentUpdate, runs Runs::AgentUpdate;
    Adopt => op AdoptJob, gate Adopt, runs Runs::Adopt;
    StorageWipe => op StorageWipeJob, gate StorageWipe, runs Runs::StorageWipe;
    RestoreBulk => op RestoreBulkJob, gate RestoreBulk, runs Runs::RestoreBulk;
}

impl KindRow {
    /// The row of the kind named `name` (`restore-now`, …); `None` for a name no row has.
    pub(crate) fn parse(name: &str) -> Option<KindRow> {
        Self::ALL.iter().copied().find(|row| row.name() == name)
    }

    /// The row that resumes an interrupted operation of kind `op`; `None` when no job is
    /// journaled as `op`. Rows sharing an operation kind share their family (both
    /// break-glass kinds): the first is given, and the family reads which kind ran from the
    /// job's `accepted` step.
    pub(crate) fn resuming(op: OpKind) -> Option<KindRow> {
        Self::ALL.iter().copied().find(|row| row.op == op)
    }

    /// The kind's name, as the signed document spells it.
    pub(crate) fn name(self) -> &'static str {
        self.kind.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::operation::Replayer;

    #[test]
    fn every_kind_round_trips_its_name_and_operation_kind() {
        assert_eq!(KindRow::ALL.len(), 11);
        for row in KindRow::ALL {
            assert_eq!(KindRow::of(row.kind), *row);
            assert_eq!(KindRow::parse(row.name()), Some(*row), "{}", row.name());
            // The document's own spelling is the table's.
            let wire: WireKind =
                serde_json::from_value(serde_json::json!(row.name())).expect("a wire kind");
            assert_eq!(wire, row.kind);
            assert_eq!(OpKind::parse(row.op.as_str()), Some(row.op));
            assert_eq!(row.op.replayer(), Replayer::Job, "{}", row.name());
            let resumer = KindRow::resuming(row.op).expect("a row resumes its operation kind");
            assert_eq!(resumer.op, row.op);
            assert_eq!(
                std::mem::discriminant(&resumer.runs),
                std::mem::discriminant(&row.runs),
                "{}: resumed by another family",
                row.name()
            );
        }
        let mut names: Vec<&str> = KindRow::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KindRow::ALL.len(), "two rows share a name");
        for gate in GateKind::ALL {
            assert!(KindRow::ALL.iter().any(|r| r.gate == *gate), "{gate:?}");
        }
    }

    #[test]
    fn every_operation_kind_the_job_replayer_owns_has_a_row() {
        for op in OpKind::ALL {
            assert_eq!(
                op.replayer() == Replayer::Job,
                KindRow::resuming(*op).is_some(),
                "{op}"
            );
        }
    }

    #[test]
    fn a_name_no_row_has_is_unknown() {
        for name in [
            "",
            "frobnicate",
            "RESTORE-NOW",
            "restore_now",
            "restore_job",
            "force-backup ",
        ] {
            assert_eq!(KindRow::parse(name), None, "{name:?}");
        }
    }
}
