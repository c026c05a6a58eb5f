//! Which hosts the operator approved a fleet rollout for (decision 0093), checked before
//! anything is signed. The hub answers which hosts carry a selector's labels; a compromised
//! hub can answer "every host is in `ring=canary`". So the hub's answer only ever narrows what
//! the operator approved, never widens it:
//!
//! - `--hosts ID,ID,…` names the hosts: a hub answer naming a host outside the list signs
//!   nothing; a listed host the hub does not return is reported, not signed for.
//! - `--max-hosts N` bounds the count: a hub answer with more than `N` hosts signs nothing.
//! - With neither, the bound is the canary's size (`--canary`, default 1), and the operator
//!   confirms the hosts shown, on a terminal, by typing `yes`; without a terminal nothing is
//!   signed. A long list a tired operator says yes to is what a hub would aim for, so a
//!   confirmation never approves more than the canary: a larger rollout is typed, not answered.
//!
//! Every wave then signs only for hosts of the approved set ([`Approval::admits`]); the
//! rollout signs for no host the hub adds later (it asks the selector once).

use std::collections::BTreeSet;
use std::io::BufRead;

use bosun_proto::admin::HostSummary;
use uuid::Uuid;

use crate::error::CtlError;
use crate::fleet::MAX_HOSTS;

/// The longest answer to the confirmation read.
const MAX_ANSWER: u64 = 64;

/// What the operator said on the command line about which hosts may be signed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// `--hosts`: the only hosts that may be signed for.
    listed: Option<BTreeSet<Uuid>>,
    /// The most hosts the hub may name for the selector.
    max: usize,
    /// Whether the operator must still confirm the hosts shown (no `--hosts`, no
    /// `--max-hosts`).
    confirm: bool,
}

impl Ask {
    /// The approval asked for by `--hosts`, `--max-hosts` and `--canary`.
    pub fn new(hosts: &[Uuid], max_hosts: Option<u32>, canary: u32) -> Result<Self, CtlError> {
        let limit = MAX_HOSTS as usize;
        if hosts.len() > limit {
            return Err(CtlError::BadArgument {
                what: "--hosts",
                reason: format!("{} hosts; at most {limit}", hosts.len()),
            });
        }
        let listed: Option<BTreeSet<Uuid>> =
            (!hosts.is_empty()).then(|| hosts.iter().copied().collect());
        let max = match (&listed, max_hosts) {
            (Some(list), Some(n)) => list.len().min(n as usize),
            (Some(list), None) => list.len(),
            (None, Some(n)) => n as usize,
            (None, None) => canary as usize,
        };
        Ok(Self {
            confirm: listed.is_none() && max_hosts.is_none(),
            listed,
            max,
        })
    }

    /// Whether the hosts shown must still be confirmed on a terminal.
    pub fn needs_confirmation(&self) -> bool {
        self.confirm
    }

    /// The most hosts the rollout may sign for.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Checks the hub's answer to the selector against what was asked: more hosts than the
    /// bound, or a host outside `--hosts`, is refused (nothing signed). Gives the listed hosts
    /// the hub did not return.
    pub fn check(&self, claimed: &[HostSummary]) -> Result<Vec<Uuid>, CtlError> {
        if claimed.len() > self.max {
            let how = match (&self.listed, self.confirm) {
                (Some(_), _) => format!("the {} that --hosts lists", self.max),
                (None, true) => format!(
                    "the canary's {} (without --hosts or --max-hosts a rollout signs for at most its canary)",
                    self.max
                ),
                (None, false) => format!("--max-hosts {}", self.max),
            };
            return Err(CtlError::NotApproved {
                reason: format!(
                    "the hub says {} hosts match the selector, more than {how}",
                    claimed.len()
                ),
            });
        }
        let Some(listed) = &self.listed else {
            return Ok(Vec::new());
        };
        if let Some(stranger) = claimed.iter().find(|h| !listed.contains(&h.host_id)) {
            return Err(CtlError::NotApproved {
                reason: format!(
                    "the hub names host {} ({}) for the selector, which --hosts does not list",
                    stranger.hostname, stranger.host_id
                ),
            });
        }
        let returned: BTreeSet<Uuid> = claimed.iter().map(|h| h.host_id).collect();
        Ok(listed.difference(&returned).copied().collect())
    }
}

/// The hosts a rollout may sign for: those the operator approved that the hub named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approval {
    hosts: BTreeSet<Uuid>,
}

impl Approval {
    /// Approves `hosts` (the rollout's targets, once the checks above held).
    pub fn new(hosts: impl IntoIterator<Item = Uuid>) -> Self {
        Self {
            hosts: hosts.into_iter().collect(),
        }
    }

    /// Whether a job may be signed for `host`.
    pub fn admits(&self, host: Uuid) -> bool {
        self.hosts.contains(&host)
    }

    /// How many hosts were approved.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

/// Asks the operator, on standard error, to confirm signing for the `hosts` shown above, and
/// reads the answer from `input`; only `yes` confirms. Refused when `terminal` is false: a
/// rollout run from a script must say which hosts (`--hosts`) or how many (`--max-hosts`).
pub fn confirm(
    hosts: usize,
    jobs: usize,
    terminal: bool,
    input: impl BufRead,
) -> Result<(), CtlError> {
    if !terminal {
        return Err(CtlError::NotApproved {
            reason: format!(
                "no terminal to confirm the {hosts} hosts shown on: name them with --hosts ID,ID or bound them with --max-hosts N"
            ),
        });
    }
    crate::table::err_prompt(format_args!(
        "Sign {jobs} jobs for the {hosts} hosts shown above? Type yes to sign: "
    ))?;
    let mut answer = String::new();
    input
        .take(MAX_ANSWER)
        .read_line(&mut answer)
        .map_err(|source| CtlError::ReadInput {
            path: "standard input".into(),
            source,
        })?;
    if answer.trim() != "yes" {
        return Err(CtlError::NotApproved {
            reason: "the operator did not confirm the hosts shown".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "fleet_approve_tests.rs"]
mod tests;
