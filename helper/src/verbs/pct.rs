//! `attach_bind_mount`: `pct set <vmid> -mp<N> <dir>,mp=<path>,ro=<0|1>` for a mounted
//! storage target. `restart_controller`: `pct exec <vmid> -- /usr/bin/systemctl restart
//! bosun-bootstrap.service`, every argument fixed but the vmid.

use bosun_proto::helper::{AttachBindMount, BindSource, CONTROLLER_UNIT, Output};
use bosun_proto::helper::{RESTART_CONTROLLER_ARGV, RestartController};

use crate::config::Config;
use crate::error::HelperError;
use crate::exec;
use crate::fsops;

pub fn attach_bind_mount(args: &AttachBindMount, config: &Config) -> Result<Output, HelperError> {
    let vmid = args.vmid.to_string();
    let BindSource::Target { target_id } = &args.source;
    let root = fsops::open_root(&config.mount_root)?;
    let dir = root
        .child(target_id.as_str(), true)?
        .ok_or_else(|| HelperError::NotFound {
            what: "mount target",
            name: target_id.to_string(),
        })?;
    if !dir.is_mount_root()? {
        return Err(HelperError::MountState {
            path: dir.path,
            state: "not a mount point",
        });
    }
    let key = format!("mp{}", args.index);
    let value = format!(
        "{},mp={},ro={}",
        dir.path.display(),
        args.guest_path,
        u8::from(args.read_only)
    );
    let flag = format!("-{key}");
    exec::run(
        &config.programs.pct,
        &["set", vmid.as_str(), flag.as_str(), value.as_str()],
        &[0],
    )?;
    Ok(Output::BindAttached { key, value })
}

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
