//! An adopted guest (decision 0073): a container made on the node before Bosun (`pct create`
//! as root) is left alone until the operator signs an `adopt` job pinned to its hostname and
//! config digest. A job signed for another hostname is refused and writes nothing; the right
//! one gives the container a guest id and the agent's identity beside its own tags, in one
//! write to Proxmox.

use std::path::Path;

use bosun_pve::Pve as _;
use serde_json::{Value, json};

use super::children::Children;
use super::scenario::{check, converge_job, ignore_plain_output};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};

/// The container made before Bosun.
const VMID: u32 = 150;
/// Its hostname.
const HOSTNAME: &str = "legacy-shop";

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct AdoptOutcome {
    /// The job's output: the guest id and identity the container got.
    pub adopted: Value,
    /// Why the job signed for another hostname was refused.
    pub refused: String,
    /// Writes to the container that reached Proxmox (the identity's one).
    pub writes: usize,
}

/// Writes, signs and submits an `adopt` of [`VMID`] with `params`; gives its job id.
async fn signed_adopt(
    (bins, out): (&Path, &Path),
    host: &str,
    name: &str,
    params: &[String],
) -> Result<Value, DemoError> {
    let doc = out.join(format!("operator/{name}.json"));
    let doc_arg = doc.display().to_string();
    let vmid = VMID.to_string();
    let mut args = vec![
        "job", "new", "--kind", "adopt", "--host", host, "--vmid", &vmid,
    ];
    for param in params {
        args.extend(["--param", param.as_str()]);
    }
    args.extend(["--valid-hours", "1", "-o", &doc_arg]);
    stack::ctl(bins, out, &args)
        .await
        .or_else(ignore_plain_output)?;
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    stack::ctl(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg])
        .await
        .or_else(ignore_plain_output)?;
    let sig_arg = format!("{doc_arg}.sig");
    let submitted = stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await?;
    check(submitted["created"] == json!(true), || {
        format!("submitting {name} answered {submitted}")
    })?;
    Ok(submitted["job_id"].clone())
}

/// The writes to [`VMID`] the simulator saw.
async fn writes(sim: &SimEndpoint) -> Result<usize, DemoError> {
    let at = format!("/lxc/{VMID}");
    Ok(sim::sim_requests(sim)
        .await?
        .iter()
        .filter(|r| {
            r.method != "GET" && (r.path.ends_with(&at) || r.path.contains(&format!("{at}/")))
        })
        .count())
}

/// The step: a container there before Bosun, adopted by a signed job.
pub async fn adopted_guest(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: uuid::Uuid,
) -> Result<AdoptOutcome, DemoError> {
    let vmid = VMID.to_string();
    let template = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";
    sim::sim_pct(
        sim,
        &[
            "create",
            &vmid,
            template,
            "--hostname",
            HOSTNAME,
            "--rootfs",
            "local-lvm:4",
            "--memory",
            "512",
            "--tags",
            "shop",
            "--unprivileged",
            "1",
        ],
        None,
    )
    .await?;
    sim::sim_pct(sim, &["start", &vmid], None).await?;
    n.detail(format!(
        "$ pct create {VMID} … --hostname {HOSTNAME} --tags shop && pct start {VMID}   (root, before Bosun)"
    ));
    let pve = sim::pve_client(sim)?;
    let vm = bosun_pve::Vmid::new(VMID).map_err(|e| DemoError::Check(e.to_string()))?;
    let config = pve.ct_config(vm).await.map_err(|source| DemoError::Pve {
        what: "reading the container's config",
        source,
    })?;
    let digest = config.digest.clone();
    n.detail(format!(
        "$ pvesh get /nodes/pve/lxc/{VMID}/config   → hostname {HOSTNAME}, digest {digest}"
    ));
    let host = host_id.to_string();
    let before = writes(sim).await?;

    let wrong = signed_adopt(
        (bins, out),
        &host,
        "adopt-wrong",
        &[
            "hostname=legacy-blog".to_owned(),
            format!("config_digest={digest}"),
        ],
    )
    .await?;
    let refused = converge_job(children, bins, out, &host, &wrong).await?;
    let detail = refused["detail"].as_str().unwrap_or_default().to_owned();
    check(
        refused["outcome"] == json!("failed") && detail.contains("hostname_mismatch"),
        || format!("the adopt signed for another hostname ended {refused}"),
    )?;
    check(writes(sim).await? == before, || {
        "the refused adopt wrote to the container".to_owned()
    })?;
    n.detail("$ bosunctl job new --kind adopt --vmid 150 --param hostname=legacy-blog …   → refused (hostname_mismatch), nothing written");

    let right = signed_adopt(
        (bins, out),
        &host,
        "adopt",
        &[
            format!("hostname={HOSTNAME}"),
            format!("config_digest={digest}"),
        ],
    )
    .await?;
    let adopted = converge_job(children, bins, out, &host, &right).await?;
    check(adopted["outcome"] == json!("succeeded"), || {
        format!("the adopt ended {adopted}")
    })?;
    let identity = adopted["output"]["identity"].as_str().unwrap_or_default();
    let config = pve.ct_config(vm).await.map_err(|source| DemoError::Pve {
        what: "reading the adopted container's config",
        source,
    })?;
    let tags = config.get_str("tags").unwrap_or_default();
    check(
        !identity.is_empty() && tags.contains(identity) && tags.contains("shop"),
        || format!("the adopted container's tags are {tags:?}, its identity {identity:?}"),
    )?;
    let written = writes(sim).await? - before;
    check(written == 1, || {
        format!("{written} writes reached the adopted container, not 1")
    })?;
    n.detail(format!(
        "agent: adopted CT {VMID} as guest {} — tags {tags} (one write, with the signed digest)",
        adopted["output"]["guest_id"].as_str().unwrap_or_default()
    ));
    Ok(AdoptOutcome {
        adopted: adopted["output"].clone(),
        refused: detail,
        writes: written,
    })
}
