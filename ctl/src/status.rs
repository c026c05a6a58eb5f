//! `bosunctl status`: one screen for the whole fleet — hosts, their storage targets, backup
//! tiers and guests (desired and observed) with each guest's last restore test per tier and
//! its bulk volumes' own backups, the last backup and restore test per host, and the newest
//! alerts.

mod backups;
pub(crate) mod bulk;
pub mod golden;
pub mod hardware;
pub mod health;
pub(crate) mod restore_results;
pub mod sync;
pub(crate) mod verify;

use bosun_proto::admin::{Alert, HostDetail, HostSummary, OpenAlert};
use bosun_proto::desired::GuestKind;
use bosun_proto::host_view::{self, HostView, guest_name};
use bosun_proto::report::GuestStatus;
use clap::Args;
use serde::Serialize;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl status`
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// How many of the newest alerts (the history) `--json` carries; the text shows the open
    /// ones.
    #[arg(long, default_value_t = 10)]
    pub alerts: u32,
    /// Answer as a monitoring check: one line on stdout and the exit status of the worst host
    /// (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN when the hub cannot be read), as Nagios,
    /// Icinga and Checkmk plugins do.
    #[arg(long, conflicts_with_all = ["json", "output"])]
    pub check: bool,
}

/// The fleet as the hub sees it.
#[derive(Debug, Clone, Serialize)]
pub struct FleetStatus {
    /// Every host with its details.
    pub hosts: Vec<HostDetail>,
    /// The newest alerts, in the hub's order: the history, recoveries included.
    pub alerts: Vec<Alert>,
    /// The conditions still open, newest first: what the text shows.
    pub open_alerts: Vec<OpenAlert>,
}

/// One guest line: desired, observed or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuestLine {
    /// The guest id, when the guest is known to desired state or reported with one.
    pub guest_id: Option<uuid::Uuid>,
    /// Its Proxmox id, once it exists.
    pub vmid: Option<u32>,
    /// Its hostname.
    pub hostname: String,
    /// Its kind ([`host_view::guest_kind`]): `lxc` or `qemu`.
    pub kind: GuestKind,
    /// Whether desired state lists it.
    pub desired: bool,
    /// What the agent last reported (`absent` when not reported).
    pub observed: String,
    /// The static addresses its Proxmox config gives it, as last reported (decision 0101).
    pub addresses: Vec<String>,
}

impl FleetStatus {
    /// Reads everything from the hub.
    pub async fn fetch(client: &HubClient, alerts: u32) -> Result<Self, CtlError> {
        let summaries: Vec<HostSummary> =
            decode("host list", client.get("/v1/admin/hosts").await?)?;
        let mut hosts = Vec::with_capacity(summaries.len());
        for summary in &summaries {
            let value = client
                .get(&format!("/v1/admin/hosts/{}", summary.host_id))
                .await?;
            hosts.push(decode("host detail", value)?);
        }
        let alerts = decode(
            "alert list",
            client
                .get(&format!("/v1/admin/alerts?limit={alerts}"))
                .await?,
        )?;
        let open_alerts = decode(
            "open alert list",
            client.get("/v1/admin/alerts/open").await?,
        )?;
        Ok(Self {
            hosts,
            alerts,
            open_alerts,
        })
    }
}

/// Desired and observed guests of one host, merged by guest id.
pub fn guest_lines(host: &HostDetail) -> Vec<GuestLine> {
    let mut lines: Vec<GuestLine> = host
        .desired
        .iter()
        .flat_map(|d| &d.guests)
        .map(|g| GuestLine {
            guest_id: Some(g.guest_id),
            vmid: None,
            hostname: guest_name(host, g.guest_id),
            kind: host_view::guest_kind(host, g.guest_id),
            desired: true,
            observed: "absent".to_owned(),
            addresses: Vec::new(),
        })
        .collect();
    for reported in host.last_report.iter().flat_map(|r| &r.guests) {
        let observed = status_name(reported.status).to_owned();
        let known = reported
            .guest_id
            .and_then(|id| lines.iter_mut().find(|l| l.guest_id == Some(id)));
        match known {
            Some(line) => {
                line.vmid = Some(reported.vmid);
                line.observed = observed;
                line.addresses.clone_from(&reported.addresses);
            }
            None => lines.push(GuestLine {
                guest_id: reported.guest_id,
                vmid: Some(reported.vmid),
                hostname: reported
                    .guest_id
                    .map_or_else(|| reported.hostname.clone(), |id| guest_name(host, id)),
                kind: reported.kind,
                desired: false,
                observed,
                addresses: reported.addresses.clone(),
            }),
        }
    }
    lines
}

/// `hosts show`'s `guest` fields, one a guest as [`guest_lines`] merges them: its name, vmid,
/// kind, whether desired state lists it and what the agent observes.
pub fn guest_fields(host: &HostDetail) -> Vec<(&'static str, String)> {
    guest_lines(host)
        .into_iter()
        .map(|g| {
            let vmid = g.vmid.map_or_else(|| "-".to_owned(), |v| v.to_string());
            let desired = if g.desired { "desired" } else { "undesired" };
            (
                "guest",
                format!(
                    "{} (vmid {vmid}): {}, {desired}, {}",
                    g.hostname, g.kind, g.observed
                ),
            )
        })
        .collect()
}

pub(crate) fn status_name(status: GuestStatus) -> &'static str {
    match status {
        GuestStatus::Running => "running",
        GuestStatus::Stopped => "stopped",
        GuestStatus::Provisioning => "provisioning",
        GuestStatus::Orphaned => "orphaned",
        GuestStatus::Broken => "broken",
        GuestStatus::Lost => "LOST",
        GuestStatus::Migrated => "migrated",
        GuestStatus::Unknown => "unknown",
    }
}

/// The last backup of a host, over all guests and targets: `when (target, ok|FAILED)`.
fn last_backup(host: &HostDetail) -> String {
    let Some(report) = &host.last_report else {
        return "never".to_owned();
    };
    report
        .last_backups
        .iter()
        .max_by_key(|b| b.finished_at)
        .map_or_else(
            || "never".to_owned(),
            |b| {
                format!(
                    "{} on {} ({})",
                    table::when(Some(b.finished_at)),
                    backups::target_name(host, report, &b.target),
                    if b.ok { "ok" } else { "FAILED" }
                )
            },
        )
}

/// The terminal rendering, as lines (the demo prints them under a step).
pub fn render(status: &FleetStatus) -> Vec<String> {
    render_at(status, jiff::Timestamp::now())
}

/// The terminal rendering with ages counted back from `now`.
pub fn render_at(status: &FleetStatus, now: jiff::Timestamp) -> Vec<String> {
    let mut out = Vec::new();
    if status.hosts.is_empty() {
        out.push("no hosts enrolled".to_owned());
    }
    // Each host's id as the shortest prefix unique among the hosts, which the hub resolves.
    let id_len = bosun_proto::ids::unique_len(status.hosts.iter().map(|h| &h.summary.host_id));
    for host in &status.hosts {
        let s = &host.summary;
        // One word for the host's state, the dashboard's: never `active / ok` beside a
        // critical health line.
        out.push(format!(
            "host {} ({})  {}  last seen {}  generation desired {} applied {}",
            s.hostname,
            bosun_proto::ids::shown(&s.host_id, id_len),
            host_view::state_word(s).0,
            table::when(s.last_seen),
            s.desired_generation,
            s.applied_generation,
        ));
        out.extend(sync::lines(host));
        out.push(format!("  health            {}", health::summary(host)));
        out.extend(hardware::node_lines(host));
        if let Some(tunnel) = host.last_report.as_ref().and_then(|r| r.tunnel.as_ref()) {
            out.push(format!("  tunnel            {}", tunnel_text(tunnel)));
        }
        out.push(format!(
            "  escrow            {}",
            crate::hosts::escrow_text(&s.escrow)
        ));
        if let Some(warning) = host_view::address_pool_warning(host) {
            out.push(format!("  WARNING           {warning}"));
        }
        if let Some(since) = host.reseal_required_since {
            out.push(format!(
                "  RESEAL            the host was replaced; its storage credentials were sealed to the \
                 lost box (since {}): pin the new box's recipient (bosunctl hosts pin-recipient {} \
                 --recipient age1…, from bosun-agentctl status on its console), then bosunctl \
                 secret seal --host {} --target-file TARGET.json, for each target (and \
                 --tunnel-id UUID for the tunnel's credentials)",
                table::when(Some(since)),
                s.host_id,
                s.host_id
            ));
        }
        out.push(format!("  last backup       {}", last_backup(host)));
        out.push(format!(
            "  last restore-test {}",
            restore_results::last_restore_test(host)
        ));
        out.push(format!(
            "  verification      {}",
            verify::host_summary(host)
        ));
        out.extend(golden::host_line(host, now));
        out.extend(backups::storage_lines(host));
        out.extend(backups::tier_lines(host, now));
        let guests = guest_lines(host);
        if guests.is_empty() {
            out.push("  no guests".to_owned());
        }
        for g in &guests {
            let address = if g.addresses.is_empty() {
                String::new()
            } else {
                format!("  address {}", g.addresses.join(", "))
            };
            out.push(format!(
                "  guest {:<12} vmid {:<5} {:<4} {:<8} {}{address}",
                g.hostname,
                g.vmid.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                g.kind.as_str(),
                if g.desired { "desired" } else { "undesired" },
                g.observed,
            ));
            if let Some(id) = g.guest_id {
                out.extend(hardware::guest_usage_line(host, id));
                out.extend(restore_results::guest_lines(host, id, now));
                out.extend(verify::guest_lines(host, id, now));
                out.extend(bulk::guest_lines(host, id, now));
            }
        }
        let listed: Vec<Option<uuid::Uuid>> = guests.iter().map(|g| g.guest_id).collect();
        out.extend(restore_results::stray_lines(host, &listed, now));
    }
    if status.open_alerts.is_empty() {
        out.push("open alerts: none".to_owned());
    } else {
        out.push("open alerts:".to_owned());
        let width = status
            .open_alerts
            .iter()
            .map(|a| a.kind.as_str().len())
            .max()
            .unwrap_or(0);
        for a in &status.open_alerts {
            out.push(format!(
                "  since {}  {:<width$}  {}",
                table::when(Some(a.since)),
                a.kind.as_str(),
                a.message.replace(bosun_proto::inert::is_control, " ")
            ));
        }
    }
    out
}

/// The `--output json` answer: the fleet as the hub serves it, each host with its `view`
/// ([`HostView`]): what the text says of it, as every view says it.
pub fn json_value(status: &FleetStatus) -> Result<serde_json::Value, CtlError> {
    let mut value = serde_json::to_value(status).map_err(|source| CtlError::Decode {
        what: "status".to_owned(),
        source,
    })?;
    if let Some(hosts) = value
        .get_mut("hosts")
        .and_then(serde_json::Value::as_array_mut)
    {
        for (json, host) in hosts.iter_mut().zip(&status.hosts) {
            with_view(json, host)?;
        }
    }
    Ok(value)
}

/// Adds `host`'s [`HostView`] to its JSON object `json` as `view`.
pub fn with_view(json: &mut serde_json::Value, host: &HostDetail) -> Result<(), CtlError> {
    let view = serde_json::to_value(HostView::of(host)).map_err(|source| CtlError::Decode {
        what: "host view".to_owned(),
        source,
    })?;
    if let Some(fields) = json.as_object_mut() {
        fields.insert("view".to_owned(), view);
    }
    Ok(())
}

/// The `--check` answer: the exit status of the worst host and one line naming what is wrong
/// ([`health::check_line`]).
pub fn check_line(status: &FleetStatus) -> (u8, String) {
    health::check_line(&status.hosts)
}

/// Whether the raw command line `args` (program name first) asks for `status --check`: then a
/// usage error is answered as the monitoring-plugin convention wants, before clap's parse
/// could say so.
pub fn check_requested<I, S>(args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<S> = args.into_iter().skip(1).collect();
    let position = |word: &str| args.iter().position(|a| a.as_ref() == word);
    matches!((position("status"), position("--check")), (Some(s), Some(c)) if s < c)
}

/// The one stdout line of `status --check` when it could not run at all (a usage or config
/// error, the hub unreadable): UNKNOWN, with `why` on the same line.
pub fn unknown_line(why: &str) -> String {
    let why: String = why
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    crate::width::elide(
        &format!(
            "BOSUN UNKNOWN - {}",
            why.replace(bosun_proto::inert::is_control, " ")
        ),
        crate::width::MONITORING_LINE,
    )
}

/// Runs `bosunctl status`.
pub async fn run(client: &HubClient, json: bool, args: &StatusArgs) -> Result<(), CtlError> {
    if args.check {
        return check(client).await;
    }
    let status = FleetStatus::fetch(client, args.alerts).await?;
    if json {
        return table::print_json(&json_value(&status)?);
    }
    // Each rendered line is one line: whatever a host put into it is escaped.
    for line in render(&status) {
        crate::outln!("{line}")?;
    }
    Ok(())
}

/// `status --check`: the line on stdout, the level as the exit status; a hub that cannot be
/// read is UNKNOWN (3), never OK.
async fn check(client: &HubClient) -> Result<(), CtlError> {
    let (exit, line) = match FleetStatus::fetch(client, 0).await {
        Ok(status) => check_line(&status),
        Err(err) => {
            table::plugin_line(&unknown_line(&bosun_errchain::error_chain(&err)))?;
            return Err(CtlError::CheckNotOk {
                exit: health::PLUGIN_UNKNOWN,
            });
        }
    };
    table::plugin_line(&line)?;
    match exit {
        0 => Ok(()),
        exit => Err(CtlError::CheckNotOk { exit }),
    }
}

/// The `tunnel` line of `status`: its readiness and, when the agent manages it (decision
/// 0082), its routes, edge connections, version and restarts.
pub fn tunnel_text(tunnel: &bosun_proto::report::TunnelHealth) -> String {
    let mut text = if tunnel.raised {
        "down".to_owned()
    } else if tunnel.healthy {
        "ready".to_owned()
    } else {
        "not ready".to_owned()
    };
    if let Some(m) = &tunnel.managed {
        text.push_str(&format!(", {} route(s)", m.routes));
        if m.unplaced > 0 {
            text.push_str(&format!(" ({} not placed)", m.unplaced));
        }
        if let Some(n) = m.connections {
            text.push_str(&format!(", {n} edge connection(s)"));
        }
        if let Some(v) = &m.version {
            text.push_str(&format!(", cloudflared {v}"));
        }
        text.push_str(&format!(", {} restart(s)", m.restarts));
        if let Some(e) = &m.error {
            text.push_str(&format!(", error: {e}"));
        }
        if let Some(e) = &m.credentials_error {
            text.push_str(&format!(", credentials not written: {e}"));
        }
    }
    text
}

#[cfg(test)]
mod tests;
