//! The `bosun-pvesim` binary: endpoint.json (0600), persistent certificate, clean shutdown.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun_pvesim::Endpoint;

fn spawn(dir: &Path, config: Option<&Path>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bosun-pvesim"));
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--data")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.spawn().expect("binary starts")
}

fn wait_endpoint(dir: &Path) -> Endpoint {
    let path = dir.join("endpoint.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(ep) = serde_json::from_str::<Endpoint>(&text)
        {
            return ep;
        }
        assert!(Instant::now() < deadline, "endpoint.json did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminate(mut child: Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            assert!(exit.success(), "clean exit on SIGTERM, got {exit:?}");
            return;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn binary_writes_endpoint_json_serves_and_keeps_its_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sim.toml");
    std::fs::write(&config, "node = \"pve7\"\nauth_failure_delay = 0\n").expect("config written");
    let child = spawn(dir.path(), Some(&config));
    let ep = wait_endpoint(dir.path());
    let mode = std::fs::metadata(dir.path().join("endpoint.json"))
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(ep.node, "pve7");
    assert_eq!(ep.tokens.agent.id, "bosun@pve!agent");
    assert_eq!(ep.tokens.root.id, "root@pam!bosun-sim");
    assert!(ep.golden_volid.starts_with("local:backup/vzdump-lxc-9000-"));
    let pem = std::fs::read(dir.path().join("pve-ssl.pem")).expect("certificate stored");
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).expect("pem")])
        .build()
        .expect("client");
    let resp = client
        .get(format!("{}/nodes", ep.url))
        .header("Authorization", ep.tokens.agent.header_value())
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["data"][0]["node"], "pve7");
    assert_eq!(body["data"][0]["ssl_fingerprint"], ep.fingerprint.as_str());
    let log = client
        .get(format!("{}/requests", ep.admin_url))
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .expect("answered");
    let log: Vec<bosun_pvesim::LoggedRequest> = log.json().await.expect("json");
    assert_eq!(log.len(), 1);
    terminate(child);

    // A restart with the same data dir keeps the fingerprint.
    let _ = std::fs::remove_file(dir.path().join("endpoint.json"));
    let child = spawn(dir.path(), None);
    let again = wait_endpoint(dir.path());
    assert_eq!(again.fingerprint, ep.fingerprint);
    assert_eq!(again.tokens, ep.tokens, "token secrets survive a restart");
    assert_eq!(again.admin_token, ep.admin_token);
    let mode = std::fs::metadata(dir.path().join("secrets.json"))
        .expect("secrets stored")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    terminate(child);
}

#[test]
fn a_vm_golden_asked_for_is_seeded_with_its_file_and_named_in_the_endpoint() {
    use sha2::Digest as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sim.toml");
    std::fs::write(&config, "time_scale = 0.0\nvm_golden = true\n").unwrap();
    let data = dir.path().join("data");
    let child = spawn(&data, Some(&config));
    let ep = wait_endpoint(&data);
    terminate(child);
    let volid = ep.vm_golden_volid.expect("the vm golden's volid");
    let name = volid
        .strip_prefix("local:backup/")
        .expect("on local's backups");
    assert!(
        name.starts_with("vzdump-qemu-") && name.ends_with(".vma.zst"),
        "{volid}"
    );
    let bytes = std::fs::read(data.join("dump").join(name)).expect("its file");
    assert_eq!(
        ep.vm_golden_sha256.as_deref(),
        Some(hex::encode(sha2::Sha256::digest(&bytes)).as_str())
    );
    assert_ne!(
        ep.vm_golden_sha256.as_deref(),
        Some(ep.golden_sha256.as_str())
    );

    // Without it, none.
    let plain = tempfile::tempdir().expect("temp dir");
    let child = spawn(plain.path(), None);
    let ep = wait_endpoint(plain.path());
    terminate(child);
    assert_eq!(ep.vm_golden_volid, None);
    assert_eq!(ep.vm_golden_sha256, None);
}
