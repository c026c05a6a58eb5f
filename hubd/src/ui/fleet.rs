//! `GET /ui/`: every host with its state and last poll, the dead-man's switch at a glance
//! (overdue hosts, a suspected silence of the hub itself) and the open alerts. `?label=k=v`
//! (and `capability=`) narrows the host list as `GET /v1/admin/hosts` does.

use axum::extract::{RawQuery, State};
use axum::response::Html;
use bosun_proto::admin::{HostStatus, HostSummary, Liveness};
use bosun_proto::rollup::HealthLevel;
use maud::{Markup, html};

use super::error::UiError;
use super::layout::{self, Nav};
use super::{Ui, logs};
use crate::store::dashboard::{DashboardFacts, DashboardQuery};
use crate::store::hub_keys::{KeyRotation, KeyState};

/// How many open alerts the fleet page lists before pointing to the alerts page.
const OPEN_ALERTS_SHOWN: usize = 10;

/// `GET /ui/`.
pub(crate) async fn page(
    State(ui): State<Ui>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, UiError> {
    // The form's empty box asks for no filter.
    let query = query.map(|q| {
        q.split('&')
            .filter(|pair| !pair.is_empty() && *pair != "label=")
            .collect::<Vec<_>>()
            .join("&")
    });
    let filter = crate::api::admin_hosts::host_filter(query.as_deref()).map_err(|e| {
        UiError::BadRequest {
            message: e.to_string(),
        }
    })?;
    let shown_filter: Vec<String> = filter
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(filter.capabilities.iter().cloned())
        .collect();
    let now_ms = ui.hub.clock().now_ms();
    let (hosts, facts) = ui
        .hub
        .store_call(move |store| {
            let wanted = if filter.is_empty() {
                None
            } else {
                Some(store.hosts_matching(&filter)?)
            };
            let (details, _) = crate::health::fleet(store, now_ms)?;
            let hosts: Vec<HostSummary> = details
                .into_iter()
                .map(|d| d.summary)
                .filter(|h| wanted.as_ref().is_none_or(|w| w.contains(&h.host_id)))
                .collect();
            let facts = store.dashboard_facts(DashboardQuery {
                host_id: None,
                alert_limit: 0,
                now_ms,
            })?;
            Ok((hosts, facts))
        })
        .await?;
    let now = ui.hub.clock().now();
    // Each host's id as the shortest prefix that tells the hosts apart, as every bosunctl
    // command and `/ui/hosts/{id}` take it back; the whole id on hover.
    let id_len = bosun_proto::ids::unique_len(hosts.iter().map(|h| &h.host_id));
    let body = html! {
        h1 { "Fleet" }
        (banners(&hosts, &facts))
        (counts(&hosts, &facts))
        h2 { "Hosts" }
        form method="get" action="/ui/" id="host-filter" {
            label { "Label " input type="text" name="label" placeholder="key=value" maxlength="127"; }
            " " button type="submit" { "Filter" }
            @if !shown_filter.is_empty() {
                " showing hosts with " (shown_filter.join(", ")) " · " a href="/ui/" { "all hosts" }
            }
        }
        @if hosts.is_empty() && !shown_filter.is_empty() {
            p class="empty" { "No host carries " (shown_filter.join(", ")) "." }
        } @else if hosts.is_empty() {
            p class="empty" { "No host is enrolled yet: " code { "bosunctl enroll-token create" } "." }
        } @else {
            div class="scroll" {
                table class="stack" id="hosts" {
                    thead { tr {
                        th { "Host" } th { "Host id" } th { "State" } th { "Last seen" } th { "Generation" }
                        th { "Agent" } th { "Golden base" } th { "Queued jobs" } th { "Escrow" } th { "Open alerts" }
                    } }
                    tbody {
                        @for host in &hosts { (row(host, &facts, now, id_len)) }
                    }
                }
            }
        }
        h2 { "Open alerts" }
        (logs::open_table(&facts.open_alerts[..facts.open_alerts.len().min(OPEN_ALERTS_SHOWN)], now, None))
        @if facts.open_alerts.len() > OPEN_ALERTS_SHOWN {
            p { a href="/ui/alerts" { "All " (facts.open_alerts.len()) " open alerts" } }
        }
    };
    Ok(layout::page("Fleet", Nav::Fleet, now, body))
}

/// The suspected-hub-silence and overdue banners.
fn banners(hosts: &[HostSummary], facts: &DashboardFacts) -> Markup {
    let overdue: Vec<&HostSummary> = hosts
        .iter()
        .filter(|h| h.liveness == Liveness::Overdue && h.status != HostStatus::Revoked)
        .collect();
    html! {
        @if facts.hub_silence_suspected {
            p class="banner danger" id="hub-silence" role="alert" {
                strong { "Hub connectivity suspected. " }
                "Most hosts went silent at once: the hub's own network is the likelier cause. "
                "Per-host overdue alerts are held until the silence ends."
            }
        }
        @if let Some(rotation) = &facts.key_rotation {
            (key_rotation(rotation))
        }
        @if !overdue.is_empty() {
            p class="banner warn" id="overdue" role="alert" {
                strong { (overdue.len()) " overdue: " }
                @for (i, host) in overdue.iter().enumerate() {
                    @if i > 0 { ", " }
                    (layout::host_link(host.host_id, &host.hostname))
                }
            }
        }
    }
}

/// Where the hub's key rotation stands: who holds the staged key (activate once every live
/// host does), or that the old key is still announced (retire it once every live host polled
/// since the switch).
fn key_rotation(rotation: &KeyRotation) -> Markup {
    let live = rotation.live_hosts;
    html! {
        @if let Some(staged) = rotation.key(KeyState::Staged) {
            p class="banner" id="key-rotation" {
                strong { "Hub key rotation: " }
                "the staged key is held by " (staged.holders) " of " (live) " live hosts. "
                @if staged.holders >= live {
                    "Every live host holds it: activate it with "
                    code { "bosun-hubd cert rotate activate" } "."
                } @else {
                    "Activate it once every live host holds it."
                }
            }
        } @else if let Some(active) = rotation.key(KeyState::Active) {
            p class="banner" id="key-rotation" {
                strong { "Hub key rotation: " }
                "the new key is served and held by " (active.holders) " of " (live)
                " live hosts; the old key is still announced until "
                code { "bosun-hubd cert rotate retire" } "."
            }
        }
    }
}

fn counts(hosts: &[HostSummary], facts: &DashboardFacts) -> Markup {
    let count = |state: &str| {
        hosts
            .iter()
            .filter(|h| layout::host_state(h).0 == state)
            .count()
    };
    let rolled = |level: HealthLevel| {
        hosts
            .iter()
            .filter(|h| {
                h.status == HostStatus::Active
                    && h.health.as_ref().is_some_and(|r| r.level == level)
            })
            .count()
    };
    html! {
        dl class="facts" {
            div { dt { "Hosts" } dd { (hosts.len()) } }
            div { dt { "Polling" } dd { (count("ok")) } }
            div { dt { "Overdue" } dd { (count("overdue")) } }
            div { dt { "Stopped" } dd { (count("stopped")) } }
            div { dt { "Pending approval" } dd { (count("pending approval")) } }
            div { dt { "Critical" } dd { (rolled(HealthLevel::Critical)) } }
            div { dt { "Warning" } dd { (rolled(HealthLevel::Warning)) } }
            div { dt { "Open alerts" } dd { (facts.open_alerts.len()) } }
        }
    }
}

fn row(host: &HostSummary, facts: &DashboardFacts, now: jiff::Timestamp, id_len: usize) -> Markup {
    let open: Vec<_> = facts
        .open_alerts
        .iter()
        .filter(|a| a.host_id == host.host_id)
        .collect();
    let (state, class) = layout::rolled_state(host);
    let open = open.len();
    // As every view says it: a refusal in the host's report puts it out of sync whatever it
    // applied.
    let sync = bosun_proto::host_view::SyncView::of_summary(host);
    let sync_class = match sync.state {
        bosun_proto::host_view::SyncState::InSync => "ok",
        bosun_proto::host_view::SyncState::Converging => "warn",
        bosun_proto::host_view::SyncState::NotInSync => "danger",
    };
    let converged = sync.state == bosun_proto::host_view::SyncState::InSync;
    html! {
        tr data-host=(host.host_id) {
            td data-label="Host" {
                (layout::host_link(host.host_id, &host.hostname))
                @for (key, value) in &host.labels { " " span class="badge" { (key) "=" (value) } }
            }
            td data-label="Host id" class="mono host-id" title=(host.host_id) {
                (bosun_proto::ids::shown(&host.host_id, id_len))
            }
            td data-label="State" { (layout::badge(state, class)) }
            td data-label="Last seen" { (layout::moment(host.last_seen, now)) }
            td data-label="Generation" {
                "desired " (host.desired_generation) ", applied " (host.applied_generation)
                @if !converged { " " (layout::badge(sync.word, sync_class)) }
            }
            td data-label="Agent" { (host.agent_version.as_deref().unwrap_or("-")) }
            td data-label="Golden base" {
                @if let Some(g) = &host.golden { (g.version) " " span title=(g.sha256) { (g.short_sha256()) } }
                @else { "-" }
            }
            td data-label="Queued jobs" { (host.pending_jobs) }
            td data-label="Escrow" { (host.escrow.as_str()) }
            td data-label="Open alerts" {
                @if open > 0 { (layout::badge(&open.to_string(), "danger")) } @else { "0" }
            }
        }
    }
}
