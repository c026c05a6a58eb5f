//! Looking in Proxmox for the task of a step whose answer never arrived (DESIGN §9:
//! "look before you decide"): the node's task list, by guest, task type and start time
//! ([`find_task`]); this names the task type each step's call starts.

pub use bosun_pve::find_task;

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
