//! `restart_controller`: `pct exec <vmid> -- /usr/bin/systemctl restart
//! bosun-bootstrap.service`, every argument fixed but the vmid.

use bosun_proto::helper::{CONTROLLER_UNIT, Output};
use bosun_proto::helper::{RESTART_CONTROLLER_ARGV, RestartController};

use crate::config::Config;
use crate::error::HelperError;
use crate::exec;

/// Restarts the controller's unit inside the running guest (Proxmox's API has no way to run
/// a command in a container, so this is the one fixed command the helper runs there).
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
