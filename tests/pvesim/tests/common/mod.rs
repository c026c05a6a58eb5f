//! Shared helpers for the simulator's integration tests: start a fast simulator on
//! 127.0.0.1:0 and talk to it with a client that trusts only its certificate.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::time::Duration;

use bosun_pvesim::{SimConfig, SimHandle, Simulator, TokenCredential};
use serde_json::Value;

pub struct Sim {
    pub handle: SimHandle,
    pub client: reqwest::Client,
}

/// A response: status, parsed JSON body (or `Value::Null` for an empty body).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
}

impl Resp {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }
    pub fn error(&self, key: &str) -> &str {
        self.body["errors"][key].as_str().unwrap_or_default()
    }
    pub fn upid(&self) -> String {
        assert_eq!(self.status, 200, "expected a UPID, got {self:?}");
        self.data()
            .as_str()
            .expect("data is a UPID string")
            .to_owned()
    }
}

pub async fn start() -> Sim {
    start_with(SimConfig {
        time_scale: 0.0,
        auth_failure_delay: Duration::ZERO,
        ..SimConfig::default()
    })
    .await
}

pub async fn start_with(config: SimConfig) -> Sim {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let handle = Simulator::start(config, listener)
        .await
        .expect("simulator starts");
    let cert = reqwest::Certificate::from_pem(handle.certificate_pem().as_bytes())
        .expect("certificate parses");
    let client = reqwest::Client::builder()
        .tls_certs_only([cert])
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client builds");
    Sim { handle, client }
}

impl Sim {
    pub fn agent(&self) -> TokenCredential {
        self.handle.endpoint().tokens.agent.clone()
    }

    pub fn root(&self) -> TokenCredential {
        self.handle.endpoint().tokens.root.clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.handle.endpoint().url)
    }

    /// A request with the agent token; `params` go in the query (GET/DELETE) or a form body.
    pub async fn call(&self, method: &str, path: &str, params: &[(&str, &str)]) -> Resp {
        self.call_as(&self.agent(), method, path, params).await
    }

    pub async fn call_as(
        &self,
        token: &TokenCredential,
        method: &str,
        path: &str,
        params: &[(&str, &str)],
    ) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(m.clone(), self.url(path))
            .header("Authorization", token.header_value());
        req = if m == reqwest::Method::GET || m == reqwest::Method::DELETE {
            req.query(params)
        } else {
            req.form(params)
        };
        let resp = req.send().await.expect("request is answered");
        to_resp(resp).await
    }

    /// A new privilege-separated token `bosun@pve!<name>` holding only a new role `role`
    /// with `privs`, granted on `/` (propagating).
    pub fn narrow_token(&self, role: &str, privs: &[&str], name: &str) -> TokenCredential {
        self.handle.add_role(role, privs).expect("role");
        let token = self
            .handle
            .create_token("bosun@pve", name, true)
            .expect("token");
        self.handle
            .grant("/", &token.id, role, true)
            .expect("grant");
        token
    }

    /// `POST /nodes/pve/lxc` restoring `archive` to `vmid` on `local-lvm` as `token`, with
    /// `extra` parameters after the usual ones.
    pub async fn restore_as(
        &self,
        token: &TokenCredential,
        vmid: &str,
        archive: &str,
        extra: &[(&str, &str)],
    ) -> Resp {
        let mut params = vec![
            ("vmid", vmid),
            ("ostemplate", archive),
            ("restore", "1"),
            ("storage", "local-lvm"),
        ];
        params.extend_from_slice(extra);
        self.call_as(token, "POST", "/nodes/pve/lxc", &params).await
    }

    /// [`Sim::restore_as`] with the agent token.
    pub async fn restore(&self, vmid: &str, archive: &str, extra: &[(&str, &str)]) -> Resp {
        self.restore_as(&self.agent(), vmid, archive, extra).await
    }

    /// Waits for a task through the handle and returns its exit status.
    pub async fn wait(&self, upid: &str) -> String {
        self.handle
            .wait_task(upid, Duration::from_secs(15))
            .await
            .unwrap_or_else(|| panic!("task {upid} did not finish"))
    }

    /// Restores the golden archive to `vmid` on local-lvm and waits for it.
    pub async fn restore_golden(&self, vmid: u32) {
        let golden = self.handle.endpoint().golden_volid.clone();
        let id = vmid.to_string();
        let r = self
            .call(
                "POST",
                "/nodes/pve/lxc",
                &[
                    ("vmid", &id),
                    ("ostemplate", &golden),
                    ("restore", "1"),
                    ("storage", "local-lvm"),
                    ("unprivileged", "1"),
                    ("unique", "1"),
                ],
            )
            .await;
        let upid = r.upid();
        assert_eq!(
            self.wait(&upid).await,
            "OK",
            "restore log: {:?}",
            self.handle.task_log(&upid)
        );
    }

    pub async fn start_ct(&self, vmid: u32) {
        let r = self
            .call("POST", &format!("/nodes/pve/lxc/{vmid}/status/start"), &[])
            .await;
        let upid = r.upid();
        assert_eq!(self.wait(&upid).await, "OK");
    }
}

pub async fn to_resp(resp: reqwest::Response) -> Resp {
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("body is JSON")
    };
    Resp { status, body }
}
