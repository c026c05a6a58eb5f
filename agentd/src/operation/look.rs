//! Looking in Proxmox for the task of a step whose answer never arrived (DESIGN §9:
//! "look before you decide"): the node's task list, by guest, task type and start time.

use jiff::Timestamp;

use crate::pve::{Pve, PveError, TaskFilter, Upid, Vmid};

/// The task type a step's call starts, for the steps whose task can be looked up by type;
/// `None` for steps that are judged another way (provisioning looks at the guest's tag).
pub fn task_type_of(step: &str) -> Option<&'static str> {
    match step {
        "snapshot" => Some("vzsnapshot"),
        "rollback" => Some("vzrollback"),
        "vzdump" => Some("vzdump"),
        _ => None,
    }
}

/// The first task of `task_type` on `vmid` that started no earlier than a second before
/// `intent_at` (the step's intent is written before its call; PVE counts whole seconds).
pub async fn find_task<P: Pve>(
    pve: &P,
    vmid: Vmid,
    task_type: &'static str,
    intent_at: Timestamp,
) -> Result<Option<Upid>, PveError> {
    let since = u64::try_from(intent_at.as_second().saturating_sub(1)).unwrap_or(0);
    let filter = TaskFilter {
        vmid,
        task_type,
        since,
    };
    let tasks = pve.list_tasks(filter).await?;
    Ok(tasks.into_iter().next().map(|t| t.upid))
}

#[cfg(test)]
mod tests {
    use super::task_type_of;

    #[test]
    fn only_steps_with_a_findable_task_are_looked_up() {
        assert_eq!(task_type_of("snapshot"), Some("vzsnapshot"));
        assert_eq!(task_type_of("rollback"), Some("vzrollback"));
        assert_eq!(task_type_of("vzdump"), Some("vzdump"));
        assert_eq!(task_type_of("restore"), None);
        assert_eq!(task_type_of("check_bootstrap"), None);
    }
}
