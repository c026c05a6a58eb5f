//! The demo's last step: guest alpha's controller reads its own audit log through the local
//! API (`GET /v1/audit`), as a customer would: what was done to alpha during the demo
//! (its snapshot and quiesced backup, the restore test of its archive, the restore after its
//! loss) and the break-glass door opened on its host, with the operator's key left out; never
//! a row of guest bravo's. The operator, meanwhile, was notified of bravo's decommission
//! (`destructive_operation`). Alpha's controller also reads its own protection
//! (`GET /v1/protection`): its last backup per tier, verification and restore test from the
//! agent's journal, judged against the signed plan, whatever the hub says.

use serde_json::Value;
use uuid::Uuid;

use super::children::Children;
use super::guest_steps::{self, GuestBootstrap};
use super::scenario::{check, converge, vmid_of};
use super::sim::SimEndpoint;
use super::{DemoError, Narrator};
use bosun_proto::admin::AlertKind;
use bosun_proto::inert::escape;
use bosun_proto::protection::GuestProtection;
use bosunctl::client::HubClient;

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct AuditLogOutcome {
    /// `event` or `event kind status` of each entry alpha read, newest first.
    pub entries: Vec<String>,
    /// The `destructive_operation` alert the hub raised for bravo's decommission.
    pub notification: String,
    /// One line per item of alpha's protection (`GET /v1/protection`).
    pub protection: Vec<String>,
}

/// The step; see the module documentation.
pub(super) async fn audit_log(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (sim, out): (&SimEndpoint, &std::path::Path),
    alpha: Uuid,
    bravo_vmid: u32,
) -> Result<AuditLogOutcome, DemoError> {
    let fleet = converge(children, client, "the destructive_operation alert", |f| {
        f.alerts
            .iter()
            .any(|a| a.kind == AlertKind::DestructiveOperation)
    })
    .await?;
    let vmid = vmid_of(&fleet, alpha)?;
    let boot: GuestBootstrap = guest_steps::bootstrap(sim, out, vmid).await?;
    let page = guest_steps::get(&boot, "/v1/audit?limit=100").await?;
    let rows = page["entries"].as_array().cloned().unwrap_or_default();
    let entries: Vec<String> = rows.iter().map(describe).collect();
    n.detail(format!(
        "GET /v1/audit with alpha's token → {} entries, newest first:",
        entries.len()
    ));
    for entry in entries.iter().take(12) {
        n.detail(format!("  {entry}"));
    }
    let has = |want: &str| entries.iter().any(|e| e.contains(want));
    for want in [
        "localapi.snapshot done",
        "backup done",
        "restore_test done",
        "break_glass.opened",
        "break_glass.command",
    ] {
        check(has(want), || {
            format!("alpha's audit log has no `{want}` entry: {entries:?}")
        })?;
    }
    check(!has("decommission_job"), || {
        format!("alpha's audit log shows bravo's decommission: {entries:?}")
    })?;
    check(
        rows.iter().all(|r| {
            r["detail"].get("fingerprint").is_none()
                && r["detail"].get("signer").is_none()
                && r["detail"].get("command").is_none()
        }),
        || "alpha's audit log shows the operator's key or a break-glass command line".to_owned(),
    )?;
    let notification = fleet
        .alerts
        .iter()
        .find(|a| a.kind == AlertKind::DestructiveOperation)
        .map(|a| a.message.clone())
        .unwrap_or_default();
    check(notification.contains(&format!("vmid {bravo_vmid}")), || {
        format!("the destructive_operation alert is not bravo's: {notification}")
    })?;
    n.detail(format!("hub: destructive_operation: {notification}"));
    let protection = protection(n, &boot, alpha).await?;
    Ok(AuditLogOutcome {
        entries,
        notification,
        protection,
    })
}

/// Alpha reads its own protection: one line per item, each checked to be alpha's.
async fn protection(
    n: &mut Narrator,
    boot: &GuestBootstrap,
    alpha: Uuid,
) -> Result<Vec<String>, DemoError> {
    let body = guest_steps::get(boot, "/v1/protection").await?;
    let answer: GuestProtection = serde_json::from_value(body)
        .map_err(|e| DemoError::Check(format!("GET /v1/protection does not decode: {e}")))?;
    answer
        .validate()
        .map_err(|e| DemoError::Check(format!("GET /v1/protection is invalid: {e}")))?;
    check(answer.guest_id == alpha, || {
        format!(
            "GET /v1/protection with alpha's token answered for {}",
            answer.guest_id
        )
    })?;
    check(!answer.items.is_empty(), || {
        "alpha's protection lists no backup tier".to_owned()
    })?;
    let lines: Vec<String> = answer
        .items
        .iter()
        .map(|i| {
            format!(
                "{:?} tier {} on {}: every {} s, last {}, last ok {}{}",
                i.kind,
                i.tier.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                escape(&i.target),
                i.interval_s,
                i.last_result
                    .map_or_else(|| "never".to_owned(), |r| format!("{r:?}")),
                i.last_ok_at
                    .map_or_else(|| "never".to_owned(), |at| at.to_string()),
                if i.overdue { ", OVERDUE" } else { "" }
            )
        })
        .collect();
    n.detail(format!(
        "GET /v1/protection with alpha's token → {} items (plan serial {}), overdue: {}",
        lines.len(),
        answer
            .plan_serial
            .map_or_else(|| "none".to_owned(), |s| s.to_string()),
        answer.overdue
    ));
    for line in &lines {
        n.detail(format!("  {line}"));
    }
    Ok(lines)
}

/// One line for an entry: its event, and for an operation its kind and how it ended.
fn describe(row: &Value) -> String {
    let event = row["event"].as_str().unwrap_or("?");
    let detail = &row["detail"];
    match (detail["kind"].as_str(), detail["status"].as_str()) {
        (Some(kind), Some(status)) => format!("{event} {kind} {status}"),
        // A command run through the door: its kind and exit status, never its arguments; a
        // line the support shell refused never ran, so it has no status to show.
        (Some(kind), None) if row["host_wide"] == true => match detail["status"].as_u64() {
            Some(status) => format!("{event} (on the host) {kind}, exit {status}"),
            None if kind == "refused" => format!(
                "{event} (on the host) refused by the support shell: not a command it runs, so nothing ran"
            ),
            None => format!("{event} (on the host) {kind}, no exit status recorded"),
        },
        _ if row["host_wide"] == true => format!(
            "{event} (on the host) {}",
            detail["reason"].as_str().unwrap_or_default()
        ),
        _ => event.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::describe;
    use serde_json::json;

    /// A host-wide command shows the exit status its entry records; a line the support shell
    /// refused has none and says so, never `exit null`.
    #[test]
    fn a_door_command_is_described_by_what_its_entry_holds() {
        let ran = json!({ "event": "break_glass.command", "host_wide": true,
                          "detail": { "kind": "status", "status": 0 } });
        assert_eq!(
            describe(&ran),
            "break_glass.command (on the host) status, exit 0"
        );
        let refused = json!({ "event": "break_glass.command", "host_wide": true,
                              "detail": { "kind": "refused", "status": null } });
        let text = describe(&refused);
        assert!(!text.contains("null"), "{text}");
        assert!(text.contains("refused by the support shell"), "{text}");
        let finished = json!({ "event": "operation.finished",
                               "detail": { "kind": "backup", "status": "succeeded" } });
        assert_eq!(describe(&finished), "operation.finished backup succeeded");
    }
}
