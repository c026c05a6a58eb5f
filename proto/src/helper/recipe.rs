//! `build_golden`'s recipe: the fixed commands the helper runs as root to build the golden
//! container image (see `golden/README.md`), every value in them a validated argument of
//! [`BuildGolden`] or a path of the helper's own configuration ([`GoldenInputs`]). Like the
//! other fixed command lines of this module's parent, it is data: the helper runs these steps
//! in order, and tears the builder down when one fails.

use std::path::Path;

use super::stamp::GUEST_STAMP_PATH;
use super::{BuildGolden, RESET_GUEST_IDENTITY_COMMANDS};

/// The host files the recipe names: paths of the helper's configuration.
#[derive(Debug, Clone, Copy)]
pub struct GoldenInputs<'a> {
    /// Holds [`GOLDEN_UNITS`].
    pub golden_dir: &'a Path,
    /// The controller image (`docker save` archive) whose digest the operator signed.
    pub controller_image_archive: &'a Path,
    /// This host's unbound guest stamp, staged root-only for `pct push`.
    pub staged_stamp: &'a Path,
}

/// Hostname of the builder container.
pub const GOLDEN_HOSTNAME: &str = "bosun-golden";
/// Units copied from the golden directory into `/etc/systemd/system` of the image.
pub const GOLDEN_UNITS: [&str; 4] = [
    "bosun-ssh-hostkeys.service",
    "bosun-bootstrap.service",
    "bosun-bootstrap-restart.service",
    "bosun-bootstrap.path",
];
/// The sshd drop-in in the golden directory (keys only, and the Bosun-managed keys file the
/// controller writes, decision 0107) and where the image holds it: Debian's `sshd_config`
/// includes `sshd_config.d/*.conf` first, so its settings win.
pub const GOLDEN_SSHD_DROP_IN: (&str, &str) =
    ("bosun-sshd.conf", "/etc/ssh/sshd_config.d/bosun.conf");

/// Every file the recipe reads from the golden directory.
pub fn golden_inputs() -> impl Iterator<Item = &'static str> {
    GOLDEN_UNITS.into_iter().chain([GOLDEN_SSHD_DROP_IN.0])
}

/// The golden units enabled in the image (the others are started by these).
pub const GOLDEN_ENABLED: [&str; 3] = [
    "bosun-ssh-hostkeys.service",
    "bosun-bootstrap.service",
    "bosun-bootstrap.path",
];
/// Tag the baked controller image carries; `bosun-bootstrap.service` runs it.
pub const GOLDEN_IMAGE_TAG: &str = "bosun/controller:golden";
/// The archive stays in the guest, where `restart_controller` measures it (decision 0102).
const IMAGE_IN_GUEST: &str = super::GUEST_CONTROLLER_IMAGE;

/// Which program a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `pct`
    Pct,
    /// `vzdump`
    Vzdump,
}

/// One command of the recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Name used in errors.
    pub name: &'static str,
    /// Program.
    pub tool: Tool,
    /// Its arguments.
    pub args: Vec<String>,
}

/// One step from a command line. Splitting on spaces is safe here, and is not a
/// shell: every interpolated value is a validated newtype or a configured path, none
/// of which may contain whitespace, quotes or other shell syntax.
fn step(name: &'static str, tool: Tool, line: &str) -> Step {
    Step {
        name,
        tool,
        args: line.split(' ').map(str::to_string).collect(),
    }
}

/// The recipe's commands, in order.
pub fn golden_steps(args: &BuildGolden, inputs: &GoldenInputs<'_>) -> Vec<Step> {
    let v = args.vmid;
    let pct = |name, line: String| step(name, Tool::Pct, &line);
    let inside = |name, line: &str| step(name, Tool::Pct, &format!("exec {v} -- {line}"));
    let apt = "/usr/bin/env DEBIAN_FRONTEND=noninteractive /usr/bin/apt-get";
    let (template, storage, gib, bridge) = (
        &args.template,
        &args.rootfs_storage,
        args.rootfs_gib,
        &args.bridge,
    );
    let mut steps = vec![
        pct(
            "create",
            format!(
                "create {v} {template} --hostname {GOLDEN_HOSTNAME} --unprivileged 1 \
                 --features nesting=1,keyctl=1 --ostype debian --cores 2 --memory 2048 \
                 --rootfs {storage}:{gib} --net0 name=eth0,bridge={bridge},ip=dhcp"
            ),
        ),
        pct("start", format!("start {v}")),
        inside("apt update", &format!("{apt} update")),
        inside(
            "install docker",
            &format!(
                "{apt} install -y --no-install-recommends docker.io openssh-server ca-certificates"
            ),
        ),
        inside(
            "make directories",
            "/usr/bin/mkdir -p -m 0700 /etc/bosun-bootstrap",
        ),
        pct(
            "push controller image",
            format!(
                "push {v} {} {IMAGE_IN_GUEST}",
                inputs.controller_image_archive.display()
            ),
        ),
        inside(
            "load controller image",
            &format!("/usr/bin/docker load --input {IMAGE_IN_GUEST}"),
        ),
        inside(
            "tag controller image",
            &format!(
                "/usr/bin/docker tag {} {GOLDEN_IMAGE_TAG}",
                args.controller_image
            ),
        ),
    ];
    for unit in GOLDEN_UNITS {
        let host = inputs.golden_dir.join(unit);
        let line = format!(
            "push {v} {} /etc/systemd/system/{unit} --perms 0644",
            host.display()
        );
        steps.push(pct("push unit", line));
    }
    let (drop_in, destination) = GOLDEN_SSHD_DROP_IN;
    steps.push(pct(
        "push sshd drop-in",
        format!(
            "push {v} {} {destination} --perms 0644",
            inputs.golden_dir.join(drop_in).display()
        ),
    ));
    // The unbound stamp every guest made from this image carries (decision 0048).
    let staged = inputs.staged_stamp;
    steps.push(pct(
        "push guest stamp",
        format!(
            "push {v} {} {GUEST_STAMP_PATH} --perms 0600",
            staged.display()
        ),
    ));
    let [host_keys, machine_id] = RESET_GUEST_IDENTITY_COMMANDS;
    // The restart service has no [Install]: only bosun-bootstrap.path starts it.
    let units = GOLDEN_ENABLED.join(" ");
    steps.extend([
        inside(
            "enable units",
            &format!("/usr/bin/systemctl enable docker.service {units}"),
        ),
        // The same two commands a DR restore whose source may still run gets
        // (`reset_guest_identity`); no argument holds a space.
        inside("remove ssh host keys", &host_keys.join(" ")),
        inside("reset machine id", &machine_id.join(" ")),
        pct("shutdown", format!("shutdown {v} --timeout 120")),
        step(
            "vzdump",
            Tool::Vzdump,
            &format!(
                "{v} --storage {} --mode stop --compress zstd",
                args.golden_storage
            ),
        ),
        pct("destroy builder", format!("destroy {v} --purge 1")),
    ]);
    steps
}

/// The archive path from vzdump's `creating vzdump archive '<path>'` line.
pub fn archive_from_log(log: &str) -> Option<String> {
    log.lines().find_map(|line| {
        let rest = line.split_once("creating vzdump archive '")?.1;
        Some(rest.split_once('\'')?.0.to_string())
    })
}
