//! `bosunctl hosts show HOST --history` against a real hub on loopback: after a few polls the
//! host's history prints as sparklines with mean, high and newest values of each series, the
//! poll count and the backups; `--json` carries the host and its history; the window is
//! bounded on the command line.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use serde_json::Value;

use crate::common;

use common::hub::start_hub;
use common::text;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_show_history_prints_each_series_as_text() {
    let hub = start_hub().await;
    let (host, key) = hub.enroll("pve-charted").await;
    let client = hub.pinned_client();
    for _ in 0..3 {
        let resp = client
            .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
            .bearer_auth(&key)
            .body(include_str!("../../docs/proto/poll-request.json"))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
    }

    // Without --history, nothing of it.
    let out = hub.run(&["hosts", "show", "pve-charted"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("poll time"));

    let out = hub
        .run(&["hosts", "show", "pve-charted", "--history", "--hours", "2"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The report says cpu 12%, memory 12288 of 65536 MiB, disk 211 of 930 GiB, no pools.
    for wanted in [
        "hostname:",
        "history:",
        "last 2h in 5-minute points, oldest left: ",
        "cpu:",
        "mean 12%, high 12%, now 12%",
        "memory:",
        "mean 19%, high 19%, now 19%",
        "root disk:",
        "mean 23%, high 23%, now 23%",
        "pool fill: no reading",
        "poll time:",
        "3 polls, mean ",
        "backups:",
        "0 done, 0 B in all, 0s in all",
    ] {
        assert!(stdout.contains(wanted), "lacks {wanted:?}:\n{stdout}");
    }
    let cpu_line = stdout.lines().find(|l| l.starts_with("cpu:")).unwrap();
    // A sparkline over the whole window: the polls are its newest slot, the rest a gap.
    assert!(cpu_line.contains("   ▂  mean"), "a sparkline: {cpu_line}");

    let out = hub
        .run(&["hosts", "show", "pve-charted", "--history", "--json"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let both: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(both["host"]["host_id"], host.to_string());
    let points = both["history"]["points"].as_array().unwrap();
    let polls: u64 = points.iter().map(|p| p["polls"].as_u64().unwrap()).sum();
    assert_eq!(polls, 3, "{both}");

    // The window is 1 to 336 hours, and only with --history.
    for bad in [
        &["hosts", "show", "pve-charted", "--history", "--hours", "0"][..],
        &[
            "hosts",
            "show",
            "pve-charted",
            "--history",
            "--hours",
            "337",
        ],
        &["hosts", "show", "pve-charted", "--hours", "5"],
    ] {
        let out = hub.run(bad).await;
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out));
    }
}
