//! Decoded answers of the node's disk API: the disks (`GET /nodes/{node}/disks/list`), one
//! disk's SMART data (`GET /nodes/{node}/disks/smart`), the LVM thin pools
//! (`GET /nodes/{node}/disks/lvmthin`) and the ZFS pools (`GET /nodes/{node}/disks/zfs`). All
//! four need `Sys.Audit` (on `/` for SMART and the pools; on `/` or the node for the list).
//!
//! Proxmox's published schema lists fewer fields than it sends: `disks/list` also carries
//! `type` (`hdd`, `ssd`, `nvme`, `usb`, …) and `wearout` (the life left in percent, or `N/A`);
//! every field is optional here and read leniently, so an answer missing one is still read.

use serde::Deserialize;
use serde_json::Value;

use super::decode::{lenient_opt_string, lenient_opt_u64};

/// `device` when PVE's `disks/smart` takes it (`^/dev/[a-zA-Z0-9/]+$`), at most 255 bytes.
pub(crate) fn smart_device(device: &str) -> Result<&str, super::types::ValueError> {
    let rest = device.strip_prefix("/dev/").unwrap_or_default();
    if device.len() <= 255
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'/')
    {
        Ok(device)
    } else {
        Err(super::types::ValueError::new(
            "disk",
            device.chars().take(64).collect::<String>(),
            "must be /dev/ followed by letters, digits and slashes",
        ))
    }
}

/// One disk of `GET /nodes/{node}/disks/list`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NodeDisk {
    /// The device path (`/dev/sda`).
    pub devpath: String,
    /// Its model.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub model: Option<String>,
    /// `hdd`, `ssd`, `nvme`, `usb`, `unknown`.
    #[serde(default, rename = "type", deserialize_with = "lenient_opt_string")]
    pub kind: Option<String>,
    /// The SMART health word (`PASSED`, `OK`, `FAILED`, `UNKNOWN`).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub health: Option<String>,
    /// The life left in percent, or `N/A`.
    #[serde(default)]
    pub wearout: Option<Value>,
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub size: Option<u64>,
}

impl NodeDisk {
    /// The life left in percent, when the disk says (`N/A` and nonsense read as none).
    pub fn life_left_percent(&self) -> Option<u8> {
        let n = match self.wearout.as_ref()? {
            Value::Number(n) => n.as_f64()?,
            Value::String(s) => s.trim().parse::<f64>().ok()?,
            _ => return None,
        };
        (n.is_finite() && (0.0..=100.0).contains(&n)).then(|| {
            // In range, so the cast neither truncates past 100 nor wraps.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let p = n.round() as u8;
            p
        })
    }
}

/// `GET /nodes/{node}/disks/smart?disk=…`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SmartData {
    /// The health word (`PASSED`, `OK`, `FAILED`, `UNKNOWN`).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub health: Option<String>,
    /// `ata` (attributes) or `text` (NVMe and SAS: smartctl's text).
    #[serde(default, rename = "type", deserialize_with = "lenient_opt_string")]
    pub kind: Option<String>,
    /// The ATA attributes.
    #[serde(default)]
    pub attributes: Vec<SmartAttribute>,
    /// smartctl's text (NVMe, SAS).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub text: Option<String>,
}

/// One ATA SMART attribute as Proxmox passes it on.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SmartAttribute {
    /// The attribute id (a number, sent as a padded string).
    #[serde(default)]
    pub id: Option<Value>,
    /// Its name (`Reallocated_Sector_Ct`).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub name: Option<String>,
    /// The normalized value.
    #[serde(default)]
    pub value: Option<Value>,
    /// The threshold the value must stay above.
    #[serde(default)]
    pub threshold: Option<Value>,
    /// `-`, `FAILING_NOW` or `In_the_past`.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub fail: Option<String>,
    /// The raw value as smartctl prints it (`34 (Min/Max 20/45)`).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub raw: Option<String>,
}

/// One thin pool of `GET /nodes/{node}/disks/lvmthin`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ThinPool {
    /// The thin pool's name.
    pub lv: String,
    /// Its volume group.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub vg: Option<String>,
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub lv_size: Option<u64>,
    /// Bytes in use.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub used: Option<u64>,
    /// The metadata volume's size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub metadata_size: Option<u64>,
    /// Metadata bytes in use.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub metadata_used: Option<u64>,
}

/// One pool of `GET /nodes/{node}/disks/zfs`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ZfsPool {
    /// The pool's name.
    pub name: String,
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub size: Option<u64>,
    /// Bytes allocated.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub alloc: Option<u64>,
    /// Bytes free.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub free: Option<u64>,
    /// `ONLINE`, `DEGRADED`, `FAULTED`, …
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub health: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_device_paths_follow_pves_pattern() {
        assert!(smart_device("/dev/sda").is_ok());
        assert!(smart_device("/dev/disk/byid/abc123").is_ok());
        for bad in [
            "/dev/",
            "sda",
            "/dev/sda;reboot",
            "/dev/../etc",
            "/dev/sd a",
        ] {
            assert!(smart_device(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wearout_reads_numbers_strings_and_not_applicable() {
        let disk = |w: Value| NodeDisk {
            devpath: "/dev/sda".into(),
            model: None,
            kind: None,
            health: None,
            wearout: Some(w),
            size: None,
        };
        assert_eq!(disk(serde_json::json!(97)).life_left_percent(), Some(97));
        assert_eq!(disk(serde_json::json!("88")).life_left_percent(), Some(88));
        assert_eq!(disk(serde_json::json!("N/A")).life_left_percent(), None);
        assert_eq!(disk(serde_json::json!(140)).life_left_percent(), None);
        assert_eq!(disk(serde_json::json!(-1)).life_left_percent(), None);
    }

    #[test]
    fn answers_decode_leniently() {
        let disks: Vec<NodeDisk> = serde_json::from_value(serde_json::json!([
            {"devpath": "/dev/sda", "type": "ssd", "health": "PASSED", "wearout": 97, "size": "512110190592", "gpt": 1},
            {"devpath": "/dev/sdb"}
        ]))
        .unwrap();
        assert_eq!(disks[0].size, Some(512_110_190_592));
        assert_eq!(disks[1].health, None);
        let smart: SmartData = serde_json::from_value(serde_json::json!({
            "health": "PASSED", "type": "ata",
            "attributes": [{"id": "  5", "name": "Reallocated_Sector_Ct", "value": 100, "worst": 100, "threshold": 10, "fail": "-", "raw": "0", "flags": "PO--CK"}]
        }))
        .unwrap();
        assert_eq!(smart.attributes[0].fail.as_deref(), Some("-"));
        let thin: Vec<ThinPool> = serde_json::from_value(serde_json::json!([
            {"lv": "data", "vg": "pve", "lv_size": 1000, "used": 10, "metadata_size": 100, "metadata_used": 1}
        ]))
        .unwrap();
        assert_eq!(thin[0].metadata_used, Some(1));
    }
}
