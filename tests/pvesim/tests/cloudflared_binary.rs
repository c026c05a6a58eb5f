//! The `bosun-cloudflared-sim` binary: the replicas of one tunnel as a program (what the demo
//! runs). It describes itself in `stand-in.json`, each replica answers `/ready` and `/metrics`
//! as cloudflared does and reads the configuration file at its start, the `systemctl` it
//! writes restarts one replica and refuses anything but `restart`, a configuration
//! `ingress validate` would refuse keeps a restarted replica down, and the control API shows
//! the replicas and makes one hang until its restart.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun_pvesim::cloudflared::{self, StandInView, VERSION};
use serde_json::Value;

const TUNNEL: &str = "6ff42ae2-765d-4adf-8112-31c55c1551ef";

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn described(dir: &Path) -> Value {
    let path = dir.join("stand-in.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(value) = serde_json::from_str::<Value>(&text)
        {
            return value;
        }
        assert!(Instant::now() < deadline, "stand-in.json did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn view(http: &reqwest::Client, control: &str) -> StandInView {
    http.get(format!("{control}/replicas"))
        .send()
        .await
        .expect("the control API answers")
        .json()
        .await
        .expect("a view")
}

async fn ready(http: &reqwest::Client, metrics: &str) -> (u16, Value) {
    let answer = http
        .get(format!("{metrics}/ready"))
        .send()
        .await
        .expect("/ready answers");
    let status = answer.status().as_u16();
    (status, answer.json().await.expect("/ready is JSON"))
}

async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn systemctl(path: &str, args: &[&str]) -> i32 {
    Command::new(path)
        .args(args)
        .status()
        .expect("the systemctl stand-in runs")
        .code()
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_replicas_that_restart_on_systemctl_and_read_the_configuration() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yml");
    let credentials = dir.path().join("credentials.json");
    let tunnel: uuid::Uuid = TUNNEL.parse().expect("uuid");
    std::fs::write(&config, cloudflared::catch_all_config(tunnel, &credentials)).expect("write");
    let _child = Running(
        Command::new(env!("CARGO_BIN_EXE_bosun-cloudflared-sim"))
            .arg("--config")
            .arg(&config)
            .arg("--dir")
            .arg(dir.path())
            .args(["--replicas", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts"),
    );
    let about = described(dir.path());
    let control = about["control"].as_str().expect("control").to_owned();
    let script = about["systemctl"].as_str().expect("systemctl").to_owned();
    let http = reqwest::Client::new();

    // Two replicas, each named after its metrics port, ready with the catch-all only.
    let first = view(&http, &control).await;
    assert_eq!(first.replicas.len(), 2);
    for replica in &first.replicas {
        let port = replica.metrics.rsplit(':').next().expect("a port");
        assert_eq!(replica.unit, format!("bosun-tunnel@{port}.service"));
        let (status, body) = ready(&http, &replica.metrics).await;
        assert_eq!((status, body["readyConnections"].as_u64()), (200, Some(4)));
        let metrics = http
            .get(format!("{}/metrics", replica.metrics))
            .send()
            .await
            .expect("/metrics answers")
            .text()
            .await
            .expect("text");
        assert!(
            metrics.contains(&format!("version=\"{VERSION}\"")),
            "{metrics}"
        );
    }
    let (a, b) = (first.replicas[0].clone(), first.replicas[1].clone());

    // A rule and the credentials, then `systemctl restart` of replica a: only a reads them.
    std::fs::write(
        &config,
        format!(
            "tunnel: {TUNNEL}\ncredentials-file: \"{}\"\ningress:\n  - hostname: shop.example.com\n    service: http://10.0.0.5:80\n  - service: http_status:404\n",
            credentials.display()
        ),
    )
    .expect("write");
    std::fs::write(&credentials, cloudflared::credentials_json(tunnel, "s")).expect("write");
    assert_eq!(systemctl(&script, &["restart", &a.unit]), 0);
    until("replica a ready with the rule", async || {
        let v = view(&http, &control).await;
        v.replicas[0].connections == 4 && v.replicas[0].routes.len() == 1
    })
    .await;
    let v = view(&http, &control).await;
    assert_eq!(v.replicas[0].credentials.as_deref(), Some(TUNNEL));
    assert_eq!(v.replicas[0].restarts_ms.len(), 1);
    assert!(v.replicas[1].routes.is_empty() && v.replicas[1].restarts_ms.is_empty());
    assert_eq!(v.all_down_samples, 0, "b kept serving");
    // The agent may restart its units, nothing else.
    assert_eq!(systemctl(&script, &["stop", &a.unit]), 2);

    // Replica b hangs: 503 until its restart, which brings it back.
    let dropped: Value = http
        .post(format!("{control}/replicas/1/drop"))
        .send()
        .await
        .expect("drop answers")
        .json()
        .await
        .expect("JSON");
    assert!(dropped["at_ms"].is_u64(), "{dropped}");
    assert_eq!(ready(&http, &b.metrics).await.0, 503);
    assert_eq!(systemctl(&script, &["restart", &b.unit]), 0);
    until("replica b ready again", async || {
        ready(&http, &b.metrics).await.0 == 200
    })
    .await;
    let missing = http
        .post(format!("{control}/replicas/7/drop"))
        .send()
        .await
        .expect("answers");
    assert_eq!(missing.status().as_u16(), 404);

    // A configuration `ingress validate` refuses: a restarted replica stays down and says why.
    std::fs::write(
        &config,
        format!("tunnel: {TUNNEL}\ncredentials-file: \"/x\"\ningress:\n  - hostname: a.example.com\n    service: http://10.0.0.5:80\n"),
    )
    .expect("write");
    assert_eq!(systemctl(&script, &["restart", &a.unit]), 0);
    until("replica a refuses the configuration", async || {
        view(&http, &control).await.replicas[0].refused.is_some()
    })
    .await;
    assert_eq!(ready(&http, &a.metrics).await.0, 503);
    let why = view(&http, &control).await.replicas[0].refused.clone();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("must match all URLs")),
        "{why:?}"
    );
}
