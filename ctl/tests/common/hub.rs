//! The hub both `bosunctl` suites run against: a real hub on 127.0.0.1:0, its pin and admin
//! token, in a temporary directory that also serves as `HOME`.

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use bosun_hubd::{Hub, HubConfig};
use serde_json::Value;
use tempfile::TempDir;
use uuid::Uuid;

pub struct Fixture {
    pub url: String,
    pub fingerprint: String,
    pub admin: String,
    pub dir: TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start_hub() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("hub");
    let report = bosun_hubd::init(&data, vec!["localhost".into()], false).unwrap();
    let mut config = HubConfig::new(&data, "127.0.0.1:0".parse().unwrap());
    config.dead_man.sweep_interval = None;
    let hub = Hub::open(config, Arc::new(bosun_hubd::clock::SystemClock))
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = hub.clone();
    tokio::spawn(async move {
        server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
    });
    Fixture {
        url,
        fingerprint: hub.fingerprint().to_owned(),
        admin: report.admin_token.expose().to_owned(),
        dir,
        _stop: stop,
    }
}

impl Fixture {
    /// Runs bosunctl with the given environment (nothing inherited from the test's env).
    pub async fn run_with(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosunctl"));
        command.env_clear().env("HOME", self.dir.path()).args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .expect("bosunctl finishes")
            .unwrap()
    }

    /// Runs bosunctl configured through the environment.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.run_with(
            &[
                ("BOSUN_HUB_URL", &self.url),
                ("BOSUN_HUB_FINGERPRINT", &self.fingerprint),
                ("BOSUN_ADMIN_TOKEN", &self.admin),
            ],
            args,
        )
        .await
    }

    /// The dashboard page at `path` (`/ui/hosts/ID`), logged in with the admin token as an
    /// operator's browser would: the login form posted from the hub's own origin, the session
    /// cookie sent back.
    pub async fn dashboard(&self, path: &str) -> String {
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(
                bosun_hubd::tls::pinned_client_config(&self.fingerprint)
                    .expect("a valid fingerprint"),
            )
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let resp = client
            .post(format!("{}/ui/login", self.url))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ORIGIN, &self.url)
            .body(format!("token={}", self.admin.replace('+', "%2B")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            reqwest::StatusCode::SEE_OTHER,
            "dashboard login"
        );
        let cookie = resp.headers()[reqwest::header::SET_COOKIE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let resp = client
            .get(format!("{}{path}", self.url))
            .header(reqwest::header::COOKIE, cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::OK, "{path}");
        resp.text().await.unwrap()
    }

    /// Enrolls a host named `hostname` with a fresh token, as its agent would; its id.
    pub async fn enroll_agent(&self, hostname: &str) -> Uuid {
        self.enroll(hostname).await.0
    }

    /// A client that trusts exactly this hub's certificate.
    pub fn pinned_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_preconfigured_tls(
                bosun_hubd::tls::pinned_client_config(&self.fingerprint)
                    .expect("a valid fingerprint"),
            )
            .build()
            .unwrap()
    }

    /// Enrolls a host named `hostname` with a fresh token; its id and host key.
    pub async fn enroll(&self, hostname: &str) -> (Uuid, String) {
        let out = self
            .run(&["enroll-token", "create", "--ttl", "10m", "--json"])
            .await;
        assert!(
            out.status.success(),
            "enroll-token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token: Value = serde_json::from_slice(&out.stdout).unwrap();
        let resp: Value = self
            .pinned_client()
            .post(format!("{}/v1/enroll", self.url))
            .json(&serde_json::json!({
                "schema": "bosun.enroll/v1", "token": token["token"], "hostname": hostname, "agent_version": "0.1.0"
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (
            resp["host_id"].as_str().unwrap().parse().unwrap(),
            resp["host_key"].as_str().unwrap().to_owned(),
        )
    }
}
