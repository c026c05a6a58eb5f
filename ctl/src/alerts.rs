//! `bosunctl alerts` and `bosunctl events`.

use bosun_proto::admin::{Alert, Event};
use clap::Args;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl alerts`
#[derive(Debug, Args)]
pub struct AlertsArgs {
    /// Newest N alerts.
    #[arg(long, default_value_t = 50)]
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

/// Lists alerts.
pub async fn alerts(client: &HubClient, json: bool, args: &AlertsArgs) -> Result<(), CtlError> {
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
                e.detail.to_string(),
            ]
        })
        .collect();
    table::print(&["SEQ", "AT", "HOST", "KIND", "DETAIL"], &rows)
}
