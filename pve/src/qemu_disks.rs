//! A disk added to a VM by a config change: `scsiN: <storage>:<GiB>,backup=<0|1>,serial=<s>`,
//! the schema's "special syntax STORAGE_ID:SIZE_IN_GiB to allocate a new volume" on the
//! `scsi[n]` property of `PUT /nodes/{node}/qemu/{vmid}/config` (8.4 and 9.1 alike).

use std::collections::BTreeMap;

use super::types::{StorageId, ValueError};

/// The `scsi` slots a VM has (`scsi0`…`scsi30`).
pub const SCSI_SLOTS: u8 = 31;

/// The longest drive serial QEMU takes (the schema: "up to 20 bytes long").
pub const SERIAL_MAX: usize = 20;

/// A new SCSI disk allocated on `storage` when the config change is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVmDisk {
    /// The storage the volume is allocated on (it must hold `images`).
    pub storage: StorageId,
    /// Size in GiB (at least 1).
    pub size_gib: u32,
    /// Whether vzdump includes the disk (`backup=1`) or leaves it out (`backup=0`).
    pub backup: bool,
    /// The drive's serial as the guest sees it (`/dev/disk/by-id/…_<serial>`): 1 to 20 of
    /// `[A-Za-z0-9_-]`, so it needs no URL encoding.
    pub serial: String,
}

impl NewVmDisk {
    /// The property string, checked.
    pub fn to_property_string(&self) -> Result<String, ValueError> {
        let serial_ok = !self.serial.is_empty()
            && self.serial.len() <= SERIAL_MAX
            && self
                .serial
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !serial_ok {
            return Err(ValueError::new(
                "drive serial",
                self.serial.chars().take(40).collect::<String>(),
                "must be 1 to 20 of [A-Za-z0-9_-]",
            ));
        }
        if self.size_gib == 0 {
            return Err(ValueError::new("disk size", "0", "must be at least 1 GiB"));
        }
        Ok(format!(
            "{}:{},backup={},serial={}",
            self.storage,
            self.size_gib,
            u8::from(self.backup),
            self.serial
        ))
    }
}

/// The disks a config change adds, by `scsi` slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewVmDisks(pub BTreeMap<u8, NewVmDisk>);

impl NewVmDisks {
    /// Whether no disk is added.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `scsiN` parameters, checked.
    pub(crate) fn params(&self) -> Result<Vec<(String, String)>, ValueError> {
        self.0
            .iter()
            .map(|(slot, disk)| {
                if *slot >= SCSI_SLOTS {
                    return Err(ValueError::new(
                        "scsi slot",
                        slot.to_string(),
                        "must be 0..=30",
                    ));
                }
                Ok((format!("scsi{slot}"), disk.to_property_string()?))
            })
            .collect()
    }
}

/// The value of `key=` in a drive's property string.
pub fn drive_option<'a>(value: &'a str, key: &str) -> Option<&'a str> {
    value
        .split(',')
        .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(serial: &str, size_gib: u32) -> NewVmDisk {
        NewVmDisk {
            storage: StorageId::new("local-lvm").expect("storage id"),
            size_gib,
            backup: false,
            serial: serial.to_owned(),
        }
    }

    #[test]
    fn a_new_disk_is_the_schemas_allocation_syntax() {
        let mut d = disk("media", 8);
        assert_eq!(
            d.to_property_string().expect("valid"),
            "local-lvm:8,backup=0,serial=media"
        );
        d.backup = true;
        assert_eq!(
            d.to_property_string().expect("valid"),
            "local-lvm:8,backup=1,serial=media"
        );
    }

    #[test]
    fn a_serial_is_bounded_and_needs_no_encoding() {
        assert!(
            disk("a".repeat(20).as_str(), 1)
                .to_property_string()
                .is_ok()
        );
        assert!(
            disk("a".repeat(21).as_str(), 1)
                .to_property_string()
                .is_err()
        );
        assert!(disk("", 1).to_property_string().is_err());
        assert!(disk("a,backup=1", 1).to_property_string().is_err());
        assert!(disk("a b", 1).to_property_string().is_err());
        assert!(disk("ok", 0).to_property_string().is_err());
    }

    #[test]
    fn slots_stop_at_scsi30() {
        let mut disks = NewVmDisks::default();
        disks.0.insert(30, disk("x", 1));
        assert_eq!(disks.params().expect("valid")[0].0, "scsi30");
        disks.0.insert(31, disk("y", 1));
        assert!(disks.params().is_err());
    }

    #[test]
    fn drive_options_are_read_by_key() {
        let v = "local-lvm:vm-100-disk-1,backup=0,serial=media,size=8G";
        assert_eq!(drive_option(v, "serial"), Some("media"));
        assert_eq!(drive_option(v, "backup"), Some("0"));
        assert_eq!(drive_option(v, "ser"), None);
    }
}
