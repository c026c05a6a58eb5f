//! Validated identifiers the PVE API takes and returns: VM ids, node and storage names,
//! snapshot names, volume ids and UPIDs.
//!
//! Each constructor checks the value against the format PVE's validator applies
//! (`pve-vmid`, `pve-node`, `pve-storage-id`, `pve-configid`, `pve-volume-id`), so a bad value
//! is refused here with a clear message instead of by the server with a 400.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize};

/// A value that does not have the form PVE expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {reason}")]
pub struct ValueError {
    /// What kind of value was checked (e.g. `vmid`, `storage id`).
    pub kind: &'static str,
    /// The rejected value.
    pub value: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

impl ValueError {
    pub(crate) fn new(kind: &'static str, value: impl Into<String>, reason: &'static str) -> Self {
        Self {
            kind,
            value: value.into(),
            reason,
        }
    }
}

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).expect("pattern is a valid constant regex")
}

static NODE_RE: LazyLock<Regex> =
    LazyLock::new(|| regex(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$"));
static STORAGE_RE: LazyLock<Regex> = LazyLock::new(|| regex(r"(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$"));
static CONFIGID_RE: LazyLock<Regex> = LazyLock::new(|| regex(r"(?i)^[a-z][a-z0-9_-]+$"));
static VOLID_RE: LazyLock<Regex> =
    LazyLock::new(|| regex(r"(?i)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$"));
static DNS_LABEL_RE: LazyLock<Regex> =
    LazyLock::new(|| regex(r"^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"));
static TAG_RE: LazyLock<Regex> = LazyLock::new(|| regex(r"(?i)^[a-z0-9_][a-z0-9_\-+.]*$"));
static UPID_RE: LazyLock<Regex> = LazyLock::new(|| {
    regex(
        r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$",
    )
});

/// A guest id (`pve-vmid`): 100 ..= 999 999 999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Vmid(u32);

impl Vmid {
    /// The smallest id PVE accepts.
    pub const MIN: u32 = 100;
    /// The largest id PVE accepts.
    pub const MAX: u32 = 999_999_999;

    /// Checks the range PVE's `pve-vmid` format allows.
    pub fn new(id: u32) -> Result<Self, ValueError> {
        if (Self::MIN..=Self::MAX).contains(&id) {
            Ok(Self(id))
        } else {
            Err(ValueError::new(
                "vmid",
                id.to_string(),
                "must be between 100 and 999999999",
            ))
        }
    }

    /// The id as a number.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Vmid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Vmid {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let id: u32 = s
            .parse()
            .map_err(|_| ValueError::new("vmid", s, "not a decimal number"))?;
        Self::new(id)
    }
}

impl<'de> Deserialize<'de> for Vmid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = crate::decode::lenient_u64(d)?;
        let id = u32::try_from(n).map_err(|_| serde::de::Error::custom("vmid out of range"))?;
        Vmid::new(id).map_err(serde::de::Error::custom)
    }
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Checks the value against PVE's format for it.
            pub fn new(value: impl Into<String>) -> Result<Self, ValueError> {
                let value = value.into();
                $check(&value)?;
                Ok(Self(value))
            }

            /// The value as sent on the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = ValueError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn check_node(v: &str) -> Result<(), ValueError> {
    if NODE_RE.is_match(v) {
        Ok(())
    } else {
        Err(ValueError::new(
            "node name",
            v,
            "must be letters, digits and inner dashes",
        ))
    }
}

fn check_storage(v: &str) -> Result<(), ValueError> {
    if v.len() < 2 {
        Err(ValueError::new(
            "storage id",
            v,
            "cannot be shorter than 2 characters",
        ))
    } else if STORAGE_RE.is_match(v) {
        Ok(())
    } else {
        Err(ValueError::new(
            "storage id",
            v,
            "contains illegal characters",
        ))
    }
}

fn check_snapname(v: &str) -> Result<(), ValueError> {
    if v.len() > 40 {
        Err(ValueError::new(
            "snapshot name",
            v,
            "may only be 40 characters long",
        ))
    } else if v == "current" || v == "vzdump" {
        Err(ValueError::new("snapshot name", v, "is reserved by PVE"))
    } else if CONFIGID_RE.is_match(v) {
        Ok(())
    } else {
        Err(ValueError::new(
            "snapshot name",
            v,
            "must start with a letter and hold letters, digits, '_' and '-'",
        ))
    }
}

fn check_volid(v: &str) -> Result<(), ValueError> {
    if VOLID_RE.is_match(v) {
        Ok(())
    } else {
        Err(ValueError::new("volume id", v, "must be STORAGE:NAME"))
    }
}

string_newtype!(
    /// A cluster node name (`pve-node`).
    NodeName,
    check_node
);
string_newtype!(
    /// A storage id (`pve-storage-id`), e.g. `local`.
    StorageId,
    check_storage
);
impl StorageId {
    /// `bosun-<kind>-<digest>`: the name of a manifest target's storage. `kind` is
    /// lowercase letters and `digest` hex digits, so the result is always a storage id (a
    /// test checks it against [`StorageId::new`]).
    pub fn bosun_target(kind: &'static str, digest: &[u8; 16]) -> Self {
        Self(format!("bosun-{kind}-{}", hex::encode(digest)))
    }

    /// `<this id>-k<key id>`: the restore-only storage that reads this storage's archives
    /// with a retired encryption key. `key_id` is lowercase hex digits, so the result is a
    /// storage id whenever this one is.
    pub fn restore_only(&self, key_id: &str) -> Self {
        Self(format!("{}-k{key_id}", self.0))
    }
}

string_newtype!(
    /// A snapshot name (`pve-configid`, at most 40 characters, not `current` or `vzdump`).
    SnapName,
    check_snapname
);
string_newtype!(
    /// A volume id (`pve-volume-id`), e.g. `local:backup/vzdump-lxc-100-….tar.zst`.
    VolumeId,
    check_volid
);

impl VolumeId {
    /// The storage part before the first `:`.
    pub fn storage(&self) -> &str {
        self.0.split_once(':').map_or("", |(s, _)| s)
    }

    /// The part after the first `:`.
    pub fn name(&self) -> &str {
        self.0.split_once(':').map_or("", |(_, n)| n)
    }
}

/// Checks a hostname against PVE's `dns-name` format (at most 255 characters).
pub fn check_dns_name(v: &str) -> Result<(), ValueError> {
    if v.is_empty() || v.len() > 255 {
        return Err(ValueError::new(
            "hostname",
            v,
            "must be 1 to 255 characters long",
        ));
    }
    if v.split('.').all(|label| DNS_LABEL_RE.is_match(label)) {
        Ok(())
    } else {
        Err(ValueError::new(
            "hostname",
            v,
            "must be dot-separated letters, digits and inner dashes",
        ))
    }
}

/// Checks a tag against PVE's `pve-tag` format.
pub fn check_tag(v: &str) -> Result<(), ValueError> {
    if TAG_RE.is_match(v) {
        Ok(())
    } else {
        Err(ValueError::new(
            "tag",
            v,
            "must be letters, digits and _-+.",
        ))
    }
}

/// A task id as PVE writes it:
/// `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Upid(Arc<UpidParts>);

#[derive(PartialEq, Eq, Hash)]
struct UpidParts {
    raw: String,
    node: NodeName,
    pid: u32,
    starttime: i64,
    task_type: String,
    id: String,
    user: String,
}

impl Upid {
    /// Parses and checks a UPID.
    pub fn parse(raw: &str) -> Result<Self, ValueError> {
        let caps = UPID_RE
            .captures(raw)
            .ok_or_else(|| ValueError::new("upid", raw, "does not have the UPID form"))?;
        let part = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        let pid = u32::from_str_radix(part(3), 16)
            .map_err(|_| ValueError::new("upid", raw, "pid is not hex"))?;
        let starttime = i64::from_str_radix(part(5), 16)
            .map_err(|_| ValueError::new("upid", raw, "start time is not hex"))?;
        Ok(Self(Arc::new(UpidParts {
            raw: raw.to_owned(),
            node: NodeName::new(part(1))?,
            pid,
            starttime,
            task_type: part(6).to_owned(),
            id: part(7).to_owned(),
            user: part(8).to_owned(),
        })))
    }

    /// The UPID string.
    pub fn as_str(&self) -> &str {
        &self.0.raw
    }
    /// The node the task runs on.
    pub fn node(&self) -> &NodeName {
        &self.0.node
    }
    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.0.pid
    }
    /// When the task started, in seconds since the epoch.
    pub fn starttime(&self) -> i64 {
        self.0.starttime
    }
    /// The task type, e.g. `vzdump`, `vzrestore`, `vzstart`.
    pub fn task_type(&self) -> &str {
        &self.0.task_type
    }
    /// The task's object id (often the vmid; may be empty).
    pub fn id(&self) -> &str {
        &self.0.id
    }
    /// Who started the task (`user@realm!tokenid` for a token).
    pub fn user(&self) -> &str {
        &self.0.user
    }
}

impl Serialize for Upid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Debug for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Upid").field(&self.0.raw).finish()
    }
}

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.raw)
    }
}

impl FromStr for Upid {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'de> Deserialize<'de> for Upid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Upid::parse(&s).map_err(serde::de::Error::custom)
    }
}
