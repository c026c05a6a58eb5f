//! `bosunctl alerts [ack|silence|silences|unsilence]` and `bosunctl events`.

use bosun_proto::admin::{Alert, AlertKind, Event, HostSummary, OpenAlert};
use bosun_proto::alert_triage::{AckAlert, CreateSilence, Silence};
use clap::{Args, Subcommand};
use reqwest::Method;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl alerts`: the conditions still open, newest first; `--all` for the history,
/// recoveries included.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AlertsArgs {
    /// Acknowledge or silence instead of listing.
    #[command(subcommand)]
    pub command: Option<AlertsCommand>,
    /// The history instead: every alert raised, recoveries included, newest first.
    #[arg(long)]
    pub all: bool,
    /// Only this host's open alerts: its id or its hostname.
    #[arg(long, value_name = "HOST", conflicts_with = "all")]
    pub host: Option<String>,
    /// Newest N alerts of the history (with `--all`).
    #[arg(long, default_value_t = 50, requires = "all")]
    pub limit: u32,
}

/// `bosunctl alerts ...`: what an operator does with open alerts.
#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// Acknowledge an open alert: it stays open and listed, marked acknowledged with the note,
    /// and no longer makes its host critical (warning at most) until it resolves.
    Ack {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// The alert's kind (e.g. `guest_broken`, `host_overdue`).
        #[arg(long, value_parser = parse_kind)]
        kind: AlertKind,
        /// The alert's subject as `bosunctl alerts` lists it; may be left out when the host
        /// has one open alert of that kind.
        #[arg(long)]
        subject: Option<String>,
        /// What is being done about it.
        #[arg(long)]
        note: String,
    },
    /// Silence a host's alerts for a while (at most 30 days): they are stored and listed,
    /// marked silenced, but not sent to the webhook.
    Silence {
        /// The host: its id or its hostname.
        #[arg(long, value_name = "HOST")]
        host: String,
        /// Only alerts of this kind (e.g. `guest_orphaned`).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<AlertKind>,
        /// Only alerts about this subject (a guest id, a storage target, ...).
        #[arg(long)]
        subject: Option<String>,
        /// How long: `90m`, `24h`, `7d` (1 minute to 30 days).
        #[arg(long = "for", value_name = "DURATION")]
        duration: String,
        /// Why, for whoever reads the event log.
        #[arg(long)]
        reason: String,
    },
    /// The silences in force, newest first.
    Silences {
        /// Newest N (the hub answers at most 10000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
        limit: u32,
    },
    /// End a silence early, by its id (from `silences`).
    Unsilence {
        /// The silence's id.
        id: u64,
    },
}

fn parse_kind(text: &str) -> Result<AlertKind, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("`{text}` is not an alert kind (e.g. guest_orphaned, host_overdue)"))
}

/// `bosunctl events`
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only this host: its id or its hostname.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Only events after this sequence number.
    #[arg(long)]
    pub after: Option<u64>,
    /// Newest N events.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
}

/// Lists the open alerts, or with `--all` the history.
pub async fn alerts(client: &HubClient, json: bool, args: &AlertsArgs) -> Result<(), CtlError> {
    if let Some(command) = &args.command {
        return triage(client, json, command).await;
    }
    if !args.all {
        return open(client, json, args.host.as_deref()).await;
    }
    let value = client
        .get(&format!("/v1/admin/alerts?limit={}", args.limit))
        .await?;
    if json {
        return table::print_json(&value);
    }
    let alerts: Vec<Alert> = decode("alert list", value)?;
    let rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            vec![
                a.id.to_string(),
                table::when(Some(a.at)),
                a.kind.as_str().to_owned(),
                table::or_dash(a.hostname.as_deref()),
                a.message.clone(),
            ]
        })
        .collect();
    table::print(&["ID", "AT", "KIND", "HOST", "MESSAGE"], &rows)
}

async fn open(client: &HubClient, json: bool, host: Option<&str>) -> Result<(), CtlError> {
    let mut path = "/v1/admin/alerts/open".to_owned();
    if let Some(host) = host {
        let host = crate::resolve::host_id(client, host).await?;
        path.push_str(&format!("?host={host}"));
    }
    let value = client.get(&path).await?;
    if json {
        return table::print_json(&value);
    }
    let open: Vec<OpenAlert> = decode("open alert list", value)?;
    if open.is_empty() {
        return crate::outln!("no open alerts (`bosunctl alerts --all` shows the history)");
    }
    let rows: Vec<Vec<String>> = open
        .iter()
        .map(|a| {
            vec![
                table::when(Some(a.since)),
                a.kind.as_str().to_owned(),
                a.hostname.clone(),
                subject(a),
                match marks(a) {
                    Some(marks) => format!("[{marks}] {}", a.message),
                    None => a.message.clone(),
                },
            ]
        })
        .collect();
    table::print(&["SINCE", "KIND", "HOST", "SUBJECT", "MESSAGE"], &rows)
}

/// The subject as the operator reads it: a guest's name with the start of its id (what
/// `alerts ack --subject` takes back), or the subject as it is.
fn subject(alert: &OpenAlert) -> String {
    match &alert.subject_name {
        Some(name) => {
            let id: String = alert.subject.chars().take(8).collect();
            format!("{name} ({id})")
        }
        None => alert.subject.clone(),
    }
}

/// `acked <when>: <note>`, `silenced #<id>`, both, or none: what the message starts with.
fn marks(alert: &OpenAlert) -> Option<String> {
    let mut marks = Vec::new();
    if let Some(ack) = &alert.acknowledged {
        marks.push(format!("acked {}: {}", table::when(Some(ack.at)), ack.note));
    }
    if let Some(id) = alert.silenced_by {
        marks.push(format!("silenced #{id}"));
    }
    (!marks.is_empty()).then(|| marks.join("; "))
}

async fn triage(client: &HubClient, json: bool, command: &AlertsCommand) -> Result<(), CtlError> {
    match command {
        AlertsCommand::Ack {
            host,
            kind,
            subject,
            note,
        } => {
            let host_id = crate::resolve::host_id(client, host).await?;
            let subject = match subject {
                Some(subject) => subject.clone(),
                None => only_subject(client, host_id, *kind).await?,
            };
            let body = AckAlert {
                host_id,
                kind: *kind,
                subject,
                note: note.clone(),
            };
            let value = send(client, Method::POST, "/v1/admin/alerts/ack", Some(&body)).await?;
            if json {
                return table::print_json(&value);
            }
            let alert: OpenAlert = decode("acknowledged alert", value)?;
            crate::outln!(
                "acknowledged {} on {} about {}",
                alert.kind.as_str(),
                alert.hostname,
                alert.subject
            )
        }
        AlertsCommand::Silence {
            host,
            kind,
            subject,
            duration,
            reason,
        } => {
            let duration_seconds = crate::duration::parse_within(
                "--for",
                duration,
                bosun_proto::alert_triage::MIN_SILENCE_SECONDS,
                bosun_proto::alert_triage::MAX_SILENCE_SECONDS,
            )?;
            let body = CreateSilence {
                host_id: crate::resolve::host_id(client, host).await?,
                kind: *kind,
                subject: subject.clone(),
                duration_seconds,
                reason: reason.clone(),
            };
            let value = send(
                client,
                Method::POST,
                "/v1/admin/alerts/silences",
                Some(&body),
            )
            .await?;
            if json {
                return table::print_json(&value);
            }
            let silence: Silence = decode("silence", value)?;
            crate::outln!(
                "silence {} on {} until {}",
                silence.id,
                silence.hostname,
                table::when(Some(silence.until))
            )
        }
        AlertsCommand::Silences { limit } => {
            let value = client
                .get(&format!("/v1/admin/alerts/silences?limit={limit}"))
                .await?;
            let value = crate::client::newest(value, *limit);
            if json {
                return table::print_json(&value);
            }
            let silences: Vec<Silence> = decode("silence list", value)?;
            if silences.is_empty() {
                return crate::outln!("no silences in force");
            }
            let rows: Vec<Vec<String>> = silences
                .iter()
                .map(|s| {
                    vec![
                        s.id.to_string(),
                        s.hostname.clone(),
                        s.kind
                            .map_or_else(|| "*".to_owned(), |k| k.as_str().to_owned()),
                        table::or_dash(s.subject.as_deref()),
                        table::when(Some(s.until)),
                        s.reason.clone(),
                    ]
                })
                .collect();
            table::print(&["ID", "HOST", "KIND", "SUBJECT", "UNTIL", "REASON"], &rows)
        }
        AlertsCommand::Unsilence { id } => {
            let path = format!("/v1/admin/alerts/silences/{id}");
            let value = send::<()>(client, Method::DELETE, &path, None).await?;
            if json {
                return table::print_json(&value);
            }
            crate::outln!("silence {id} ended")
        }
    }
}

/// The subject of the host's one open alert of `kind`; an error naming the choices when
/// there are none or several.
async fn only_subject(
    client: &HubClient,
    host_id: uuid::Uuid,
    kind: AlertKind,
) -> Result<String, CtlError> {
    let value = client
        .get(&format!("/v1/admin/alerts/open?host={host_id}"))
        .await?;
    let open: Vec<OpenAlert> = decode("open alert list", value)?;
    let subjects: Vec<String> = open
        .into_iter()
        .filter(|a| a.kind == kind)
        .map(|a| a.subject)
        .collect();
    match subjects.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CtlError::BadArgument {
            what: "--kind",
            reason: format!("host {host_id} has no open {} alert", kind.as_str()),
        }),
        many => Err(CtlError::BadArgument {
            what: "--subject",
            reason: format!(
                "host {host_id} has {} open {} alerts; name one: {}",
                many.len(),
                kind.as_str(),
                many.join(", ")
            ),
        }),
    }
}

async fn send<T: serde::Serialize>(
    client: &HubClient,
    method: Method,
    path: &str,
    body: Option<&T>,
) -> Result<serde_json::Value, CtlError> {
    let body = body
        .map(serde_json::to_vec)
        .transpose()
        .map_err(|e| CtlError::BadArgument {
            what: "request",
            reason: e.to_string(),
        })?;
    client.call(method, path, body, &[]).await
}

/// Lists events.
pub async fn events(client: &HubClient, json: bool, args: &EventsArgs) -> Result<(), CtlError> {
    let mut path = format!("/v1/admin/events?limit={}", args.limit);
    if let Some(host) = &args.host {
        let host = crate::resolve::host_id(client, host).await?;
        path.push_str(&format!("&host={host}"));
    }
    if let Some(after) = args.after {
        path.push_str(&format!("&after={after}"));
    }
    let value = client.get(&path).await?;
    if json {
        return table::print_json(&value);
    }
    let events: Vec<Event> = decode("event list", value)?;
    // Hosts by name, as commands take them back; a host the hub no longer holds by the
    // shortest prefix of its id unique among the events listed.
    let hosts: Vec<HostSummary> = decode("host list", client.get("/v1/admin/hosts").await?)?;
    let names: std::collections::HashMap<uuid::Uuid, String> =
        hosts.into_iter().map(|h| (h.host_id, h.hostname)).collect();
    let len = bosun_proto::ids::unique_len(events.iter().filter_map(|e| e.host_id.as_ref()));
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                table::when(Some(e.at)),
                e.host_id.map_or_else(
                    || "-".to_owned(),
                    |h| {
                        names
                            .get(&h)
                            .cloned()
                            .unwrap_or_else(|| bosun_proto::ids::shown(&h, len))
                    },
                ),
                e.kind.clone(),
                bosun_proto::audit_text::fields_line(&e.detail),
            ]
        })
        .collect();
    table::print(&["SEQ", "AT", "HOST", "KIND", "DETAIL"], &rows)
}
