//! Break-glass consent from both ends (decision 0080): a guest's controller on its local API,
//! and the real support shell (`bosun-support`) run as a door's forced command, its `sudo` a
//! stand-in that answers `pct config VMID` from the simulator (through its `pct` stand-in) and
//! succeeds at everything else.

use std::process::Output;
use std::time::Duration;

use bosun_pvesim::SimHandle;
use serde_json::Value;

use super::{AgentFiles, InProcessAgent, RealHub, enrolled_stack, eventually};

/// An enrolled stack whose agent (started in process) serves its guests' local API and keeps
/// break-glass's spool and consent file beneath its directory.
pub struct ConsentStack {
    pub sim: SimHandle,
    pub hub: RealHub,
    pub files: AgentFiles,
    pub spool: std::path::PathBuf,
    pub consent: std::path::PathBuf,
    pub agent: InProcessAgent,
}

/// [`ConsentStack`], its agent started.
pub async fn consent_stack() -> ConsentStack {
    let (sim, hub, files) = enrolled_stack().await;
    let spool = files.dir.path().join("support-commands.jsonl");
    let consent = files.dir.path().join("consent.json");
    files.use_local_api(
        0,
        &format!(
            "[backup]\nstorage = \"local\"\n[break_glass]\nspool = {spool:?}\nconsent = {consent:?}\nscan_interval_seconds = 1\n"
        ),
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    ConsentStack {
        sim,
        hub,
        files,
        spool,
        consent,
        agent,
    }
}

/// Runs the workspace's `bosun-support` as the door's forced command does: the session the
/// line names, the agent's consent file, `asked` as the client's command; gives all it did.
pub fn support_shell(
    files: &AgentFiles,
    sim: &SimHandle,
    session: &str,
    spool: &std::path::Path,
    consent: &std::path::Path,
    asked: &str,
) -> Output {
    use std::os::unix::fs::PermissionsExt as _;
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .to_path_buf();
    let (built, sim_pct) = (bin.join("bosun-support"), bin.join("bosun-pvesim-pct"));
    for program in [&built, &sim_pct] {
        assert!(
            program.is_file(),
            "{} is missing: build the workspace's binaries first",
            program.display()
        );
    }
    let pct = files.dir.path().join("support-pct");
    if !pct.exists() {
        std::fs::copy(&sim_pct, &pct).unwrap();
        let beside = files.dir.path().join("support-pct.endpoint.json");
        std::fs::write(&beside, serde_json::to_vec(sim.endpoint()).unwrap()).unwrap();
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let sudo = files.dir.path().join("sudo");
    let script = format!(
        "#!/bin/sh\n[ \"$3 $4\" = '/usr/sbin/pct config' ] || exit 0\nshift 3\nexec '{}' \"$@\"\n",
        pct.display()
    );
    std::fs::write(&sudo, script).unwrap();
    std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::process::Command::new(built)
        .args(["--session", session, "--spool"])
        .arg(spool)
        .arg("--consent")
        .arg(consent)
        .arg("--sudo")
        .arg(&sudo)
        .env("SSH_ORIGINAL_COMMAND", asked)
        .output()
        .unwrap()
}

/// A guest's local API as its controller reaches it: the bootstrap's URL and token.
pub struct Controller {
    pub url: String,
    pub token: String,
    pub client: reqwest::Client,
}

impl Controller {
    /// Guest `vmid`'s controller, once its bootstrap is pushed and its token is accepted.
    pub async fn of(files: &AgentFiles, vmid: u32) -> Controller {
        let path = files.helper.bootstrap_path(vmid);
        eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
            let path = path.clone();
            async move { path.exists() }
        })
        .await;
        let doc = files.helper.read_bootstrap(vmid);
        let controller = Controller {
            url: doc.local_api.url.clone(),
            token: doc.local_api.token.expose().to_owned(),
            client: reqwest::Client::builder()
                .danger_accept_invalid_certs(true)
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        eventually(Duration::from_secs(10), "the token is accepted", || async {
            controller.call(reqwest::Method::GET, "", None).await.0 == 200
        })
        .await;
        controller
    }

    /// `method` on `/v1/break-glass/consent` + `query` with `body`.
    pub async fn call(
        &self,
        method: reqwest::Method,
        query: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(
                method,
                format!("{}/v1/break-glass/consent{query}", self.url),
            )
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    pub async fn audit(&self) -> Vec<Value> {
        let page: Value = self
            .client
            .get(format!("{}/v1/audit?limit=100", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["entries"].as_array().cloned().unwrap_or_default()
    }
}
