//! The simulated hosts: what each poll carries and how a host follows the hub's answers.
//!
//! With [`Reports::Full`] every poll carries the whole `docs/proto/report.json` (the same
//! bytes every time, as the bench always sent). With [`Reports::Delta`] each host numbers its
//! reports and follows the hub's answers the way `agentd/src/hub/report.rs` does: a full report
//! first (and again after a failed poll or when the hub asks for one), then change-only deltas
//! on top of the report the hub acknowledged. A real host's CPU and memory figures move between
//! polls, so each delta carries the host metrics and the host health (sampled gauges, none
//! raised) with a new CPU figure; nothing else changes (the steady state).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::Deserialize;
use uuid::Uuid;

/// What each simulated poll carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Reports {
    /// The whole report on every poll.
    Full,
    /// One full report per host, then change-only deltas (as real agents).
    Delta,
}

/// One enrolled host.
#[derive(Debug)]
pub struct Host {
    /// Its id.
    pub id: Uuid,
    /// Its key.
    pub key: String,
    sequence: Mutex<Sequence>,
    /// A poll of it was answered.
    polled: AtomicBool,
}

impl Host {
    /// A host that has sent nothing yet.
    pub fn new(id: Uuid, key: String) -> Self {
        Self {
            id,
            key,
            sequence: Mutex::new(Sequence {
                next: 1,
                acked: None,
            }),
            polled: AtomicBool::new(false),
        }
    }

    /// The sequence number the hub acknowledged last, if any.
    pub fn acked(&self) -> Option<u64> {
        self.sequence.lock().acked
    }
}

/// A host's report numbering, as the agent's `Reporter` keeps it.
#[derive(Debug)]
struct Sequence {
    next: u64,
    acked: Option<u64>,
}

/// The part of a poll answer the reporter follows.
#[derive(Debug, Deserialize)]
struct Answer {
    report_seq: Option<u64>,
    #[serde(default)]
    full_report: bool,
}

/// The simulated fleet. Host *n* polls hub *n* mod the number of hubs (what a TCP load
/// balancer spreading connections over replicas does); once the first hub is taken down its
/// hosts poll the next one, and a poll that failed is sent once more to the next hub (the
/// balancer's redispatch).
#[derive(Debug)]
pub struct Fleet {
    /// Its hosts.
    pub hosts: Vec<Host>,
    reports: Reports,
    /// `report.json` as parsed (full reports of the delta mode are numbered per host).
    report: serde_json::Value,
    /// The poll body of the full mode.
    full_body: Bytes,
    client: reqwest::Client,
    urls: Vec<String>,
    first_down: AtomicBool,
    retried: AtomicU64,
}

impl Fleet {
    /// A fleet polling the hubs at `urls` with `client`.
    pub fn new(
        hosts: Vec<Host>,
        reports: Reports,
        client: reqwest::Client,
        urls: Vec<String>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(!hosts.is_empty(), "a fleet needs at least one host");
        anyhow::ensure!(!urls.is_empty(), "a fleet needs at least one hub");
        let mut report: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/proto/report.json"))
                .context("parsing docs/proto/report.json")?;
        let full_body = Bytes::from(poll_body("report", &report).into_bytes());
        if reports == Reports::Delta {
            report["host_health"] = host_health(0.12);
        }
        Ok(Self {
            hosts,
            reports,
            report,
            full_body,
            client,
            urls,
            first_down: AtomicBool::new(false),
            retried: AtomicU64::new(0),
        })
    }

    /// Whether host `n` has a report at the hub: in delta mode one the hub acknowledged, in
    /// full mode any answered poll (each carries the whole report).
    pub fn reported(&self, n: usize) -> bool {
        match self.reports {
            Reports::Full => self.hosts[n].polled.load(Ordering::Relaxed),
            Reports::Delta => self.hosts[n].acked().is_some(),
        }
    }

    /// From now on the first hub's hosts poll the next one.
    pub fn take_down_first(&self) {
        self.first_down.store(true, Ordering::SeqCst);
    }

    /// Polls sent a second time, to the next hub, after the first attempt failed.
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }

    /// The body of host `n`'s next poll, and the sequence number it carries (delta mode).
    fn next_body(&self, n: usize) -> (Bytes, Option<u64>) {
        if self.reports == Reports::Full {
            return (self.full_body.clone(), None);
        }
        let host = &self.hosts[n];
        let mut sequence = host.sequence.lock();
        let seq = sequence.next;
        sequence.next += 1;
        let body = match sequence.acked {
            None => {
                let mut report = self.report.clone();
                report["seq"] = seq.into();
                poll_body("report", &report)
            }
            Some(base_seq) => {
                let mut metrics = self.report["host"].clone();
                // A new CPU figure every poll, as a live host's (below the gauge's high mark).
                let cpu = f64::from(u32::try_from((seq * 37 + n as u64) % 80).unwrap_or(0)) / 100.0;
                metrics["cpu_usage"] = serde_json::json!(cpu);
                let delta = serde_json::json!({
                    "schema": bosun_proto::delta::SCHEMA,
                    "seq": seq,
                    "base_seq": base_seq,
                    "host": metrics,
                    "host_health": host_health(cpu),
                });
                poll_body("delta", &delta)
            }
        };
        (Bytes::from(body.into_bytes()), Some(seq))
    }

    /// Sends host `n`'s next poll; its latency when it succeeded.
    pub async fn poll(self: Arc<Self>, n: usize) -> Option<Duration> {
        let n = n % self.hosts.len();
        let (body, sent) = self.next_body(n);
        let host = &self.hosts[n];
        let hubs = self.urls.len();
        let mut hub = n % hubs;
        if hub == 0 && self.first_down.load(Ordering::SeqCst) {
            hub = 1 % hubs;
        }
        let started = Instant::now();
        let mut answer = self.send(host, hub, body.clone()).await;
        if answer.is_none() && hubs > 1 {
            self.retried.fetch_add(1, Ordering::Relaxed);
            answer = self.send(host, (hub + 1) % hubs, body).await;
        }
        let elapsed = started.elapsed();
        if answer.is_some() {
            host.polled.store(true, Ordering::Relaxed);
        }
        if let Some(sent) = sent {
            let answer = answer
                .as_deref()
                .and_then(|bytes| serde_json::from_slice::<Answer>(bytes).ok());
            let mut sequence = host.sequence.lock();
            // As `Reporter::answered`/`failed`: the hub holds what it acknowledged, nothing
            // else is a base.
            sequence.acked = answer
                .filter(|a| !a.full_report && a.report_seq == Some(sent))
                .map(|_| sent);
        }
        answer.map(|_| elapsed)
    }

    /// One poll request to hub `hub`; the answer's body when it was a success.
    async fn send(&self, host: &Host, hub: usize, body: Bytes) -> Option<Bytes> {
        let resp = self
            .client
            .post(format!("{}/v1/hosts/{}/poll", self.urls[hub], host.id))
            .bearer_auth(&host.key)
            .body(body)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.bytes().await.ok()
    }
}

/// Host health as a live host's agent samples it: CPU at `cpu`, memory and disk steady, one
/// disk passing SMART, nothing raised.
fn host_health(cpu: f64) -> serde_json::Value {
    let gauge = |usage: f64| serde_json::json!({ "usage": usage, "high": 0.9, "low": 0.8, "raised": false });
    serde_json::json!({
        "cpu": gauge(cpu),
        "memory": gauge(0.41),
        "disk": gauge(0.37),
        "load_avg": [cpu * 4.0, 0.8, 0.7],
        "smart": [{ "device": "/dev/sda", "state": "passed", "checked_at": "2026-11-23T06:00:00Z" }],
    })
}

/// The full-report poll body every host of a `--store` run sends (`docs/proto/report.json`).
pub fn full_poll_body() -> anyhow::Result<String> {
    let report: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/proto/report.json"))
            .context("parsing docs/proto/report.json")?;
    Ok(poll_body("report", &report))
}

fn poll_body(field: &str, report: &serde_json::Value) -> String {
    let mut body = serde_json::json!({
        "schema": bosun_proto::poll::REQUEST_SCHEMA,
        "known_generation": 0,
        "applied_generation": 0,
        "acked_jobs": [],
    });
    body[field] = report.clone();
    body.to_string()
}
