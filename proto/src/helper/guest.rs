//! The fixed paths and command lines the helper uses inside a guest (after `pct exec <vmid>
//! --`, `pct push`, `pct pull`): every argument fixed but the vmid, nothing through a shell,
//! and what the helper keeps of a guest program's answer.

use super::ImageRef;

/// Where `push_bootstrap` puts the document inside the guest (its parent directory
/// must exist there: the golden image makes it, mode 0700).
pub const GUEST_BOOTSTRAP_PATH: &str = "/etc/bosun-bootstrap/bootstrap.json";

/// The systemd unit the controller runs as inside every guest (the golden image installs it).
pub const CONTROLLER_UNIT: &str = "bosun-bootstrap.service";

/// Where `systemctl` lives inside the guest.
pub const GUEST_SYSTEMCTL: &str = "/usr/bin/systemctl";

/// What `restart_controller` runs after `pct exec <vmid> --`: every argument fixed.
pub const RESTART_CONTROLLER_ARGV: [&str; 3] = [GUEST_SYSTEMCTL, "restart", CONTROLLER_UNIT];

/// Where `restart_controller` places a signed controller image inside the guest and where it
/// measures the image the guest holds: beside the stamp, a directory no mount point may cover
/// (the guest's own root filesystem) and that the controller's container sees read-only.
pub const GUEST_CONTROLLER_IMAGE: &str = "/etc/bosun-bootstrap/controller-image.tar";
/// Where `restart_controller` writes the digest of the image it placed (`sha256:<hex>`): a
/// controller that cannot switch itself runs by it (decision 0102).
pub const GUEST_CONTROLLER_DIGEST: &str = "/etc/bosun-bootstrap/controller.digest";
/// The largest controller image archive the helper places or measures, in bytes.
pub const MAX_CONTROLLER_IMAGE_BYTES: usize = 256 * 1024 * 1024;
/// Where `docker` lives inside the guest.
pub const GUEST_DOCKER: &str = "/usr/bin/docker";

/// The image `docker load` says it loaded (`Loaded image: <ref>` or `Loaded image ID:
/// <id>`, the last such line), when it is a well-formed reference.
pub fn loaded_image(stdout: &str) -> Option<ImageRef> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("Loaded image"))?;
    let (_, name) = line.split_once(": ")?;
    ImageRef::new(name.trim().to_owned()).ok()
}

/// What `reset_guest_identity` runs inside the guest, each command after `pct exec <vmid> --`,
/// in this order, every argument fixed: the SSH host keys removed and the machine id emptied,
/// as the golden image leaves them, so the guest's next boot makes its own (systemd writes a
/// machine id into an empty file; the golden's `bosun-ssh-hostkeys.service` runs
/// `ssh-keygen -A`). Nothing goes through a shell: `ssh_host_*` is `find`'s own pattern.
pub const RESET_GUEST_IDENTITY_COMMANDS: [&[&str]; 2] = [
    &[
        "/usr/bin/find",
        "/etc/ssh",
        "-maxdepth",
        "1",
        "-name",
        "ssh_host_*",
        "-delete",
    ],
    &["/usr/bin/truncate", "-s", "0", "/etc/machine-id"],
];

/// Where a guest's controller installs its own restore check: `restore_check` runs this file
/// (nothing else) inside a restored scratch guest. It exits 0 when the guest's data is whole;
/// the first lines of what it writes explain a failure.
pub const RESTORE_CHECK_PATH: &str = "/etc/bosun/restore-check";

/// What `restore_check` runs after `pct exec <vmid> --` to learn whether the check is installed
/// (exit 0: an executable file; 1: none).
pub const RESTORE_CHECK_PROBE: [&str; 3] = ["/usr/bin/test", "-x", RESTORE_CHECK_PATH];

/// The hostname the restore test gives every scratch guest, followed by its vmid
/// (`restore-test-<vmid>`): one of the marks `restore_check` requires.
pub const SCRATCH_HOSTNAME_PREFIX: &str = "restore-test-";

/// Most bytes of a restore check's output (stdout and stderr together) the helper keeps.
pub const RESTORE_CHECK_MAX_BYTES: usize = 8 * 1024;
/// Most lines of a restore check's output an answer carries.
pub const RESTORE_CHECK_MAX_LINES: usize = 20;
/// Most characters of one such line.
pub const RESTORE_CHECK_MAX_LINE_CHARS: usize = 200;

/// The first [`RESTORE_CHECK_MAX_LINES`] lines of a restore check's `output`, each cut to
/// [`RESTORE_CHECK_MAX_LINE_CHARS`] characters with control characters replaced, trailing
/// blank lines dropped: the helper answers with these, and the agent bounds what it reads
/// the same way.
pub fn restore_check_lines(output: &str) -> Vec<String> {
    let mut lines: Vec<String> = output
        .lines()
        .take(RESTORE_CHECK_MAX_LINES)
        .map(|line| {
            line.trim_end()
                .chars()
                .take(RESTORE_CHECK_MAX_LINE_CHARS)
                .map(|c| if crate::inert::is_control(c) { ' ' } else { c })
                .collect()
        })
        .collect();
    while lines.last().is_some_and(|l: &String| l.trim().is_empty()) {
        lines.pop();
    }
    lines
}
