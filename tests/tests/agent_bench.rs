//! Agent figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-tests --test agent_bench -- --ignored --nocapture`):
//!
//! - desired-state change → first Proxmox mutation, p50/p90 over 20 changes,
//!   with long-poll;
//! - 20 guests provisioned in parallel vs one, with task durations at a tenth
//!   of the simulator's realistic defaults (restore 3 s, start 0.3 s);
//! - idle RSS and CPU of the `bosun-agentd` binary at a 30 s poll, when
//!   `BOSUN_AGENTD_BIN` names it (build it first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;

use std::time::{Duration, Instant};

use agent_support::*;
use bosun_pvesim::SimConfig;
use uuid::Uuid;

/// The sample at `percent` (0..=100) of a sorted, non-empty list.
fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let idx = (sorted.len() - 1) * percent.min(100) / 100;
    sorted[idx]
}

async fn provision_time(count: usize) -> Duration {
    let config = SimConfig {
        time_scale: 0.1,
        ..SimConfig::fast()
    };
    let sim = start_sim(config).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let text = std::fs::read_to_string(&files.config_path)
        .unwrap()
        .replace("max_parallel = 8", "max_parallel = 20");
    std::fs::write(&files.config_path, text).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let guests: Vec<(Uuid, String)> = (0..count)
        .map(|i| (Uuid::new_v4(), format!("b{i}")))
        .collect();
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    let started = Instant::now();
    hub.put_desired(agent.handles.host_id, &desired(&sim, &list, "running"))
        .await;
    eventually(Duration::from_secs(300), "all provisioned", || {
        let sim = sim.clone();
        async move {
            let ids = sim.guest_ids();
            ids.len() == count && ids.iter().all(|v| sim.guest_running(*v) == Some(true))
        }
    })
    .await;
    let took = started.elapsed();
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn agent_figures() {
    // 1. desired change → first Proxmox mutation.
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "lat")], "running"))
        .await;
    eventually(Duration::from_secs(60), "guest up", || {
        let sim = sim.clone();
        async move { sim.guest_ids().len() == 1 && sim.guest_running(sim.guest_ids()[0]) == Some(true) }
    })
    .await;
    let mut samples = Vec::new();
    for i in 0..20u32 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = mutations(&sim).len();
        let mut doc = desired(&sim, &[(guest, "lat")], "running");
        doc["guests"][0]["resources"]["cores"] = serde_json::json!(1 + (i % 2) * 2);
        let t0 = Instant::now();
        hub.put_desired(host, &doc).await;
        loop {
            if mutations(&sim).len() > before {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no mutation after a change"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        samples.push(t0.elapsed());
    }
    samples.sort();
    println!(
        "desired change -> first proxmox call: p50 {:?} p90 {:?} max {:?} (n={})",
        percentile(&samples, 50),
        percentile(&samples, 90),
        samples.last().unwrap(),
        samples.len()
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;

    // 2. 20 in parallel vs 1.
    let one = provision_time(1).await;
    let twenty = provision_time(20).await;
    println!(
        "provision 1 guest: {one:?}; 20 guests in parallel: {twenty:?}; ratio {:.2}",
        twenty.as_secs_f64() / one.as_secs_f64()
    );

    // 3. idle RSS / CPU of the real binary.
    match std::env::var("BOSUN_AGENTD_BIN") {
        Ok(bin) => idle_figures(&bin).await,
        Err(_) => println!("idle figures skipped: set BOSUN_AGENTD_BIN"),
    }
}

/// Only the idle figures (needs `BOSUN_AGENTD_BIN`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn agent_idle_figures() {
    let bin = std::env::var("BOSUN_AGENTD_BIN").expect("set BOSUN_AGENTD_BIN to the agent binary");
    idle_figures(&bin).await;
}

/// Idle RSS and CPU of the agent binary at a 30 s poll (enrolled, no desired state yet).
async fn idle_figures(bin: &str) {
    let (sim, hub, files) = enrolled_stack().await;
    let text = std::fs::read_to_string(&files.config_path)
        .unwrap()
        .replace("long_poll_seconds = 5", "long_poll_seconds = 30")
        .replace("interval_seconds = 1", "interval_seconds = 30");
    std::fs::write(&files.config_path, text).unwrap();
    let mut child = std::process::Command::new(bin)
        .arg("--config")
        .arg(&files.config_path)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let ticks = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let t0 = ticks(pid);
    let w0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let used = (ticks(pid) - t0) as f64 / 100.0;
    let wall = w0.elapsed().as_secs_f64();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map_or("?".to_owned(), |l| {
                l[name.len() + 1..]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
    };
    println!(
        "idle at 30 s poll: VmRSS {} (anon {}, file {}), VmHWM {}, threads {}; cpu {:.3}% of a core over {wall:.0} s",
        field("VmRSS"),
        field("RssAnon"),
        field("RssFile"),
        field("VmHWM"),
        field("Threads"),
        used / wall * 100.0
    );
    // Where the resident pages are: per mapped file (anonymous memory under `[anon]`).
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut by_file = std::collections::BTreeMap::<String, u64>::new();
    let mut current = String::new();
    for line in smaps.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            current = parts.nth(4).unwrap_or("[anon]").to_owned();
        } else if first == "Rss:" {
            *by_file.entry(current.clone()).or_default() += parts
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    let mut top: Vec<(String, u64)> = by_file.into_iter().collect();
    top.sort_by_key(|(_, kb)| std::cmp::Reverse(*kb));
    for (file, kb) in top.iter().take(8) {
        println!("  resident {kb:>6} kB  {file}");
    }
    let _ = child.kill();
    let _ = child.wait();
    hub.stop().await;
    sim.shutdown().await;
}
