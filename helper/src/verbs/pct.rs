//! The verbs that run fixed commands inside a running guest through `pct exec <vmid> --`
//! (Proxmox's API has no way to run a command in a container), every argument fixed but the
//! vmid. `pct exec` enters the container's namespaces as its root, so a path inside the
//! guest (a symlink its owner planted) resolves within the guest, never on the host.
//!
//! - `restart_controller`: `/usr/bin/systemctl restart bosun-bootstrap.service`.
//! - `reset_guest_identity`: each of [`RESET_GUEST_IDENTITY_COMMANDS`] in turn.

use bosun_proto::helper::{CONTROLLER_UNIT, Output};
use bosun_proto::helper::{RESET_GUEST_IDENTITY_COMMANDS, ResetGuestIdentity};
use bosun_proto::helper::{RESTART_CONTROLLER_ARGV, RestartController};

use crate::config::Config;
use crate::error::HelperError;
use crate::exec;

/// Restarts the controller's unit inside the running guest.
pub fn restart_controller(a: &RestartController, config: &Config) -> Result<Output, HelperError> {
    let vmid = a.vmid.to_string();
    let argv: Vec<&str> = ["exec", &vmid]
        .into_iter()
        .chain(RESTART_CONTROLLER_ARGV)
        .collect();
    exec::run(&config.programs.pct, &argv, &[0])?;
    let unit = CONTROLLER_UNIT.to_owned();
    Ok(Output::ControllerRestarted { vmid: a.vmid, unit })
}

/// The `pct` argument vectors of `reset_guest_identity` for `vmid`, in order.
pub(crate) fn reset_guest_identity_argvs(vmid: &str) -> Vec<Vec<&str>> {
    RESET_GUEST_IDENTITY_COMMANDS
        .iter()
        .map(|command| {
            ["exec", vmid, "--"]
                .into_iter()
                .chain(command.iter().copied())
                .collect()
        })
        .collect()
}

/// Removes the SSH host keys and empties the machine id inside the running guest; the first
/// command that fails stops the verb with its words.
pub fn reset_guest_identity(
    a: &ResetGuestIdentity,
    config: &Config,
) -> Result<Output, HelperError> {
    let vmid = a.vmid.to_string();
    for argv in reset_guest_identity_argvs(&vmid) {
        exec::run(&config.programs.pct, &argv, &[0])?;
    }
    Ok(Output::GuestIdentityReset { vmid: a.vmid })
}
