//! The update end-to-end stage shared by `agent_update` and `agent_update_bench`: one host
//! whose real agent runs from slot a under [`FakeSystemd`], a real hub and simulator, the
//! operator's key, and the calls an operator makes (upload, sign, submit) and the gate's run.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bosun_proto::update::UpdateRecord;
use bosun_pvesim::{SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::agent_support::signing::{OperatorKey, envelope};
use crate::agent_support::{self, AgentFiles, RealHub, agent_files, start_sim};
use crate::update_support::swap_proxy::SwapProxy;
use crate::update_support::{self, FakeSystemd, GateTimings, Prefix, UnitSpec, binary};

/// One host, its agent running from slot a under the stand-in systemd.
pub struct UpdateStack {
    pub sim: SimHandle,
    pub hub: RealHub,
    pub files: AgentFiles,
    pub prefix: Prefix,
    pub systemd: FakeSystemd,
    pub operator: OperatorKey,
    pub host_id: Uuid,
    /// The front the agent reaches the hub through, when started behind one
    /// ([`UpdateStack::start_behind_proxy`]).
    pub proxy: Option<SwapProxy>,
}

impl UpdateStack {
    pub async fn start(timings: GateTimings) -> Self {
        Self::start_with(timings, false).await
    }

    /// As [`UpdateStack::start`], the agent reaching the hub through a [`SwapProxy`], which
    /// can answer an artifact's download with other bytes as a compromised hub would.
    pub async fn start_behind_proxy(timings: GateTimings) -> Self {
        Self::start_with(timings, true).await
    }

    async fn start_with(timings: GateTimings, behind_proxy: bool) -> Self {
        let sim = start_sim(SimConfig::fast()).await;
        let hub = RealHub::start().await;
        let token = hub.enroll_token().await;
        let proxy = behind_proxy
            .then(|| SwapProxy::start(&hub.url, &hub.dir.path().join("tls"), hub.client.clone()));
        let agent_url = proxy.as_ref().map_or(hub.url.as_str(), |p| p.url.as_str());
        let files = agent_files(&sim, agent_url, &hub.fingerprint, Some(&token));
        let operator = files.trusted_operator();
        let mark = files.state_dir.join("update/poll-ok.json");
        let prefix = Prefix::new(&mark, timings);
        update_support::install_executable(&binary("bosun-agentd"), &prefix.slot_binary("a"));
        let mut text = std::fs::read_to_string(&files.config_path).unwrap();
        text.push_str(&format!("[update]\nslots_root = {:?}\n", prefix.slots));
        std::fs::write(&files.config_path, text).unwrap();
        *files.helper.update.lock() = Some((
            prefix.slots.clone(),
            files.state_dir.join("update/incoming/bosun-agentd"),
        ));
        let systemd = FakeSystemd::start(
            &prefix.unit_dir,
            UnitSpec {
                exec: prefix.slots.join("current/bosun-agentd"),
                args: vec!["--config".into(), files.config_path.clone().into()],
                env: vec![(
                    "RUST_LOG".into(),
                    std::env::var("BOSUN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
                )],
                restart_sec: Duration::from_millis(200),
                log: files.dir.path().join("agent.log"),
                run_as: None,
            },
        )
        .unwrap();
        systemd.wait(
            |s| s.contains("ActiveState=active"),
            Duration::from_secs(30),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !mark.exists() {
            assert!(
                Instant::now() < deadline,
                "the agent never polled: {}",
                log(&files)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, hosts) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
        let host_id = hosts[0]["host_id"].as_str().unwrap().parse().unwrap();
        Self {
            sim,
            hub,
            files,
            prefix,
            systemd,
            operator,
            host_id,
            proxy,
        }
    }

    /// Uploads `bytes` as an artifact; gives their SHA-256.
    pub async fn upload(&self, bytes: Vec<u8>) -> String {
        let sha256 = hex(&bytes);
        let response = self
            .hub
            .client
            .put(format!("{}/v1/admin/artifacts/{sha256}", self.hub.url))
            .bearer_auth(&self.hub.admin)
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        sha256
    }

    /// An `agent-update` job document for `sha256` (with `override_window`).
    pub fn job(&self, sha256: &str) -> (Uuid, Vec<u8>) {
        self.job_with(sha256, true)
    }

    /// An `agent-update` job document for `sha256`.
    pub fn job_with(&self, sha256: &str, override_window: bool) -> (Uuid, Vec<u8>) {
        let now = jiff::Timestamp::now();
        let job_id = Uuid::now_v7();
        let doc = json!({
            "schema": "bosun.job/v1",
            "job_id": job_id,
            "kind": "agent-update",
            "target": { "host_id": self.host_id },
            "params": { "version": "0.2.0-test", "sha256": sha256, "override_window": override_window },
            "nonce": format!("n-{}", Uuid::new_v4().simple()),
            "not_before": now - jiff::SignedDuration::from_secs(60),
            "expires_at": now + jiff::SignedDuration::from_hours(1),
        });
        (job_id, serde_json::to_vec(&doc).unwrap())
    }

    /// Submits a document with a signature by `key`.
    pub async fn submit(&self, bytes: &[u8], key: &OperatorKey) {
        let signature = key.sign(bytes, "bosun-job@v1");
        let (status, body) = self
            .hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{}/jobs", self.host_id),
                Some(envelope(bytes, &signature)),
            )
            .await;
        assert!((200..300).contains(&status), "{status} {body}");
    }

    /// Signs and submits an update to `sha256`, waits for its trial and runs the gate to its
    /// verdict; gives the record and the time from submission to the verdict.
    pub async fn update(&self, sha256: &str) -> (UpdateRecord, Duration) {
        let (_, bytes) = self.job(sha256);
        let started = Instant::now();
        self.submit(&bytes, &self.operator).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.prefix.record().is_none() {
            assert!(
                Instant::now() < deadline,
                "never staged: {}",
                log(&self.files)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // What bosun-update-gate.path does when the record appears.
        let mut gate = self.prefix.start_gate();
        let status = tokio::task::spawn_blocking(move || gate.wait().unwrap())
            .await
            .unwrap();
        assert!(status.success(), "{}", self.prefix.gate_log());
        (self.prefix.record().unwrap(), started.elapsed())
    }

    /// Waits for an alert of `kind` at the hub; gives its message.
    pub async fn alert(&self, kind: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, alerts) = self.hub.admin(Method::GET, "/v1/admin/alerts", None).await;
            if let Some(a) = alerts
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["kind"] == kind)
            {
                return a["message"].as_str().unwrap_or_default().to_owned();
            }
            assert!(Instant::now() < deadline, "no {kind} alert: {alerts}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for an event of `kind` at the hub.
    pub async fn event(&self, kind: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, events) = self
                .hub
                .admin(Method::GET, "/v1/admin/events?limit=200", None)
                .await;
            if let Some(e) = events
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["kind"] == kind)
            {
                return e.clone();
            }
            assert!(Instant::now() < deadline, "no {kind} event: {events}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The job's result at the hub.
    pub async fn job_result(&self, job: Uuid) -> Value {
        agent_support::jobs::job_result(&self.hub, self.host_id, job).await
    }

    /// Writes a fixture agent to a file; gives its bytes.
    pub fn fixture(&self, body: &str) -> Vec<u8> {
        format!("#!/bin/sh\n{body}\n").into_bytes()
    }
}

pub fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn log(files: &AgentFiles) -> String {
    std::fs::read_to_string(files.dir.path().join("agent.log"))
        .unwrap_or_default()
        .lines()
        .rev()
        .take(30)
        .collect::<Vec<_>>()
        .join("\n")
}
