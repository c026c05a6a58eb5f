//! Named formats: the hash-based ones from `pve-api-formats.json` (property strings), the
//! code-based ones the agent touches (regexes from PVE's Perl sources, see NOTES.md), and
//! inline property-string formats.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::value::{Level, check_at, is_optional};
use super::{SchemaError, read_json};

fn re(p: &str) -> Regex {
    Regex::new(p).expect("constant regex is valid")
}

static VMID: LazyLock<Regex> = LazyLock::new(|| re(r"^[1-9][0-9]{2,8}$"));
static NODE: LazyLock<Regex> = LazyLock::new(|| re(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$"));
static STORAGE_ID: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$"));
static CONFIGID: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z][a-z0-9_-]+$"));
static VOLUME_ID: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$"));
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"));
static TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^[a-z0-9_][a-z0-9_\-+.]*$"));
static DISK_SIZE: LazyLock<Regex> = LazyLock::new(|| re(r"^\d+(\.\d+)?([KMGT](iB)?)?$"));
static MAC: LazyLock<Regex> = LazyLock::new(|| re(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$"));
// pve-access-control's `verify_username`, `verify_tokenid`, `verify_roleid`, and the shape of
// a privilege name (`verify_privname` also wants it known to the release).
static USERID: LazyLock<Regex> = LazyLock::new(|| re(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+$"));
static TOKENID: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$"));
static ROLEID: LazyLock<Regex> = LazyLock::new(|| re(r"^[A-Za-z0-9.\-_]+$"));
static PRIV: LazyLock<Regex> = LazyLock::new(|| re(r"^[A-Z][A-Za-z]*(\.[A-Za-z]+)+$"));
static STORAGE_PATH: LazyLock<Regex> = LazyLock::new(|| re(r"^/[^;()]*$"));
static MP_DOTS: LazyLock<Regex> = LazyLock::new(|| re(r"(^|/)\.\.?(/|$)"));
static LIST_SPLIT: LazyLock<Regex> = LazyLock::new(|| re(r"[,;\s\x00]+"));

/// The named formats and storage content types from `pve-api-formats.json`.
#[derive(Debug, Clone)]
pub struct Formats {
    hash: BTreeMap<String, Map<String, Value>>,
    code: BTreeSet<String>,
    content_types: Vec<String>,
}

impl Formats {
    /// Loads `pve-api-formats.json`.
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let doc = read_json(path)?;
        let shape = |what: &str| SchemaError::Shape {
            path: path.to_owned(),
            what: what.to_owned(),
        };
        let formats = doc
            .get("formats")
            .and_then(Value::as_object)
            .ok_or_else(|| shape("no `formats` object"))?;
        let mut hash = BTreeMap::new();
        let mut code = BTreeSet::new();
        for (name, def) in formats {
            match def {
                Value::Object(o) if o.contains_key("$perl-code") => {
                    code.insert(name.clone());
                }
                Value::Object(o) => {
                    hash.insert(name.clone(), o.clone());
                }
                _ => {}
            }
        }
        let content_types = doc
            .get("storage-content-types")
            .and_then(Value::as_array)
            .ok_or_else(|| shape("no `storage-content-types` array"))?
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        Ok(Self {
            hash,
            code,
            content_types,
        })
    }

    fn knows(&self, name: &str) -> bool {
        self.hash.contains_key(name) || self.code.contains(name)
    }

    /// Checks a value against a named format; `-list`/`-alist` names check each element.
    pub fn check_named(&self, name: &str, value: &str) -> Vec<String> {
        if !self.knows(name) {
            for suffix in ["-list", "-alist"] {
                if let Some(base) = name.strip_suffix(suffix)
                    && (self.knows(base) || self.check_code(base, "").is_some())
                {
                    return LIST_SPLIT
                        .split(value)
                        .filter(|v| !v.is_empty())
                        .flat_map(|v| self.check_named(base, v))
                        .collect();
                }
            }
        }
        if let Some(props) = self.hash.get(name) {
            return self.check_property_string(props, value);
        }
        match self.check_code(name, value) {
            Some(Ok(())) => Vec::new(),
            Some(Err(msg)) => vec![format!("invalid format - {msg}")],
            None if self.code.contains(name) => {
                vec![format!(
                    "format '{name}' is code-based and the checker has no rule for it; add one"
                )]
            }
            None => vec![format!(
                "format '{name}' is not defined in pve-api-formats.json"
            )],
        }
    }

    /// Checks a property string (`key=value,...`) against its sub-schemas.
    pub fn check_property_string(&self, props: &Map<String, Value>, value: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let default_key = props
            .iter()
            .find(|(_, s)| {
                s.get("default_key")
                    .is_some_and(|d| d.as_i64() == Some(1) || d.as_bool() == Some(true))
            })
            .map(|(k, _)| k.clone());
        for part in value.split(',').filter(|p| !p.is_empty()) {
            let (key, val) = match part.split_once('=') {
                Some((k, v)) => (k.to_owned(), v),
                None => match &default_key {
                    Some(k) => (k.clone(), part),
                    None => {
                        out.push(format!("invalid format - value without key, but schema does not define a default key ({part})"));
                        continue;
                    }
                },
            };
            let Some(mut schema) = props.get(&key) else {
                out.push(format!(
                    "invalid format - invalid key in comma-separated list property: {key}"
                ));
                continue;
            };
            let mut canonical = key.clone();
            if let Some(target) = schema.get("alias").and_then(Value::as_str) {
                canonical = target.to_owned();
                match props.get(target) {
                    Some(s) => schema = s,
                    None => {
                        out.push(format!(
                            "invalid format - key {key} aliases unknown key {target}"
                        ));
                        continue;
                    }
                }
            }
            if !seen.insert(canonical) {
                out.push(format!(
                    "invalid format - duplicate key in comma-separated list property: {key}"
                ));
            }
            for msg in check_at(schema, val, self, Level::PropertyString) {
                out.push(format!("{key}: {msg}"));
            }
        }
        for (k, s) in props {
            if !is_optional(s) && s.get("alias").is_none() && !seen.contains(k) {
                out.push(format!(
                    "invalid format - property string lacks required key {k}"
                ));
            }
        }
        out
    }
}

fn check_dns_name(v: &str) -> Result<(), String> {
    if !v.is_empty() && v.split('.').all(|l| DNS_LABEL.is_match(l)) {
        Ok(())
    } else {
        Err(format!("value '{v}' does not look like a valid DNS name"))
    }
}

fn check_cidr<T: std::str::FromStr>(v: &str, max_prefix: u8, what: &str) -> Result<(), String> {
    let bad = || format!("invalid {what} address '{v}'");
    let (addr, prefix) = v.split_once('/').ok_or_else(bad)?;
    addr.parse::<T>().map_err(|_| bad())?;
    let p: u8 = prefix.parse().map_err(|_| bad())?;
    if p > max_prefix {
        return Err(bad());
    }
    Ok(())
}

impl Formats {
    /// Checks `value` against code-based format `name`; `None` when the checker has no rule.
    pub fn check_code(&self, name: &str, v: &str) -> Option<Result<(), String>> {
        let ok_if = |cond: bool, msg: String| if cond { Ok(()) } else { Err(msg) };
        Some(match name {
            "pve-vmid" => ok_if(
                VMID.is_match(v),
                "value does not look like a valid VM ID".into(),
            ),
            "pve-node" => ok_if(
                NODE.is_match(v),
                format!("value does not look like a valid node name ({v})"),
            ),
            "pve-storage-id" => {
                if v.len() < 2 {
                    Err(format!(
                        "storage ID '{v}' cannot be shorter than 2 characters"
                    ))
                } else {
                    ok_if(
                        STORAGE_ID.is_match(v),
                        format!("storage ID '{v}' contains illegal characters"),
                    )
                }
            }
            "pve-configid" => ok_if(
                CONFIGID.is_match(v),
                format!("invalid configuration ID '{v}'"),
            ),
            "pve-volume-id" => ok_if(
                VOLUME_ID.is_match(v),
                format!("unable to parse volume ID '{v}'"),
            ),
            "dns-name" => check_dns_name(v),
            "pve-tag" => ok_if(TAG.is_match(v), format!("invalid tag '{v}'")),
            "pve-storage-content" => ok_if(
                self.content_types.iter().any(|c| c == v),
                format!("invalid content type '{v}'"),
            ),
            "pve-storage-path" => ok_if(STORAGE_PATH.is_match(v), format!("invalid path '{v}'")),
            // PVE::Storage::Plugin::verify_options: mount options are any text without
            // whitespace.
            "pve-storage-options" => ok_if(
                !v.is_empty() && !v.chars().any(char::is_whitespace),
                format!("invalid options '{v}'"),
            ),
            "pve-storage-server" | "address" => {
                if v.parse::<Ipv4Addr>().is_ok() || v.parse::<Ipv6Addr>().is_ok() {
                    Ok(())
                } else {
                    check_dns_name(v)
                }
            }
            "disk-size" => ok_if(DISK_SIZE.is_match(v), format!("unable to parse size '{v}'")),
            "ipv4" => ok_if(
                v.parse::<Ipv4Addr>().is_ok(),
                format!("invalid IPv4 address '{v}'"),
            ),
            "ipv6" => ok_if(
                v.parse::<Ipv6Addr>().is_ok(),
                format!("invalid IPv6 address '{v}'"),
            ),
            "ip" => ok_if(
                v.parse::<Ipv4Addr>().is_ok() || v.parse::<Ipv6Addr>().is_ok(),
                format!("invalid IP address '{v}'"),
            ),
            "pve-lxc-mp-string" => ok_if(
                !MP_DOTS.is_match(v),
                format!("{v} contains illegal character sequences ('.' or '..' as a path part)"),
            ),
            "mac-addr" => ok_if(MAC.is_match(v), format!("invalid MAC address '{v}'")),
            // PVE 8.4 gives `agent/exec`'s `command` items `format: string` (9.1: `type:
            // string`); any text passes.
            "string" => Ok(()),
            // `pve_verify_bridge_id`.
            "pve-bridge-id" => ok_if(
                !v.is_empty()
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                format!("invalid bridge ID '{v}'"),
            ),
            // `verify_poolname`: up to three levels of `[A-Za-z0-9.-_]+` joined by `/`.
            "pve-poolid" => {
                let part = |p: &str| {
                    !p.is_empty()
                        && p.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                };
                let parts: Vec<&str> = v.split('/').collect();
                ok_if(
                    parts.len() <= 3 && parts.iter().all(|p| part(p)),
                    format!("invalid pool ID '{v}'"),
                )
            }
            // `pve_verify_urlencoded`.
            "urlencoded" => ok_if(
                v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-%_.!~*'()".contains(c)),
                format!("invalid urlencoded string: {v}"),
            ),
            "pve-ipv4-config" => match v {
                "dhcp" | "manual" => Ok(()),
                _ => check_cidr::<Ipv4Addr>(v, 32, "IPv4"),
            },
            "pve-ipv6-config" => match v {
                "auto" | "dhcp" | "manual" => Ok(()),
                _ => check_cidr::<Ipv6Addr>(v, 128, "IPv6"),
            },
            // `pve_verify_startup_order`: comma-separated parts, each blank, `order=N` or a
            // bare `N`, `up=N` or `down=N`.
            "pve-startup-order" => {
                let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
                ok_if(
                    !v.is_empty()
                        && v.split(',').all(|part| {
                            part.trim().is_empty()
                                || digits(part.strip_prefix("order=").unwrap_or(part))
                                || part.strip_prefix("up=").is_some_and(digits)
                                || part.strip_prefix("down=").is_some_and(digits)
                        }),
                    "unable to parse startup options".into(),
                )
            }
            "pve-userid" => ok_if(
                v.len() <= 64 && USERID.is_match(v),
                format!("value '{v}' does not look like a valid user name"),
            ),
            "pve-tokenid" => ok_if(
                TOKENID.is_match(v),
                format!("value '{v}' does not look like a valid token ID"),
            ),
            "pve-roleid" => ok_if(ROLEID.is_match(v), format!("invalid role ID '{v}'")),
            "pve-priv" => ok_if(PRIV.is_match(v), format!("invalid privilege '{v}'")),
            _ => return None,
        })
    }
}
