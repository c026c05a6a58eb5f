//! Storage targets as the agent tests drive them: an ext4 image on a loop device standing in
//! for a USB disk, and what the hub heard of a target.

use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::RealHub;

/// The serial the tests' USB disks report (in the fake helper's sysfs tree).
pub const USB_SERIAL: &str = "BOSUN-USB-0001";

/// The hub's report of the target `durable_id`, if any.
pub async fn target_report(hub: &RealHub, host: Uuid, durable_id: &str) -> Option<Value> {
    let detail = hub.host(host).await;
    detail["last_report"]["storage"]
        .as_array()?
        .iter()
        .find(|t| t["durable_id"] == durable_id)
        .cloned()
}

/// Alerts of `kind` the hub raised for `host`.
pub async fn alerts(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    let (status, body) = hub.admin(Method::GET, "/v1/admin/alerts", None).await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .or_else(|| body["alerts"].as_array())
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["kind"] == kind && a["host_id"] == json!(host))
        .collect()
}

/// An ext4 image on a loop device, with the filesystem UUID a USB disk would have.
pub struct UsbDisk {
    image: tempfile::NamedTempFile,
    pub device: Option<String>,
}

impl UsbDisk {
    pub fn new(uuid: &str) -> Self {
        let image = tempfile::NamedTempFile::new().unwrap();
        image.as_file().set_len(32 * 1024 * 1024).unwrap();
        let mkfs = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-U", uuid])
            .arg(image.path())
            .output()
            .unwrap();
        assert!(mkfs.status.success(), "mkfs.ext4: {mkfs:?}");
        let mut disk = Self {
            image,
            device: None,
        };
        disk.plug();
        disk
    }

    /// Attaches the image to a free loop device.
    pub fn plug(&mut self) {
        let out = std::process::Command::new("losetup")
            .args(["-f", "--show"])
            .arg(self.image.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        self.device = Some(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }

    /// Pulls the disk: its mount goes away (as the kernel and udev leave it) and the loop
    /// device is detached.
    pub fn pull(&mut self, mount_point: &std::path::Path) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(mount_point)
            .status();
        if let Some(device) = self.device.take() {
            let status = std::process::Command::new("losetup")
                .args(["-d", &device])
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
}

impl Drop for UsbDisk {
    fn drop(&mut self) {
        if let Some(device) = self.device.take() {
            let _ = std::process::Command::new("losetup")
                .args(["-d", &device])
                .status();
        }
    }
}

/// Unmounts on drop, so a failed test leaves no mount behind.
pub struct Unmount(pub std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
