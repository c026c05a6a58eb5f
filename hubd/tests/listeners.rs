//! `bosun-hubd serve --config FILE` with the admin side on an address of its own: the agent
//! address serves only what agents call, the admin address only what operators call, and a
//! config file that is missing or wrong stops the hub before it binds anything.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common;

use common::field;

const HUBD: &str = env!("CARGO_BIN_EXE_bosun-hubd");

/// Kills the hub if a test fails half-way.
struct Hub(Child);

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("hub.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts `serve --config`, and reads each side's address from its `hub listening` line.
fn serve(config: &Path) -> (Hub, HashMap<String, String>) {
    let (hub, sides, _) = serve_under(&[], config);
    let addrs = sides
        .into_iter()
        .map(|(side, (addr, _))| (side, addr))
        .collect();
    (hub, addrs)
}

/// Starts `serve --config` under the command `wrapper` (none: directly). Each side's address
/// and `hub listening` line, and the lines the hub logs after them.
fn serve_under(
    wrapper: &[&str],
    config: &Path,
) -> (
    Hub,
    HashMap<String, (String, String)>,
    std::sync::mpsc::Receiver<String>,
) {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(HUBD);
            command
        }
        None => Command::new(HUBD),
    };
    let mut child = command
        .args(["serve", "--config"])
        .arg(config)
        .env("BOSUN_LOG", "info")
        .env_remove("BOSUN_HUB_DATA")
        .env_remove("BOSUN_HUB_LISTEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let hub = Hub(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end, heard or not: a hub whose log is not read would stop at a full pipe.
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut sides = HashMap::new();
    while sides.len() < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the hub logs both listeners");
        if !line.contains("hub listening") {
            continue;
        }
        let addr = line
            .split("addr=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next());
        let side = line
            .split("side=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        if let (Some(addr), Some(side)) = (addr, side) {
            sides.insert(side.to_owned(), (addr.to_owned(), line.clone()));
        }
    }
    (hub, sides, rx)
}

/// A hub initialized in `dir` with the agent and admin sides on addresses of their own: its
/// config file, certificate fingerprint, admin token, and a client pinned to it.
fn init_split(dir: &Path) -> (std::path::PathBuf, String, String, reqwest::Client) {
    let data = dir.join("data");
    let config = write_config(
        dir,
        &format!(
            "data_dir = {:?}\n[listen]\nagent = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n",
            data.display().to_string()
        ),
    );
    // `init` takes the data directory from the same file.
    let out = Command::new(HUBD)
        .args(["init", "--config"])
        .arg(&config)
        .env_remove("BOSUN_HUB_DATA")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fingerprint = field(&text, "fingerprint:").to_owned();
    let admin = field(&text, "admin token:").to_owned();
    assert!(data.join("hub.db").exists() || std::fs::read_dir(&data).unwrap().count() > 0);
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(&fingerprint).unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    (config, fingerprint, admin, client)
}

/// The status of the host list asked of the admin side at `admin_url`.
async fn hosts_status(client: &reqwest::Client, admin_url: &str, admin: &str) -> StatusCode {
    client
        .get(format!("{admin_url}/v1/admin/hosts"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn the_admin_side_is_served_only_on_its_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _, admin, client) = init_split(dir.path());
    let (mut hub, sides) = serve(&config);
    let agent_url = format!("https://{}", sides["agent API"]);
    let admin_url = format!("https://{}", sides["admin API"]);
    assert_ne!(agent_url, admin_url);

    // The operator side answers on the admin address.
    assert_eq!(
        hosts_status(&client, &admin_url, &admin).await,
        StatusCode::OK
    );
    let metrics = client
        .get(format!("{admin_url}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let token: Value = client
        .post(format!("{admin_url}/v1/admin/enrollment-tokens"))
        .bearer_auth(&admin)
        .json(&json!({ "ttl_seconds": 600, "require_approval": false }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["token"].as_str().unwrap();

    // ...and not on the agents' address, even with the right token: it is not there at all.
    for path in ["/v1/admin/hosts", "/metrics", "/ui/"] {
        let resp = client
            .get(format!("{agent_url}{path}"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::NOT_FOUND,
            "{path} on the agent address"
        );
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "no_such_endpoint", "{path}: {body}");
    }

    // Agents enroll and poll on theirs, and not on the admin address.
    let enroll = json!({ "schema": "bosun.enroll/v1", "token": token, "hostname": "pve-1", "agent_version": "0.1.0" });
    let refused = client
        .post(format!("{admin_url}/v1/enroll"))
        .json(&enroll)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    let enrolled = client
        .post(format!("{agent_url}/v1/enroll"))
        .json(&enroll)
        .send()
        .await
        .unwrap();
    assert_eq!(
        enrolled.status(),
        StatusCode::CREATED,
        "the token was not spent on the admin side"
    );
    let enrolled: Value = enrolled.json().await.unwrap();
    let host = enrolled["host_id"].as_str().unwrap();
    let poll_path = format!("/v1/hosts/{host}/poll?wait=0");
    let poll = common::poll_body(0, &[]);
    for (url, want) in [
        (&admin_url, StatusCode::NOT_FOUND),
        (&agent_url, StatusCode::OK),
    ] {
        let resp = client
            .post(format!("{url}{poll_path}"))
            .bearer_auth(enrolled["host_key"].as_str().unwrap())
            .json(&poll)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_eq!(status, want, "poll on {url}: {body}");
    }
    // Both sides answer health checks.
    for url in [&agent_url, &admin_url] {
        let health = client.get(format!("{url}/v1/health")).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
    }

    // SIGTERM stops both listeners and the process exits cleanly.
    let pid = hub.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    loop {
        if let Some(status) = hub.0.try_wait().unwrap() {
            assert!(status.success(), "clean exit on SIGTERM, got {status}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "hub did not stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_missing_or_wrong_config_file_stops_the_hub_before_it_binds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.display().to_string();
    let run = |args: &[&str]| {
        let out = Command::new(HUBD)
            .args(args)
            .env_remove("BOSUN_HUB_DATA")
            .env_remove("BOSUN_HUB_LISTEN")
            .env_remove("BOSUN_HUB_CONFIG")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let missing = dir.path().join("absent.toml");
    let stderr = run(&["serve", "--config", missing.to_str().unwrap()]);
    assert!(stderr.contains("absent.toml"), "{stderr}");

    let typo = write_config(
        dir.path(),
        &format!("data_dir = {data:?}\n[listen]\nadmn = \"127.0.0.1:7444\"\n"),
    );
    let stderr = run(&["serve", "--config", typo.to_str().unwrap()]);
    assert!(stderr.contains("admn"), "{stderr}");

    let same = write_config(
        dir.path(),
        &format!(
            "data_dir = {data:?}\n[listen]\nagent = \"127.0.0.1:7443\"\nadmin = \"127.0.0.1:7443\"\n"
        ),
    );
    let stderr = run(&["serve", "--config", same.to_str().unwrap()]);
    assert!(stderr.contains("another address"), "{stderr}");

    let nothing = write_config(dir.path(), "[agents]\npoll_interval_secs = 30\n");
    let stderr = run(&["init", "--config", nothing.to_str().unwrap()]);
    assert!(stderr.contains("data"), "{stderr}");
    assert!(!Path::new(&data).exists(), "nothing was created");
}

/// A file limit of 1,024 leaves the hub 512 connections after its own files: 256 for each side.
const NOFILE: &str = "--nofile=1024:1024";
const SIDE_CAP: usize = 256;

/// Whether the hub closed `conn` (an end of stream or a reset); `conn` does not block.
fn closed_by_the_hub(conn: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match conn.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(err) => err.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// How many of `conns` the hub closed, once that many stayed closed for a moment (at most 10 s).
fn count_closed(conns: &[std::net::TcpStream]) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = (0, std::time::Instant::now());
    loop {
        let closed = conns.iter().filter(|c| closed_by_the_hub(c)).count();
        if closed != last.0 {
            last = (closed, std::time::Instant::now());
        } else if closed > 0 && last.1.elapsed() > Duration::from_millis(500) {
            return closed;
        }
        if std::time::Instant::now() > deadline {
            return closed;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn connections_past_what_the_file_limit_holds_are_refused_and_the_hub_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _, admin, client) = init_split(dir.path());
    let (_hub, sides, log) = serve_under(&["prlimit", NOFILE, "--"], &config);
    for side in ["agent API", "admin API"] {
        assert!(
            sides[side]
                .1
                .contains(&format!("max_connections={SIDE_CAP}")),
            "{}",
            sides[side].1
        );
    }
    let agent = sides["agent API"].0.clone();
    let admin_url = format!("https://{}", sides["admin API"].0);

    // Someone fills the agent side with connections that never start a handshake: those past
    // the cap are closed at once, before a handshake, and the others wait for theirs.
    const OVER: usize = 32;
    let flood = tokio::task::spawn_blocking(move || {
        let flood: Vec<_> = (0..SIDE_CAP + OVER)
            .map(|_| {
                let conn = std::net::TcpStream::connect(&agent).unwrap();
                conn.set_nonblocking(true).unwrap();
                conn
            })
            .collect();
        assert_eq!(count_closed(&flood), OVER, "the connections past the cap");
        flood
    })
    .await
    .unwrap();

    // The operators' side has its own share, and the store its files: the admin API answers.
    assert_eq!(
        hosts_status(&client, &admin_url, &admin).await,
        StatusCode::OK
    );
    let refused = std::iter::from_fn(|| log.recv_timeout(Duration::from_secs(10)).ok())
        .find(|line| line.contains("connections refused"))
        .expect("the refusals are logged");
    assert!(refused.contains("agent API"), "{refused}");
    // And counted where an operator's alert sees them.
    let metrics = client
        .get(format!("{admin_url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        format!("bosun_hub_connections_refused_total{{listener=\"agent\"}} {OVER}"),
        "bosun_hub_connections_refused_total{listener=\"admin\"} 0".to_owned(),
        format!("bosun_hub_connections_max{{listener=\"agent\"}} {SIDE_CAP}"),
        format!("bosun_hub_connections_max{{listener=\"admin\"}} {SIDE_CAP}"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    // Once the flood goes, agents are served again.
    drop(flood);
    let agent_url = format!("https://{}", sides["agent API"].0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = client
            .post(format!(
                "{agent_url}/v1/hosts/{}/poll",
                uuid::Uuid::new_v4()
            ))
            .bearer_auth("not-a-host-key")
            .body("{}")
            .send()
            .await;
        match answer {
            Ok(resp) => {
                // Answered: a stranger's poll is refused.
                assert!(resp.status().is_client_error(), "{}", resp.status());
                break;
            }
            Err(err) => assert!(
                std::time::Instant::now() < deadline,
                "the agent side serves again once the flood closed: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
