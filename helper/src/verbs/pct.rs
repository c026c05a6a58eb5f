//! The verbs that enter a running guest, each only one [`guests::admit`] took (decision 0048):
//! `push_bootstrap` through `pct push` ([`stage`]), the others run fixed commands through
//! `pct exec <vmid> --` (Proxmox's API has no way to run a command in a container), every
//! argument fixed but the vmid. `pct exec` enters the container's namespaces as its root, so a
//! path inside the guest (a symlink its owner planted) resolves within the guest, never on the
//! host.
//!
//! - `push_bootstrap`: only into a guest whose stamp is bound to the document's guest id, or
//!   unbound (then bound to it first).
//! - `restart_controller`: `/usr/bin/systemctl restart bosun-bootstrap.service`, then the image
//!   archive the guest holds measured: pulled (bounded) and hashed here, never run. With a
//!   signed digest (a rollout, decision 0102) the image is placed first: the configured
//!   `controller_image_archive` hashed and refused unless it is the signed digest, `pct push`ed
//!   to [`IMAGE`], `docker load`ed and tagged `bosun/controller:golden` (the
//!   image the unit runs), the digest written to [`GUEST_CONTROLLER_DIGEST`]; a guest then
//!   measured to hold anything else is an error.
//! - `reset_guest_identity`: each of [`RESET_GUEST_IDENTITY_COMMANDS`] in turn.
//! - `restore_check`: only in a guest whose `pct config --current` carries every scratch mark
//!   of a restore test ([`guests::unsafe_config`]: no link up, no mount point, its scratch hostname),
//!   so it never runs code in a guest that can reach anything; [`RESTORE_CHECK_PROBE`], then
//!   [`RESTORE_CHECK_PATH`] bounded in time and output.

use std::time::Duration;

use bosun_proto::bootstrap::Bootstrap;
use bosun_proto::helper::GUEST_CONTROLLER_IMAGE as IMAGE;
use bosun_proto::helper::GUEST_DOCKER as DOCKER;
use bosun_proto::helper::MAX_CONTROLLER_IMAGE_BYTES as MAX_IMAGE;
use bosun_proto::helper::recipe::GOLDEN_IMAGE_TAG;
use bosun_proto::helper::{CONTROLLER_UNIT, GUEST_BOOTSTRAP_PATH, Output, PushBootstrap};
use bosun_proto::helper::{GUEST_CONTROLLER_DIGEST, Sha256Hex, loaded_image};
use bosun_proto::helper::{RESET_GUEST_IDENTITY_COMMANDS, ResetGuestIdentity};
use bosun_proto::helper::{RESTART_CONTROLLER_ARGV, RestartController};
use bosun_proto::helper::{RESTORE_CHECK_MAX_BYTES, RESTORE_CHECK_PATH, RESTORE_CHECK_PROBE};
use bosun_proto::helper::{RestoreCheck, restore_check_lines};
use sha2::{Digest as _, Sha256};

use crate::config::Config;
use crate::error::HelperError;
use crate::exec;

use super::archive::hex;
use super::golden::signed_image;
use super::guests::{self, Admitted, Scratch};
use super::stage;

/// Writes the document into the guest it names, once [`guests::admit`] took the guest and its
/// stamp is (or is now) bound to the document's guest id.
pub fn push_bootstrap(args: &PushBootstrap, config: &Config) -> Result<Output, HelperError> {
    let admitted = guests::admit(config, args.vmid, Scratch::Refuse)?;
    let named = serde_json::from_slice::<Bootstrap>(args.document.expose_bytes())
        .map_err(HelperError::ParseRequest)?
        .guest_id;
    match admitted.stamp.guest_id {
        Some(bound) if bound != named => {
            let reason = format!("its stamp is bound to guest {bound}, the document names {named}");
            return Err(guests::not_ours(args.vmid, reason));
        }
        Some(_) => {}
        None => guests::stamp(config, args.vmid, &admitted.key, Some(named)).map(drop)?,
    }
    let (document, to) = (args.document.expose_bytes(), GUEST_BOOTSTRAP_PATH);
    stage::push_file(config, args.vmid, "bootstrap", document, to)?;
    Ok(Output::BootstrapPushed {
        vmid: args.vmid,
        destination: GUEST_BOOTSTRAP_PATH.to_owned(),
    })
}

/// Restarts the controller's unit inside the running guest, first placing the signed image
/// when one is named (see the module docs), and measures the image archive the guest holds.
pub fn restart_controller(a: &RestartController, config: &Config) -> Result<Output, HelperError> {
    let guest = guests::admit(config, a.vmid, Scratch::Refuse)?;
    let (vmid, pct, max) = (a.vmid.to_string(), &config.programs.pct, MAX_IMAGE);
    let signed = a.image.as_ref().map(|s| format!("sha256:{s}"));
    if let (Some(sha256), Some(d)) = (&a.image, &signed) {
        place_image(&guest, sha256)?;
        let (digest, to) = (format!("{d}\n"), GUEST_CONTROLLER_DIGEST);
        stage::push_file(config, a.vmid, "digest", digest.as_bytes(), to)?;
    }
    guest.exec(&RESTART_CONTROLLER_ARGV, config.limits.restart, &[0])?;
    let pulled = guests::pull(config, &vmid, IMAGE, max)?;
    let hash = |b: &Vec<u8>| format!("sha256:{}", hex(&Sha256::digest(b)));
    let measured = pulled.as_ref().map(hash);
    let over = pulled.is_some_and(|b| b.len() > max);
    let found = measured.as_deref().unwrap_or("no image");
    let what = match signed {
        _ if over => format!("{IMAGE} is over {max} bytes"),
        Some(s) if measured.as_ref() != Some(&s) => format!("the guest holds {found}, not {s}"),
        _ => {
            let (unit, vmid) = (CONTROLLER_UNIT.to_owned(), a.vmid);
            return Ok(Output::ControllerRestarted {
                vmid,
                unit,
                measured,
            });
        }
    };
    Err(HelperError::ProgramOutput(pct.clone(), what))
}

/// Pushes the helper's controller image archive, once it hashes to `sha256`, into the guest
/// and has the guest's Docker load it and tag it as the image its unit runs.
fn place_image(guest: &Admitted<'_>, sha256: &Sha256Hex) -> Result<(), HelperError> {
    let config = guest.config;
    let source = signed_image(config, sha256)?.to_string_lossy();
    let (pct, time, source) = (&config.programs.pct, config.limits.packages, &*source);
    let push = ["push", &guest.vmid, source, IMAGE, "--perms", "0600"];
    exec::run(pct, &push, time, &[0])?;
    let loaded = guest.exec(&[DOCKER, "load", "--input", IMAGE], time, &[0])?;
    let unnamed = "docker load named no image it loaded";
    let none = || HelperError::ProgramOutput(pct.clone(), unnamed.to_owned());
    let image = loaded_image(&loaded.stdout.text()).ok_or_else(none)?;
    let tag = [DOCKER, "tag", image.as_str(), GOLDEN_IMAGE_TAG];
    guest.exec(&tag, config.limits.quick, &[0]).map(drop)
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
    guests::admit(config, a.vmid, Scratch::Refuse)?;
    let vmid = a.vmid.to_string();
    for argv in reset_guest_identity_argvs(&vmid) {
        exec::run(&config.programs.pct, &argv, config.limits.quick, &[0])?;
    }
    Ok(Output::GuestIdentityReset { vmid: a.vmid })
}

/// Runs the guest's own restore check in a restore test's scratch guest (see the module docs).
pub fn restore_check(a: &RestoreCheck, config: &Config) -> Result<Output, HelperError> {
    let (pct, vmid) = (&config.programs.pct, a.vmid.to_string());
    let guest = guests::admit(config, a.vmid, Scratch::Require)?;
    let probe = guest.exec(&RESTORE_CHECK_PROBE, config.limits.quick, &[0, 1])?;
    let installed = probe.code() == Some(0);
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
