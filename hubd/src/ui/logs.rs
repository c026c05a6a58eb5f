//! `GET /ui/alerts` (open alerts, then the newest raised) and `GET /ui/events` (the event
//! log, optionally of one host), and the tables the host page shares.

use axum::extract::{RawQuery, State};
use axum::response::Html;
use bosun_proto::admin::{Alert, Event};
use jiff::Timestamp;
use maud::{Markup, html};

use super::Ui;
use super::error::UiError;
use super::layout::{self, Nav};
use crate::store::dashboard::{DashboardQuery, OpenAlert};
use crate::store::{EventQuery, StoreError};

/// How many of the newest alerts and events the pages show.
pub(crate) const PAGE_ROWS: u32 = 200;

/// Longest event detail shown, in characters; the rest is cut with an ellipsis.
const MAX_DETAIL_CHARS: usize = 400;

/// `GET /ui/alerts`.
pub(crate) async fn alerts(
    State(ui): State<Ui>,
    acting: super::session::Acting,
) -> Result<Html<String>, UiError> {
    let now_ms = ui.hub.clock().now_ms();
    let facts = ui
        .hub
        .store_call(move |store| {
            store.dashboard_facts(DashboardQuery {
                host_id: None,
                alert_limit: PAGE_ROWS,
                now_ms,
            })
        })
        .await?;
    let now = ui.hub.clock().now();
    let body = html! {
        h1 { "Alerts" }
        h2 { "Open" }
        (open_table(&facts.open_alerts, now, Some(&acting)))
        h2 { "Newest " (PAGE_ROWS) " raised" }
        (alerts_table(&facts.recent_alerts, now, true))
    };
    Ok(layout::page("Alerts", Nav::Alerts, now, body))
}

/// The host a page's address names: its whole id, or a prefix of it the store resolves (as
/// the pages show ids and the API takes them back); an unknown one is not found, a malformed
/// one or a prefix of more than one host (named) a bad request.
pub(crate) async fn host_of(ui: &Ui, raw: String) -> Result<uuid::Uuid, UiError> {
    if let Ok(id) = uuid::Uuid::parse_str(&raw) {
        return Ok(id);
    }
    let resolved = ui
        .hub
        .store_call(move |store| store.resolve_id(crate::store::id_lookup::IdKind::Host, &raw))
        .await;
    resolved.map_err(|error| match error {
        StoreError::AmbiguousId { .. } | StoreError::BadIdPrefix { .. } => UiError::BadRequest {
            message: error.to_string(),
        },
        StoreError::UnknownId { .. } => UiError::NotFound {
            what: "host (no host id is or starts with the one in the address)".to_owned(),
        },
        other => UiError::Store(other),
    })
}

/// `GET /ui/events?host=ID`.
pub(crate) async fn events(
    State(ui): State<Ui>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, UiError> {
    let host_id = match crate::api::extract::query_param(query.as_deref(), "host") {
        Some(raw) => Some(host_of(&ui, raw.to_owned()).await?),
        None => None,
    };
    let (events, hosts) = ui
        .hub
        .store_call(move |store| {
            let events = store.list_events(EventQuery {
                host_id,
                after: None,
                limit: PAGE_ROWS,
            })?;
            Ok((events, store.list_hosts()?))
        })
        .await?;
    // Hosts by name, as the operator types them back; a removed host by its id.
    let names: std::collections::BTreeMap<uuid::Uuid, String> =
        hosts.into_iter().map(|h| (h.host_id, h.hostname)).collect();
    let now = ui.hub.clock().now();
    let body = html! {
        h1 { "Events" }
        @if let Some(host_id) = host_id {
            p {
                "Of host " (names.get(&host_id).map_or_else(|| host_id.to_string(), Clone::clone))
                " (" code { (host_id) } ") only. " a href="/ui/events" { "All events" }
            }
        }
        p class="muted" { "The newest " (PAGE_ROWS) ", newest first." }
        (events_table(&events, now, host_id.is_none().then_some(&names)))
    };
    Ok(layout::page("Events", Nav::Events, now, body))
}

/// Open alerts, oldest first; with `triage`, each with its acknowledge and silence controls
/// for the session's token.
pub(crate) fn open_table(
    open: &[OpenAlert],
    now: Timestamp,
    triage: Option<&super::session::Acting>,
) -> Markup {
    html! {
        @if open.is_empty() {
            p class="empty" id="open-alerts" { "No open alerts." }
        } @else {
            div class="scroll" {
                table class="stack" id="open-alerts" {
                    thead { tr {
                        th { "Since" } th { "Host" } th { "Kind" } th { "Message" }
                        @if triage.is_some() { th { "Triage" } }
                    } }
                    tbody {
                        @for alert in open {
                            tr {
                                td data-label="Since" { (layout::moment(Some(alert.since), now)) }
                                td data-label="Host" { (layout::host_link(alert.host_id, &alert.hostname)) }
                                td data-label="Kind" {
                                    (layout::badge(alert.kind.as_str(), layout::alert_class(alert.kind)))
                                }
                                td data-label="Message" class="detail" {
                                    (alert.message)
                                    @if let Some(ack) = &alert.acknowledged {
                                        " " (layout::badge("acknowledged", "ok"))
                                        " " span class="muted" {
                                            (layout::moment(Some(ack.at), now)) ": " (ack.note)
                                        }
                                    }
                                    @if let Some(id) = alert.silenced_by {
                                        " " (layout::badge(&format!("silenced #{id}"), "muted"))
                                    }
                                }
                                @if let Some(acting) = triage {
                                    td data-label="Triage" { (super::triage::controls(alert, acting)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Raised alerts, newest first.
pub(crate) fn alerts_table(alerts: &[Alert], now: Timestamp, with_host: bool) -> Markup {
    html! {
        @if alerts.is_empty() {
            p class="empty" { "No alerts raised." }
        } @else {
            div class="scroll" {
                table class="stack" id="alerts" {
                    thead { tr {
                        th { "When" }
                        @if with_host { th { "Host" } }
                        th { "Kind" } th { "Message" }
                    } }
                    tbody {
                        @for alert in alerts.iter().rev() {
                            tr {
                                td data-label="When" { (layout::moment(Some(alert.at), now)) }
                                @if with_host {
                                    td data-label="Host" {
                                        @match (alert.host_id, &alert.hostname) {
                                            (Some(id), Some(name)) => (layout::host_link(id, name)),
                                            (Some(id), None) => (layout::host_link(id, &id.to_string())),
                                            _ => span class="muted" { "hub" },
                                        }
                                    }
                                }
                                td data-label="Kind" {
                                    (layout::badge(alert.kind.as_str(), layout::alert_class(alert.kind)))
                                }
                                td data-label="Message" class="detail" { (alert.message) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Events, newest first; with `hosts` (hostnames by id), a column naming each event's host.
pub(crate) fn events_table(
    events: &[Event],
    now: Timestamp,
    hosts: Option<&std::collections::BTreeMap<uuid::Uuid, String>>,
) -> Markup {
    let with_host = hosts.is_some();
    let ids = events.iter().filter_map(|e| e.host_id).collect::<Vec<_>>();
    let len = bosun_proto::ids::unique_len(&ids);
    html! {
        @if events.is_empty() {
            p class="empty" { "No events." }
        } @else {
            div class="scroll" {
                table class="stack" id="events" {
                    thead { tr {
                        th { "When" }
                        @if with_host { th { "Host" } }
                        th { "Event" } th { "Detail" }
                    } }
                    tbody {
                        @for event in events.iter().rev() {
                            tr {
                                td data-label="When" { (layout::moment(Some(event.at), now)) }
                                @if with_host {
                                    td data-label="Host" {
                                        @if let Some(id) = event.host_id {
                                            a href={ "/ui/events?host=" (id) } title=(id) {
                                                @match hosts.and_then(|h| h.get(&id)) {
                                                    Some(name) => (name),
                                                    None => span class="mono" { (bosun_proto::ids::shown(&id, len)) },
                                                }
                                            }
                                        } @else {
                                            span class="muted" { "hub" }
                                        }
                                    }
                                }
                                td data-label="Event" { (event.kind) }
                                td data-label="Detail" class="detail mono" { (detail(&event.detail)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An event's detail as compact JSON, cut at [`MAX_DETAIL_CHARS`]; empty for `{}`.
fn detail(value: &serde_json::Value) -> String {
    if value.as_object().is_some_and(serde_json::Map::is_empty) || value.is_null() {
        return String::new();
    }
    let text = value.to_string();
    match text.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_details_are_cut_on_a_character_boundary() {
        let long = serde_json::json!({ "x": "é".repeat(1_000) });
        let shown = detail(&long);
        assert_eq!(shown.chars().count(), MAX_DETAIL_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(detail(&serde_json::json!({})), "");
    }
}
