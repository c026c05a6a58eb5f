//! Looking in Proxmox for the task of a step whose answer never arrived (DESIGN §9:
//! "look before you decide"): the node's task list, by guest, task type and start time
//! ([`find_task`]); the task type each step's call starts is a column of the step table
//! ([`super::StepName::task_type`]).

pub use bosun_pve::find_task;
