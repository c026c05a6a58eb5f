//! What the operator sees from their desk. They log in to the hub's dashboard with the admin
//! token (a session cookie, as a browser would) and find the host and its guests; Prometheus'
//! view of the hub and of the agent (each `/metrics`, the agent's on its own loopback
//! listener, never on the guests' bridge); and `bosunctl` addressing the host by its name: `hosts show` and `desired diff`, which finds desired,
//! last-applied and current state in agreement, and `audit`, the hub's trail of what the agent
//! did (the signed jobs it claimed and finished among it). After the demo's last step the
//! dashboard's pages are saved, styled, for reading once the hub has stopped ([`save_pages`]).

use std::time::Duration;

use secrecy::ExposeSecret as _;
use uuid::Uuid;

use super::children::Children;
use super::scenario::check;
use super::{DemoError, Narrator, stack};
use bosunctl::client::HubClient;

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
    let mut desk = Dashboard::new(client)?;
    // A browser without a session is sent to the login page.
    let (status, _) = desk.get("/ui/").await?;
    check(status == reqwest::StatusCode::SEE_OTHER, || {
        format!("/ui/ without a session answered {status}, not a redirect to the login")
    })?;
    desk.login(client).await?;
    n.detail(format!(
        "dashboard: {}/ui/ (log in with the admin token; session cookie HttpOnly, Secure, SameSite=Strict)",
        desk.url
    ));
    let host = client.get(&format!("/v1/admin/hosts/{host_id}")).await?;
    let hostname = host["hostname"].as_str().unwrap_or_default().to_owned();
    let (_, fleet) = desk.get("/ui/").await?;
    check(fleet.contains(&hostname), || {
        format!("the fleet page does not show {hostname}")
    })?;
    let (_, page) = desk.get(&format!("/ui/hosts/{host_id}")).await?;
    check(page.contains("alpha"), || {
        "the host page does not show guest alpha".to_owned()
    })?;
    n.detail(format!(
        "the fleet page lists {hostname}; its host page shows guest alpha"
    ));

    // Prometheus' view: the hub's per-host series and the agent's own counters.
    let (_, hub_metrics) = desk.get("/metrics").await?;
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
    // The hostile NFS tier of generation 5 is still in desired state and still refused: the
    // diff says the host is not in sync, names it with why, and exits 11 (decision 0065).
    let diff = stack::ctl_refused(bins, out, &["desired", "diff", &hostname]).await?;
    // Each name once: a target the host refuses is refused as storage and as a tier.
    let mut refused: Vec<&str> = diff["refused"]
        .as_array()
        .map(|all| all.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    refused.sort_unstable();
    refused.dedup();
    check(
        diff["in_sync"].as_bool() == Some(false)
            && refused.contains(&super::backup_tiers::HOSTILE_NFS),
        || format!("the diff does not show the refused NFS tier: {diff}"),
    )?;
    // What the diff said, in its own words: the step's verdict.
    let sync = if diff["in_sync"].as_bool() == Some(true) {
        "in sync".to_owned()
    } else {
        format!("not in sync, the host refuses {}", refused.join(", "))
    };
    n.detail(format!(
        "bosunctl hosts show {hostname} / desired diff {hostname} (exit 11): {sync}"
    ));
    n.conclude(format!("desired diff {hostname}: {sync}"));

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

/// The operator triages what is open: acknowledges charlie's failed restore test (it stays
/// open and marked, and counts as a warning at most in the host's state) and silences the
/// host's CPU alerts for a planned load test (raised alerts are kept and listed, not sent to
/// the webhook); both are events in the hub's log. The state the dashboard then shows for the
/// host is read from its fleet page and said as it is, with the open alerts not acknowledged.
pub(super) async fn triage(
    n: &mut Narrator,
    client: &HubClient,
    (bins, out): (&std::path::Path, &std::path::Path),
    host_id: Uuid,
) -> Result<(), DemoError> {
    let host = host_id.to_string();
    let open = stack::ctl(bins, out, &["alerts", "--host", &host]).await?;
    let failed = open
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["kind"] == "restore_test_failed")
        .ok_or_else(|| {
            DemoError::Check(format!(
                "no open restore_test_failed alert to triage: {open}"
            ))
        })?;
    let subject = failed["subject"].as_str().unwrap_or_default().to_owned();
    let note = "charlie's orders come back from the day before; archive under review";
    let acked = stack::ctl(
        bins,
        out,
        &[
            "alerts",
            "ack",
            "--host",
            &host,
            "--kind",
            "restore_test_failed",
            "--subject",
            &subject,
            "--note",
            note,
        ],
    )
    .await?;
    check(acked["acknowledged"]["note"] == note, || {
        format!("the acknowledgement did not hold: {acked}")
    })?;
    n.detail(format!(
        "$ bosunctl alerts ack --kind restore_test_failed --note \"{note}\" → still open, acknowledged"
    ));
    let silence = stack::ctl(
        bins,
        out,
        &[
            "alerts",
            "silence",
            "--host",
            &host,
            "--kind",
            "host_cpu_high",
            "--for",
            "2h",
            "--reason",
            "load test tonight",
        ],
    )
    .await?;
    check(silence["id"].is_u64(), || {
        format!("the silence was not made: {silence}")
    })?;
    n.detail(format!(
        "$ bosunctl alerts silence --kind host_cpu_high --for 2h → silence {} until {} (raised alerts are kept, not sent to the webhook)",
        silence["id"],
        silence["until"].as_str().unwrap_or_default()
    ));
    let events = stack::ctl(bins, out, &["events", "--host", &host, "--limit", "20"]).await?;
    let logged = |kind: &str| {
        events
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["kind"] == kind)
    };
    check(
        logged("alert_acknowledged") && logged("alert_silenced"),
        || format!("the hub's event log does not hold the triage: {events}"),
    )?;
    n.detail("hub events: alert_acknowledged, alert_silenced");

    // What the dashboard shows now, and what still weighs on the host.
    let mut desk = Dashboard::new(client)?;
    desk.login(client).await?;
    let (_, fleet) = desk.get("/ui/").await?;
    let hostname = hostname(client, host_id).await?;
    let state = super::fleet_page::host_state(&fleet, host_id)
        .ok_or_else(|| DemoError::Check(format!("the fleet page shows no state for {hostname}")))?;
    let open = stack::ctl(bins, out, &["alerts", "--host", &host]).await?;
    let mut unacknowledged: Vec<&str> = open
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["acknowledged"].is_null())
        .filter_map(|a| a["kind"].as_str())
        .collect();
    unacknowledged.sort_unstable();
    unacknowledged.dedup();
    let still = if unacknowledged.is_empty() {
        "none".to_owned()
    } else {
        unacknowledged.join(", ")
    };
    n.detail(format!(
        "dashboard after the triage: host {hostname} {state} (open, not acknowledged: {still})"
    ));
    Ok(())
}

/// The host's name as the hub knows it.
pub(super) async fn hostname(client: &HubClient, host_id: Uuid) -> Result<String, DemoError> {
    let host = client.get(&format!("/v1/admin/hosts/{host_id}")).await?;
    host["hostname"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| DemoError::Check(format!("the hub names no host {host_id}: {host}")))
}

/// The dashboard as a browser holds it: the hub's pinned TLS, no redirects followed, and the
/// session cookie once logged in.
struct Dashboard {
    http: reqwest::Client,
    url: String,
    cookie: Option<String>,
}

impl Dashboard {
    fn new(client: &HubClient) -> Result<Self, DemoError> {
        let settings = client.settings();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(bosunctl::tls::pinned(&settings.fingerprint)?)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|err| DemoError::Check(format!("building an HTTP client: {err}")))?;
        Ok(Self {
            http,
            url: settings.url.clone(),
            cookie: None,
        })
    }

    /// `GET path`: its status and body.
    async fn get(&self, path: &str) -> Result<(reqwest::StatusCode, String), DemoError> {
        let mut request = self.http.get(format!("{}{path}", self.url));
        if let Some(cookie) = &self.cookie {
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
        Ok((status, text))
    }

    /// Logs in with the admin token, as the login form does, and keeps the session cookie.
    async fn login(&mut self, client: &HubClient) -> Result<(), DemoError> {
        let login = self
            .http
            .post(format!("{}/ui/login", self.url))
            .header("origin", &self.url)
            .form(&[("token", client.settings().token.expose_secret())])
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
        self.cookie = Some(cookie);
        Ok(())
    }
}

/// The pages saved at the end of the demo: the dashboard path, and the file it is saved as.
const SAVED_PAGES: [(&str, &str); 3] = [
    ("/ui/", "fleet.html"),
    ("/ui/alerts", "alerts.html"),
    ("/ui/events", "events.html"),
];

/// The stylesheet's file beside the saved pages.
const SAVED_STYLESHEET: &str = "dashboard.css";

/// After the last step: the dashboard's fleet, host, alerts and events pages as the day ends,
/// saved under `out/dashboard/` with the stylesheet beside them and their links between each
/// other made relative, so they open styled from the disk once the hub has stopped.
pub(super) async fn save_pages(
    n: &mut Narrator,
    client: &HubClient,
    out: &std::path::Path,
    host_id: Uuid,
) -> Result<(), DemoError> {
    let mut desk = Dashboard::new(client)?;
    desk.login(client).await?;
    let host_path = format!("/ui/hosts/{host_id}");
    let pages: Vec<(String, &str)> = SAVED_PAGES
        .iter()
        .map(|&(path, file)| (path.to_owned(), file))
        .chain([(host_path.clone(), "host.html")])
        .collect();
    let dir = out.join("dashboard");
    stack::create_dir(&dir)?;
    let (status, css) = desk.get(STYLESHEET).await?;
    check(status.is_success() && !css.is_empty(), || {
        format!("GET {STYLESHEET} answered {status}")
    })?;
    stack::write(&dir.join(SAVED_STYLESHEET), &css)?;
    for (path, file) in &pages {
        let (status, html) = desk.get(path).await?;
        check(status.is_success(), || {
            format!("GET {path} answered {status}")
        })?;
        check(html.contains(&format!("href=\"{STYLESHEET}\"")), || {
            format!("{path} links no stylesheet at {STYLESHEET}")
        })?;
        stack::write(&dir.join(file), &offline(&html, &pages))?;
    }
    n.detail(format!(
        "the dashboard as the day ends, saved with its stylesheet: {} (open fleet.html in a browser)",
        dir.display()
    ));
    let saved = dir.join("fleet.html");
    let fleet = std::fs::read_to_string(&saved).map_err(|source| DemoError::Artifact {
        path: saved.clone(),
        source,
    })?;
    let hostname = hostname(client, host_id).await?;
    let state = super::fleet_page::host_state(&fleet, host_id).ok_or_else(|| {
        DemoError::Check(format!(
            "the saved fleet page shows no state for {hostname}"
        ))
    })?;
    n.detail(format!("saved fleet.html: host {hostname} {state}"));
    Ok(())
}

/// Where the dashboard serves its stylesheet.
const STYLESHEET: &str = "/ui/static/dashboard.css";

/// `html` with its stylesheet and the links to the other saved pages pointing at the files
/// beside it. Longer paths go first, so `/ui/hosts/…` is not cut by `/ui/`.
fn offline(html: &str, pages: &[(String, &str)]) -> String {
    let mut html = html.replace(
        &format!("href=\"{STYLESHEET}\""),
        &format!("href=\"{SAVED_STYLESHEET}\""),
    );
    let mut by_length: Vec<&(String, &str)> = pages.iter().collect();
    by_length.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    for (path, file) in by_length {
        html = html.replace(&format!("href=\"{path}\""), &format!("href=\"{file}\""));
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_pages_link_each_other_and_the_stylesheet_beside_them() {
        let pages = vec![
            ("/ui/".to_owned(), "fleet.html"),
            ("/ui/alerts".to_owned(), "alerts.html"),
            ("/ui/hosts/42".to_owned(), "host.html"),
        ];
        let html = format!(
            r#"<link rel="stylesheet" href="{STYLESHEET}"><a href="/ui/">Fleet</a><a href="/ui/hosts/42">h</a><a href="/ui/alerts">a</a><a href="/ui/hosts/7">other</a>"#
        );
        assert_eq!(
            offline(&html, &pages),
            r#"<link rel="stylesheet" href="dashboard.css"><a href="fleet.html">Fleet</a><a href="host.html">h</a><a href="alerts.html">a</a><a href="/ui/hosts/7">other</a>"#
        );
    }
}
