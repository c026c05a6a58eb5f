//! What an `adopt` job finds in Proxmox, judged against what the operator signed
//! ([`judge`], a pure function over the guest's config): the vmid holds a guest of the signed
//! kind, not a template, carrying no identity of Bosun's, with the signed name and exactly the
//! signed config digest, running when a bootstrap is asked for, and — a virtual machine —
//! already a member of pool `bosun` (decision 0122: the agent's token cannot add a VM to the
//! pool; the operator does, as root). A guest that already carries this job's own identity is
//! this job's, from a run a crash interrupted.
//!
//! Nothing here writes; [`AdoptRefusal`] is why a guest is not adopted, and its text leads with
//! a code the hub and the operator read (`config_changed: …`).

use bosun_proto::desired::GuestKind;
use bosun_pve::{BOSUN_POOL, CtConfig};

use crate::guests::reconcile::lookup::has_tag;

/// The prefix of every identity tag the agent writes ([`crate::ops::journal::identity_tag`]).
const IDENTITY_PREFIX: &str = "bosun-op-";

/// How much of a value found in a guest's config a refusal repeats.
const MAX_SHOWN: usize = 64;

/// What the signature pins, and what the job itself will write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pins<'a> {
    /// The signed kind of guest.
    pub(super) kind: GuestKind,
    /// The signed hostname (a container) or name (a VM).
    pub(super) hostname: &'a str,
    /// The signed config digest.
    pub(super) digest: &'a str,
    /// The identity tag this job writes.
    pub(super) identity: &'a str,
    /// Whether a bootstrap is to be delivered (the guest must run).
    pub(super) bootstrap: bool,
}

/// What Proxmox says of the guest at the vmid, besides its config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// Whether it runs (read only when a bootstrap is asked for).
    pub(super) running: bool,
    /// The pool it is a member of (`/cluster/resources`; read for a VM only).
    pub(super) pool: Option<String>,
}

/// What the guest is, once judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// The guest the operator signed for, not yet the agent's: its tags now.
    Fresh {
        /// Its tags, in order, to be kept beside the identity.
        tags: Vec<String>,
    },
    /// It carries this job's identity: a run a crash interrupted wrote it.
    Ours,
}

/// How a refusal names a guest of `kind`: `CT 120`, `VM 120`.
pub(super) fn label(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Lxc => "CT",
        GuestKind::Qemu => "VM",
    }
}

/// The config key that holds a guest's name: a container's `hostname`, a VM's `name`.
fn name_key(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Lxc => "hostname",
        GuestKind::Qemu => "name",
    }
}

/// Why a guest is not adopted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptRefusal {
    /// No container holds the vmid on this node (nothing, or a virtual machine).
    #[error("no_container: no container holds vmid {vmid} on this node")]
    NoContainer {
        /// The vmid.
        vmid: u32,
    },
    /// No virtual machine holds the vmid on this node (nothing, or a container).
    #[error("no_vm: no virtual machine holds vmid {vmid} on this node")]
    NoVm {
        /// The vmid.
        vmid: u32,
    },
    /// A template is not a guest.
    #[error("not_a_guest: {label} {vmid} is a template")]
    Template {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
    },
    /// The guest carries an identity Bosun wrote (a guest of this or another agent).
    #[error("bosun_guest: {label} {vmid} carries a Bosun identity ({tag}); it is not adopted")]
    BosunIdentity {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
        /// The tag found (escaped, cut).
        tag: String,
    },
    /// Another hostname (or VM name) than the signed one.
    #[error("hostname_mismatch: {label} {vmid} is named {found}, the job was signed for {signed}")]
    HostnameMismatch {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
        /// The signed hostname.
        signed: String,
        /// The hostname found (escaped, cut), or `none`.
        found: String,
    },
    /// The guest is locked (a backup, a snapshot): its config is not the signed one.
    #[error("locked: {label} {vmid} is locked ({lock}); sign again once it is not")]
    Locked {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
        /// The lock (escaped, cut).
        lock: String,
    },
    /// The config changed since the operator read the digest they signed.
    #[error(
        "config_changed: {label} {vmid}'s config digest is {found}, the job was signed for {signed}"
    )]
    ConfigChanged {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
        /// The signed digest.
        signed: String,
        /// The digest found (escaped, cut).
        found: String,
    },
    /// A VM outside pool `bosun`: the agent's token cannot add it (decision 0122), and without
    /// it the token reaches nothing inside the VM (decision 0113).
    #[error(
        "not_in_pool: VM {vmid} is in {found}, not in pool bosun; as root on the node, `pveum pool modify bosun --vms {vmid}` adds it (the agent's token cannot), then sign again"
    )]
    NotInPool {
        /// The vmid.
        vmid: u32,
        /// `no pool`, or `pool 'x'` (escaped, cut).
        found: String,
    },
    /// A bootstrap is asked for, but it can only be delivered into a running guest (`pct push`
    /// into a container, the guest agent's `file-write` into a VM).
    #[error(
        "not_running: {label} {vmid} is not running, and its bootstrap can only be delivered into a running guest"
    )]
    NotRunning {
        /// `CT` or `VM`.
        label: &'static str,
        /// The vmid.
        vmid: u32,
    },
}

/// A value from the guest's config as a refusal shows it: escaped and cut.
fn shown(value: &str) -> String {
    value
        .chars()
        .take(MAX_SHOWN)
        .flat_map(char::escape_debug)
        .collect()
}

/// The guest's tags, as Proxmox separates them.
pub(super) fn tags_of(config: &CtConfig) -> Vec<String> {
    config
        .get_str("tags")
        .map(|tags| {
            tags.split([';', ',', ' '])
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Judges the guest of the signed kind at `vmid` (its config, what else was seen) against the
/// job's pins.
pub(super) fn judge(
    vmid: u32,
    config: &CtConfig,
    seen: &Seen,
    pins: &Pins<'_>,
) -> Result<Found, AdoptRefusal> {
    let label = label(pins.kind);
    if has_tag(config.get_str("tags").as_deref(), pins.identity) {
        return Ok(Found::Ours);
    }
    let tags = tags_of(config);
    if let Some(tag) = tags.iter().find(|t| t.starts_with(IDENTITY_PREFIX)) {
        return Err(AdoptRefusal::BosunIdentity {
            label,
            vmid,
            tag: shown(tag),
        });
    }
    if config.get_bool("template").unwrap_or(false) {
        return Err(AdoptRefusal::Template { label, vmid });
    }
    let hostname = config.get_str(name_key(pins.kind));
    if hostname.as_deref() != Some(pins.hostname) {
        return Err(AdoptRefusal::HostnameMismatch {
            label,
            vmid,
            signed: pins.hostname.to_owned(),
            found: hostname.as_deref().map_or_else(|| "none".to_owned(), shown),
        });
    }
    if let Some(lock) = config.lock() {
        return Err(AdoptRefusal::Locked {
            label,
            vmid,
            lock: shown(&lock),
        });
    }
    if config.digest != pins.digest {
        return Err(AdoptRefusal::ConfigChanged {
            label,
            vmid,
            signed: pins.digest.to_owned(),
            found: shown(&config.digest),
        });
    }
    if pins.kind == GuestKind::Qemu && seen.pool.as_deref() != Some(BOSUN_POOL) {
        return Err(AdoptRefusal::NotInPool {
            vmid,
            found: seen
                .pool
                .as_deref()
                .map_or_else(|| "no pool".to_owned(), |p| format!("pool '{}'", shown(p))),
        });
    }
    if pins.bootstrap && !seen.running {
        return Err(AdoptRefusal::NotRunning { label, vmid });
    }
    Ok(Found::Fresh { tags })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef01234567";
    const IDENTITY: &str = "bosun-op-00000000000000000000000000000abc";

    fn config(extra: serde_json::Value) -> CtConfig {
        let mut value = json!({
            "digest": DIGEST,
            "hostname": "legacy-web",
            "tags": "prod;web",
            "memory": 1024,
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            value[k] = v;
        }
        serde_json::from_value(value).expect("a config")
    }

    fn pins(bootstrap: bool) -> Pins<'static> {
        Pins {
            kind: GuestKind::Lxc,
            hostname: "legacy-web",
            digest: DIGEST,
            identity: IDENTITY,
            bootstrap,
        }
    }

    fn seen(running: bool) -> Seen {
        Seen {
            running,
            pool: None,
        }
    }

    /// A VM's config: its `name`, no `hostname`.
    fn vm_config(extra: serde_json::Value) -> CtConfig {
        let mut config = config(extra);
        let name = config.values.remove("hostname");
        if let Some(name) = name
            && !config.values.contains_key("name")
        {
            config.values.insert("name".into(), name);
        }
        config
    }

    fn vm_pins() -> Pins<'static> {
        Pins {
            kind: GuestKind::Qemu,
            ..pins(false)
        }
    }

    fn in_pool(pool: &str) -> Seen {
        Seen {
            running: true,
            pool: Some(pool.to_owned()),
        }
    }

    #[test]
    fn a_vm_is_judged_by_its_name_and_must_be_in_bosuns_pool() {
        assert_eq!(
            judge(120, &vm_config(json!({})), &in_pool("bosun"), &vm_pins()),
            Ok(Found::Fresh {
                tags: vec!["prod".into(), "web".into()]
            })
        );
        let code = |r: Result<Found, AdoptRefusal>| {
            let text = r.expect_err("refused").to_string();
            text.split(':').next().unwrap_or_default().to_owned()
        };
        // Outside the pool, or in another one: the operator adds it, never the agent.
        for seen in [seen(true), in_pool("ops")] {
            let refused = judge(120, &vm_config(json!({})), &seen, &vm_pins());
            assert_eq!(code(refused.clone()), "not_in_pool");
            let text = refused.expect_err("refused").to_string();
            assert!(text.contains("pveum pool modify bosun --vms 120"), "{text}");
        }
        // A container's `hostname` is not a VM's name.
        assert_eq!(
            code(judge(
                120,
                &config(json!({})),
                &in_pool("bosun"),
                &vm_pins()
            )),
            "hostname_mismatch"
        );
        for (extra, expected) in [
            (json!({ "template": 1 }), "not_a_guest"),
            (
                json!({ "tags": "bosun-op-0000000000000000000000000000ffff" }),
                "bosun_guest",
            ),
            (json!({ "name": "other" }), "hostname_mismatch"),
            (json!({ "lock": "backup" }), "locked"),
            (
                json!({ "digest": "1123456789abcdef0123456789abcdef01234567" }),
                "config_changed",
            ),
        ] {
            let refused = judge(120, &vm_config(extra), &in_pool("bosun"), &vm_pins());
            let text = refused.clone().expect_err("refused").to_string();
            assert!(text.contains("VM 120"), "{text}");
            assert_eq!(code(refused), expected);
        }
    }

    #[test]
    fn the_signed_container_is_fresh_and_keeps_its_tags() {
        assert_eq!(
            judge(120, &config(json!({})), &seen(false), &pins(false)),
            Ok(Found::Fresh {
                tags: vec!["prod".into(), "web".into()]
            })
        );
        assert!(judge(120, &config(json!({})), &seen(true), &pins(true)).is_ok());
    }

    #[test]
    fn its_own_identity_is_a_resumed_run_whatever_else_changed() {
        let tagged = config(json!({
            "tags": format!("prod;web;{IDENTITY}"),
            "digest": "ffffffffffffffffffffffffffffffffffffffff",
        }));
        assert_eq!(
            judge(120, &tagged, &seen(false), &pins(true)),
            Ok(Found::Ours)
        );
    }

    #[test]
    fn every_mismatch_is_refused_with_its_code() {
        let code = |r: Result<Found, AdoptRefusal>| {
            let text = r.expect_err("refused").to_string();
            text.split(':').next().unwrap_or_default().to_owned()
        };
        let cases = [
            (
                config(json!({ "tags": "bosun-op-0000000000000000000000000000ffff" })),
                "bosun_guest",
            ),
            (config(json!({ "template": 1 })), "not_a_guest"),
            (config(json!({ "hostname": "other" })), "hostname_mismatch"),
            (config(json!({ "lock": "backup" })), "locked"),
            (
                config(json!({ "digest": "1123456789abcdef0123456789abcdef01234567" })),
                "config_changed",
            ),
        ];
        for (found, expected) in cases {
            assert_eq!(
                code(judge(120, &found, &seen(true), &pins(false))),
                expected
            );
        }
        assert_eq!(
            code(judge(120, &config(json!({})), &seen(false), &pins(true))),
            "not_running"
        );
        let mut nameless = config(json!({}));
        nameless.values.remove("hostname");
        assert_eq!(
            code(judge(120, &nameless, &seen(true), &pins(false))),
            "hostname_mismatch"
        );
    }

    #[test]
    fn a_vm_asked_for_a_bootstrap_must_run_in_bosuns_pool() {
        let with = Pins {
            bootstrap: true,
            ..vm_pins()
        };
        let stopped = Seen {
            running: false,
            pool: Some("bosun".to_owned()),
        };
        let text = judge(120, &vm_config(json!({})), &stopped, &with)
            .expect_err("refused")
            .to_string();
        assert!(text.starts_with("not_running: VM 120 "), "{text}");
        // Outside the pool it is refused for that first, running or not.
        let text = judge(120, &vm_config(json!({})), &in_pool("other"), &with)
            .expect_err("refused")
            .to_string();
        assert!(text.starts_with("not_in_pool: "), "{text}");
        assert!(matches!(
            judge(120, &vm_config(json!({})), &in_pool("bosun"), &with),
            Ok(Found::Fresh { .. })
        ));
    }

    #[test]
    fn what_a_container_holds_is_shown_escaped_and_cut() {
        let hostile = config(json!({ "hostname": format!("\u{1b}[2J{}", "x".repeat(500)) }));
        let text = judge(120, &hostile, &seen(true), &pins(false))
            .expect_err("refused")
            .to_string();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.len() < 300, "{}", text.len());
    }
}
