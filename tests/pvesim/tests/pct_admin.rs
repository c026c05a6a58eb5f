//! `POST /_sim/pct`: `pct set` as root@pam on the node. A bind mount point that every API
//! token (even root@pam's) is refused through `/api2` is applied, validated by the config
//! route's schema, and logged as a root@pam (non-token) request. The stand-ins
//! `bosun-pvesim-pct` and `bosun-pvesim-vzdump` run as `bosun-helper` runs them.

// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::start;
use serde_json::{Value, json};

const MP: &str = "/var/lib/bosun-helper/guests/101/bootstrap,mp=/etc/bosun,ro=1";

async fn pct(sim: &common::Sim, token: &str, args: Value) -> (u16, String) {
    let ep = sim.handle.endpoint();
    let resp = sim
        .client
        .post(format!("{}/pct", ep.admin_url))
        .bearer_auth(token)
        .json(&json!({ "args": args }))
        .send()
        .await
        .expect("answered");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

#[tokio::test]
async fn pct_set_attaches_a_bind_mount_as_root_and_logs_it_as_root() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let admin = sim.handle.endpoint().admin_token.clone();

    // Through the API no token may add a bind mount, root@pam's included.
    for token in [sim.agent(), sim.root()] {
        let r = sim
            .call_as(&token, "PUT", "/nodes/pve/lxc/101/config", &[("mp0", MP)])
            .await;
        assert_eq!(r.status, 403, "{}", r.message());
        assert!(
            r.message().contains("only allowed for root@pam"),
            "{}",
            r.message()
        );
    }
    assert!(!sim.handle.guest_config(101).unwrap().contains_key("mp0"));

    sim.handle.clear_requests();
    let (status, body) = pct(&sim, &admin, json!(["set", "101", "-mp0", MP])).await;
    assert_eq!(status, 200, "{body}");
    let config = sim.handle.guest_config(101).unwrap();
    let mp0 = config.get("mp0").expect("mp0 set");
    assert!(
        mp0.starts_with("/var/lib/bosun-helper/guests/101/bootstrap"),
        "{mp0}"
    );
    assert!(
        mp0.contains("mp=/etc/bosun") && mp0.contains("ro=1"),
        "{mp0}"
    );

    let log = sim.handle.requests();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].method, "PUT");
    assert_eq!(log[0].path, "/nodes/pve/lxc/101/config");
    assert_eq!(log[0].token_id, None, "applied as root@pam, not a token");
    assert_eq!(log[0].status, 200);
}

#[tokio::test]
async fn pct_needs_the_admin_token_and_valid_arguments() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let admin = sim.handle.endpoint().admin_token.clone();

    let (status, _) = pct(&sim, "wrong", json!(["set", "101", "-mp0", MP])).await;
    assert_eq!(status, 401);
    // Commands pct does not have, or arguments it would not accept: 400, nothing ran.
    let (status, body) = pct(&sim, &admin, json!(["list"])).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = pct(&sim, &admin, json!(["set", "101"])).await;
    assert_eq!(status, 400, "{body}");
    // Schema validation of the config route applies; pct prints it and exits 255.
    let (status, body) = pct(&sim, &admin, json!(["set", "101", "-nosuch", "1"])).await;
    assert_eq!(status, 200, "{body}");
    let out: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["exit"], 255, "{body}");
    assert!(
        out["stderr"]
            .as_str()
            .unwrap()
            .starts_with("400 Parameter verification failed.\nnosuch:"),
        "{body}"
    );
    // A missing guest is the config route's error.
    let (_, body) = pct(&sim, &admin, json!(["set", "555", "-mp0", MP])).await;
    let out: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["exit"], 255, "{body}");
    assert_eq!(
        out["stderr"],
        "Configuration file 'nodes/pve/lxc/555.conf' does not exist\n"
    );
    assert!(!sim.handle.guest_config(101).unwrap().contains_key("mp0"));
}

/// The `bosun-pvesim-pct` stand-in installed as `pct`, run the way `bosun-helper` runs it
/// (cleared environment), with the simulator named in `pct.endpoint.json` beside it.
#[tokio::test]
async fn the_pct_stand_in_applies_pct_set_through_the_simulator() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let dir = tempfile::tempdir().unwrap();
    let pct = dir.path().join("pct");
    std::fs::copy(env!("CARGO_BIN_EXE_bosun-pvesim-pct"), &pct).unwrap();
    let run = |args: &'static [&'static str]| {
        let pct = pct.clone();
        async move { run_program(&pct, args).await }
    };

    // Without its endpoint file it fails, saying why.
    let out = run(&["set", "101", "-mp0", MP]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pct.endpoint.json"));

    std::fs::write(
        dir.path().join("pct.endpoint.json"),
        serde_json::to_string(sim.handle.endpoint()).unwrap(),
    )
    .unwrap();
    let out = run(&["list"]).await;
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["set", "101", "-bogus", "1"]).await;
    assert_eq!(out.status.code(), Some(255));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
    assert!(!sim.handle.guest_config(101).unwrap().contains_key("mp0"));

    let out = run(&["set", "101", "-mp0", MP]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mp0 = sim.handle.guest_config(101).unwrap()["mp0"].clone();
    assert!(mp0.contains("mp=/etc/bosun"), "{mp0}");
}

/// Installs a stand-in with its endpoint file beside it, as a helper prefix does.
pub(crate) fn install_stand_in(
    sim: &common::Sim,
    dir: &std::path::Path,
    name: &str,
    exe: &str,
) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::copy(exe, &path).unwrap();
    std::fs::write(
        dir.join(format!("{name}.endpoint.json")),
        serde_json::to_string(sim.handle.endpoint()).unwrap(),
    )
    .unwrap();
    path
}

/// Runs a freshly copied program with a cleared environment. Another test thread that forks
/// while the copy is still open for writing keeps that descriptor until it execs, and the
/// kernel refuses to exec a file open for writing (`ETXTBSY`): such a start is tried again.
pub(crate) async fn run_program(program: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut tries = 0;
    loop {
        match tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .output()
            .await
        {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            result => return result.unwrap(),
        }
    }
}

/// `pct push` through the stand-in: it reads the host file itself (a 0600 staging file),
/// the simulator writes it into the running CT, and the file reads back over the admin
/// endpoint with its mode and owner; the content never appears in the stand-in's output.
#[tokio::test]
async fn the_pct_stand_in_pushes_a_host_file_that_reads_back_over_the_admin_endpoint() {
    use std::os::unix::fs::PermissionsExt as _;
    let sim = start().await;
    sim.restore_golden(101).await;
    let dir = tempfile::tempdir().unwrap();
    let pct = install_stand_in(
        &sim,
        dir.path(),
        "pct",
        env!("CARGO_BIN_EXE_bosun-pvesim-pct"),
    );
    let staged = dir.path().join("bootstrap.json");
    let secret = r#"{"schema":"bosun.bootstrap/v1","token":"tok_live_3b1f6a"}"#;
    std::fs::write(&staged, secret).unwrap();
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dest = "/etc/bosun-bootstrap/bootstrap.json";
    let staged_arg = staged.to_str().unwrap();
    let args = [
        "push", "101", staged_arg, dest, "--perms", "0600", "--user", "0", "--group", "0",
    ];

    let out = run_program(&pct, &args).await;
    assert_eq!(out.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "can only push files to a running CT\n"
    );
    sim.start_ct(101).await;
    let out = run_program(&pct, &args).await;
    assert!(out.status.success(), "{out:?}");
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(stream).contains("tok_live"),
            "{out:?}"
        );
    }
    let file = bosun_pvesim::fetch_guest_file(&sim.client, sim.handle.endpoint(), 101, dest)
        .await
        .unwrap()
        .expect("pushed");
    assert_eq!(file.content, secret.as_bytes());
    assert_eq!(
        (file.kind.as_str(), file.mode, file.uid, file.gid),
        ("file", 0o600, 0, 0)
    );
    let missing =
        bosun_pvesim::fetch_guest_file(&sim.client, sim.handle.endpoint(), 101, "/etc/nope")
            .await
            .unwrap();
    assert_eq!(missing, None);
    let no_ct = bosun_pvesim::fetch_guest_file(&sim.client, sim.handle.endpoint(), 555, dest)
        .await
        .unwrap();
    assert_eq!(no_ct, None);
    // The admin token guards the route.
    let r = sim
        .client
        .get(format!(
            "{}/guests/101/file",
            sim.handle.endpoint().admin_url
        ))
        .query(&[("path", dest)])
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // A host file the stand-in cannot read is pct's error, and nothing reaches the CT.
    let out = run_program(&pct, &["push", "101", "/nonexistent/f", "/etc/f"]).await;
    assert_eq!(out.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "failed to open /nonexistent/f for reading\n"
    );
    assert!(sim.handle.guest_file(101, "/etc/f").is_none());
}

/// The vzdump stand-in prints the task log (with the archive line) and exits 0, or 255
/// when the job fails.
#[tokio::test]
async fn the_vzdump_stand_in_prints_the_archive_line_and_the_jobs_status() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let dir = tempfile::tempdir().unwrap();
    let vzdump = install_stand_in(
        &sim,
        dir.path(),
        "vzdump",
        env!("CARGO_BIN_EXE_bosun-pvesim-vzdump"),
    );
    let out = run_program(
        &vzdump,
        &[
            "101",
            "--storage",
            "local",
            "--mode",
            "stop",
            "--compress",
            "zstd",
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let archive = stdout
        .lines()
        .find_map(|l| l.strip_prefix("INFO: creating vzdump archive '"))
        .and_then(|rest| rest.strip_suffix('\''))
        .unwrap_or_else(|| panic!("{stdout}"));
    let name = archive
        .strip_prefix("/var/lib/vz/dump/")
        .expect("dir storage path");
    assert!(
        sim.handle
            .storage_volumes("local")
            .contains(&format!("local:backup/{name}"))
    );

    let out = run_program(&vzdump, &["101", "--storage", "nosuch"]).await;
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    let out = run_program(&vzdump, &["--storage", "local"]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// `POST /_sim/cli-faults` replaces the injected CLI failures; `GET` shows them; both need
/// the admin token.
#[tokio::test]
async fn cli_faults_are_set_over_the_admin_endpoint() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let ep = sim.handle.endpoint().clone();
    let url = format!("{}/cli-faults", ep.admin_url);
    let rules =
        json!([{"program": "pct", "args": ["set", "101"], "exit": 3, "message": "disk full"}]);
    let r = sim
        .client
        .post(&url)
        .bearer_auth("wrong")
        .json(&rules)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = sim
        .client
        .post(&url)
        .bearer_auth(&ep.admin_token)
        .json(&rules)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let shown: Value = sim
        .client
        .get(&url)
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown, rules);
    let (status, body) = pct(&sim, &ep.admin_token, json!(["set", "101", "-mp0", MP])).await;
    assert_eq!(status, 200);
    let out: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (out["exit"].as_i64(), out["stderr"].as_str()),
        (Some(3), Some("disk full\n"))
    );
    assert!(!sim.handle.guest_config(101).unwrap().contains_key("mp0"));
    let r = sim
        .client
        .post(&url)
        .bearer_auth(&ep.admin_token)
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

/// A file larger than a default request body (2 MiB) still reaches the CT intact.
#[tokio::test]
async fn the_pct_stand_in_pushes_a_multi_megabyte_file() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.start_ct(101).await;
    let dir = tempfile::tempdir().unwrap();
    let pct = install_stand_in(
        &sim,
        dir.path(),
        "pct",
        env!("CARGO_BIN_EXE_bosun-pvesim-pct"),
    );
    let image: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    let staged = dir.path().join("image.tar");
    std::fs::write(&staged, &image).unwrap();
    let out = run_program(
        &pct,
        &[
            "push",
            "101",
            staged.to_str().unwrap(),
            "/var/lib/image.tar",
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        sim.handle
            .guest_file(101, "/var/lib/image.tar")
            .unwrap()
            .content,
        image
    );
}
