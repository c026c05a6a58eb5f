//! What an `adopt` job finds in Proxmox, judged against what the operator signed
//! ([`judge`], a pure function over the container's config): the vmid holds a container, not
//! a template, carrying no identity of Bosun's, with the signed hostname and exactly the
//! signed config digest, running when a bootstrap is asked for. A container that already
//! carries this job's own identity is this job's, from a run a crash interrupted.
//!
//! Nothing here writes; [`AdoptRefusal`] is why a container is not adopted, and its text
//! leads with a code the hub and the operator read (`config_changed: …`).

use bosun_pve::CtConfig;

use crate::guests::reconcile::lookup::has_tag;

/// The prefix of every identity tag the agent writes ([`crate::ops::journal::identity_tag`]).
const IDENTITY_PREFIX: &str = "bosun-op-";

/// How much of a value found in a container's config a refusal repeats.
const MAX_SHOWN: usize = 64;

/// What the signature pins, and what the job itself will write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pins<'a> {
    /// The signed hostname.
    pub(super) hostname: &'a str,
    /// The signed config digest.
    pub(super) digest: &'a str,
    /// The identity tag this job writes.
    pub(super) identity: &'a str,
    /// Whether a bootstrap is to be pushed (the container must run).
    pub(super) bootstrap: bool,
}

/// What the container is, once judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// The container the operator signed for, not yet the agent's: its tags now.
    Fresh {
        /// Its tags, in order, to be kept beside the identity.
        tags: Vec<String>,
    },
    /// It carries this job's identity: a run a crash interrupted wrote it.
    Ours,
}

/// Why a container is not adopted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptRefusal {
    /// No container holds the vmid on this node (nothing, or a virtual machine).
    #[error("no_container: no container holds vmid {vmid} on this node")]
    NoContainer {
        /// The vmid.
        vmid: u32,
    },
    /// A template is not a guest.
    #[error("not_a_guest: CT {vmid} is a template")]
    Template {
        /// The vmid.
        vmid: u32,
    },
    /// The container carries an identity Bosun wrote (a guest of this or another agent).
    #[error("bosun_guest: CT {vmid} carries a Bosun identity ({tag}); it is not adopted")]
    BosunIdentity {
        /// The vmid.
        vmid: u32,
        /// The tag found (escaped, cut).
        tag: String,
    },
    /// Another hostname than the signed one.
    #[error("hostname_mismatch: CT {vmid} is named {found}, the job was signed for {signed}")]
    HostnameMismatch {
        /// The vmid.
        vmid: u32,
        /// The signed hostname.
        signed: String,
        /// The hostname found (escaped, cut), or `none`.
        found: String,
    },
    /// The container is locked (a backup, a snapshot): its config is not the signed one.
    #[error("locked: CT {vmid} is locked ({lock}); sign again once it is not")]
    Locked {
        /// The vmid.
        vmid: u32,
        /// The lock (escaped, cut).
        lock: String,
    },
    /// The config changed since the operator read the digest they signed.
    #[error(
        "config_changed: CT {vmid}'s config digest is {found}, the job was signed for {signed}"
    )]
    ConfigChanged {
        /// The vmid.
        vmid: u32,
        /// The signed digest.
        signed: String,
        /// The digest found (escaped, cut).
        found: String,
    },
    /// A bootstrap is asked for, but `pct push` needs a running container.
    #[error(
        "not_running: CT {vmid} is not running, and its bootstrap can only be pushed into a running container"
    )]
    NotRunning {
        /// The vmid.
        vmid: u32,
    },
}

/// A value from the container's config as a refusal shows it: escaped and cut.
fn shown(value: &str) -> String {
    value
        .chars()
        .take(MAX_SHOWN)
        .flat_map(char::escape_debug)
        .collect()
}

/// The container's tags, as Proxmox separates them.
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

/// Judges the container at `vmid` (its config, whether it runs) against the job's pins.
pub(super) fn judge(
    vmid: u32,
    config: &CtConfig,
    running: bool,
    pins: &Pins<'_>,
) -> Result<Found, AdoptRefusal> {
    if has_tag(config.get_str("tags").as_deref(), pins.identity) {
        return Ok(Found::Ours);
    }
    let tags = tags_of(config);
    if let Some(tag) = tags.iter().find(|t| t.starts_with(IDENTITY_PREFIX)) {
        return Err(AdoptRefusal::BosunIdentity {
            vmid,
            tag: shown(tag),
        });
    }
    if config.get_bool("template").unwrap_or(false) {
        return Err(AdoptRefusal::Template { vmid });
    }
    let hostname = config.hostname();
    if hostname.as_deref() != Some(pins.hostname) {
        return Err(AdoptRefusal::HostnameMismatch {
            vmid,
            signed: pins.hostname.to_owned(),
            found: hostname.as_deref().map_or_else(|| "none".to_owned(), shown),
        });
    }
    if let Some(lock) = config.lock() {
        return Err(AdoptRefusal::Locked {
            vmid,
            lock: shown(&lock),
        });
    }
    if config.digest != pins.digest {
        return Err(AdoptRefusal::ConfigChanged {
            vmid,
            signed: pins.digest.to_owned(),
            found: shown(&config.digest),
        });
    }
    if pins.bootstrap && !running {
        return Err(AdoptRefusal::NotRunning { vmid });
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
            hostname: "legacy-web",
            digest: DIGEST,
            identity: IDENTITY,
            bootstrap,
        }
    }

    #[test]
    fn the_signed_container_is_fresh_and_keeps_its_tags() {
        assert_eq!(
            judge(120, &config(json!({})), false, &pins(false)),
            Ok(Found::Fresh {
                tags: vec!["prod".into(), "web".into()]
            })
        );
        assert!(judge(120, &config(json!({})), true, &pins(true)).is_ok());
    }

    #[test]
    fn its_own_identity_is_a_resumed_run_whatever_else_changed() {
        let tagged = config(json!({
            "tags": format!("prod;web;{IDENTITY}"),
            "digest": "ffffffffffffffffffffffffffffffffffffffff",
        }));
        assert_eq!(judge(120, &tagged, false, &pins(true)), Ok(Found::Ours));
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
            assert_eq!(code(judge(120, &found, true, &pins(false))), expected);
        }
        assert_eq!(
            code(judge(120, &config(json!({})), false, &pins(true))),
            "not_running"
        );
        let mut nameless = config(json!({}));
        nameless.values.remove("hostname");
        assert_eq!(
            code(judge(120, &nameless, true, &pins(false))),
            "hostname_mismatch"
        );
    }

    #[test]
    fn what_a_container_holds_is_shown_escaped_and_cut() {
        let hostile = config(json!({ "hostname": format!("\u{1b}[2J{}", "x".repeat(500)) }));
        let text = judge(120, &hostile, true, &pins(false))
            .expect_err("refused")
            .to_string();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.len() < 300, "{}", text.len());
    }
}
