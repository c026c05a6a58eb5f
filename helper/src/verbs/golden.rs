//! `build_golden`: runs the golden container image recipe ([`bosun_proto::helper::recipe`],
//! see `golden/README.md`).
//!
//! A builder container is created from a Debian template with `nesting=1,keyctl=1`,
//! gets Docker and the controller image, the four units from `golden/`, this host's unbound
//! guest stamp (decision 0048), loses its SSH
//! host keys and machine id, and is archived with vzdump to the golden storage. The
//! builder is destroyed afterwards, and also when a step fails. The controller image archive
//! is baked only if its bytes hash to the signed recipe's digest; otherwise nothing is
//! created.

use std::path::{Path, PathBuf};

use bosun_proto::helper::recipe::{GoldenInputs, Step, Tool, golden_inputs};
use bosun_proto::helper::recipe::{archive_from_log, golden_steps};
use bosun_proto::helper::stamp::GuestStamp;
use bosun_proto::helper::{BuildGolden, Output};

use crate::config::{Config, TimeLimits};
use crate::error::HelperError;
use crate::exec;

use super::{guests, stage};

/// How long a step may take: the package steps and the image load fetch and unpack, vzdump
/// archives the whole builder; the rest are single container operations.
fn time_limit(step: &Step, limits: &TimeLimits) -> u64 {
    match (step.tool, step.name) {
        (Tool::Vzdump, _) => limits.vzdump,
        (_, "create" | "apt update" | "install docker" | "load controller image") => {
            limits.packages
        }
        (_, "shutdown" | "enable units" | "start") => limits.restart,
        _ => limits.quick,
    }
}

pub fn build(args: &BuildGolden, config: &Config) -> Result<Output, HelperError> {
    // Everything the recipe reads from the host must exist before the builder does.
    let inputs = golden_inputs().map(|u| config.golden_dir.join(u));
    let mut inputs = inputs.chain([config.controller_image_archive.clone()]);
    if let Some(missing) = inputs.find(|p: &PathBuf| !p.is_file()) {
        return Err(HelperError::not_found(
            "golden image input",
            missing.display(),
        ));
    }
    signed_image(config, &args.controller_sha256)?;
    let key = guests::load_key(&config.guest_key, true)?;
    let stamp = GuestStamp::sign(&key, None, uuid::Uuid::new_v4().into_bytes());
    let dir = stage::staging_dir(&config.staging_root)?;
    let name = format!("guest-stamp-{}", args.vmid);
    let staged = stage::Staged::write(dir, name, stamp.line().as_bytes())?;
    let inputs = GoldenInputs {
        golden_dir: &config.golden_dir,
        controller_image_archive: &config.controller_image_archive,
        staged_stamp: &staged.path(),
    };
    let vmid = args.vmid.to_string();
    let mut archive = None;
    for (i, s) in golden_steps(args, &inputs).into_iter().enumerate() {
        let limit = time_limit(&s, &config.limits);
        let program = match s.tool {
            Tool::Pct => &config.programs.pct,
            Tool::Vzdump => &config.programs.vzdump,
        };
        let done = exec::run(program, &s.args, limit, &[0]).map_err(|err| {
            if i > 0 {
                tear_down(config, &vmid);
            }
            HelperError::GoldenStep(s.name, Box::new(err))
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

/// The controller image archive, once its bytes hash to the signed `sha256`. It lives in a
/// root-only directory, so the bytes hashed here are the bytes `pct push` sends: only the
/// operator's signed digest decides what code enters a guest.
pub(super) fn signed_image<'a>(
    config: &'a Config,
    sha256: &bosun_proto::helper::Sha256Hex,
) -> Result<&'a Path, HelperError> {
    let image = &config.controller_image_archive;
    let beneath_root = image.strip_prefix("/").unwrap_or(image);
    let beneath_root = beneath_root.display().to_string();
    let (found, _) = super::archive::hash_file(Path::new("/"), &beneath_root, None)?;
    if found != sha256.as_str() {
        let what = "controller image archive";
        return Err(HelperError::DigestMismatch(what, sha256.to_string(), found));
    }
    Ok(image)
}

/// Stops and destroys the builder after a failed step. Best effort: the step's error
/// is what the caller gets, and these may fail because the builder is already gone.
fn tear_down(config: &Config, vmid: &str) {
    let pct = &config.programs.pct;
    let _ = exec::run(pct, &["stop", vmid], config.limits.restart, &[0]);
    let _ = exec::run(
        pct,
        &["destroy", vmid, "--purge", "1"],
        config.limits.quick,
        &[0],
    );
}
