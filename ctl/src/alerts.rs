//! `bosunctl alerts` and `bosunctl events`.

use bosun_proto::admin::{Alert, Event, OpenAlert};
use clap::Args;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl alerts`: the conditions still open; `--all` for the history, recoveries included.
#[derive(Debug, Args)]
pub struct AlertsArgs {
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
                a.subject.clone(),
                a.message.clone(),
            ]
        })
        .collect();
    table::print(&["SINCE", "KIND", "HOST", "SUBJECT", "MESSAGE"], &rows)
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
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                table::when(Some(e.at)),
                e.host_id.map_or_else(|| "-".to_owned(), |h| h.to_string()),
                e.kind.clone(),
                bosun_proto::audit_text::fields_line(&e.detail),
            ]
        })
        .collect();
    table::print(&["SEQ", "AT", "HOST", "KIND", "DETAIL"], &rows)
}
