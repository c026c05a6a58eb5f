//! Parameter specifications and PVE's validator (PVE::JSONSchema) messages for the
//! parameters the simulator accepts. Every name here must exist in PVE's published schema;
//! the route catalogue itself lives in `routes.rs`.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

/// One accepted parameter of a route.
#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    /// The schema name; indexed families use PVE's spelling (`net[n]`, `mp[n]`).
    pub name: &'static str,
    pub kind: ParamKind,
    pub optional: bool,
    /// Another parameter that must be present when this one is (`requires` in the schema).
    pub requires: Option<&'static str>,
}

/// Type and format of a parameter value.
#[derive(Debug, Clone, Copy)]
pub enum ParamKind {
    Bool,
    Int {
        min: Option<i64>,
        max: Option<i64>,
    },
    Number {
        min: Option<f64>,
        max: Option<f64>,
    },
    /// Integer with format `pve-vmid`.
    VmId,
    /// String with format `pve-vmid-list`.
    VmIdList,
    Node,
    StorageId,
    /// `pve-configid` (snapshot names) with a maximum length.
    ConfigId {
        max_len: usize,
    },
    ConfigIdList,
    VolumeId,
    DnsName,
    DnsNameList,
    TagList,
    StorageContent,
    StorageContentList,
    Str {
        max_len: Option<usize>,
        pattern: Option<&'static str>,
    },
    Enum(&'static [&'static str]),
    PropString(&'static PropSpec),
    /// `pve-startup-order`: `[[order=]\d+] [,up=\d+] [,down=\d+]`.
    StartupOrder,
    /// `type: array` of strings (a repeated key, or one value for a one-item array); the
    /// normalised form is the JSON array.
    StrArray,
}

/// Keys of a property string (`features`, `net[n]`, `rootfs`, …).
#[derive(Debug)]
pub struct PropSpec {
    pub keys: &'static [&'static str],
    pub default_key: Option<&'static str>,
    pub bool_keys: &'static [&'static str],
    /// Keys whose values are numbers or integers, checked as the schema types them (`rate`,
    /// `tag`, `mtu` inside a `netN`).
    pub typed_keys: &'static [(&'static str, ParamKind)],
}

pub(crate) const fn req(name: &'static str, kind: ParamKind) -> ParamSpec {
    ParamSpec {
        name,
        kind,
        optional: false,
        requires: None,
    }
}

pub(crate) const fn opt(name: &'static str, kind: ParamKind) -> ParamSpec {
    ParamSpec {
        name,
        kind,
        optional: true,
        requires: None,
    }
}

pub(crate) const fn opt_requires(
    name: &'static str,
    kind: ParamKind,
    requires: &'static str,
) -> ParamSpec {
    ParamSpec {
        name,
        kind,
        optional: true,
        requires: Some(requires),
    }
}

impl ParamSpec {
    /// Whether a request parameter name belongs to this spec (`net3` matches `net[n]`).
    pub fn matches(&self, name: &str) -> bool {
        match self.name.strip_suffix("[n]") {
            Some(prefix) => name
                .strip_prefix(prefix)
                .and_then(|rest| {
                    (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| rest.parse::<u32>().ok())
                        .flatten()
                })
                .is_some_and(|i| i <= max_index(prefix)),
            None => self.name == name,
        }
    }
}

fn max_index(prefix: &str) -> u32 {
    match prefix {
        "net" | "ipconfig" => 31,
        "scsi" => 30,
        _ => 255,
    }
}

pub(crate) const BOOL: ParamKind = ParamKind::Bool;
pub(crate) const INT: ParamKind = ParamKind::Int {
    min: None,
    max: None,
};
pub(crate) const UINT: ParamKind = ParamKind::Int {
    min: Some(0),
    max: None,
};
pub(crate) const STR: ParamKind = ParamKind::Str {
    max_len: None,
    pattern: None,
};

pub(crate) static FEATURES: PropSpec = PropSpec {
    keys: &[
        "force_rw_sys",
        "fuse",
        "keyctl",
        "mknod",
        "mount",
        "nesting",
    ],
    default_key: None,
    bool_keys: &["force_rw_sys", "fuse", "keyctl", "mknod", "nesting"],
    typed_keys: &[],
};
pub(crate) static NET: PropSpec = PropSpec {
    keys: &[
        "bridge",
        "firewall",
        "gw",
        "gw6",
        "host-managed",
        "hwaddr",
        "ip",
        "ip6",
        "link_down",
        "mtu",
        "name",
        "rate",
        "tag",
        "trunks",
        "type",
    ],
    default_key: None,
    bool_keys: &["firewall", "host-managed", "link_down"],
    // `rate` is a `number` with no bounds in the schema (MB/s; 0 is no limit).
    typed_keys: &[
        (
            "mtu",
            ParamKind::Int {
                min: Some(64),
                max: Some(65535),
            },
        ),
        (
            "rate",
            ParamKind::Number {
                min: None,
                max: None,
            },
        ),
        (
            "tag",
            ParamKind::Int {
                min: Some(1),
                max: Some(4094),
            },
        ),
    ],
};
/// The NIC models of a VM's `netN` (qemu-server's `$nic_model_list`, the same in 8.4 and 9.1):
/// each is also a key whose value is the device's MAC (`virtio=BC:24:11:…`).
pub(crate) const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];
/// `mac-addr`: a unicast MAC (the I/G bit clear).
const MAC: ParamKind = ParamKind::Str {
    max_len: None,
    pattern: Some("(?i)[0-9a-f][02468ace](?::[0-9a-f]{2}){5}"),
};
/// A VM's network device (`net[n]` of the qemu config schema): a model (the default key, or a
/// model named as a key with the MAC as its value), the bridge and the device's settings.
pub(crate) static QEMU_NET: PropSpec = PropSpec {
    keys: &[
        "bridge",
        "e1000",
        "e1000-82540em",
        "e1000-82544gc",
        "e1000-82545em",
        "e1000e",
        "firewall",
        "i82551",
        "i82557b",
        "i82559er",
        "link_down",
        "macaddr",
        "model",
        "mtu",
        "ne2k_isa",
        "ne2k_pci",
        "pcnet",
        "queues",
        "rate",
        "rtl8139",
        "tag",
        "trunks",
        "virtio",
        "vmxnet3",
    ],
    default_key: Some("model"),
    bool_keys: &["firewall", "link_down"],
    // Unlike a container's, a VM's `rate` has a minimum of 0 in the schema (still no maximum).
    typed_keys: &[
        ("model", ParamKind::Enum(NIC_MODELS)),
        ("macaddr", MAC),
        ("e1000", MAC),
        ("e1000-82540em", MAC),
        ("e1000-82544gc", MAC),
        ("e1000-82545em", MAC),
        ("e1000e", MAC),
        ("i82551", MAC),
        ("i82557b", MAC),
        ("i82559er", MAC),
        ("ne2k_isa", MAC),
        ("ne2k_pci", MAC),
        ("pcnet", MAC),
        ("rtl8139", MAC),
        ("virtio", MAC),
        ("vmxnet3", MAC),
        (
            "mtu",
            ParamKind::Int {
                min: Some(1),
                max: Some(65520),
            },
        ),
        (
            "queues",
            ParamKind::Int {
                min: Some(0),
                max: Some(64),
            },
        ),
        (
            "rate",
            ParamKind::Number {
                min: Some(0.0),
                max: None,
            },
        ),
        (
            "tag",
            ParamKind::Int {
                min: Some(1),
                max: Some(4094),
            },
        ),
    ],
};
pub(crate) static ROOTFS: PropSpec = PropSpec {
    keys: &[
        "acl",
        "mountoptions",
        "quota",
        "replicate",
        "ro",
        "shared",
        "size",
        "volume",
    ],
    default_key: Some("volume"),
    bool_keys: &["acl", "quota", "replicate", "ro", "shared"],
    typed_keys: &[],
};
pub(crate) static MP: PropSpec = PropSpec {
    keys: &[
        "acl",
        "backup",
        "keepattrs",
        "mountoptions",
        "mp",
        "quota",
        "replicate",
        "ro",
        "shared",
        "size",
        "volume",
    ],
    default_key: Some("volume"),
    bool_keys: &[
        "acl",
        "backup",
        "keepattrs",
        "quota",
        "replicate",
        "ro",
        "shared",
    ],
    typed_keys: &[],
};
pub(crate) static DEV: PropSpec = PropSpec {
    keys: &["deny-write", "gid", "mode", "path", "uid"],
    default_key: Some("path"),
    bool_keys: &["deny-write"],
    typed_keys: &[],
};
pub(crate) static UNUSED: PropSpec = PropSpec {
    keys: &["volume"],
    default_key: Some("volume"),
    bool_keys: &[],
    typed_keys: &[],
};
pub(crate) static PRUNE: PropSpec = PropSpec {
    keys: &[
        "keep-all",
        "keep-daily",
        "keep-hourly",
        "keep-last",
        "keep-monthly",
        "keep-weekly",
        "keep-yearly",
    ],
    default_key: None,
    bool_keys: &["keep-all"],
    typed_keys: &[],
};

/// PVE's storage content types.
pub(crate) const CONTENT_TYPES: &[&str] = &[
    "backup", "images", "import", "iso", "none", "rootdir", "snippets", "vztmpl",
];

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("static regex is valid")
}

static VMID_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^[1-9][0-9]{2,8}$"));
static NODE_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$"));
static STORAGE_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$"));
static CONFIGID_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z][a-z0-9_-]+$"));
static VOLID_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$"));
static DNS_LABEL_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$"));
static TAG_RE: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z0-9_][a-z0-9_\-+.]*$"));
static INT_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^[+-]?\d+$"));
static NUM_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"));

/// A request value after decoding: one string, or several for a repeated key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawValue {
    One(String),
    Many(Vec<String>),
    /// A JSON boolean from a JSON body.
    JsonBool(bool),
}

impl RawValue {
    pub(crate) fn display(&self) -> String {
        match self {
            RawValue::One(s) => s.clone(),
            RawValue::Many(v) => v.join(","),
            RawValue::JsonBool(b) => u8::from(*b).to_string(),
        }
    }
}

/// Validates one value and returns its normalised string form (booleans as `0`/`1`),
/// or the validator's message (ending in a newline as PVE's do).
pub(crate) fn check_value(kind: &ParamKind, raw: &RawValue) -> Result<String, String> {
    if let ParamKind::StrArray = kind {
        let items: Vec<String> = match raw {
            RawValue::Many(items) => items.clone(),
            RawValue::One(s) => vec![s.clone()],
            RawValue::JsonBool(b) => vec![u8::from(*b).to_string()],
        };
        return Ok(serde_json::Value::from(items).to_string());
    }
    let value = match (kind, raw) {
        (ParamKind::Bool, RawValue::JsonBool(b)) => return Ok(u8::from(*b).to_string()),
        (_, RawValue::JsonBool(b)) => u8::from(*b).to_string(),
        (_, RawValue::Many(items)) => {
            if matches!(
                kind,
                ParamKind::ConfigIdList
                    | ParamKind::VmIdList
                    | ParamKind::StorageContentList
                    | ParamKind::DnsNameList
                    | ParamKind::TagList
            ) {
                items.join(",")
            } else {
                return Err(type_error(kind, &format!("ARRAY({})", items.join(","))));
            }
        }
        (_, RawValue::One(s)) => s.clone(),
    };
    check_str(kind, &value).map(|v| v.unwrap_or(value))
}

fn type_error(kind: &ParamKind, got: &str) -> String {
    let t = match kind {
        ParamKind::Bool => "boolean",
        ParamKind::Int { .. } | ParamKind::VmId => "integer",
        ParamKind::Number { .. } => "number",
        _ => "string",
    };
    format!("type check ('{t}') failed - got '{got}'\n")
}

fn bad_format(text: &str) -> String {
    format!("invalid format - {text}\n")
}

fn check_str(kind: &ParamKind, v: &str) -> Result<Option<String>, String> {
    match kind {
        ParamKind::Bool => match v {
            "0" | "1" => Ok(None),
            _ => Err(type_error(kind, v)),
        },
        ParamKind::Int { min, max } => {
            let n = parse_int(kind, v)?;
            check_range(n as f64, min.map(|m| m as f64), max.map(|m| m as f64))?;
            Ok(Some(n.to_string()))
        }
        ParamKind::Number { min, max } => {
            if !NUM_RE.is_match(v) {
                return Err(type_error(kind, v));
            }
            let n: f64 = v.parse().map_err(|_| type_error(kind, v))?;
            check_range(n, *min, *max)?;
            Ok(None)
        }
        ParamKind::VmId => {
            let n = parse_int(kind, v)?;
            if !VMID_RE.is_match(&n.to_string()) {
                return Err(bad_format("value does not look like a valid VM ID"));
            }
            Ok(Some(n.to_string()))
        }
        ParamKind::VmIdList => {
            for id in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if !VMID_RE.is_match(id) {
                    return Err(bad_format("value does not look like a valid VM ID"));
                }
            }
            Ok(None)
        }
        ParamKind::Node => NODE_RE
            .is_match(v)
            .then_some(None)
            .ok_or_else(|| bad_format("value does not look like a valid node name")),
        ParamKind::StorageId => check_storage_id(v).map(|()| None),
        ParamKind::ConfigId { max_len } => {
            if !CONFIGID_RE.is_match(v) {
                return Err(bad_format(&format!("invalid configuration ID '{v}'")));
            }
            check_len(v, Some(*max_len)).map(|()| None)
        }
        ParamKind::ConfigIdList => {
            for id in v.split([',', ';', ' ', '\0']).filter(|s| !s.is_empty()) {
                if !CONFIGID_RE.is_match(id) {
                    return Err(bad_format(&format!("invalid configuration ID '{id}'")));
                }
            }
            Ok(None)
        }
        ParamKind::VolumeId => VOLID_RE
            .is_match(v)
            .then_some(None)
            .ok_or_else(|| bad_format(&format!("unable to parse volume ID '{v}'"))),
        ParamKind::DnsName => {
            check_dns(v)?;
            check_len(v, Some(255)).map(|()| None)
        }
        ParamKind::DnsNameList => {
            for name in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                check_dns(name)?;
            }
            Ok(None)
        }
        ParamKind::TagList => {
            for tag in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if !TAG_RE.is_match(tag) {
                    return Err(bad_format(&format!("invalid tag '{tag}'")));
                }
            }
            Ok(None)
        }
        ParamKind::StorageContent => CONTENT_TYPES
            .contains(&v)
            .then_some(None)
            .ok_or_else(|| bad_format(&format!("invalid content type '{v}'"))),
        ParamKind::StorageContentList => {
            for c in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if !CONTENT_TYPES.contains(&c) {
                    return Err(bad_format(&format!("invalid content type '{c}'")));
                }
            }
            Ok(None)
        }
        ParamKind::Str { max_len, pattern } => {
            if let Some(p) = pattern {
                let anchored = re(&format!("^(?:{p})$"));
                if !anchored.is_match(v) {
                    return Err("value does not match the regex pattern\n".to_owned());
                }
            }
            check_len(v, *max_len).map(|()| None)
        }
        ParamKind::Enum(values) => {
            if values.contains(&v) {
                Ok(None)
            } else {
                Err(format!(
                    "value '{v}' does not have a value in the enumeration '{}'\n",
                    values.join(", ")
                ))
            }
        }
        ParamKind::PropString(spec) => parse_prop_string(spec, v)
            .map(|_| None)
            .map_err(|e| bad_format(&e)),
        ParamKind::StartupOrder => {
            if startup_order_parses(v) {
                Ok(None)
            } else {
                Err(bad_format("unable to parse startup options"))
            }
        }
        // Handled whole in `check_value`.
        ParamKind::StrArray => Ok(None),
    }
}

fn parse_int(kind: &ParamKind, v: &str) -> Result<i64, String> {
    if !INT_RE.is_match(v) {
        return Err(type_error(kind, v));
    }
    v.trim_start_matches('+')
        .parse::<i64>()
        .map_err(|_| type_error(kind, v))
}

fn check_range(n: f64, min: Option<f64>, max: Option<f64>) -> Result<(), String> {
    if let Some(m) = min
        && n < m
    {
        return Err(format!("value must have a minimum value of {m}\n"));
    }
    if let Some(m) = max
        && n > m
    {
        return Err(format!("value must have a maximum value of {m}\n"));
    }
    Ok(())
}

fn check_len(v: &str, max: Option<usize>) -> Result<(), String> {
    match max {
        Some(m) if v.chars().count() > m => Err(format!("value may only be {m} characters long\n")),
        _ => Ok(()),
    }
}

fn check_dns(v: &str) -> Result<(), String> {
    if v.split('.').all(|l| DNS_LABEL_RE.is_match(l)) {
        Ok(())
    } else {
        Err(bad_format("value does not look like a valid DNS name"))
    }
}

/// `pve-node`.
pub(crate) fn node_name_ok(v: &str) -> bool {
    NODE_RE.is_match(v)
}

/// `pve-storage-id`, with PVE's two messages.
pub(crate) fn check_storage_id(v: &str) -> Result<(), String> {
    if v.len() < 2 {
        return Err(bad_format(&format!(
            "storage ID '{v}' cannot be shorter than 2 characters"
        )));
    }
    if !STORAGE_RE.is_match(v) {
        return Err(bad_format(&format!(
            "storage ID '{v}' contains illegal characters"
        )));
    }
    Ok(())
}

/// Splits a property string (`name=eth0,bridge=vmbr0`) into its keys, checking key names,
/// duplicates and boolean values the way PVE's `parse_property_string` does.
pub(crate) fn parse_prop_string(
    spec: &PropSpec,
    value: &str,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for part in value.split(',').filter(|p| !p.is_empty()) {
        let (key, val) = match part.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => match spec.default_key {
                Some(dk) => (dk.to_owned(), part.to_owned()),
                None => {
                    return Err(
                        "value without key, but schema does not define a default key".to_owned(),
                    );
                }
            },
        };
        if !spec.keys.contains(&key.as_str()) {
            return Err(format!(
                "invalid key in comma-separated list property: {key}"
            ));
        }
        let val = if spec.bool_keys.contains(&key.as_str()) {
            match val.to_ascii_lowercase().as_str() {
                "1" | "on" | "yes" | "true" => "1".to_owned(),
                "0" | "off" | "no" | "false" => "0".to_owned(),
                _ => {
                    return Err(format!(
                        "{key}: type check ('boolean') failed - got '{val}'"
                    ));
                }
            }
        } else {
            val
        };
        if let Some((_, kind)) = spec.typed_keys.iter().find(|(k, _)| *k == key) {
            check_str(kind, &val).map_err(|e| format!("{key}: {}", e.trim_end()))?;
        }
        if out.insert(key.clone(), val).is_some() {
            return Err(format!(
                "duplicate key in comma-separated list property: {key}"
            ));
        }
    }
    Ok(out)
}

/// Parses a PVE size string (`8G`, `+2G`, `512M`, `1024`) into bytes; no unit means bytes.
pub(crate) fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: u64 = match unit {
        "" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return None,
    };
    let bytes = n * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then(|| {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked finite, non-negative and in range just above"
        )]
        let b = bytes as u64;
        b
    })
}

/// Renders bytes the way PVE writes `size=` in configs (`8G`, `512M`, or plain bytes).
pub(crate) fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        let m = 1u64 << shift;
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{unit}", bytes / m);
        }
    }
    bytes.to_string()
}

/// PVE's `pve_parse_startup_order`: comma-separated parts, each blank, `order=N` or a bare `N`,
/// `up=N` or `down=N`; an empty value does not parse.
pub(crate) fn startup_order_parses(value: &str) -> bool {
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    !value.is_empty()
        && value.split(',').all(|part| {
            part.trim().is_empty()
                || digits(part.strip_prefix("order=").unwrap_or(part))
                || part.strip_prefix("up=").is_some_and(digits)
                || part.strip_prefix("down=").is_some_and(digits)
        })
}

#[cfg(test)]
mod tests;
