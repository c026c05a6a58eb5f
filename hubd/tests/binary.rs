//! The `bosun-hubd` binary itself: `init` prints the admin token once, `serve` prints the
//! fingerprint, serves, and stops cleanly on SIGTERM.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::field;

const HUBD: &str = env!("CARGO_BIN_EXE_bosun-hubd");

#[tokio::test]
async fn init_then_serve_then_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(HUBD)
        .args(["init", "--data"])
        .arg(&data)
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
    assert!(
        admin.starts_with("bsa_") && fingerprint.len() == 64,
        "{text}"
    );

    // A second init refuses and mints nothing.
    let again = Command::new(HUBD)
        .args(["init", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already initialized"));
    assert!(!String::from_utf8_lossy(&again.stdout).contains("bsa_"));

    let mut child = Command::new(HUBD)
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("BOSUN_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(field(&first, "fingerprint:"), fingerprint);
    // The bound port comes from the log line `hub listening addr=...`.
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    for line in stderr.lines() {
        let line = line.unwrap();
        if let Some(rest) = line.split("addr=").nth(1) {
            addr = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
    }
    let addr = addr.expect("serve logs its address");
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&fingerprint).expect("a valid fingerprint"),
        )
        .build()
        .unwrap();
    let resp = client
        .get(format!("https://{addr}/v1/admin/hosts"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK);

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
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
