//! Typed builders for PVE property strings (`net0=name=eth0,bridge=vmbr0`,
//! `prune-backups=keep-last=3`) and size arguments.
//!
//! Each builder validates its parts and renders the comma-separated string; the form encoder
//! percent-encodes the `=` and `,` inside the value, so PVE's form decoder (which splits on
//! `&`, `;` and the first `=`) never truncates it.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use super::decimal::Thousandths;
use super::types::ValueError;

static NAME_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-_.\w\d]+$").expect("constant regex is valid"));
static MAC_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$").expect("constant regex is valid")
});
static IPV4_CIDR_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})$")
        .expect("constant regex is valid")
});

/// How a container interface gets its IPv4 address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ipv4Config {
    /// `ip=dhcp`.
    Dhcp,
    /// `ip=manual` (configured inside the guest).
    Manual,
    /// A static address in CIDR form, e.g. `10.0.0.5/24`.
    Static(String),
}

/// A container network interface, rendered as the `netN` property string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// The interface name inside the guest (`eth0`).
    pub name: String,
    /// The host bridge (`vmbr0`).
    pub bridge: String,
    /// A fixed MAC address; `None` lets PVE generate one.
    pub hwaddr: Option<String>,
    /// IPv4 configuration.
    pub ip: Option<Ipv4Config>,
    /// IPv4 gateway.
    pub gw: Option<std::net::Ipv4Addr>,
    /// VLAN tag (1..=4094).
    pub tag: Option<u16>,
    /// Whether the PVE firewall filters this interface.
    pub firewall: Option<bool>,
    /// Keep the link down (restore tests isolate their scratch guests this way).
    pub link_down: Option<bool>,
    /// The interface's rate limit in MB/s (`rate=`; Proxmox polices what the guest sends and
    /// shapes what it receives at this rate; none, or `0`, is no limit).
    pub rate: Option<Thousandths>,
    /// Keys the agent does not model (`ip6`, `gw6`, `mtu`, `type`, …) with their
    /// values, as [`NetConfig::parse`] read them: written back unchanged.
    pub other: Vec<(String, String)>,
}

impl NetConfig {
    /// An interface `name` on `bridge` with everything else left to PVE.
    pub fn new(name: impl Into<String>, bridge: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            bridge: bridge.into(),
            hwaddr: None,
            ip: None,
            gw: None,
            tag: None,
            firewall: None,
            link_down: None,
            rate: None,
            other: Vec::new(),
        }
    }

    /// Parses a `netN` property string as Proxmox returns it, keeping every key (the MAC
    /// too): the keys the agent models in their fields, the rest in [`NetConfig::other`].
    pub fn parse(property: &str) -> Result<Self, ValueError> {
        let mut net = Self::new("", "");
        for part in property.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| ValueError::new("net property", part, "has no '='"))?;
            match key {
                "name" => net.name = value.to_owned(),
                "bridge" => net.bridge = value.to_owned(),
                "hwaddr" => net.hwaddr = Some(value.to_owned()),
                "ip" => {
                    net.ip = Some(match value {
                        "dhcp" => Ipv4Config::Dhcp,
                        "manual" => Ipv4Config::Manual,
                        cidr => Ipv4Config::Static(cidr.to_owned()),
                    });
                }
                "gw" => {
                    net.gw = Some(value.parse().map_err(|_| {
                        ValueError::new("net gateway", value, "is not an IPv4 address")
                    })?);
                }
                "tag" => {
                    net.tag = Some(
                        value
                            .parse()
                            .map_err(|_| ValueError::new("vlan tag", value, "is not a number"))?,
                    );
                }
                "firewall" => net.firewall = Some(value == "1"),
                "link_down" => net.link_down = Some(value == "1"),
                "rate" => net.rate = Some(Thousandths::parse(value)?),
                other => net.other.push((other.to_owned(), value.to_owned())),
            }
        }
        if net.name.is_empty() || net.bridge.is_empty() {
            return Err(ValueError::new(
                "net property",
                property,
                "lacks name or bridge",
            ));
        }
        Ok(net)
    }

    /// Validates the parts and renders `name=…,bridge=…[,hwaddr=…][,ip=…]…`.
    pub fn to_property_string(&self) -> Result<String, ValueError> {
        if !NAME_RE.is_match(&self.name) {
            return Err(ValueError::new(
                "interface name",
                &self.name,
                "must be letters, digits, '-', '_', '.'",
            ));
        }
        if !NAME_RE.is_match(&self.bridge) {
            return Err(ValueError::new(
                "bridge",
                &self.bridge,
                "must be letters, digits, '-', '_', '.'",
            ));
        }
        let mut parts = vec![
            format!("name={}", self.name),
            format!("bridge={}", self.bridge),
        ];
        if let Some(mac) = &self.hwaddr {
            if !MAC_RE.is_match(mac) {
                return Err(ValueError::new(
                    "mac address",
                    mac,
                    "must be six colon-separated hex bytes",
                ));
            }
            parts.push(format!("hwaddr={mac}"));
        }
        if let Some(ip) = &self.ip {
            let value = match ip {
                Ipv4Config::Dhcp => "dhcp".to_owned(),
                Ipv4Config::Manual => "manual".to_owned(),
                Ipv4Config::Static(cidr) => {
                    check_ipv4_cidr(cidr)?;
                    cidr.clone()
                }
            };
            parts.push(format!("ip={value}"));
        }
        if let Some(gw) = self.gw {
            parts.push(format!("gw={gw}"));
        }
        if let Some(tag) = self.tag {
            if !(1..=4094).contains(&tag) {
                return Err(ValueError::new(
                    "vlan tag",
                    tag.to_string(),
                    "must be between 1 and 4094",
                ));
            }
            parts.push(format!("tag={tag}"));
        }
        if let Some(fw) = self.firewall {
            parts.push(format!("firewall={}", u8::from(fw)));
        }
        if let Some(down) = self.link_down {
            parts.push(format!("link_down={}", u8::from(down)));
        }
        if let Some(rate) = self.rate {
            parts.push(format!("rate={rate}"));
        }
        for (key, value) in &self.other {
            let modelled = [
                "name",
                "bridge",
                "hwaddr",
                "ip",
                "gw",
                "tag",
                "firewall",
                "link_down",
                "rate",
            ];
            if key.is_empty()
                || modelled.contains(&key.as_str())
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            {
                return Err(ValueError::new(
                    "net property key",
                    key.clone(),
                    "must be a lowercase key the agent does not model",
                ));
            }
            if value.is_empty() || value.contains([',', '=']) {
                return Err(ValueError::new(
                    "net property value",
                    value.clone(),
                    "must be non-empty, without ',' or '='",
                ));
            }
            parts.push(format!("{key}={value}"));
        }
        Ok(parts.join(","))
    }
}

fn check_ipv4_cidr(cidr: &str) -> Result<(), ValueError> {
    let bad = || ValueError::new("ipv4 address", cidr, "must be a.b.c.d/prefix");
    let caps = IPV4_CIDR_RE.captures(cidr).ok_or_else(bad)?;
    for i in 1..=4 {
        caps[i].parse::<u8>().map_err(|_| bad())?;
    }
    let prefix: u8 = caps[5].parse().map_err(|_| bad())?;
    if prefix > 32 {
        return Err(bad());
    }
    Ok(())
}

/// Backup retention, rendered as the `prune-backups` property string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneBackups {
    /// Keep every backup (`keep-all=1`); excludes the other options.
    pub keep_all: bool,
    /// Keep the last N backups.
    pub keep_last: Option<u32>,
    /// Keep one backup per hour for the last N hours with backups.
    pub keep_hourly: Option<u32>,
    /// Keep one per day for N days.
    pub keep_daily: Option<u32>,
    /// Keep one per week for N weeks.
    pub keep_weekly: Option<u32>,
    /// Keep one per month for N months.
    pub keep_monthly: Option<u32>,
    /// Keep one per year for N years.
    pub keep_yearly: Option<u32>,
}

impl PruneBackups {
    /// Validates and renders e.g. `keep-daily=7,keep-last=3`.
    pub fn to_property_string(&self) -> Result<String, ValueError> {
        let keeps = [
            ("keep-daily", self.keep_daily),
            ("keep-hourly", self.keep_hourly),
            ("keep-last", self.keep_last),
            ("keep-monthly", self.keep_monthly),
            ("keep-weekly", self.keep_weekly),
            ("keep-yearly", self.keep_yearly),
        ];
        let set: Vec<String> = keeps
            .iter()
            .filter_map(|(k, v)| v.map(|n| format!("{k}={n}")))
            .collect();
        match (self.keep_all, set.is_empty()) {
            (true, true) => Ok("keep-all=1".to_owned()),
            (true, false) => Err(ValueError::new(
                "prune-backups",
                set.join(","),
                "keep-all cannot be combined with other keep options",
            )),
            (false, true) => Err(ValueError::new("prune-backups", "", "names no keep option")),
            (false, false) => Ok(set.join(",")),
        }
    }
}

/// A size for `resize`, in whole units of base 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeUnit {
    /// KiB (`K`).
    K,
    /// MiB (`M`).
    M,
    /// GiB (`G`).
    G,
    /// TiB (`T`).
    T,
}

impl SizeUnit {
    fn suffix(self) -> &'static str {
        match self {
            Self::K => "K",
            Self::M => "M",
            Self::G => "G",
            Self::T => "T",
        }
    }
}

/// A resize target: grow by an amount (`+2G`) or set an absolute size (`10G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskSize {
    /// Grow the volume by this amount.
    Grow(u64, SizeUnit),
    /// Set the volume to this size (PVE refuses to shrink).
    Absolute(u64, SizeUnit),
}

impl DiskSize {
    /// Renders the `size` parameter; a zero amount is refused.
    pub fn to_param(self) -> Result<String, ValueError> {
        let (sign, n, unit) = match self {
            Self::Grow(n, u) => ("+", n, u),
            Self::Absolute(n, u) => ("", n, u),
        };
        if n == 0 {
            return Err(ValueError::new(
                "disk size",
                "0",
                "must be greater than zero",
            ));
        }
        Ok(format!("{sign}{n}{}", unit.suffix()))
    }
}

impl fmt::Display for DiskSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_param() {
            Ok(s) => f.write_str(&s),
            Err(_) => f.write_str("<invalid size>"),
        }
    }
}

/// A container volume that can be resized: `rootfs` or a mount point `mpN` (0..=255).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtDisk {
    /// The root filesystem.
    RootFs,
    /// Mount point N.
    MountPoint(u8),
}

impl fmt::Display for CtDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RootFs => f.write_str("rootfs"),
            Self::MountPoint(n) => write!(f, "mp{n}"),
        }
    }
}

/// The MAC address (`hwaddr`) a `netN` property string names, uppercase; `None` when it
/// names none.
pub fn hwaddr_of(property: &str) -> Option<String> {
    property
        .split(',')
        .find_map(|part| part.strip_prefix("hwaddr="))
        .filter(|mac| !mac.is_empty())
        .map(str::to_ascii_uppercase)
}

/// Parses a `netN` property string into a [`NetConfig`], dropping `hwaddr` (so setting it
/// again makes Proxmox generate a new MAC). Keys [`NetConfig`] does not model are refused
/// rather than silently dropped.
pub fn net_without_hwaddr(property: &str) -> Result<NetConfig, String> {
    let mut net = NetConfig::new("", "");
    for part in property.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("net property part {part:?} has no '='"))?;
        match key {
            "name" => net.name = value.to_owned(),
            "bridge" => net.bridge = value.to_owned(),
            "hwaddr" | "type" => {}
            "ip" => {
                net.ip = Some(match value {
                    "dhcp" => Ipv4Config::Dhcp,
                    "manual" => Ipv4Config::Manual,
                    cidr => Ipv4Config::Static(cidr.to_owned()),
                });
            }
            "gw" => {
                net.gw = Some(
                    value
                        .parse()
                        .map_err(|_| format!("net gateway {value:?} is not ipv4"))?,
                );
            }
            "tag" => {
                net.tag = Some(
                    value
                        .parse()
                        .map_err(|_| format!("net tag {value:?} is not a number"))?,
                );
            }
            "firewall" => net.firewall = Some(value == "1"),
            "link_down" => net.link_down = Some(value == "1"),
            "rate" => net.rate = Some(Thousandths::parse(value).map_err(|e| e.to_string())?),
            other => return Err(format!("net property key {other:?} is not handled")),
        }
    }
    if net.name.is_empty() || net.bridge.is_empty() {
        return Err(format!("net property {property:?} lacks name or bridge"));
    }
    Ok(net)
}
