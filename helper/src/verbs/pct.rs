//! The verbs that run fixed commands inside a running guest through `pct exec <vmid> --`
//! (Proxmox's API has no way to run a command in a container), every argument fixed but the
//! vmid. `pct exec` enters the container's namespaces as its root, so a path inside the
//! guest (a symlink its owner planted) resolves within the guest, never on the host.
//!
//! - `restart_controller`: `/usr/bin/systemctl restart bosun-bootstrap.service`.
//! - `reset_guest_identity`: each of [`RESET_GUEST_IDENTITY_COMMANDS`] in turn.
//! - `restore_check`: only in a guest whose `pct config --current` carries every scratch mark
//!   of a restore test ([`scratch_marks`]: no link up, no mount point, its scratch hostname),
//!   so it never runs code in a guest that can reach anything; [`RESTORE_CHECK_PROBE`], then
//!   [`RESTORE_CHECK_PATH`] bounded in time and output.

use std::time::Duration;

use bosun_proto::helper::{CONTROLLER_UNIT, Output};
use bosun_proto::helper::{RESET_GUEST_IDENTITY_COMMANDS, ResetGuestIdentity};
use bosun_proto::helper::{RESTART_CONTROLLER_ARGV, RestartController};
use bosun_proto::helper::{RESTORE_CHECK_MAX_BYTES, RESTORE_CHECK_PATH, RESTORE_CHECK_PROBE};
use bosun_proto::helper::{RestoreCheck, SCRATCH_HOSTNAME_PREFIX, restore_check_lines};

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
    exec::run(&config.programs.pct, &argv, exec::limit::RESTART, &[0])?;
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
        exec::run(&config.programs.pct, &argv, exec::limit::QUICK, &[0])?;
    }
    Ok(Output::GuestIdentityReset { vmid: a.vmid })
}

/// Why `pct config <vmid> --current` (`key: value` lines, up to any `[section]`) does not
/// show a restore test's scratch guest: its hostname is not `restore-test-<vmid>`, a `netN`
/// lacks `link_down=1`, or it has a mount point `mpN`.
pub(crate) fn scratch_marks(config: &str, vmid: &str) -> Result<(), String> {
    let mut named = false;
    let current = config.lines().take_while(|l| !l.starts_with('['));
    for (key, value) in current.filter_map(|l| l.split_once(':')) {
        let (key, value) = (key.trim(), value.trim());
        let indexed = |prefix: &str| {
            key.strip_prefix(prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if key == "hostname" {
            named = value.strip_prefix(SCRATCH_HOSTNAME_PREFIX) == Some(vmid);
        } else if indexed("net") && !value.split(',').any(|o| o == "link_down=1") {
            return Err(format!("{key} has its link up"));
        } else if indexed("mp") {
            return Err(format!("it has mount point {key}"));
        }
    }
    let hostname = format!("{SCRATCH_HOSTNAME_PREFIX}{vmid}");
    named
        .then_some(())
        .ok_or(format!("its hostname is not {hostname}"))
}

/// Runs the guest's own restore check in a restore test's scratch guest (see the module docs).
pub fn restore_check(a: &RestoreCheck, config: &Config) -> Result<Output, HelperError> {
    let (pct, vmid) = (&config.programs.pct, a.vmid.to_string());
    let args = ["config", vmid.as_str(), "--current"];
    let shown = exec::run(pct, &args, exec::limit::QUICK, &[0])?;
    scratch_marks(&shown.stdout.text(), &vmid).map_err(|reason| HelperError::NotScratch {
        vmid: a.vmid.get(),
        reason,
    })?;
    let probe: Vec<&str> = ["exec", &vmid, "--"]
        .into_iter()
        .chain(RESTORE_CHECK_PROBE)
        .collect();
    let installed = exec::run(pct, &probe, exec::limit::QUICK, &[0, 1])?.code() == Some(0);
    let limits = exec::Limits {
        time: Duration::from_secs(u64::from(a.timeout_secs.get())),
        keep: RESTORE_CHECK_MAX_BYTES,
    };
    let argv = ["exec", &vmid, "--", RESTORE_CHECK_PATH];
    let ran = match installed {
        true => Some(exec::start(pct, &argv, exec::Streams::Merged, limits)?),
        false => None,
    };
    Ok(Output::RestoreChecked {
        vmid: a.vmid,
        installed,
        exit_code: ran.as_ref().and_then(exec::Ran::code),
        timed_out: ran.as_ref().is_some_and(|r| r.timed_out),
        output: ran.map_or_else(Vec::new, |r| restore_check_lines(&r.stdout.text())),
    })
}
