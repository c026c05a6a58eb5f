//! `bosun-pvesim-pct`: a stand-in for `/usr/sbin/pct` on a machine whose "Proxmox node" is
//! `bosun-pvesim`. Installed where a helper configuration names `programs.pct` (a test or demo
//! prefix), it applies `pct set <vmid> -<key> <value>…` to the simulator as root@pam through
//! the simulator's admin route `POST /_sim/pct`, as the real `pct` changes the node's config.
//!
//! `bosun-helper` runs it with a cleared environment, so where the simulator is comes from a
//! file beside the program: `<its own path>.endpoint.json`, a copy of the simulator's
//! `endpoint.json` (only `admin_url`, `admin_token` and `fingerprint` are read). Exit status 0
//! on success, 2 for bad usage, 1 for anything the simulator refused or a failed call — with
//! the reason on stderr, like `pct`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;

#[derive(Deserialize)]
struct Target {
    admin_url: String,
    admin_token: String,
    fingerprint: String,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("set") {
        eprintln!("bosun-pvesim-pct: only `pct set <vmid> -<option> <value>…` is simulated");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("bosun-pvesim-pct: starting the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bosun-pvesim-pct: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn target_file() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this program")?;
    let mut name = exe.into_os_string();
    name.push(".endpoint.json");
    Ok(PathBuf::from(name))
}

async fn run(args: Vec<String>) -> anyhow::Result<()> {
    let path = target_file()?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let target: Target =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_pin::client_config(&target.fingerprint)
                .context("the simulator's certificate fingerprint")?,
        )
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")?;
    let response = client
        .post(format!("{}/pct", target.admin_url))
        .bearer_auth(&target.admin_token)
        .json(&serde_json::json!({ "args": args }))
        .send()
        .await
        .with_context(|| format!("calling {}/pct", target.admin_url))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{status}: {}", body.trim());
    }
    Ok(())
}
