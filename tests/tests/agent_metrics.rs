//! The agent's `/metrics` after real work (a provisioned guest, reconcile passes, Proxmox
//! calls against the simulator, a backup asked for on the local API), scraped in both formats
//! and linted by `promtool check metrics`; and `docs/monitoring/`: the rules pass
//! `promtool check rules` and their unit tests, and every metric the rules and the Grafana
//! dashboard name is a family a live hub or agent exports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::promtool;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_support::*;
use serde_json::Value;
use uuid::Uuid;

const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/monitoring")
}

/// Scrapes `url` with `accept`; gives the content type and the body.
async fn scrape(client: &reqwest::Client, url: &str, accept: &str) -> (String, String) {
    let response = client
        .get(url)
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{url}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, response.text().await.unwrap())
}

/// The sum of every sample of `family` whose labels contain all of `labels`.
fn total(text: &str, family: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every sample name a 0.0.4 scrape can have: its families, and a histogram's series.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = promtool::family_names(text);
    for line in text.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" histogram"))
        {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// The metric names a PromQL expression uses: identifiers outside label matchers, ranges
/// and strings that are neither functions, keywords nor the label lists of `by (…)`,
/// `on (…)` and the like.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 5] = ["and", "or", "unless", "bool", "offset"];
    // Aggregations may put `by (…)` between their name and their argument.
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Drop `{…}`, `[…]` and quoted strings.
    let mut plain = String::new();
    let (mut depth, mut quote) = (0u32, None);
    for c in expr.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth = depth.saturating_sub(1),
            (None, c) if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let chars: Vec<char> = plain.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut next = i;
        while next < chars.len() && chars[next].is_whitespace() {
            next += 1;
        }
        let called = chars.get(next) == Some(&'(');
        if LABEL_LISTS.contains(&word.as_str()) {
            if called {
                i = next + chars[next..].iter().position(|&c| c == ')').unwrap_or(0);
            }
            continue;
        }
        if !called && !KEYWORDS.contains(&word.as_str()) && !AGGREGATIONS.contains(&word.as_str()) {
            names.insert(word);
        }
    }
    names
}

/// The `expr:` of every rule in a rules file (single-line or `|` blocks).
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut exprs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let item = line.trim_start();
        let Some(rest) = item
            .strip_prefix("- ")
            .unwrap_or(item)
            .trim_start()
            .strip_prefix("expr:")
        else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        if rest.trim() == "|" {
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect();
            exprs.push(block.join(" "));
        } else {
            exprs.push(rest.trim().to_owned());
        }
    }
    exprs
}

/// Every panel query of a Grafana dashboard.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    exprs
}

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(monitoring_dir())
        .output()
        .expect("promtool runs (Debian's `prometheus`; scripts/install-deps installs it)");
    let mut printed = String::from_utf8_lossy(&out.stdout).into_owned();
    printed.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), printed)
}

#[test]
fn the_tokenizer_finds_metric_names_and_nothing_else() {
    let names = metric_names(
        "sum by (instance, status) (rate(a_total{status!~\"2..\", x=\"b_c\"}[5m])) \
         / on(host) group_left(hostname) b_info > 1e-9 unless on() c and d offset 5m",
    );
    let want: BTreeSet<String> = ["a_total", "b_info", "c", "d"].map(str::to_owned).into();
    assert_eq!(names, want);
    let exprs = rule_exprs(
        "  - alert: A\n    expr: |\n      x\n        + y\n    for: 1m\n  - expr: z > 1\n",
    );
    assert_eq!(exprs, ["x + y", "z > 1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_metrics_count_real_work_lint_clean_and_back_the_shipped_rules_and_dashboard() {
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    files.use_local_api(
        0,
        // A tunnel nobody serves: the hub exports its readiness (down) for the rules to name.
        "[backup]\nstorage = \"local\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[tunnel]\nreadiness_url = \"http://127.0.0.1:9/ready\"\n",
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let metrics_url = format!(
        "http://{}/metrics",
        agent.handles.metrics.expect("[metrics] serves")
    );
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "alpha")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
        let path = helper.bootstrap_path(vmid);
        async move { path.exists() }
    })
    .await;
    let doc = helper.read_bootstrap(vmid);
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let run = local_backup(&client, &doc.local_api.url, doc.local_api.token.expose()).await;
    assert_eq!(run["phase"], "done", "{run}");

    // Both formats, each linted.
    let (content_type, om) = scrape(&client, &metrics_url, PROMETHEUS_ACCEPT).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"));
    promtool::assert_openmetrics_only_counter_naming(&om);
    let (content_type, text) = scrape(&client, &metrics_url, "*/*").await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    promtool::assert_clean_text(&text);

    // The work shows.
    let version = format!(
        "bosun_agent_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(promtool::sample(&text, &version), Some(1.0), "{text}");
    assert!(
        total(&text, "process_resident_memory_bytes", &[]) > 1e6,
        "{text}"
    );
    assert!(
        total(&text, "process_cpu_seconds_total", &[]) > 0.0,
        "{text}"
    );
    assert!(
        total(&text, "bosun_agent_reconcile_passes_total", &[]) >= 1.0,
        "{text}"
    );
    assert!(total(&text, "bosun_agent_reconcile_duration_seconds_count", &[]) >= 1.0);
    // Proxmox calls by endpoint template: the guest's config read names `{vmid}`, never the
    // vmid itself.
    assert!(
        total(
            &text,
            "bosun_agent_pve_requests_total",
            &[
                "endpoint=\"/nodes/{node}/lxc\"",
                "method=\"GET\"",
                "status=\"200\""
            ]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        total(
            &text,
            "bosun_agent_pve_requests_total",
            &["{vmid}", "status=\"200\""]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        !text.contains(&format!("/{vmid}")),
        "a vmid in a label:\n{text}"
    );
    assert!(total(&text, "bosun_agent_pve_request_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(
        total(
            &text,
            "bosun_agent_local_api_requests_total",
            &["route=\"/v1/backup\"", "status=\"202\""]
        ),
        1.0,
        "{text}"
    );
    assert!(
        total(
            &text,
            "bosun_agent_local_api_requests_total",
            &["route=\"/v1/backup/status\"", "status=\"200\""]
        ) >= 1.0
    );
    let guest_target = format!("{{guest=\"{guest}\",target=\"local\"}}");
    let finished = promtool::sample(
        &text,
        &format!("bosun_agent_backup_last_success_timestamp_seconds{guest_target}"),
    )
    .unwrap_or_else(|| panic!("no backup time in\n{text}"));
    let now = jiff::Timestamp::now().as_duration().as_secs_f64();
    assert!(
        now - finished < 300.0 && finished <= now + 1.0,
        "{finished} vs {now}"
    );
    assert_eq!(
        promtool::sample(
            &text,
            &format!("bosun_agent_backup_last_run_succeeded{guest_target}")
        ),
        Some(1.0)
    );
    assert!(
        total(
            &text,
            "bosun_agent_journal_size_bytes",
            &["file=\"database\""]
        ) > 0.0
    );
    assert_eq!(
        promtool::sample(&text, "bosun_agent_hub_connected"),
        Some(1.0),
        "{text}"
    );
    assert!(promtool::sample(&text, "bosun_agent_queue_operations").is_some());
    assert_eq!(
        promtool::sample(&text, "bosun_agent_guests{status=\"running\",kind=\"lxc\"}"),
        Some(1.0),
        "{text}"
    );
    assert!(promtool::sample(&text, "bosun_agent_applied_generation").unwrap() >= 1.0);
    // Only /metrics is served.
    let other = client
        .get(metrics_url.replace("/metrics", "/v1/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);

    // The shipped rules and dashboard name only families a live hub or agent exports.
    eventually(
        Duration::from_secs(30),
        "the hub has the tunnel's health",
        || async { hub.host(host).await["last_report"]["tunnel"]["healthy"] == false },
    )
    .await;
    let hub_scrape = hub
        .client
        .get(format!("{}/metrics", hub.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    promtool::assert_clean_text(&hub_scrape);
    let mut exported = exported_names(&text);
    exported.extend(exported_names(&hub_scrape));
    // Prometheus adds `up` to every scrape.
    exported.insert("up".to_owned());
    let rules = std::fs::read_to_string(monitoring_dir().join("bosun.rules.yml")).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring_dir().join("grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let rule_exprs = rule_exprs(&rules);
    assert!(rule_exprs.len() >= 10, "{rule_exprs:?}");
    let panel_exprs = dashboard_exprs(&dashboard);
    assert!(panel_exprs.len() >= 15, "{panel_exprs:?}");
    for expr in rule_exprs.iter().chain(&panel_exprs) {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for name in names {
            assert!(
                exported.contains(&name),
                "`{name}` in `{expr}` is not exported; exported: {exported:?}"
            );
        }
    }
    let (ok, printed) = promtool(&["check", "rules", "bosun.rules.yml"]);
    assert!(ok, "{printed}");
    let (ok, printed) = promtool(&["test", "rules", "bosun.rules.test.yml"]);
    assert!(ok && printed.contains("SUCCESS"), "{printed}");

    agent.stop().await;
    hub.stop().await;
}
