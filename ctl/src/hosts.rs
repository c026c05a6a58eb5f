//! `bosunctl hosts list|show|label|approve|revoke|rotate-key|remove`.

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::recipients::{self, KnownRecipients, Pinned};
use crate::resolve;
use crate::table;
use bosun_proto::admin::{EscrowState, HostDetail, HostSummary};
use clap::Subcommand;
use reqwest::Method;
use uuid::Uuid;

/// `bosunctl hosts ...`
#[derive(Debug, Subcommand)]
pub enum HostsCommand {
    /// All hosts: status, liveness, versions, desired vs. known vs. applied generation, escrow,
    /// labels; only those carrying every `--label` and `--capability` given.
    List {
        /// Only hosts with this label, `key=value` (repeat: all must match).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Only hosts whose capabilities include this word: `helper`, `tunnel`, `smart`,
        /// `addresses`, `arch=x86_64`, `pve=9`, `storage=pbs`, `target=ID`, `bridge=vmbr0`,
        /// `nic=eno1` (repeat: all must match).
        #[arg(long = "capability", value_name = "WORD")]
        capabilities: Vec<String>,
    },
    /// One host in detail, with its labels and what it says it is and has.
    Show {
        #[command(flatten)]
        host: resolve::HostArg,
        /// Also its five-minute history (CPU, memory, root disk, pool fill, poll time,
        /// backups) as sparklines with mean, high and newest values.
        #[arg(long)]
        history: bool,
        /// How far back the history goes, hours (1 to 336).
        #[arg(long, value_name = "HOURS", default_value_t = bosun_proto::history::DEFAULT_HOURS,
              requires = "history",
              value_parser = clap::value_parser!(u32).range(1..=i64::from(bosun_proto::history::MAX_HOURS)))]
        hours: u32,
    },
    /// Set labels on a host (`key=value`; a key: 1 to 63 of a-z 0-9 . _ / -, a value: 1 to 63
    /// of A-Z a-z 0-9 . _ -; at most 32 per host) and remove them (`--remove KEY`), in one
    /// audited change.
    Label {
        #[command(flatten)]
        host: resolve::HostArg,
        /// Labels to set.
        #[arg(value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Keys to remove.
        #[arg(long = "remove", value_name = "KEY")]
        remove: Vec<String>,
    },
    /// Approve a host enrolled with an approval-required token, and pin its sealing recipient.
    Approve {
        #[command(flatten)]
        host: resolve::HostArg,
        /// The host's sealing recipient (`age1…`) as `bosun-agentctl status` prints it on the
        /// node's console: pinned, so `secret seal` seals to it and never to the hub's word.
        #[arg(long, value_name = "AGE_RECIPIENT")]
        recipient: Option<String>,
    },
    /// Pin (or confirm a changed) sealing recipient of a host, as `bosun-agentctl status`
    /// prints it on the node's console; `secret seal` seals to the pinned one only.
    PinRecipient {
        #[command(flatten)]
        host: resolve::HostArg,
        /// The recipient (`age1…`).
        #[arg(long, value_name = "AGE_RECIPIENT")]
        recipient: String,
    },
    /// Revoke a host's key; it is locked out.
    Revoke {
        #[command(flatten)]
        host: resolve::HostArg,
    },
    /// Have the host's agent replace its key at its next poll (e.g. after a suspected leak).
    /// The old key works until the agent first presents the new one; the `host.key_rotated`
    /// event (`bosunctl events`) says when that happened.
    RotateKey {
        #[command(flatten)]
        host: resolve::HostArg,
    },
    /// Remove a revoked host and everything the hub keeps about it (desired state, jobs,
    /// escrow, audit trail, alerts); the event log keeps a `host_removed` event.
    Remove {
        #[command(flatten)]
        host: resolve::HostArg,
        /// Also when the hub holds the host's escrow blob, the customer's wrapped key: without
        /// it their backups cannot be read after a host loss. Without this flag such a host is
        /// refused (exit 6).
        #[arg(long)]
        forget_escrow: bool,
    },
}

/// `POST /v1/admin/hosts/{host}/{action}`, which answers with no body: says `said` of the
/// host, or `{"host_id", "result"}` with `--json`.
async fn host_action(
    client: &HubClient,
    json: bool,
    host: &resolve::HostArg,
    action: &str,
    result: &str,
    said: &str,
) -> Result<(), CtlError> {
    let host_id = resolve::host_id(client, host.name()).await?;
    client
        .call(
            Method::POST,
            &format!("/v1/admin/hosts/{host_id}/{action}"),
            None,
            &[],
        )
        .await?;
    if json {
        return table::print_json(&serde_json::json!({"host_id": host_id, "result": result}));
    }
    crate::outln!("host {host_id} {said}")
}

/// Runs a `hosts` command.
pub async fn run(
    client: &HubClient,
    global: &GlobalArgs,
    command: &HostsCommand,
) -> Result<(), CtlError> {
    let json = global.json();
    match command {
        HostsCommand::List {
            labels,
            capabilities,
        } => {
            let query = crate::host_labels::list_query(labels, capabilities)?;
            let value = client.get(&format!("/v1/admin/hosts{query}")).await?;
            if json {
                return table::print_json(&value);
            }
            let hosts: Vec<HostSummary> = decode("host list", value)?;
            let len = bosun_proto::ids::unique_len(hosts.iter().map(|h| &h.host_id));
            let rows: Vec<Vec<String>> = hosts.iter().map(|h| summary_row(h, len)).collect();
            table::print(
                &[
                    "HOST ID",
                    "HOSTNAME",
                    "STATUS",
                    "LIVENESS",
                    "HEALTH",
                    "LAST SEEN",
                    "AGENT",
                    "GEN D/K/A",
                    "SYNC",
                    "JOBS",
                    "ESCROW",
                    "GOLDEN; LABELS",
                ],
                &rows,
            )
        }
        HostsCommand::Label {
            host,
            labels,
            remove,
        } => crate::host_labels::label(client, json, host, labels, remove).await,
        HostsCommand::Show {
            host,
            history,
            hours,
        } => show(client, global, host, history.then_some(*hours)).await,
        HostsCommand::Approve { host, recipient } => {
            approve(client, global, host, recipient.as_deref()).await
        }
        HostsCommand::PinRecipient { host, recipient } => {
            pin_recipient(client, global, host, recipient).await
        }
        HostsCommand::Revoke { host } => {
            host_action(client, json, host, "revoke", "revoked", "revoked").await
        }
        HostsCommand::RotateKey { host } => {
            let said = "asked to replace its key at its next poll";
            host_action(
                client,
                json,
                host,
                "rotate-key",
                "key_rotation_requested",
                said,
            )
            .await
        }
        HostsCommand::Remove {
            host,
            forget_escrow,
        } => {
            let host_id = resolve::host_id(client, host.name()).await?;
            let query = if *forget_escrow {
                "?forget_escrow=true"
            } else {
                ""
            };
            client
                .call(
                    Method::DELETE,
                    &format!("/v1/admin/hosts/{host_id}{query}"),
                    None,
                    &[],
                )
                .await?;
            if json {
                // The hub answers 204 with no body: the JSON says what was done to which host.
                return table::print_json(
                    &serde_json::json!({"host_id": host_id, "result": "removed"}),
                );
            }
            crate::outln!("host {host_id} removed")
        }
    }
}

/// `hosts show`: the host's detail, and with `history_hours` its history over that window
/// (`--json`: `{"host": …, "history": …}`).
async fn show(
    client: &HubClient,
    global: &GlobalArgs,
    host: &resolve::HostArg,
    history_hours: Option<u32>,
) -> Result<(), CtlError> {
    let host_id = resolve::host_id(client, host.name()).await?;
    let mut value = client.get(&format!("/v1/admin/hosts/{host_id}")).await?;
    let host: HostDetail = decode("host detail", value.clone())?;
    // The JSON carries what the text says of the host, as every view says it.
    crate::status::with_view(&mut value, &host)?;
    let history = match history_hours {
        Some(hours) => Some(
            client
                .get(&format!("/v1/admin/hosts/{host_id}/history?hours={hours}"))
                .await?,
        ),
        None => None,
    };
    if global.json() {
        return match history {
            Some(history) => {
                table::print_json(&serde_json::json!({"host": value, "history": history}))
            }
            None => table::print_json(&value),
        };
    }
    // No place for pins (no HOME, no --config) shows the host as not pinned.
    let known = recipients::path(global)
        .ok()
        .map(|path| KnownRecipients::load(&path))
        .transpose()?;
    let pinned = known.as_ref().and_then(|k| k.get(host.summary.host_id));
    print_detail(&host, pinned)?;
    match history {
        Some(history) => crate::history::print(&decode("host history", history)?),
        None => Ok(()),
    }
}

/// The host's detail, and the recipient its reports name.
async fn detail(
    client: &HubClient,
    host_id: Uuid,
) -> Result<(HostDetail, Option<String>), CtlError> {
    let value = client.get(&format!("/v1/admin/hosts/{host_id}")).await?;
    let detail: HostDetail = decode("host detail", value)?;
    let reported = detail
        .last_report
        .as_ref()
        .and_then(|r| r.storage_recipient.clone());
    Ok((detail, reported))
}

/// `hosts approve`: approves the host, then pins the recipient the operator read on the node's
/// console. One the hub reports otherwise refuses the approval: someone else's box, or a hub
/// that lies.
async fn approve(
    client: &HubClient,
    global: &GlobalArgs,
    host: &resolve::HostArg,
    recipient: Option<&str>,
) -> Result<(), CtlError> {
    let recipient = recipient
        .map(|r| recipients::parse_recipient("--recipient", r))
        .transpose()?;
    let host_id = resolve::host_id(client, host.name()).await?;
    let (detail, reported) = detail(client, host_id).await?;
    if let (Some(given), Some(reported)) = (&recipient, &reported)
        && given != reported
    {
        return Err(CtlError::BadArgument {
            what: "--recipient",
            reason: format!(
                "the hub reports {reported} for host {host_id}, not {given} as the node's console \
                 shows: the host was not approved"
            ),
        });
    }
    let mut known = KnownRecipients::load(&recipients::path(global)?)?;
    host_action(
        client,
        global.json(),
        host,
        "approve",
        "approved",
        "approved",
    )
    .await?;
    let Some(recipient) = recipient else {
        if !global.json() {
            crate::outln!(
                "sealing recipient: {}",
                recipients::describe(known.get(host_id), reported.as_deref())
            )?;
        }
        return Ok(());
    };
    known.pin(host_id, &recipient, Some(&detail.summary.hostname))?;
    if !global.json() {
        crate::outln!("sealing recipient {recipient} pinned for host {host_id}")?;
    }
    Ok(())
}

/// `hosts pin-recipient`: the operator's word on the host's recipient, replacing any pin.
async fn pin_recipient(
    client: &HubClient,
    global: &GlobalArgs,
    host: &resolve::HostArg,
    recipient: &str,
) -> Result<(), CtlError> {
    let recipient = recipients::parse_recipient("--recipient", recipient)?;
    let host_id = resolve::host_id(client, host.name()).await?;
    let (detail, reported) = detail(client, host_id).await?;
    let mut known = KnownRecipients::load(&recipients::path(global)?)?;
    let replaced = known.pin(host_id, &recipient, Some(&detail.summary.hostname))?;
    if global.json() {
        return table::print_json(&serde_json::json!({
            "host_id": host_id,
            "recipient": recipient,
            "replaced": replaced.as_ref().map(|p| &p.recipient),
            "reported": reported,
        }));
    }
    match &replaced {
        Some(old) => crate::outln!(
            "host {host_id}: sealing recipient {recipient} pinned (replaces {})",
            old.recipient
        )?,
        None => crate::outln!("host {host_id}: sealing recipient {recipient} pinned")?,
    }
    if let Some(reported) = reported.filter(|r| *r != recipient) {
        crate::outln!(
            "note: the hub reports {reported}; secret seal refuses while the two differ"
        )?;
    }
    Ok(())
}

/// One row of `hosts list`: its id cut to `id_len` characters, unique among the hosts listed;
/// its HEALTH cell is the hub's roll-up level (`-` from a hub that serves none); when it was
/// last seen, as an age; the desired, known and applied generations as `D/K/A`; its golden
/// base and labels last (under the row when the table is too wide for one line).
pub fn summary_row(host: &HostSummary, id_len: usize) -> Vec<String> {
    let now = jiff::Timestamp::now();
    vec![
        bosun_proto::ids::shown(&host.host_id, id_len),
        host.hostname.clone(),
        host.status.as_str().to_owned(),
        host.liveness.as_str().to_owned(),
        host.health
            .as_ref()
            .map_or("-", |h| h.level.as_str())
            .to_owned(),
        host.last_seen
            .map_or_else(|| "never".to_owned(), |t| table::ago(t, now)),
        table::or_dash(host.agent_version.as_deref()),
        format!(
            "{}/{}/{}",
            host.desired_generation, host.known_generation, host.applied_generation
        ),
        crate::status::sync::word(host).to_owned(),
        host.pending_jobs.to_string(),
        host.escrow.as_str().to_owned(),
        format!(
            "{}; {}",
            crate::status::golden::column(host),
            crate::host_labels::text(&host.labels)
        ),
    ]
}

/// The escrow line of the host detail (and of `bosunctl status`).
pub(crate) fn escrow_text(escrow: &EscrowState) -> String {
    match escrow {
        EscrowState::None => "none: the hub holds no escrow of the host's PBS key".to_owned(),
        EscrowState::Stored {
            key_fingerprint,
            updated_at,
        } => format!(
            "stored {}, NOT verified: wraps key {}, which is not the key the host reports",
            table::when(Some(*updated_at)),
            table::or_dash((!key_fingerprint.is_empty()).then_some(key_fingerprint.as_str()))
        ),
        EscrowState::Verified {
            key_fingerprint,
            updated_at,
        } => format!(
            "verified: wraps the host's key {key_fingerprint} (stored {})",
            table::when(Some(*updated_at))
        ),
    }
}

fn print_detail(host: &HostDetail, pinned: Option<&Pinned>) -> Result<(), CtlError> {
    let s = &host.summary;
    let mut fields = vec![
        ("host id", s.host_id.to_string()),
        ("hostname", s.hostname.clone()),
        ("status", s.status.as_str().to_owned()),
        ("liveness", s.liveness.as_str().to_owned()),
        // The host's state in the word `status` and the dashboard give it.
        ("state", bosun_proto::host_view::state_word(s).0.to_owned()),
        ("last seen", table::when(s.last_seen)),
        ("enrolled", table::when(Some(host.enrolled_at))),
        ("poll interval", format!("{}s", host.poll_interval_seconds)),
        ("agent", table::or_dash(s.agent_version.as_deref())),
        (
            "controller",
            table::or_dash(s.controller_version.as_deref()),
        ),
        (
            "generation",
            format!(
                "desired {} / known {} / applied {}",
                s.desired_generation, s.known_generation, s.applied_generation
            ),
        ),
        ("sync", crate::status::sync::head(host)),
        ("pending jobs", s.pending_jobs.to_string()),
        ("escrow", escrow_text(&s.escrow)),
        (
            "recipient",
            recipients::describe(
                pinned,
                host.last_report
                    .as_ref()
                    .and_then(|r| r.storage_recipient.as_deref()),
            ),
        ),
    ];
    fields.extend(crate::host_labels::fields(host));
    for refused in crate::status::sync::refused(host) {
        fields.push(("refused", refused.line()));
    }
    if let Some(at) = host.replaced_at {
        fields.push((
            "replaced",
            format!(
                "{}: a new box took over this host (see `bosunctl events --host {}`)",
                table::when(Some(at)),
                s.host_id
            ),
        ));
    }
    if let Some(since) = host.reseal_required_since {
        fields.push((
            "reseal",
            format!(
                "REQUIRED since {}: its storage credentials were sealed to the replaced box; pin \
                 the new box's recipient from its console (`bosunctl hosts pin-recipient`), seal \
                 them again to it for each target (`bosunctl secret seal --target-file`) and the \
                 tunnel (`--tunnel-id`), and put the desired state",
                table::when(Some(since))
            ),
        ));
    }
    if let Some(desired) = &host.desired {
        fields.push((
            "desired",
            format!(
                "{} guests, {} storage targets",
                desired.guests.len(),
                desired.storage.len()
            ),
        ));
    }
    fields.extend(crate::status::guest_fields(host));
    if let Some(report) = &host.last_report {
        let running = report
            .guests
            .iter()
            .filter(|g| g.status == bosun_proto::report::GuestStatus::Running)
            .count();
        fields.push(("current", current_line(report, running)));
        if let Some(tunnel) = &report.tunnel {
            fields.push(("tunnel", crate::status::tunnel_text(tunnel)));
        }
        // The newest restore test, judged as `status` and the dashboard judge it.
        if let Some(test) = bosun_proto::host_view::newest_restore_test(report) {
            fields.push((
                "restore test",
                format!(
                    "{} at {} ({}), {} on {}",
                    crate::status::restore_results::outcome(test),
                    table::when(Some(test.finished_at)),
                    crate::status::restore_results::took(test.duration_seconds),
                    bosun_proto::host_view::guest_name(host, test.guest_id),
                    test.tier.as_deref().unwrap_or("-")
                ),
            ));
        }
        fields.extend(verify_fields(host, report));
        fields.extend(crate::status::bulk::fields(host, jiff::Timestamp::now()));
        fields.extend(crate::status::golden::fields(host, jiff::Timestamp::now()));
    }
    table::print_fields(&fields)
}

/// The report's guests and host figures in one line.
fn current_line(report: &bosun_proto::report::StateReport, running: usize) -> String {
    match &report.host {
        Some(metrics) => format!(
            "{} guests ({running} running), cpu {:.0}%, memory {}/{} MiB, disk {}/{} GiB",
            report.guests.len(),
            metrics.cpu_usage * 100.0,
            metrics.memory_used_mib,
            metrics.memory_total_mib,
            metrics.disk_used_gib,
            metrics.disk_total_gib
        ),
        None => format!(
            "{} guests ({running} running), host metrics not read",
            report.guests.len()
        ),
    }
}

/// The PBS verification summary and one `verify` line per guest and tier.
fn verify_fields(
    host: &HostDetail,
    report: &bosun_proto::report::StateReport,
) -> Vec<(&'static str, String)> {
    if report.verifications.is_empty() {
        return Vec::new();
    }
    let mut fields = vec![("verification", crate::status::verify::host_summary(host))];
    let now = jiff::Timestamp::now();
    let guests: std::collections::BTreeSet<uuid::Uuid> =
        report.verifications.iter().map(|v| v.guest_id).collect();
    for guest_id in guests {
        for line in crate::status::verify::guest_lines(host, guest_id, now) {
            let line = line.trim().trim_start_matches("verify ").to_owned();
            fields.push((
                "verify",
                format!(
                    "guest {} on {line}",
                    bosun_proto::host_view::guest_name(host, guest_id)
                ),
            ));
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::escrow_text;
    use bosun_proto::admin::EscrowState;

    #[test]
    fn escrow_lines_say_whether_the_key_is_escrowed() {
        let at = "2026-11-20T00:00:00Z".parse().unwrap();
        assert!(escrow_text(&EscrowState::None).starts_with("none"));
        let stored = escrow_text(&EscrowState::Stored {
            key_fingerprint: "aa:bb".into(),
            updated_at: at,
        });
        assert!(
            stored.contains("NOT verified") && stored.contains("aa:bb"),
            "{stored}"
        );
        let verified = escrow_text(&EscrowState::Verified {
            key_fingerprint: "aa:bb".into(),
            updated_at: at,
        });
        assert!(
            verified.starts_with("verified") && verified.contains("aa:bb"),
            "{verified}"
        );
    }
}
