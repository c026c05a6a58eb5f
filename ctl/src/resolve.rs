//! Hosts and guests named by id or by name.
//!
//! Every command that takes a host accepts its id (a UUID, used as is, without asking the hub)
//! or its hostname, resolved through the hub's host list (`GET /v1/admin/hosts`). A guest is
//! resolved within one host: its id, or its hostname as the host's desired state or last report
//! names it. A name matches exactly; failing that, ignoring ASCII case (hostnames are
//! case-insensitive); failing that, as a prefix of an id (at least 4 hex digits, as the views
//! print them: [`bosun_proto::ids`]). A host's or a job's id prefix is resolved by the hub
//! (its store, for every API client alike); a guest's, which the hub keeps inside its host's
//! documents, here among the host's guests. A name two hosts (or guests) share, or a prefix of
//! more than one id, is refused (exit 4), listing them with their ids, so the operator can pick
//! one; a name or prefix of none is refused too (exit 8).

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

pub use crate::error::NameKind;

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
    check_name(NameKind::Host, name_or_id)?;
    let hosts: Vec<HostSummary> = decode("host list", client.get("/v1/admin/hosts").await?)?;
    let candidates: Vec<Candidate> = hosts
        .into_iter()
        .map(|h| Candidate {
            id: h.host_id,
            name: h.hostname,
        })
        .collect();
    match pick(NameKind::Host, name_or_id, &candidates) {
        Err(CtlError::UnknownName { .. }) if bosun_proto::ids::as_prefix(name_or_id).is_some() => {
            host_by_prefix(client, name_or_id).await
        }
        other => other,
    }
}

/// The host whose id starts with `prefix`, as the hub resolves it (`GET
/// /v1/admin/hosts/{prefix}`): the one resolution of host id prefixes, shared with every API
/// client. A prefix of several hosts is refused (exit 4, the hub listing them), of none too
/// (exit 8).
async fn host_by_prefix(client: &HubClient, prefix: &str) -> Result<Uuid, CtlError> {
    let Some(typed) = bosun_proto::ids::as_prefix(prefix) else {
        return Err(CtlError::UnknownName {
            kind: NameKind::Host,
            name: prefix.to_owned(),
        });
    };
    let path = format!("/v1/admin/hosts/{}", bosun_proto::ids::hyphenated(&typed));
    match client.get(&path).await {
        Ok(value) => Ok(decode::<HostDetail>("host detail", value)?.summary.host_id),
        Err(err) => Err(from_hub(NameKind::Host, prefix, err)),
    }
}

/// The hub's refusal of a typed id prefix as the same errors a name gets: ambiguous (exit 4,
/// with the hub's list of candidates), unknown (exit 8).
pub fn from_hub(kind: NameKind, typed: &str, err: CtlError) -> CtlError {
    match err {
        CtlError::Hub {
            status: 409,
            code,
            message,
            ..
        } if code == "ambiguous_id" => CtlError::AmbiguousName {
            kind,
            name: typed.to_owned(),
            candidates: message
                .split_once("give one of the ids: ")
                .map_or(message.as_str(), |(_, listed)| listed)
                .to_owned(),
        },
        CtlError::Hub { status: 404, .. } => CtlError::UnknownName {
            kind,
            name: typed.to_owned(),
        },
        other => other,
    }
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
    check_name(NameKind::Guest, name_or_id)?;
    let detail: HostDetail = decode(
        "host detail",
        client.get(&format!("/v1/admin/hosts/{host}")).await?,
    )?;
    pick_or_prefix(NameKind::Guest, name_or_id, &guest_candidates(&detail))
}

/// [`pick`], and failing a name, the one candidate whose id starts with `text` (an id prefix).
pub fn pick_or_prefix(
    kind: NameKind,
    text: &str,
    candidates: &[Candidate],
) -> Result<Uuid, CtlError> {
    match pick(kind, text, candidates) {
        Err(CtlError::UnknownName { .. }) if bosun_proto::ids::as_prefix(text).is_some() => {
            by_prefix(kind, text, candidates)
        }
        other => other,
    }
}

/// The one candidate whose id is `text` or starts with it (an id prefix of at least 4 hex
/// digits); a prefix of more than one is refused, listing them.
pub fn by_prefix(kind: NameKind, text: &str, candidates: &[Candidate]) -> Result<Uuid, CtlError> {
    if let Some(id) = as_id(text) {
        return Ok(id);
    }
    let Some(prefix) = bosun_proto::ids::as_prefix(text) else {
        return Err(CtlError::BadName {
            kind,
            reason: format!(
                "{:?} is neither an id nor an id prefix (at least {} hex digits)",
                text.chars().take(64).collect::<String>(),
                bosun_proto::ids::MIN_TYPED
            ),
        });
    };
    let matches: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| bosun_proto::ids::has_prefix(&c.id, &prefix))
        .collect();
    one_of(kind, text, &matches)
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

fn check_name(kind: NameKind, name: &str) -> Result<(), CtlError> {
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(bosun_proto::inert::is_control)
    {
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
pub fn pick(kind: NameKind, name: &str, candidates: &[Candidate]) -> Result<Uuid, CtlError> {
    let exact: Vec<&Candidate> = candidates.iter().filter(|c| c.name == name).collect();
    let matches = if exact.is_empty() {
        candidates
            .iter()
            .filter(|c| c.name.eq_ignore_ascii_case(name))
            .collect()
    } else {
        exact
    };
    one_of(kind, name, &matches)
}

/// The one match, or why not: none (exit 8), more than one (exit 4, listing them).
fn one_of(kind: NameKind, name: &str, matches: &[&Candidate]) -> Result<Uuid, CtlError> {
    match matches {
        [one] => Ok(one.id),
        [] => Err(CtlError::UnknownName {
            kind,
            name: name.to_owned(),
        }),
        many => {
            // As the hub lists them: the first few, and `and more` for the rest.
            let mut candidates = many
                .iter()
                .take(bosun_proto::ids::MAX_CANDIDATES)
                .map(|c| format!("{} ({})", c.id, c.name))
                .collect::<Vec<_>>()
                .join(", ");
            if many.len() > bosun_proto::ids::MAX_CANDIDATES {
                candidates.push_str(", and more");
            }
            Err(CtlError::AmbiguousName {
                kind,
                name: name.to_owned(),
                candidates,
            })
        }
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
        assert_eq!(
            pick(NameKind::Host, "pve-a", &all).unwrap(),
            Uuid::from_u128(1)
        );
        // An exact match wins over a case-insensitive one.
        assert_eq!(
            pick(NameKind::Host, "pve-b", &all).unwrap(),
            Uuid::from_u128(3)
        );
        assert_eq!(
            pick(NameKind::Host, "PVE-A", &all).unwrap(),
            Uuid::from_u128(1)
        );
    }

    #[test]
    fn an_ambiguous_name_lists_every_candidate_with_its_id() {
        let all = [candidate(1, "web"), candidate(2, "web"), candidate(3, "db")];
        let err = pick(NameKind::Guest, "web", &all).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ambiguous"), "{text}");
        assert!(text.contains(&Uuid::from_u128(1).to_string()), "{text}");
        assert!(text.contains(&Uuid::from_u128(2).to_string()), "{text}");
        assert!(!text.contains(&Uuid::from_u128(3).to_string()), "{text}");
        assert_eq!(err.exit_code(), crate::error::exit::INPUT);
    }

    #[test]
    fn an_id_prefix_resolves_when_unique_and_lists_candidates_when_not() {
        let a = Uuid::parse_str("6ac09cbf-0000-4000-8000-000000000001").unwrap();
        let b = Uuid::parse_str("6ac09cbf-0000-4000-8000-000000000002").unwrap();
        let c = Uuid::parse_str("01a213eb-0000-4000-8000-000000000003").unwrap();
        let all = [
            Candidate {
                id: a,
                name: "alpha".into(),
            },
            Candidate {
                id: b,
                name: "bravo".into(),
            },
            Candidate {
                id: c,
                name: "6ac09cbf".into(),
            },
        ];
        // A name wins over a prefix.
        assert_eq!(pick_or_prefix(NameKind::Host, "6ac09cbf", &all).unwrap(), c);
        assert_eq!(pick_or_prefix(NameKind::Host, "01a213eb", &all).unwrap(), c);
        let err = pick_or_prefix(NameKind::Host, "6ac09cbf-0000", &all).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::exit::INPUT);
        let text = err.to_string();
        assert!(
            text.contains(&a.to_string()) && text.contains(&b.to_string()),
            "{text}"
        );
        let end = "6ac09cbf-0000-4000-8000-00000000000";
        assert_eq!(
            pick_or_prefix(NameKind::Host, &format!("{end}2"), &all).unwrap(),
            b
        );
        let err = pick_or_prefix(NameKind::Host, "ffff0000", &all).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::exit::NOT_FOUND);
    }

    #[test]
    fn an_ambiguous_prefix_lists_at_most_ten_candidates() {
        let all: Vec<Candidate> = (0..13)
            .map(|i| Candidate {
                id: Uuid::from_u128((0x6ac0_9cbf << 96) | i),
                name: format!("job-{i}"),
            })
            .collect();
        let text = by_prefix(NameKind::Job, "6ac09cbf", &all)
            .unwrap_err()
            .to_string();
        assert_eq!(
            text.matches("(job-").count(),
            bosun_proto::ids::MAX_CANDIDATES,
            "{text}"
        );
        assert!(text.ends_with(", and more"), "{text}");
    }

    #[test]
    fn an_unknown_name_says_where_the_names_are_listed() {
        let err = pick(NameKind::Guest, "nosuch", &[candidate(1, "web")]).unwrap_err();
        assert!(
            err.to_string().contains("`bosunctl desired get HOST`"),
            "{err}"
        );
        let err = by_prefix(NameKind::Job, "99999999", &[]).unwrap_err();
        assert!(
            err.to_string().contains("`bosunctl job list --host HOST`"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_name_says_so() {
        let err = pick(NameKind::Host, "nope", &[candidate(1, "pve-a")]).unwrap_err();
        assert!(err.to_string().contains("no host named \"nope\""), "{err}");
        assert_eq!(err.exit_code(), crate::error::exit::NOT_FOUND);
    }

    #[test]
    fn ids_are_taken_as_is_and_bad_names_are_refused() {
        let id = Uuid::from_u128(7);
        assert_eq!(as_id(&id.to_string()), Some(id));
        assert_eq!(as_id("pve-a"), None);
        assert!(check_name(NameKind::Host, "").is_err());
        assert!(check_name(NameKind::Host, "a\u{7}b").is_err());
        assert!(check_name(NameKind::Host, &"a".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name(NameKind::Host, "pve-a.example").is_ok());
    }
}
