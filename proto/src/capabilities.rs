//! What a host is and has (`capabilities` in a poll), and the labels operators give hosts.
//!
//! The agent describes its host with every full report and whenever the description changes
//! (decision 0077): architecture, CPU, Proxmox version, the storage kinds the node has and the
//! targets its signed plan names, its bridges and NICs, and whether a helper, a tunnel and SMART
//! are there. A description is bounded in counts and lengths, and everything in it is a host's
//! word: names are held to narrow alphabets, the two free-form texts (CPU model, Proxmox
//! version) may hold any visible character but no control character, and every place that shows
//! them escapes them ([`crate::inert`]; the dashboard escapes markup).
//!
//! [`HostCapabilities::tags`] flattens a description into the words `hosts list --capability`
//! matches (`helper`, `arch=x86_64`, `storage=pbs`, `bridge=vmbr0`, …). Labels
//! ([`LabelKey`], [`LabelValue`]) are the operator's own `key=value` words on a host,
//! set through `PUT /v1/admin/hosts/{id}/labels`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Most NICs and bridges one description lists.
pub const MAX_INTERFACES: usize = 64;
/// Most storage kinds one description lists.
pub const MAX_STORAGE_KINDS: usize = 32;
/// Most plan targets one description lists (a plan names at most this many).
pub const MAX_PLAN_TARGETS: usize = crate::desired::MAX_TARGETS;
/// Longest CPU model text, in bytes.
pub const MAX_CPU_MODEL: usize = 128;
/// Longest Proxmox version text, in bytes.
pub const MAX_PVE_VERSION: usize = 64;
/// Longest interface name, in bytes (Linux allows 15; Proxmox's own names stay within 20).
pub const MAX_INTERFACE_NAME: usize = 20;
/// Fastest link a description may state, in Mbit/s (1.6 Tbit/s).
pub const MAX_SPEED_MBPS: u32 = 1_600_000;
/// Most labels one host carries.
pub const MAX_LABELS: usize = 32;
/// Longest label key, in bytes.
pub const MAX_LABEL_KEY: usize = 63;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE: usize = 63;
/// Longest capability word `--capability` takes, in bytes.
pub const MAX_CAPABILITY: usize = 96;

// The OpenAPI schemas state these bounds as literals.
const _: () = assert!(MAX_INTERFACES == 64 && MAX_STORAGE_KINDS == 32 && MAX_PLAN_TARGETS == 64);
const _: () = assert!(MAX_LABELS == 32 && MAX_LABEL_KEY == 63 && MAX_LABEL_VALUE == 63);

/// What a host is and has, as its agent read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostCapabilities {
    /// The machine architecture (`x86_64`, `aarch64`): 1 to 16 of `[a-z0-9_]`.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 16, pattern = "^[a-z0-9_]+$")
    )]
    pub arch: String,
    /// The CPU model as Proxmox names it: free text, at most 128 bytes, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub cpu_model: Option<String>,
    /// Logical CPUs (0: unknown).
    #[serde(default)]
    pub cpu_count: u32,
    /// CPU sockets, when Proxmox said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sockets: Option<u32>,
    /// The Proxmox VE version (`pve-manager/9.1.1/…`): free text, at most 64 bytes, no control
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 64))]
    pub pve_version: Option<String>,
    /// The storage types the node has configured (`dir`, `lvmthin`, `zfspool`, `pbs`, …),
    /// sorted, each 1 to 16 of `[a-z0-9]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub storage_kinds: Vec<String>,
    /// The targets (`durable_id`s) the host's signed data plan names, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 64))]
    pub plan_targets: Vec<String>,
    /// The node's bridges and NICs, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 64))]
    pub interfaces: Vec<Interface>,
    /// The agent has a root helper configured.
    #[serde(default)]
    pub helper: bool,
    /// The agent watches a tunnel.
    #[serde(default)]
    pub tunnel: bool,
    /// The node's disks give SMART readings.
    #[serde(default)]
    pub smart: bool,
    /// Whether the agent has an address pool (`[addresses]` in its `agent.toml`, decision
    /// 0101): without one a new guest gets DHCP and its firewall no `ipfilter`. Absent from an
    /// agent that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_pool: Option<bool>,
}

/// One bridge or NIC of the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Interface {
    /// Its name (`vmbr0`, `eno1`): 1 to 20 of `[A-Za-z0-9_.:-]`, starting with a letter or digit.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 20,
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
        )
    )]
    pub name: String,
    /// What it is.
    pub kind: InterfaceKind,
    /// Its MAC address (six lowercase hex bytes joined by `:`), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
    )]
    pub mac: Option<String>,
    /// Whether it is up.
    pub state: LinkState,
    /// Its link speed in Mbit/s, when the kernel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 1_600_000))]
    pub speed_mbps: Option<u32>,
}

/// What kind of interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InterfaceKind {
    /// A Linux or Open vSwitch bridge guests attach to.
    Bridge,
    /// A physical NIC.
    Nic,
    /// A bond of NICs.
    Bond,
    /// A VLAN interface.
    Vlan,
    /// Anything this hub version does not know.
    #[serde(other)]
    Other,
}

/// Whether an interface is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Up.
    Up,
    /// Down.
    Down,
    /// Not known (anything this hub version does not know).
    #[serde(other)]
    Unknown,
}

impl InterfaceKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bridge => "bridge",
            Self::Nic => "nic",
            Self::Bond => "bond",
            Self::Vlan => "vlan",
            Self::Other => "other",
        }
    }
}

impl LinkState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Up => "up",
            Self::Down => "down",
            Self::Unknown => "unknown",
        }
    }
}

impl HostCapabilities {
    /// Checks every bound: counts, lengths and alphabets; interface names once each.
    pub fn validate(&self) -> Result<(), ValidationError> {
        word(|| "capabilities.arch".into(), &self.arch, 16, is_lower_word)?;
        if let Some(model) = &self.cpu_model {
            validate::text(|| "capabilities.cpu_model".into(), model, MAX_CPU_MODEL)?;
        }
        if let Some(version) = &self.pve_version {
            validate::text(
                || "capabilities.pve_version".into(),
                version,
                MAX_PVE_VERSION,
            )?;
        }
        validate::count(
            "capabilities.storage_kinds",
            self.storage_kinds.len(),
            MAX_STORAGE_KINDS,
        )?;
        for (i, kind) in self.storage_kinds.iter().enumerate() {
            word(
                || format!("capabilities.storage_kinds[{i}]"),
                kind,
                16,
                |c| c.is_ascii_lowercase() || c.is_ascii_digit(),
            )?;
        }
        validate::count(
            "capabilities.plan_targets",
            self.plan_targets.len(),
            MAX_PLAN_TARGETS,
        )?;
        for (i, target) in self.plan_targets.iter().enumerate() {
            validate::ident(|| format!("capabilities.plan_targets[{i}]"), target, 64)?;
        }
        validate::count(
            "capabilities.interfaces",
            self.interfaces.len(),
            MAX_INTERFACES,
        )?;
        let mut names = BTreeSet::new();
        for (i, nic) in self.interfaces.iter().enumerate() {
            nic.validate(i)?;
            if !names.insert(nic.name.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: "capabilities.interfaces".into(),
                    value: nic.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The words `hosts list --capability` matches: `helper`, `tunnel`, `smart`,
    /// `addresses` when present;
    /// `arch=…`, `pve=<major>`, `storage=<kind>`, `target=<durable_id>`, `bridge=<name>`,
    /// `nic=<name>` (also `bond=`, `vlan=`).
    pub fn tags(&self) -> BTreeSet<String> {
        let mut tags = BTreeSet::new();
        for (present, word) in [
            (self.helper, "helper"),
            (self.tunnel, "tunnel"),
            (self.smart, "smart"),
            (self.address_pool == Some(true), "addresses"),
        ] {
            if present {
                tags.insert(word.to_owned());
            }
        }
        tags.insert(format!("arch={}", self.arch));
        if let Some(major) = self.pve_version.as_deref().and_then(pve_major) {
            tags.insert(format!("pve={major}"));
        }
        tags.extend(self.storage_kinds.iter().map(|k| format!("storage={k}")));
        tags.extend(self.plan_targets.iter().map(|t| format!("target={t}")));
        tags.extend(
            self.interfaces
                .iter()
                .filter(|n| n.kind != InterfaceKind::Other)
                .map(|n| format!("{}={}", n.kind.as_str(), n.name)),
        );
        tags
    }
}

impl Interface {
    fn validate(&self, i: usize) -> Result<(), ValidationError> {
        let field = || format!("capabilities.interfaces[{i}].name");
        word(field, &self.name, MAX_INTERFACE_NAME, |c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
        })?;
        if !self.name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(ValidationError::Invalid {
                field: field(),
                reason: "must start with a letter or digit".into(),
            });
        }
        if let Some(mac) = &self.mac
            && !is_mac(mac)
        {
            return Err(ValidationError::Invalid {
                field: format!("capabilities.interfaces[{i}].mac"),
                reason: "expected six lowercase hex bytes joined by `:`".into(),
            });
        }
        if let Some(speed) = self.speed_mbps {
            validate::range(
                || format!("capabilities.interfaces[{i}].speed_mbps"),
                speed,
                0,
                MAX_SPEED_MBPS,
            )?;
        }
        Ok(())
    }
}

/// The major version in a Proxmox version text (`pve-manager/9.1.1/…` or `9.1.1`).
fn pve_major(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("pve-manager/").unwrap_or(version);
    let major: String = rest.chars().take_while(char::is_ascii_digit).collect();
    major.parse().ok()
}

/// Whether `s` is a MAC address: six lowercase hex bytes joined by `:`.
pub fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

fn is_lower_word(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// Checks a name: 1..=`max` bytes, each character one `allowed` takes.
fn word(
    field: impl Fn() -> String,
    value: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::Empty { field: field() });
    }
    if value.len() > max {
        return Err(ValidationError::TooLong {
            field: field(),
            len: value.len(),
            max,
        });
    }
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: format!(
                "character {:?} is not allowed",
                crate::inert::escape(&bad.to_string())
            ),
        });
    }
    Ok(())
}

/// A label key: 1 to 63 of `[a-z0-9._/-]`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelKey(String);

/// A label value: 1 to 63 of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelValue(String);

impl LabelKey {
    /// Checks `key` (`field` names it in the error).
    pub fn parse(field: &str, key: &str) -> Result<Self, ValidationError> {
        word(
            || field.to_owned(),
            key,
            MAX_LABEL_KEY,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '/' | '-'),
        )
        .map_err(|e| explain(e, "a label key is 1 to 63 of a-z 0-9 . _ / -"))?;
        if !key.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
            return Err(ValidationError::Invalid {
                field: field.to_owned(),
                reason: "a label key starts with a-z or 0-9".into(),
            });
        }
        Ok(Self(key.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl LabelValue {
    /// Checks `value` (`field` names it in the error).
    pub fn parse(field: &str, value: &str) -> Result<Self, ValidationError> {
        word(
            || field.to_owned(),
            value,
            MAX_LABEL_VALUE,
            |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'),
        )
        .map_err(|e| explain(e, "a label value is 1 to 63 of A-Z a-z 0-9 . _ -"))?;
        Ok(Self(value.to_owned()))
    }

    /// The value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `err` with what the rule is added to an alphabet complaint.
fn explain(err: ValidationError, rule: &str) -> ValidationError {
    match err {
        ValidationError::Invalid { field, reason } => ValidationError::Invalid {
            field,
            reason: format!("{reason}; {rule}"),
        },
        other => other,
    }
}

/// Parses `key=value` (a label or a selector term).
pub fn parse_label(field: &str, text: &str) -> Result<(LabelKey, LabelValue), ValidationError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: format!("`{}` is not key=value", crate::inert::escape(text)),
        });
    };
    let key = LabelKey::parse(field, key)?;
    if value.is_empty() {
        return Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: format!(
                "`{}=` gives the label no value; a label value is 1 to 63 of A-Z a-z 0-9 . _ -",
                key.as_str()
            ),
        });
    }
    Ok((key, LabelValue::parse(field, value)?))
}

/// Checks a capability word `--capability` takes: `helper`, or `name=value` with a name of
/// `[a-z]` and a value of `[A-Za-z0-9_.:-]`, at most [`MAX_CAPABILITY`] bytes.
pub fn check_capability(field: &str, text: &str) -> Result<(), ValidationError> {
    let (name, value) = text.split_once('=').unwrap_or((text, "x"));
    word(|| field.to_owned(), name, MAX_CAPABILITY, |c| c.is_ascii_lowercase())
        .and_then(|()| {
            word(|| field.to_owned(), value, MAX_CAPABILITY, |c| {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
            })
        })
        .map_err(|e| explain(e, "a capability is a word (helper, smart, tunnel) or name=value (arch=x86_64, storage=pbs, bridge=vmbr0)"))?;
    if text.len() > MAX_CAPABILITY {
        return Err(ValidationError::TooLong {
            field: field.to_owned(),
            len: text.len(),
            max: MAX_CAPABILITY,
        });
    }
    Ok(())
}

/// `PUT /v1/admin/hosts/{host_id}/labels`: labels to set and keys to remove, in one change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LabelChange {
    /// Labels to set (a key already there takes the new value).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Keys to remove (a key not there is no error).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub remove: Vec<String>,
}

impl LabelChange {
    /// Checks every key and value, and that no key is both set and removed.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::count("set", self.set.len(), MAX_LABELS)?;
        validate::count("remove", self.remove.len(), MAX_LABELS)?;
        if self.set.is_empty() && self.remove.is_empty() {
            return Err(ValidationError::Empty {
                field: "set".into(),
            });
        }
        for (key, value) in &self.set {
            LabelKey::parse("set", key)?;
            LabelValue::parse(&format!("set.{key}"), value)?;
        }
        for (i, key) in self.remove.iter().enumerate() {
            LabelKey::parse(&format!("remove[{i}]"), key)?;
            if self.set.contains_key(key) {
                return Err(ValidationError::Duplicate {
                    field: "remove".into(),
                    value: key.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The answer of `PUT /v1/admin/hosts/{host_id}/labels`: the host's labels after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostLabels {
    /// The host.
    pub host_id: uuid::Uuid,
    /// Its labels, by key.
    pub labels: BTreeMap<String, String>,
}

#[cfg(test)]
#[path = "capabilities_tests.rs"]
mod tests;
