//! The parameters of a signed `adopt` job: what the operator pins of a guest (a container or a
//! virtual machine) that was on the node before Bosun, so that the signature covers that guest
//! and no other.
//!
//! | param | meaning |
//! |---|---|
//! | `guest_kind` | `lxc` (the default: jobs signed before VMs name none) or `qemu` (decision 0122) |
//! | `hostname` | the container's `hostname`, or the VM's `name`, as its Proxmox config holds it now |
//! | `config_digest` | the `digest` of its config (`GET /nodes/{node}/{lxc,qemu}/{vmid}/config`, 40 hex digits) |
//! | `bootstrap` | `true`: deliver a bootstrap (token, endpoints) into it (a container through the helper's `pct push`, a VM through its guest agent's `file-write`); `false` (default): none |
//! | `customer_id`, `customer_name` | whom the bootstrap names (needed with `bootstrap=true`) |
//!
//! The digest is Proxmox's SHA-1 of the config file: any change to the container's config
//! after the operator read it (another hostname, another volume, another network) changes it,
//! and the agent writes the guest's identity with that digest as Proxmox's own
//! compare-and-set, so the identity lands only on the config the operator signed.

use serde_json::{Map, Value};

use crate::desired::{CustomerIdentity, GuestKind};
use crate::validate::{self, ValidationError};

/// The `guest_kind` parameter.
pub const GUEST_KIND_PARAM: &str = "guest_kind";
/// The `hostname` parameter.
pub const HOSTNAME_PARAM: &str = "hostname";
/// The `config_digest` parameter.
pub const DIGEST_PARAM: &str = "config_digest";
/// The `bootstrap` parameter.
pub const BOOTSTRAP_PARAM: &str = "bootstrap";
/// The `customer_id` parameter.
pub const CUSTOMER_ID_PARAM: &str = "customer_id";
/// The `customer_name` parameter.
pub const CUSTOMER_NAME_PARAM: &str = "customer_name";
/// Longest hostname Proxmox keeps for a container (a DNS name).
pub const MAX_HOSTNAME: usize = 255;

/// What an `adopt` job pins and asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptParams {
    /// The kind of guest the operator signed for: the vmid must hold one of this kind.
    pub kind: GuestKind,
    /// The container's hostname or the VM's name, as its config holds it.
    pub hostname: String,
    /// The config's digest (40 lowercase hex digits).
    pub config_digest: String,
    /// The customer a bootstrap names; `Some` exactly when a bootstrap is asked for.
    pub bootstrap: Option<CustomerIdentity>,
}

fn invalid(param: &str, reason: impl Into<String>) -> ValidationError {
    ValidationError::Invalid {
        field: format!("params.{param}"),
        reason: reason.into(),
    }
}

/// Whether `name` is a DNS hostname (labels of letters, digits and inner hyphens).
fn is_hostname(name: &str) -> bool {
    name.len() <= MAX_HOSTNAME
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

impl AdoptParams {
    /// Reads and checks an `adopt` job's parameters. A parameter this table does not name is
    /// refused: the operator signs exactly what the agent reads.
    pub fn from_params(params: &Map<String, Value>) -> Result<Self, ValidationError> {
        const KNOWN: [&str; 6] = [
            GUEST_KIND_PARAM,
            HOSTNAME_PARAM,
            DIGEST_PARAM,
            BOOTSTRAP_PARAM,
            CUSTOMER_ID_PARAM,
            CUSTOMER_NAME_PARAM,
        ];
        if let Some(unknown) = params.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            let shown: String = unknown
                .chars()
                .take(64)
                .flat_map(char::escape_debug)
                .collect();
            return Err(invalid(&shown, "`adopt` takes no such parameter"));
        }
        let text = |name: &str| {
            params
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(name, "`adopt` needs a string"))
        };
        let kind = match params.get(GUEST_KIND_PARAM) {
            None => GuestKind::Lxc,
            Some(Value::String(k)) if k == "lxc" => GuestKind::Lxc,
            Some(Value::String(k)) if k == "qemu" => GuestKind::Qemu,
            Some(_) => return Err(invalid(GUEST_KIND_PARAM, "must be lxc or qemu")),
        };
        let hostname = text(HOSTNAME_PARAM)?;
        if !is_hostname(hostname) {
            return Err(invalid(HOSTNAME_PARAM, "not a valid DNS hostname"));
        }
        let config_digest = text(DIGEST_PARAM)?;
        if config_digest.len() != 40
            || !config_digest
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(invalid(
                DIGEST_PARAM,
                "must be the config's digest: 40 lowercase hex digits",
            ));
        }
        let wanted = match params.get(BOOTSTRAP_PARAM) {
            None => false,
            Some(Value::Bool(b)) => *b,
            // `bosunctl job new --param bootstrap=true` writes strings.
            Some(Value::String(t)) if t == "true" => true,
            Some(Value::String(t)) if t == "false" => false,
            Some(_) => return Err(invalid(BOOTSTRAP_PARAM, "must be true or false")),
        };
        let bootstrap = if wanted {
            let customer_id = text(CUSTOMER_ID_PARAM)?;
            validate::ident(|| format!("params.{CUSTOMER_ID_PARAM}"), customer_id, 64)?;
            let display_name = text(CUSTOMER_NAME_PARAM)?;
            validate::text(
                || format!("params.{CUSTOMER_NAME_PARAM}"),
                display_name,
                200,
            )?;
            Some(CustomerIdentity {
                customer_id: customer_id.to_owned(),
                display_name: display_name.to_owned(),
            })
        } else {
            for name in [CUSTOMER_ID_PARAM, CUSTOMER_NAME_PARAM] {
                if params.contains_key(name) {
                    return Err(invalid(name, "only with `bootstrap=true`"));
                }
            }
            None
        };
        Ok(Self {
            kind,
            hostname: hostname.to_owned(),
            config_digest: config_digest.to_owned(),
            bootstrap,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    const DIGEST: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn reads_the_pins_and_the_bootstrap() {
        let plain = AdoptParams::from_params(&params(
            json!({ "hostname": "legacy-web.example", "config_digest": DIGEST }),
        ))
        .unwrap();
        assert_eq!(plain.hostname, "legacy-web.example");
        assert_eq!(plain.bootstrap, None);
        let with = AdoptParams::from_params(&params(json!({
            "hostname": "web", "config_digest": DIGEST, "bootstrap": "true",
            "customer_id": "acme", "customer_name": "Acme Ltd",
        })))
        .unwrap();
        assert_eq!(with.bootstrap.unwrap().customer_id, "acme");
        assert_eq!(with.kind, GuestKind::Lxc, "no kind is a container");
        let vm = AdoptParams::from_params(&params(
            json!({ "guest_kind": "qemu", "hostname": "legacy-vm", "config_digest": DIGEST }),
        ))
        .unwrap();
        assert_eq!(vm.kind, GuestKind::Qemu);
        let vm_with = AdoptParams::from_params(&params(json!({
            "guest_kind": "qemu", "hostname": "legacy-vm", "config_digest": DIGEST,
            "bootstrap": "true", "customer_id": "acme", "customer_name": "Acme Ltd",
        })))
        .unwrap();
        assert_eq!(vm_with.kind, GuestKind::Qemu);
        assert_eq!(vm_with.bootstrap.unwrap().customer_id, "acme");
    }

    #[test]
    fn refuses_what_it_cannot_pin() {
        for bad in [
            json!({ "config_digest": DIGEST }),
            json!({ "hostname": "web" }),
            json!({ "hostname": "web", "config_digest": "ABCDEF" }),
            json!({ "hostname": "web", "config_digest": DIGEST.to_uppercase() }),
            json!({ "hostname": "-web", "config_digest": DIGEST }),
            json!({ "hostname": "web\u{1b}[2J", "config_digest": DIGEST }),
            json!({ "hostname": "web", "config_digest": DIGEST, "bootstrap": "yes" }),
            json!({ "hostname": "web", "config_digest": DIGEST, "bootstrap": true }),
            json!({ "hostname": "web", "config_digest": DIGEST, "customer_id": "acme" }),
            json!({ "hostname": "web", "config_digest": DIGEST, "vmid": "101" }),
            json!({ "hostname": "web", "config_digest": DIGEST, "guest_kind": "kvm" }),
            json!({ "hostname": "web", "config_digest": DIGEST, "guest_kind": 1 }),
            json!({
                "hostname": "web", "config_digest": DIGEST, "guest_kind": "qemu",
                "bootstrap": "true", "customer_id": "acme",
            }),
        ] {
            assert!(
                AdoptParams::from_params(&params(bad.clone())).is_err(),
                "{bad}"
            );
        }
    }
}
