//! `smart_status`: `smartctl --json --all <device>`.

use bosun_proto::helper::{Output, SmartStatus};
use std::path::Path;

use rustix::fs::OFlags;

use crate::config::Config;
use crate::error::HelperError;
use crate::{exec, fsops};

/// smartctl exit-status bits that mean it could not read the device at all
/// (command line, device open); the other bits report disk health.
const FATAL_BITS: i32 = 0b11;

pub fn status(args: &SmartStatus, config: &Config) -> Result<Output, HelperError> {
    let device = args.device.as_str();
    let (_, stat) = fsops::open_file(None, Path::new(device), OFlags::PATH)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::BlockDevice {
        return Err(HelperError::not_found("block device", device));
    }
    let codes: Vec<i32> = (0..=255).filter(|c| c & FATAL_BITS == 0).collect();
    let out = exec::run(
        &config.programs.smartctl,
        &["--json", "--all", device],
        config.limits.smart,
        &codes,
    )?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout.bytes).map_err(|e| {
        HelperError::ProgramOutput(config.programs.smartctl.clone(), format!("not JSON: {e}"))
    })?;
    Ok(Output::Smart {
        device: device.into(),
        report,
        exit_status: out.code().unwrap_or(-1),
    })
}
