//! `build_golden`: the golden container image recipe (see `golden/README.md`).
//!
//! A builder container is created from a Debian template with `nesting=1,keyctl=1`,
//! gets Docker and the controller image, the four units from `golden/`, loses its SSH
//! host keys and machine id, and is archived with vzdump to the golden storage. The
//! builder is destroyed afterwards, and also when a step fails. The controller image archive
//! is baked only if its bytes hash to the signed recipe's digest; otherwise nothing is
//! created.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_proto::helper::{BuildGolden, Output, RESET_GUEST_IDENTITY_COMMANDS};

use crate::config::Config;
use crate::error::HelperError;
use crate::exec;

/// Hostname of the builder container.
pub const GOLDEN_HOSTNAME: &str = "bosun-golden";
/// Units copied from the golden directory into `/etc/systemd/system` of the image.
pub const GOLDEN_UNITS: [&str; 4] = [
    "bosun-ssh-hostkeys.service",
    "bosun-bootstrap.service",
    "bosun-bootstrap-restart.service",
    "bosun-bootstrap.path",
];
/// The golden units enabled in the image (the others are started by these).
pub const GOLDEN_ENABLED: [&str; 3] = [
    "bosun-ssh-hostkeys.service",
    "bosun-bootstrap.service",
    "bosun-bootstrap.path",
];
/// Tag the baked controller image carries; `bosun-bootstrap.service` runs it.
pub const GOLDEN_IMAGE_TAG: &str = "bosun/controller:golden";
const IMAGE_IN_GUEST: &str = "/var/lib/bosun-golden/controller-image.tar";

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
pub fn golden_steps(args: &BuildGolden, config: &Config) -> Vec<Step> {
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
            "/usr/bin/mkdir -p -m 0700 /var/lib/bosun-golden /etc/bosun-bootstrap",
        ),
        pct(
            "push controller image",
            format!(
                "push {v} {} {IMAGE_IN_GUEST}",
                config.controller_image_archive.display()
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
        inside(
            "remove image archive",
            &format!("/usr/bin/rm -f {IMAGE_IN_GUEST}"),
        ),
    ];
    for unit in GOLDEN_UNITS {
        let host = config.golden_dir.join(unit);
        let line = format!(
            "push {v} {} /etc/systemd/system/{unit} --perms 0644",
            host.display()
        );
        steps.push(pct("push unit", line));
    }
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

/// How long a step may take: the package steps and the image load fetch and unpack, vzdump
/// archives the whole builder; the rest are single container operations.
fn time_limit(step: &Step) -> Duration {
    match (step.tool, step.name) {
        (Tool::Vzdump, _) => exec::limit::VZDUMP,
        (_, "create" | "apt update" | "install docker" | "load controller image") => {
            exec::limit::PACKAGES
        }
        (_, "shutdown" | "enable units" | "start") => exec::limit::RESTART,
        _ => exec::limit::QUICK,
    }
}

fn program(tool: Tool, config: &Config) -> &Path {
    match tool {
        Tool::Pct => &config.programs.pct,
        Tool::Vzdump => &config.programs.vzdump,
    }
}

/// The archive path from vzdump's `creating vzdump archive '<path>'` line.
fn archive_from_log(log: &str) -> Option<String> {
    log.lines().find_map(|line| {
        let rest = line.split_once("creating vzdump archive '")?.1;
        Some(rest.split_once('\'')?.0.to_string())
    })
}

pub fn build(args: &BuildGolden, config: &Config) -> Result<Output, HelperError> {
    // Everything the recipe reads from the host must exist before the builder does.
    let inputs = GOLDEN_UNITS.iter().map(|u| config.golden_dir.join(u));
    let mut inputs = inputs.chain([config.controller_image_archive.clone()]);
    if let Some(missing) = inputs.find(|p: &PathBuf| !p.is_file()) {
        return Err(HelperError::NotFound {
            what: "golden image input",
            name: missing.display().to_string(),
        });
    }
    // The archive lives in a root-only directory, so the bytes hashed here are the bytes
    // `pct push` sends: only the operator's signed digest decides what code is baked.
    let image = &config.controller_image_archive;
    let beneath_root = image
        .strip_prefix("/")
        .unwrap_or(image)
        .display()
        .to_string();
    let (found, _) = super::archive::hash_file(Path::new("/"), &beneath_root)?;
    if found != args.controller_sha256.as_str() {
        return Err(HelperError::DigestMismatch {
            what: "controller image archive",
            expected: args.controller_sha256.to_string(),
            found,
        });
    }
    let vmid = args.vmid.to_string();
    let mut archive = None;
    for (i, s) in golden_steps(args, config).into_iter().enumerate() {
        let limit = time_limit(&s);
        let done = exec::run(program(s.tool, config), &s.args, limit, &[0]).map_err(|err| {
            if i > 0 {
                tear_down(&config.programs.pct, &vmid);
            }
            HelperError::GoldenStep {
                step: s.name,
                source: Box::new(err),
            }
        })?;
        if s.tool == Tool::Vzdump {
            archive = archive_from_log(&done.stdout.text());
        }
    }
    // The hash is taken from the file itself, after vzdump closed it: nothing the
    // caller says about the archive is trusted.
    let hashed = archive
        .as_deref()
        .map(|a| super::archive::hash_built(a, config));
    let hashed = hashed.transpose()?.flatten();
    Ok(Output::GoldenBuilt {
        vmid: args.vmid,
        archive,
        sha256: hashed.as_ref().map(|(sha, _)| sha.clone()),
        size: hashed.map(|(_, size)| size),
    })
}

/// Stops and destroys the builder after a failed step. Best effort: the step's error
/// is what the caller gets, and these may fail because the builder is already gone.
fn tear_down(pct: &Path, vmid: &str) {
    let _ = exec::run(pct, &["stop", vmid], exec::limit::RESTART, &[0]);
    let _ = exec::run(
        pct,
        &["destroy", vmid, "--purge", "1"],
        exec::limit::QUICK,
        &[0],
    );
}
