//! A VM's devices as its config names them: the disk a resize grows ([`VmDisk`]) and the
//! network device read back from `netN` ([`VmNet::parse`]), so the agent can put one key back
//! (`firewall=1`) without dropping any other.

use std::fmt;

use super::decimal::Thousandths;
use super::qemu_requests::VmNet;
use super::types::ValueError;

/// The disk buses PVE resizes, with how many slots each has (`ide0`…`ide3`, `scsi0`…`scsi30`,
/// `virtio0`…`virtio15`, `sata0`…`sata5`), as `resize_vm`'s `disk` enum lists them.
const BUSES: &[(&str, u8)] = &[("ide", 4), ("scsi", 31), ("virtio", 16), ("sata", 6)];

/// A VM disk `PUT …/qemu/{vmid}/resize` accepts: a bus slot (`scsi0`), `efidisk0` or
/// `tpmstate0`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmDisk(String);

impl VmDisk {
    /// Checks `key` against the schema's list of resizable disks.
    pub fn new(key: impl Into<String>) -> Result<Self, ValueError> {
        let key = key.into();
        let slot = BUSES.iter().any(|(bus, slots)| {
            key.strip_prefix(bus).is_some_and(|n| {
                !n.is_empty()
                    && (n == "0" || !n.starts_with('0'))
                    && n.parse::<u8>().is_ok_and(|n| n < *slots)
            })
        });
        if slot || key == "efidisk0" || key == "tpmstate0" {
            Ok(Self(key))
        } else {
            Err(ValueError::new(
                "vm disk",
                key,
                "must be ideN, scsiN, virtioN, sataN, efidisk0 or tpmstate0 (a slot PVE resizes)",
            ))
        }
    }

    /// The config key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `key` names a disk slot of a bus (not `efidisk0`, `tpmstate0` or `unusedN`).
    pub fn is_bus_slot(key: &str) -> bool {
        Self::new(key).is_ok_and(|d| d.0 != "efidisk0" && d.0 != "tpmstate0")
    }
}

impl fmt::Display for VmDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl VmNet {
    /// Reads a `netN` value Bosun wrote or could have: a `virtio` device
    /// (`virtio[=MAC]`, or `model=virtio` with `macaddr=`) and the keys [`VmNet`] models. Any
    /// other model or key is refused rather than dropped, so writing the device back never
    /// loses a setting.
    pub fn parse(property: &str) -> Result<Self, ValueError> {
        let refuse = |why: &'static str| ValueError::new("vm network device", property, why);
        let mut net = VmNet::new("");
        let mut model = false;
        for part in property.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = match part.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (part, None),
            };
            match (key, value) {
                ("virtio", mac) if !model => {
                    model = true;
                    net.macaddr = mac.filter(|m| !m.is_empty()).map(str::to_owned);
                }
                ("model", Some("virtio")) if !model => model = true,
                ("macaddr", Some(mac)) => net.macaddr = Some(mac.to_owned()),
                ("bridge", Some(bridge)) => net.bridge = bridge.to_owned(),
                ("firewall", Some(v)) => {
                    net.firewall = Some(flag(v).ok_or_else(|| refuse("firewall is not a boolean"))?)
                }
                ("link_down", Some(v)) => {
                    net.link_down =
                        Some(flag(v).ok_or_else(|| refuse("link_down is not a boolean"))?)
                }
                ("rate", Some(v)) => net.rate = Some(Thousandths::parse(v)?),
                ("tag", Some(v)) => {
                    net.tag = Some(v.parse().map_err(|_| refuse("tag is not a vlan number"))?);
                }
                _ => {
                    return Err(refuse(
                        "names a model or key Bosun does not write (only virtio, bridge, firewall, link_down, rate, tag)",
                    ));
                }
            }
        }
        if !model {
            return Err(refuse("is not a virtio device"));
        }
        if net.bridge.is_empty() {
            return Err(refuse("names no bridge"));
        }
        Ok(net)
    }
}

/// A property string's boolean (`1`/`on`/`yes`/`true` or their opposites).
fn flag(value: &str) -> Option<bool> {
    match value {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_schemas_disks_are_resizable() {
        for ok in [
            "scsi0",
            "scsi30",
            "virtio15",
            "sata5",
            "ide3",
            "efidisk0",
            "tpmstate0",
        ] {
            assert_eq!(VmDisk::new(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "scsi31", "virtio16", "sata6", "ide4", "scsi", "scsi01", "unused0", "net0", "scsi-1",
            "rootfs",
        ] {
            assert!(VmDisk::new(bad).is_err(), "{bad}");
        }
        assert!(VmDisk::is_bus_slot("scsi0"));
        assert!(!VmDisk::is_bus_slot("efidisk0"));
    }

    #[test]
    fn a_device_reads_back_whole_or_not_at_all() {
        let net = VmNet::parse("virtio=BC:24:11:5E:A1:08,bridge=vmbr0,tag=20,rate=12.5").unwrap();
        assert_eq!(net.macaddr.as_deref(), Some("BC:24:11:5E:A1:08"));
        assert_eq!(net.firewall, None);
        let mut on = net.clone();
        on.firewall = Some(true);
        assert_eq!(
            on.to_property_string().unwrap(),
            "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1,rate=12.5,tag=20",
            "the MAC and every other key are kept"
        );
        let model =
            VmNet::parse("model=virtio,macaddr=BC:24:11:00:00:01,bridge=vmbr1,firewall=0").unwrap();
        assert_eq!(model.firewall, Some(false));
        assert_eq!(model.macaddr.as_deref(), Some("BC:24:11:00:00:01"));
        for bad in [
            "e1000=BC:24:11:00:00:01,bridge=vmbr0",
            "virtio=BC:24:11:00:00:01,bridge=vmbr0,queues=4",
            "virtio=BC:24:11:00:00:01",
            "virtio,virtio,bridge=vmbr0",
            "virtio,bridge=vmbr0,firewall=maybe",
        ] {
            assert!(VmNet::parse(bad).is_err(), "{bad}");
        }
    }
}
