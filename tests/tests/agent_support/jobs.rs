//! Signed jobs through the real hub: author with `bosunctl job new|sign`
//! (stock `ssh-keygen -Y sign`), submit with `bosunctl job submit`, and wait
//! for the agent's result at the hub.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::RealHub;
use super::signing::OperatorKey;

/// Runs `bosunctl` against `hub` with `args`; every setting is a flag, so no config file is
/// read or needed.
pub async fn ctl(hub: &RealHub, args: &[&str]) {
    let mut argv = vec![
        "bosunctl".to_owned(),
        "--hub-url".into(),
        hub.url.clone(),
        "--fingerprint".into(),
        hub.fingerprint.clone(),
        "--admin-token".into(),
        hub.admin.clone(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let cli = bosunctl::cli::Cli::try_parse_from(&argv).unwrap();
    bosunctl::dispatch(cli).await.unwrap();
}

/// Authors, signs and submits a job; gives its id.
pub async fn submit(hub: &RealHub, key: &OperatorKey, dir: &Path, args: &[&str]) -> Uuid {
    let file = dir.join(format!("job-{}.json", Uuid::new_v4().simple()));
    let file_text = file.display().to_string();
    let mut new = vec!["job", "new", "-o", &file_text];
    new.extend_from_slice(args);
    ctl(hub, &new).await;
    let key_text = key.key.display().to_string();
    ctl(hub, &["job", "sign", &file_text, "-f", &key_text]).await;
    let sig = format!("{file_text}.sig");
    // Tests send jobs the agent must refuse (a stranger's guest, a wrong vmid): past
    // bosunctl's own checks, which `ctl/tests/cli.rs` covers.
    ctl(hub, &["job", "submit", "--skip-checks", &file_text, &sig]).await;
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    doc["job_id"].as_str().unwrap().parse().unwrap()
}

/// Waits (up to 60 s) for the job's result at the hub.
pub async fn job_result(hub: &RealHub, host: Uuid, job: Uuid) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, jobs) = hub
            .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
            .await;
        let found = jobs
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["job_id"] == job.to_string().as_str() && !j["result"].is_null())
            .map(|j| j["result"].clone());
        if let Some(result) = found {
            return result;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no result for job {job}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
