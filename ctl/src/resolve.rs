//! Hosts and guests named by id or by name.
//!
//! Every command that takes a host accepts its id (a UUID, used as is, without asking the hub)
//! or its hostname, resolved through the hub's host list (`GET /v1/admin/hosts`). A guest is
//! resolved within one host: its id, or its hostname as the host's desired state or last report
//! names it. A name matches exactly; failing that, ignoring ASCII case (hostnames are
//! case-insensitive). A name two hosts (or guests) share is refused, listing them with their
//! ids, so the operator can pick one by id.

use bosun_proto::admin::{HostDetail, HostSummary};
use uuid::Uuid;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::global::GlobalArgs;

/// A command's host, named the way every `bosunctl` command takes one: `--host HOST`, or as
/// the command's argument where it is the command's one subject (`hosts show HOST`).
#[derive(Debug, Clone, clap::Args)]
pub struct HostArg {
    /// The host: its id or its hostname.
    #[arg(
        value_name = "HOST",
        required_unless_present = "host",
        conflicts_with = "host"
    )]
    positional: Option<String>,
    /// The host: its id or its hostname (the same as the argument).
    #[arg(long = "host", value_name = "HOST")]
    host: Option<String>,
}

impl HostArg {
    /// The host as given, either way.
    pub fn name(&self) -> &str {
        self.host
            .as_deref()
            .or(self.positional.as_deref())
            .unwrap_or_default()
    }
}

/// Longest name accepted (a hostname is at most 253 bytes).
const MAX_NAME: usize = 253;

/// One thing a name may refer to: its id and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
}

/// The host a command line names (`name_or_id`): an id as is, a name through the host list.
pub async fn host_id(client: &HubClient, name_or_id: &str) -> Result<Uuid, CtlError> {
    if let Some(id) = as_id(name_or_id) {
        return Ok(id);
    }
    check_name("host", name_or_id)?;
    let hosts: Vec<HostSummary> = decode("host list", client.get("/v1/admin/hosts").await?)?;
    let candidates: Vec<Candidate> = hosts
        .into_iter()
        .map(|h| Candidate {
            id: h.host_id,
            name: h.hostname,
        })
        .collect();
    pick("host", name_or_id, &candidates)
}

/// The host `name_or_id` names, for a command that works without the hub (signing): an id
/// is used as is, offline; only a name connects to the hub (configured as for any command).
pub async fn host_id_offline(global: &GlobalArgs, name_or_id: &str) -> Result<Uuid, CtlError> {
    match as_id(name_or_id) {
        Some(id) => Ok(id),
        None => host_id(&crate::client::connect(global)?, name_or_id).await,
    }
}

/// The guest of `host` a command line names: an id as is, a name through the host's desired
/// state and last report.
pub async fn guest_id(client: &HubClient, host: Uuid, name_or_id: &str) -> Result<Uuid, CtlError> {
    if let Some(id) = as_id(name_or_id) {
        return Ok(id);
    }
    check_name("guest", name_or_id)?;
    let detail: HostDetail = decode(
        "host detail",
        client.get(&format!("/v1/admin/hosts/{host}")).await?,
    )?;
    pick("guest", name_or_id, &guest_candidates(&detail))
}

/// The guests of a host by name: desired state first, then reported guests with a guest id
/// that desired state does not list (one entry per guest id).
pub fn guest_candidates(detail: &HostDetail) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = detail
        .desired
        .iter()
        .flat_map(|d| &d.guests)
        .map(|g| Candidate {
            id: g.guest_id,
            name: g.hostname.clone(),
        })
        .collect();
    for reported in detail.last_report.iter().flat_map(|r| &r.guests) {
        let Some(id) = reported.guest_id else {
            continue;
        };
        if !out.iter().any(|c| c.id == id) {
            out.push(Candidate {
                id,
                name: reported.hostname.clone(),
            });
        }
    }
    out
}

/// `text` as an id, when it is one.
pub fn as_id(text: &str) -> Option<Uuid> {
    Uuid::try_parse(text.trim()).ok()
}

fn check_name(kind: &'static str, name: &str) -> Result<(), CtlError> {
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(CtlError::BadName {
            kind,
            reason: format!(
                "{:?} is neither an id nor a name (1 to {MAX_NAME} bytes, no control characters)",
                name.chars().take(64).collect::<String>()
            ),
        });
    }
    Ok(())
}

/// Picks the one candidate named `name`: exactly, else ignoring ASCII case.
pub fn pick(kind: &'static str, name: &str, candidates: &[Candidate]) -> Result<Uuid, CtlError> {
    let exact: Vec<&Candidate> = candidates.iter().filter(|c| c.name == name).collect();
    let matches = if exact.is_empty() {
        candidates
            .iter()
            .filter(|c| c.name.eq_ignore_ascii_case(name))
            .collect()
    } else {
        exact
    };
    match matches.as_slice() {
        [one] => Ok(one.id),
        [] => Err(CtlError::UnknownName {
            kind,
            name: name.to_owned(),
        }),
        many => Err(CtlError::AmbiguousName {
            kind,
            name: name.to_owned(),
            candidates: many
                .iter()
                .map(|c| format!("{} ({})", c.id, c.name))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: u128, name: &str) -> Candidate {
        Candidate {
            id: Uuid::from_u128(id),
            name: name.to_owned(),
        }
    }

    #[test]
    fn a_unique_name_resolves_exactly_then_ignoring_case() {
        let all = [
            candidate(1, "pve-a"),
            candidate(2, "PVE-B"),
            candidate(3, "pve-b"),
        ];
        assert_eq!(pick("host", "pve-a", &all).unwrap(), Uuid::from_u128(1));
        // An exact match wins over a case-insensitive one.
        assert_eq!(pick("host", "pve-b", &all).unwrap(), Uuid::from_u128(3));
        assert_eq!(pick("host", "PVE-A", &all).unwrap(), Uuid::from_u128(1));
    }

    #[test]
    fn an_ambiguous_name_lists_every_candidate_with_its_id() {
        let all = [candidate(1, "web"), candidate(2, "web"), candidate(3, "db")];
        let err = pick("guest", "web", &all).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ambiguous"), "{text}");
        assert!(text.contains(&Uuid::from_u128(1).to_string()), "{text}");
        assert!(text.contains(&Uuid::from_u128(2).to_string()), "{text}");
        assert!(!text.contains(&Uuid::from_u128(3).to_string()), "{text}");
        assert_eq!(err.exit_code(), crate::error::exit::INPUT);
    }

    #[test]
    fn an_unknown_name_says_so() {
        let err = pick("host", "nope", &[candidate(1, "pve-a")]).unwrap_err();
        assert!(err.to_string().contains("no host named \"nope\""), "{err}");
        assert_eq!(err.exit_code(), crate::error::exit::NOT_FOUND);
    }

    #[test]
    fn ids_are_taken_as_is_and_bad_names_are_refused() {
        let id = Uuid::from_u128(7);
        assert_eq!(as_id(&id.to_string()), Some(id));
        assert_eq!(as_id("pve-a"), None);
        assert!(check_name("host", "").is_err());
        assert!(check_name("host", "a\u{7}b").is_err());
        assert!(check_name("host", &"a".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name("host", "pve-a.example").is_ok());
    }
}
