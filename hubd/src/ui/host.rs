//! `GET /ui/hosts/{host_id}`: one host — its state and versions (a warning when its agent has
//! no address pool), its health and the last day's history as charts, its guests (desired and
//! current, each with the address Bosun assigned it, and the generation the agent last
//! applied), backups per tier with their ages, restore tests, bulk volumes' own backups,
//! storage targets, alerts, jobs with their results, recent events and its audit trail (the
//! newest entries; `?audit_before=CURSOR` pages to older ones).

use axum::extract::{Path, RawQuery, State};
use axum::response::Html;
use bosun_proto::admin::{AuditRecord, Event, HostDetail, JobRecord, JobState};
use bosun_proto::desired::GuestSpec;
use bosun_proto::host_view::{self, SyncState, SyncView};
use bosun_proto::report::{GuestReport, GuestStatus};
use jiff::Timestamp;
use maud::{Markup, html};

use super::error::UiError;
use super::layout::{self, Nav};
use super::{Ui, audit, backups, bulk, health, history, logs, verify};
use crate::store::EventQuery;
use crate::store::dashboard::{DashboardFacts, DashboardQuery};

/// How many of the host's newest events and alerts the page shows.
const RECENT: u32 = 50;

/// Everything the page shows, read together.
struct HostView {
    detail: HostDetail,
    jobs: Vec<JobRecord>,
    events: Vec<Event>,
    facts: DashboardFacts,
    /// A page of the audit trail and one entry more when an older page follows.
    audit: Vec<AuditRecord>,
}

/// `GET /ui/hosts/{host_id}`.
pub(crate) async fn page(
    State(ui): State<Ui>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, UiError> {
    let host_id = super::logs::host_of(&ui, raw).await?;
    let audit_before = crate::api::extract::query_param(query.as_deref(), "audit_before");
    let paged = audit_before.is_some();
    let audit_query = audit::query(host_id, audit_before)?;
    let now_ms = ui.hub.clock().now_ms();
    let view = ui
        .hub
        .store_call(move |store| {
            Ok(HostView {
                detail: crate::health::host(store, host_id, now_ms)?.0,
                jobs: store.list_jobs(host_id, crate::api::listing::MAX_LISTED)?,
                events: store.list_events(EventQuery {
                    host_id: Some(host_id),
                    after: None,
                    limit: RECENT,
                })?,
                facts: store.dashboard_facts(DashboardQuery {
                    host_id: Some(host_id),
                    alert_limit: RECENT,
                    now_ms,
                })?,
                audit: store.audit(&audit_query)?,
            })
        })
        .await?;
    let history =
        crate::api::admin_history::read(&ui.hub, host_id, bosun_proto::history::DEFAULT_HOURS)
            .await?;
    let now = ui.hub.clock().now();
    let host = &view.detail;
    let s = &host.summary;
    let (state, class) = layout::rolled_state(s);
    let body = html! {
        p { a href="/ui/" { "← Fleet" } }
        h1 { (s.hostname) " " (layout::badge(state, class)) }
        (banners(host, now))
        (summary(host, now))
        h2 { "Labels and capabilities" }
        (super::profile::section(host))
        h2 { "Health" }
        (health::section(host, now))
        h2 { "History" }
        (history::section(&history))
        h2 { "Guests" }
        (generations(host))
        (guests(host))
        h2 { "Backups" }
        (backups::tiers(host, now))
        h2 { "Restore tests" }
        (backups::restore_tests(host, now))
        h2 { "Verification" }
        (verify::section(host, now))
        h2 { "Bulk volumes" }
        (bulk::section(host, now))
        h2 { "Golden base" }
        (super::golden::section(host, now))
        h2 { "Storage targets" }
        (backups::storage(host))
        h2 { "Open alerts" }
        (logs::open_table(&view.facts.open_alerts, now, None))
        h2 { "Recent alerts" }
        (logs::alerts_table(&view.facts.recent_alerts, now, false))
        h2 { "Jobs" }
        (jobs(&view.jobs, now))
        h2 { "Recent events" }
        (logs::events_table(&view.events, now, None))
        p { a href={ "/ui/events?host=" (s.host_id) } { "This host's event log" } }
        h2 id="audit-trail" { "Audit trail" }
        (audit::section(s.host_id, &view.audit, paged, now))
    };
    Ok(layout::page(&s.hostname, Nav::Fleet, now, body))
}

fn banners(host: &HostDetail, now: Timestamp) -> Markup {
    html! {
        @if let Some(since) = host.reseal_required_since {
            p class="banner warn" role="alert" {
                strong { "Reseal storage credentials. " }
                "A new box took over this host " (layout::ago(since, now))
                "; credentials sealed to the lost box cannot be opened: "
                code { "bosunctl secret seal --host " (host.summary.host_id) " --target-file TARGET.json" }
                ", for each target that carries credentials, and "
                code { "--tunnel-id UUID" }
                " for the tunnel's"
            }
        }
        @if let Some(warning) = host_view::address_pool_warning(host) {
            p class="banner warn" id="addresses" { strong { "Warning: " } (warning) }
        }
    }
}

fn summary(host: &HostDetail, now: Timestamp) -> Markup {
    let s = &host.summary;
    let report = host.last_report.as_ref();
    let pve = report.and_then(|r| r.versions.pve.as_deref());
    html! {
        dl class="facts" id="host-facts" {
            div { dt { "Host id" } dd class="mono" { (s.host_id) } }
            div { dt { "Status" } dd { (s.status.as_str()) ", " (s.liveness.as_str()) } }
            div { dt { "Last seen" } dd { (layout::moment(s.last_seen, now)) } }
            div { dt { "Enrolled" } dd { (layout::moment(Some(host.enrolled_at), now)) } }
            div { dt { "Poll interval" } dd { (host.poll_interval_seconds) "s" } }
            div { dt { "Agent" } dd { (s.agent_version.as_deref().unwrap_or("-")) } }
            div { dt { "Controller" } dd { (s.controller_version.as_deref().unwrap_or("-")) } }
            div { dt { "Proxmox VE" } dd { (pve.unwrap_or("-")) } }
            div { dt { "Escrow" } dd { (s.escrow.as_str()) } }
            @if let Some(metrics) = report.and_then(|r| r.host.as_ref()) {
                div { dt { "CPU" } dd {
                    (metrics.cpu_count) " cores, "
                    (format!("{:.0}", metrics.cpu_usage * 100.0)) "% used"
                } }
                div { dt { "Memory" } dd {
                    (metrics.memory_used_mib / 1024) " of " (metrics.memory_total_mib / 1024) " GiB"
                } }
                div { dt { "Root disk" } dd {
                    (metrics.disk_used_gib) " of " (metrics.disk_total_gib) " GiB"
                } }
            } @else if report.is_some() {
                div { dt { "Host metrics" } dd { "not read: the agent could not read Proxmox's node list in its last report" } }
            }
            @if let Some(at) = host.replaced_at {
                div { dt { "Box replaced" } dd { (layout::moment(Some(at), now)) } }
            }
        }
    }
}

fn generations(host: &HostDetail) -> Markup {
    let s = &host.summary;
    // Whether the host is in sync, as every view says it: what it reports it refuses (decision
    // 0065), or a guest's field it cannot apply, puts it out of sync whatever it applied.
    let sync = SyncView::of(host);
    let class = match sync.state {
        SyncState::InSync => "ok",
        SyncState::Converging => "warn",
        SyncState::NotInSync => "danger",
    };
    let reported = host
        .last_report
        .as_ref()
        .map_or(&[][..], |r| r.refused.as_slice());
    html! {
        p id="generations" {
            "Desired state generation " strong { (s.desired_generation) }
            "; the agent holds " (s.known_generation)
            " and last applied " strong { (s.applied_generation) } ". "
            span id="sync" { (layout::badge(sync.word, class)) }
            @if sync.state == SyncState::NotInSync {
                " the host refuses part of desired state"
            }
        }
        @if !reported.is_empty() {
            ul id="refused" {
                @for r in reported { li { (r.line()) } }
            }
        }
    }
}

/// What of a guest's desired spec cannot be applied to the guest its host reports.
fn unappliable(row: &GuestRow<'_>) -> Vec<bosun_proto::desired_status::Unappliable> {
    match (row.desired, row.current) {
        (Some(spec), Some(seen)) => bosun_proto::desired_status::unappliable(spec, seen),
        _ => Vec::new(),
    }
}

/// One guest: what desired state asks and what the agent reports, merged by guest id.
struct GuestRow<'a> {
    desired: Option<&'a GuestSpec>,
    current: Option<&'a GuestReport>,
}

fn guest_rows(host: &HostDetail) -> Vec<GuestRow<'_>> {
    let reported: &[GuestReport] = host
        .last_report
        .as_ref()
        .map_or(&[], |r| r.guests.as_slice());
    let mut rows: Vec<GuestRow<'_>> = host
        .desired
        .iter()
        .flat_map(|d| &d.guests)
        .map(|spec| GuestRow {
            desired: Some(spec),
            current: reported.iter().find(|g| g.guest_id == Some(spec.guest_id)),
        })
        .collect();
    let undesired: Vec<GuestRow<'_>> = reported
        .iter()
        .filter(|g| {
            !rows
                .iter()
                .any(|r| r.current.is_some_and(|c| std::ptr::eq(c, *g)))
        })
        .map(|g| GuestRow {
            desired: None,
            current: Some(g),
        })
        .collect();
    rows.extend(undesired);
    rows
}

fn guests(host: &HostDetail) -> Markup {
    let rows = guest_rows(host);
    html! {
        @if rows.is_empty() {
            p class="empty" id="guests" { "No guests desired or reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="guests" {
                    thead { tr {
                        th { "Guest" } th { "Kind" } th { "VMID" } th { "Address" } th { "Desired" }
                        th { "Current" } th { "Controller" } th { "Customer" }
                    } }
                    tbody { @for row in &rows { (guest_row(host, row)) } }
                }
            }
        }
    }
}

fn guest_row(host: &HostDetail, row: &GuestRow<'_>) -> Markup {
    // A guest with an id is named as every view names it; one without, by what it reports.
    let id = row
        .desired
        .map(|d| d.guest_id)
        .or(row.current.and_then(|g| g.guest_id));
    let name = match id {
        Some(id) => host_view::guest_name(host, id),
        None => row
            .current
            .map(|g| g.hostname.clone())
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| "-".to_owned()),
    };
    let vmid = row
        .current
        .map(|g| g.vmid)
        .or(row.desired.and_then(|d| d.vmid));
    // `lxc` or `qemu`, as `bosunctl status` says it.
    let kind = match id {
        Some(id) => host_view::guest_kind(host, id),
        None => row.current.map(|g| g.kind).unwrap_or_default(),
    };
    html! {
        tr {
            td data-label="Guest" { (name) }
            td data-label="Kind" class="mono" { (kind.as_str()) }
            td data-label="VMID" { @if let Some(vmid) = vmid { (vmid) } @else { "-" } }
            // The addresses Bosun assigned, as the report gives them (`bosunctl status` too).
            td data-label="Address" class="mono" {
                @match row.current.map(|g| g.addresses.as_slice()).filter(|a| !a.is_empty()) {
                    Some(addresses) => (addresses.join(", ")),
                    None => span class="muted" { "-" },
                }
            }
            td data-label="Desired" {
                @if let Some(spec) = row.desired {
                    (layout::wire(Some(&spec.power))) ", "
                    (spec.resources.cores) " cores, " (spec.resources.memory_mib) " MiB, "
                    (spec.resources.rootfs_gib) " GiB"
                    @for refused in unappliable(row) {
                        br;
                        (layout::badge("refused", "danger")) " " (refused.field) ": " (refused.reason)
                    }
                } @else {
                    span class="muted" { "not in desired state" }
                }
            }
            td data-label="Current" {
                @if let Some(current) = row.current {
                    (layout::badge(&layout::wire(Some(&current.status)), guest_class(current.status)))
                    @if let Some(r) = &current.resources {
                        " " (r.cores) " cores, " (r.memory_mib) " MiB, " (r.rootfs_gib) " GiB"
                    }
                } @else {
                    span class="muted" { "not reported" }
                }
            }
            td data-label="Controller" class="mono" {
                @match row.current.and_then(|g| g.controller_digest.as_deref()) {
                    // `sha256:` and the first 12 hex digits, as image tools print a digest;
                    // the whole digest on hover.
                    Some(digest) => span title=(digest) { (digest.get(..19).unwrap_or(digest)) },
                    None => span class="muted" { "-" },
                }
                @if let Some(expected) = row.current.and_then(|g| {
                    g.controller_expected
                        .as_deref()
                        .filter(|e| g.controller_digest.as_deref().is_some_and(|d| d != *e))
                }) {
                    " " span class="badge danger" title=(expected) { "not the signed one" }
                }
            }
            td data-label="Customer" {
                @if let Some(spec) = row.desired { (spec.customer.display_name) } @else { "-" }
            }
        }
    }
}

fn guest_class(status: GuestStatus) -> &'static str {
    match status {
        GuestStatus::Running => "ok",
        GuestStatus::Stopped
        | GuestStatus::Provisioning
        | GuestStatus::Orphaned
        | GuestStatus::Migrated => "warn",
        GuestStatus::Broken | GuestStatus::Lost | GuestStatus::Unknown => "danger",
    }
}

/// A host's jobs; each id shown as the shortest prefix that tells the jobs apart, as `bosunctl
/// job cancel` takes it back.
fn jobs(jobs: &[JobRecord], now: Timestamp) -> Markup {
    let id_len = bosun_proto::ids::unique_len(jobs.iter().map(|j| &j.job_id));
    html! {
        @if jobs.is_empty() {
            p class="empty" id="jobs" { "No jobs." }
        } @else {
            div class="scroll" {
                table class="stack" id="jobs" {
                    thead { tr {
                        th { "Job" } th { "Kind" } th { "State" } th { "Queued" } th { "Acked" }
                        th { "Result" }
                    } }
                    tbody {
                        @for job in jobs.iter().rev() {
                            tr {
                                td data-label="Job" class="mono" title=(job.job_id) { (bosun_proto::ids::shown(&job.job_id, id_len)) }
                                td data-label="Kind" { (job.kind) }
                                td data-label="State" { (layout::badge(job.state.as_str(), job_class(job.state))) }
                                td data-label="Queued" { (layout::moment(Some(job.submitted_at), now)) }
                                td data-label="Acked" { (layout::moment(job.acked_at, now)) }
                                td data-label="Result" class="detail" {
                                    @if let Some(result) = &job.result {
                                        (super::job_result::cell(result, now))
                                    } @else {
                                        span class="muted" { "none yet" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn job_class(state: JobState) -> &'static str {
    match state {
        JobState::Succeeded => "ok",
        JobState::Queued | JobState::Acked | JobState::Cancelled => "warn",
        JobState::Failed | JobState::Rejected => "danger",
    }
}
