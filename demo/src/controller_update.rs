//! A new controller reaches a golden guest (DESIGN §11, decision 0102). The operator puts a new
//! controller image archive on the node (the helper's `controller_image_archive`) and rolls it
//! out by label: `bosunctl fleet rollout --kind controller-update --label ring=canary --param
//! digest=sha256:…` signs one `controller-update` job for each running guest of the canary host
//! whose controller does not run it yet (delta, the golden guest). The agent snapshots delta,
//! has the helper place the image (`restart_controller` with the signed digest: the archive
//! hashed on the host and refused unless it is the signed digest, `pct push`ed into the guest,
//! `docker load`ed, tagged `bosun/controller:golden`, its digest written beside the bootstrap,
//! the unit restarted, the archive in the guest hashed back), and commits once delta's
//! controller, started again by the demo as the guest's systemd, reports the new digest
//! healthy. The hub then shows delta's controller digest as the helper measured it. The step
//! prints the time from the rollout's start to the restart on the new image and to healthy.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::Digest as _;
use uuid::Uuid;

use super::children::Children;
use super::controller::{self, ControllerOutcome};
use super::helper::HelperInstall;
use super::scenario::{check, converge};
use super::sim::{self, SimEndpoint};
use super::stack::program;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;

fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

/// The label the operator's rollouts select the canary host by.
const RING: &str = "ring=canary";
/// How long the rollout may take, its health gate included.
const ROLLOUT_WAIT: Duration = Duration::from_secs(180);
/// The new controller image archive (the simulated guest's `docker load` takes any bytes).
const NEW_IMAGE: &[u8] = b"bosun demo controller image 2, as docker save would write it\n";

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct ControllerUpdateOutcome {
    /// The new image's signed digest.
    pub digest: String,
    /// `bosunctl fleet rollout`'s report (`--json`).
    pub rollout: Value,
    /// What the hub shows as delta's controller digest afterwards (the helper's measurement).
    pub reported: Option<String>,
    /// Milliseconds from the rollout's start to the restart on the new image.
    pub to_restart_ms: u128,
    /// Milliseconds from the rollout's start to its healthy, committed end.
    pub to_healthy_ms: u128,
}

/// The step; see the module documentation.
pub(super) async fn controller_update(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (sim, helper): (&SimEndpoint, &HelperInstall),
    (host_id, managed): (Uuid, &ControllerOutcome),
) -> Result<ControllerUpdateOutcome, DemoError> {
    let vmid = managed.vmid;
    let archive = helper
        .prefix
        .join("var/lib/bosun-helper/golden/controller-image.tar");
    std::fs::write(&archive, NEW_IMAGE).map_err(artifact(&archive))?;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(NEW_IMAGE)));
    n.detail(format!(
        "the operator copies the new controller image archive to the node's controller_image_archive (root-only): {}…",
        &digest[..19]
    ));
    let before = controller::restarts(sim, vmid).await?;
    let started = Instant::now();
    let key = out.join("operator/id_ed25519");
    let mut rollout = start_rollout((bins, out), &digest, &key, &host_id.to_string())?;
    n.detail(format!(
        "$ bosunctl fleet rollout --kind controller-update --label {RING} --hosts {host_id} --param digest={}… -f id_ed25519   (one signed job per running guest whose controller does not run it)",
        &digest[..19]
    ));
    // Delta's systemd: when the helper restarts the unit, the controller starts again on the
    // image the helper placed, reading the digest it wrote beside the bootstrap.
    let deadline = started + ROLLOUT_WAIT;
    while controller::restarts(sim, vmid).await? <= before {
        children.check_alive()?;
        if let Ok(Some(status)) = rollout.try_wait() {
            return Err(DemoError::Check(format!(
                "`bosunctl fleet rollout` ended ({status}) before delta's controller was restarted; see logs/fleet-rollout-controller.log"
            )));
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the helper's restart of delta's controller on the new image".into(),
                after: ROLLOUT_WAIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let to_restart_ms = started.elapsed().as_millis();
    let placed = sim::sim_guest_file(sim, vmid, bosun_proto::helper::GUEST_CONTROLLER_DIGEST)
        .await?
        .ok_or_else(|| DemoError::Check("the helper wrote no controller.digest into delta".into()))?
        .content()?;
    check(String::from_utf8_lossy(&placed).trim() == digest, || {
        format!("delta's controller.digest holds {placed:?}, not {digest}")
    })?;
    let image = sim::sim_guest_file(sim, vmid, bosun_proto::helper::GUEST_CONTROLLER_IMAGE)
        .await?
        .map(|f| f.content())
        .transpose()?;
    check(image.as_deref() == Some(NEW_IMAGE), || {
        "the image in delta is not the new archive".to_owned()
    })?;
    n.detail(format!(
        "agent: snapshot, then helper restart_controller with the signed digest → pct push {vmid} … /etc/bosun-bootstrap/controller-image.tar, docker load, docker tag … bosun/controller:golden, controller.digest, systemctl restart, the image hashed back: {to_restart_ms} ms"
    ));
    controller::restart_on(children, (bins, out), vmid, &placed).await?;
    let report = finish(rollout).await?;
    let to_healthy_ms = started.elapsed().as_millis();
    n.detail(format!(
        "delta's controller runs the new image and reports it healthy: the rollout committed {to_healthy_ms} ms after it started"
    ));
    let guest = managed.guest;
    let fleet = converge(
        children,
        client,
        "delta's measured controller digest",
        |f| {
            controller::delta_report(f, guest).is_some_and(|g| {
                g.controller_digest.as_deref() == Some(digest.as_str())
                    && g.controller_expected.as_deref() == Some(digest.as_str())
            })
        },
    )
    .await?;
    let reported =
        controller::delta_report(&fleet, guest).and_then(|g| g.controller_digest.clone());
    n.detail(format!(
        "$ bosunctl status --json   → delta: \"controller_digest\": \"{}\" (the helper's SHA-256 of the image in the guest), \"controller_expected\": the signed digest",
        reported.as_deref().unwrap_or("-")
    ));
    Ok(ControllerUpdateOutcome {
        digest,
        rollout: report,
        reported,
        to_restart_ms,
        to_healthy_ms,
    })
}

/// Starts `bosunctl fleet rollout` of the controller `digest` to the guests of the hosts
/// labeled [`RING`], for `host` only (the operator names its canary, decision 0093).
fn start_rollout(
    (bins, out): (&Path, &Path),
    digest: &str,
    key: &Path,
    host: &str,
) -> Result<tokio::process::Child, DemoError> {
    let program: PathBuf = program(bins, "bosunctl")?;
    let log = out.join("logs/fleet-rollout-controller.log");
    let stderr = std::fs::File::create(&log).map_err(artifact(&log))?;
    tokio::process::Command::new(&program)
        .arg("--config")
        .arg(out.join("operator/ctl.json"))
        .args(["--json", "fleet", "rollout", "--kind", "controller-update"])
        .args(["--label", RING, "--hosts", host, "--valid-hours", "1"])
        .arg("--param")
        .arg(format!("digest={digest}"))
        .args(["--wait", "2m", "--deadline", "10m", "-f"])
        .arg(key)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DemoError::Spawn { program, source })
}

/// Waits for the rollout's verdict; gives its report.
async fn finish(child: tokio::process::Child) -> Result<Value, DemoError> {
    let output = tokio::time::timeout(ROLLOUT_WAIT, child.wait_with_output())
        .await
        .map_err(|_| DemoError::Timeout {
            what: "`bosunctl fleet rollout --kind controller-update` to end".into(),
            after: ROLLOUT_WAIT,
        })?
        .map_err(|source| DemoError::Spawn {
            program: "bosunctl".into(),
            source,
        })?;
    if !output.status.success() {
        return Err(DemoError::Check(format!(
            "`bosunctl fleet rollout --kind controller-update` exited {}; see logs/fleet-rollout-controller.log",
            output.status
        )));
    }
    serde_json::from_slice(&output.stdout).map_err(|err| {
        DemoError::Check(format!("`bosunctl fleet rollout` printed no report: {err}"))
    })
}
