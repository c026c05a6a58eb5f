//! The last step of `make demo`: what the operator sees from their desk. They log in to the
//! hub's dashboard with the admin token (a session cookie, as a browser would) and find the
//! host and its guests; Prometheus' view of the hub and of the agent (each `/metrics`, the
//! agent's on its own loopback listener, never on the guests' bridge); and `bosunctl`
//! addressing the host by its name: `hosts show` and `desired diff`, which finds desired,
//! last-applied and current state in agreement, and `audit`, the hub's trail of what the agent
//! did (the signed jobs it claimed and finished among it).

use std::time::Duration;

use secrecy::ExposeSecret as _;
use uuid::Uuid;

use super::children::Children;
use super::scenario::check;
use super::{DemoError, Narrator, stack};
use crate::client::HubClient;

/// The dashboard's session cookie.
const SESSION_COOKIE: &str = "__Host-bosun-session";

/// Runs the step; `agent_log` is the agent's log, where it names its metrics address.
pub(super) async fn operator_view(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&std::path::Path, &std::path::Path),
    host_id: Uuid,
    agent_log: &std::path::Path,
) -> Result<(), DemoError> {
    let settings = client.settings();
    let http = reqwest::Client::builder()
        .use_preconfigured_tls(crate::tls::pinned(&settings.fingerprint)?)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|err| DemoError::Check(format!("building an HTTP client: {err}")))?;
    let get = async |path: &str, cookie: Option<&str>| {
        let mut request = http.get(format!("{}{path}", settings.url));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request
            .send()
            .await
            .map_err(|err| DemoError::Check(format!("GET {path}: {err}")))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| DemoError::Check(format!("GET {path}: {err}")))?;
        Ok::<_, DemoError>((status, text))
    };

    // A browser without a session is sent to the login page.
    let (status, _) = get("/ui/", None).await?;
    check(status == reqwest::StatusCode::SEE_OTHER, || {
        format!("/ui/ without a session answered {status}, not a redirect to the login")
    })?;
    let login = http
        .post(format!("{}/ui/login", settings.url))
        .header("origin", &settings.url)
        .form(&[("token", settings.token.expose_secret())])
        .send()
        .await
        .map_err(|err| DemoError::Check(format!("POST /ui/login: {err}")))?;
    let cookie = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(SESSION_COOKIE))
        .map(|value| value.split(';').next().unwrap_or_default().to_owned())
        .ok_or_else(|| {
            DemoError::Check(format!("login answered {} with no session", login.status()))
        })?;
    n.detail(format!(
        "dashboard: {}/ui/ (log in with the admin token; session cookie HttpOnly, Secure, SameSite=Strict)",
        settings.url
    ));
    let host = client.get(&format!("/v1/admin/hosts/{host_id}")).await?;
    let hostname = host["hostname"].as_str().unwrap_or_default().to_owned();
    let (_, fleet) = get("/ui/", Some(&cookie)).await?;
    check(fleet.contains(&hostname), || {
        format!("the fleet page does not show {hostname}")
    })?;
    let (_, page) = get(&format!("/ui/hosts/{host_id}"), Some(&cookie)).await?;
    check(page.contains("alpha"), || {
        "the host page does not show guest alpha".to_owned()
    })?;
    let pages = out.join("dashboard");
    stack::create_dir(&pages)?;
    stack::write(&pages.join("fleet.html"), &fleet)?;
    stack::write(&pages.join("host.html"), &page)?;
    n.detail(format!(
        "the fleet page lists {hostname}; its host page shows guest alpha (saved in {})",
        pages.display()
    ));

    // Prometheus' view: the hub's per-host series and the agent's own counters.
    let (_, hub_metrics) = get("/metrics", None).await?;
    let last_seen = metric_line(
        &hub_metrics,
        "bosun_hub_host_last_seen_age_seconds",
        &host_id,
    )
    .ok_or_else(|| DemoError::Check("the hub exports no last-seen age for the host".into()))?;
    n.detail(format!("hub /metrics: {last_seen}"));
    let addr = stack::wait_for_log_field(agent_log, "metrics listening", "addr=", children).await?;
    let agent_metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .map_err(|err| DemoError::Check(format!("scraping the agent: {err}")))?
        .text()
        .await
        .map_err(|err| DemoError::Check(format!("scraping the agent: {err}")))?;
    let passes: Vec<String> = agent_metrics
        .lines()
        .filter_map(|line| line.strip_prefix("bosun_agent_reconcile_passes_total{"))
        .filter_map(|rest| rest.split_once("} "))
        .map(|(labels, value)| format!("{labels} {value}"))
        .collect();
    check(!passes.is_empty(), || {
        "the agent exports no reconcile passes".to_owned()
    })?;
    let passes = format!("reconcile passes {}", passes.join(", "));
    let pve_calls = agent_metrics
        .lines()
        .filter(|line| line.starts_with("bosun_agent_pve_requests_total"))
        .count();
    n.detail(format!(
        "agent /metrics on {addr} (loopback only): {passes}; {pve_calls} Proxmox endpoint/status series"
    ));

    // The CLI by name, not id.
    let shown = stack::ctl(bins, out, &["hosts", "show", &hostname]).await?;
    check(
        shown["host_id"].as_str() == Some(&host_id.to_string()),
        || format!("`hosts show {hostname}` found another host: {shown}"),
    )?;
    let diff = stack::ctl(bins, out, &["desired", "diff", &hostname]).await?;
    check(diff["in_sync"].as_bool() == Some(true), || {
        format!("desired, applied and current state differ: {diff}")
    })?;
    n.detail(format!(
        "bosunctl hosts show {hostname} / desired diff {hostname}: desired = last applied = current"
    ));

    // The audit trail the hub keeps of what the agent did: the signed jobs are in it.
    let trail = stack::ctl(bins, out, &["audit", "--host", &hostname, "--limit", "500"]).await?;
    let page: bosun_proto::admin::AuditPage = serde_json::from_value(trail.clone())
        .map_err(|err| DemoError::Check(format!("`bosunctl audit` printed no page: {err}")))?;
    check(page.entries.iter().all(|e| e.host_id == host_id), || {
        format!("`bosunctl audit --host {hostname}` shows another host's entries: {trail}")
    })?;
    let action = |name: &str| page.entries.iter().find(|e| e.action == name);
    let (Some(claimed), Some(finished)) = (action("job.claimed"), action("job.finished")) else {
        return Err(DemoError::Check(format!(
            "the hub's audit trail of {hostname} has no signed job claimed and finished: {trail}"
        )));
    };
    n.detail(format!(
        "$ bosunctl audit --host {hostname}   ({} entries, newest first; the hub keeps them for [retention] audit_days, 365 by default)",
        page.entries.len()
    ));
    for entry in [claimed, finished] {
        n.detail(format!(
            "  {}  {}  {}",
            entry.at.strftime("%H:%M:%S"),
            entry.action,
            bosun_proto::audit_text::one_line(&entry.detail)
        ));
    }
    Ok(())
}

/// The sample line of `family` for `host_id`.
fn metric_line<'a>(text: &'a str, family: &str, host_id: &Uuid) -> Option<&'a str> {
    let label = format!("host=\"{host_id}\"");
    text.lines()
        .find(|line| line.starts_with(family) && line.contains(&label))
}
