//! The `[golden]` section of the agent's configuration: how this host's helper builds a
//! golden image when a signed recipe asks for one.
//!
//! ```toml
//! [golden]
//! builder_vmid = 9000                      # the temporary builder container
//! template = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
//! rootfs_storage = "local-lvm"             # default: pve.storage
//! rootfs_gib = 8
//! bridge = "vmbr0"                         # package downloads during the build
//! storage = "local"                        # receives the archive (the helper's dump_root); default: backup.storage
//! build_timeout_seconds = 3600             # one build (60–14400)
//! boot_stay_up_seconds = 30                # a new build's boot test: how long its scratch guest must stay running (1–600)
//! ```

use std::time::Duration;

use bosun_proto::helper::{BridgeName, DiskGib, StorageId, TemplateVolid, Vmid};
use serde::Deserialize;

use super::error::ConfigError;

/// Validated build settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenSettings {
    /// The temporary builder container's vmid.
    pub builder_vmid: Vmid,
    /// The Debian template the builder starts from.
    pub template: TemplateVolid,
    /// Storage of the builder's root disk.
    pub rootfs_storage: StorageId,
    /// Size of the builder's root disk.
    pub rootfs_gib: DiskGib,
    /// The builder's bridge.
    pub bridge: BridgeName,
    /// The storage receiving the archive (its dump directory is the helper's `dump_root`).
    pub storage: StorageId,
    /// Longest one build may take.
    pub build_timeout: Duration,
    /// How long a new build's scratch guest must stay running in its boot test.
    pub boot_stay_up: Duration,
}

/// The raw `[golden]` section.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGolden {
    builder_vmid: Option<u64>,
    template: Option<String>,
    rootfs_storage: Option<String>,
    rootfs_gib: Option<u64>,
    bridge: Option<String>,
    storage: Option<String>,
    build_timeout_seconds: Option<u64>,
    boot_stay_up_seconds: Option<u64>,
}

fn bad(field: &'static str, reason: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.to_string(),
    }
}

impl RawGolden {
    /// Validates the section; `pve_storage` and `backup_storage` are the defaults of the
    /// builder's disk and the archive's storage.
    pub(crate) fn settings(
        self,
        pve_storage: &str,
        backup_storage: &str,
    ) -> Result<GoldenSettings, ConfigError> {
        let timeout = self.build_timeout_seconds.unwrap_or(3600);
        if !(60..=14_400).contains(&timeout) {
            return Err(bad(
                "golden.build_timeout_seconds",
                "must be between 60 and 14400",
            ));
        }
        let stay_up = self.boot_stay_up_seconds.unwrap_or(30);
        if !(1..=600).contains(&stay_up) {
            return Err(bad(
                "golden.boot_stay_up_seconds",
                "must be between 1 and 600",
            ));
        }
        Ok(GoldenSettings {
            builder_vmid: Vmid::new(self.builder_vmid.unwrap_or(9000))
                .map_err(|e| bad("golden.builder_vmid", e))?,
            template: TemplateVolid::new(self.template.unwrap_or_else(|| {
                "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst".to_owned()
            }))
            .map_err(|e| bad("golden.template", e))?,
            rootfs_storage: StorageId::new(
                self.rootfs_storage
                    .unwrap_or_else(|| pve_storage.to_owned()),
            )
            .map_err(|e| bad("golden.rootfs_storage", e))?,
            rootfs_gib: DiskGib::new(self.rootfs_gib.unwrap_or(8))
                .map_err(|e| bad("golden.rootfs_gib", e))?,
            bridge: BridgeName::new(self.bridge.unwrap_or_else(|| "vmbr0".to_owned()))
                .map_err(|e| bad("golden.bridge", e))?,
            storage: StorageId::new(self.storage.unwrap_or_else(|| backup_storage.to_owned()))
                .map_err(|e| bad("golden.storage", e))?,
            build_timeout: Duration::from_secs(timeout),
            boot_stay_up: Duration::from_secs(stay_up),
        })
    }
}
