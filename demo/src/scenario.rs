//! The whole system on one machine: a simulated Proxmox node, the hub, the agent (as an
//! unprivileged user when the demo runs as root) and the operator's own tools, walked through
//! the scenario of `make demo`. Every step checks what it shows; `bosun-tests`'
//! `demo_scenario` runs this same driver and asserts on its [`Outcome`].

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_proto::admin::AlertKind;
use serde_json::{Value, json};
use uuid::Uuid;

use super::children::{Children, RunAs, Site};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use super::{guest_steps, helper};
use bosunctl::client::HubClient;
use bosunctl::config::Settings;
use bosunctl::status::{self, FleetStatus};

/// How long the demo waits for the system to converge after an operator action.
pub(super) const CONVERGE: Duration = Duration::from_secs(45);

/// What the scenario established, for the summary and the integration test.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The enrolled host.
    pub host_id: Option<Uuid>,
    /// `(guest_id, vmid)` of the guest kept throughout.
    pub kept: Option<(Uuid, u32)>,
    /// `(guest_id, vmid)` of the guest dropped from desired state, then decommissioned.
    pub dropped: Option<(Uuid, u32)>,
    /// Whether the agent ran as an unprivileged user.
    pub agent_uid: Option<u32>,
    /// Alert kinds raised, oldest first.
    pub alerts: Vec<String>,
    /// Destroy calls the simulator saw, per vmid.
    pub destroys: Vec<u32>,
    /// Whether the resubmitted job was refused (not queued again).
    pub replay_refused: bool,
    /// Step 3: the reference client in guest alpha.
    pub guest_client: Option<guest_steps::GuestClientOutcome>,
    /// Step 4: the status of the cross-guest request.
    pub cross_guest_status: Option<u16>,
    /// The helper's private prefix (removed when the demo ends).
    pub helper_prefix: Option<std::path::PathBuf>,
    /// Restores the simulator saw after a hostile hub named a customer's backup as a new
    /// guest's golden archive (step 8), and whether the hub raised `golden_refused`.
    pub hostile_golden: Option<(usize, bool)>,
    /// Step 9: the offsite PBS target, both backup tiers, their pruning and status lines.
    pub tiers: Option<super::backup_tiers::TiersOutcome>,
    /// Steps 10 and 11: a restore test passing, and guest alpha restored after its loss.
    pub recovery: super::recovery::RecoveryOutcome,
    /// `--scenario host-loss`: what the host-loss walk established (`None` for the others).
    pub host_loss: Option<super::host_loss::HostLossOutcome>,
    /// Step 14: a forged agent update refused, the signed one committed by the gate.
    pub self_update: Option<super::self_update::SelfUpdateOutcome>,
    /// Step 15: a signed break-glass door opened by the helper, then closed.
    pub break_glass: Option<super::break_glass::BreakGlassOutcome>,
    /// Step 16: the node's CPU past the high threshold, then back below the low one.
    pub host_health: Option<super::host_health::HostHealthOutcome>,
    /// The last step: guest alpha's controller reads its audit log; the operator's
    /// notification of bravo's decommission.
    pub audit_log: Option<super::audit_log::AuditLogOutcome>,
    /// Step 17: guest charlie's archive, its data torn, boots in its restore test and fails
    /// the guest's own check.
    pub restore_check: Option<super::restore_check::RestoreCheckOutcome>,
    /// An adopted guest: a container made before Bosun, adopted by a signed job.
    pub adopted: Option<super::adopt::AdoptOutcome>,
    /// Break-glass the customer consents to: alpha's `guest-config` refused, run, refused.
    pub consent: Option<super::consent::ConsentOutcome>,
    /// PBS verification between restore tests: an ok verify per guest and tier, then damaged
    /// chunks failing it (`verify_failed`).
    pub verified: Option<super::verify::VerifyStepOutcome>,
    /// The controller in every guest is managed: guest delta provisioned from the host's own
    /// golden build under a signed recipe, its controller crashed and healed in place.
    pub controller: Option<super::controller::ControllerOutcome>,
    /// A new controller rolled out by label to golden guest delta, placed and measured by the
    /// helper.
    pub controller_update: Option<super::controller_update::ControllerUpdateOutcome>,
    /// The customer's app: alpha's customer key signed into the plan, delivered in alpha's
    /// bootstrap and written where the golden image's sshd reads it.
    pub customer_app: Option<super::customer_app::CustomerAppOutcome>,
    /// The tunnel, managed: the signed route written as ingress with the sealed credentials,
    /// an unready replica restarted, a hub's forged route refused.
    pub tunnel: Option<super::tunnel::TunnelOutcome>,
    /// Guests come up in an order: the shop's chain brought up, its startup order, the cycle
    /// refused.
    pub order: Option<super::boot_order::OrderOutcome>,
    /// A fair share for every guest: the shop's shares as Proxmox stores them, a loosening
    /// held at the plan's ceilings.
    pub share: Option<super::fair_share::ShareOutcome>,
    /// The node's access: `pve setup` finding nothing to change, `pve check` passing.
    pub pve_access: Option<super::pve_access::PveAccessOutcome>,
    /// A VM beside the containers: restored from the base signed for a VM, shown as `qemu`.
    pub vm: Option<super::vm_guest::VmOutcome>,
    /// The VM's lifecycle: backed up with its freeze, restore-tested, recovered by DR.
    pub vm_lifecycle: Option<super::vm_lifecycle::VmLifecycleOutcome>,
}

/// Runs the scenario; children it starts stay in `children` for the caller to stop. Gives
/// the unit stand-in the agent runs under from its self-update on (the agent stops when the
/// caller drops it), and what `--keep-running` settles the host with.
pub async fn run(
    n: &mut Narrator,
    children: &mut Children,
    bins: &Path,
    out: &Path,
    time_scale: f64,
    outcome: &mut Outcome,
) -> Result<(super::unit::FakeSystemd, super::settle::Kept), DemoError> {
    n.say("Bosun demo: a Proxmox host kept by Bosun, on this machine");
    n.say("a simulated Proxmox VE node, the hub on SQLite, the host agent and the operator's own tools");
    n.say("");
    let (sim, client, host_id, agent, run_as, helper, hub) = n
        .step(
            "the operator initialises the hub and creates an enrollment token; the agent enrolls",
            async |n| {
                // The agent provisions a guest only after bosun-helper (root) has hashed its
                // golden archive, and the helper pushes the bootstrap: the demo needs root.
                let Some(user) = RunAs::for_agent("bosun-test")? else {
                    return Err(DemoError::Check(
                        "the demo needs root: the agent provisions a guest only after bosun-helper \
                         (root) has hashed its golden archive, and the helper pushes the bootstrap"
                            .to_owned(),
                    ));
                };
                let run_as = Some(user);
                user.check_reaches(&out.join("agent"))?;
                user.check_reaches(&stack::program(bins, "bosun-agentd")?)?;
                let sim = sim::start_sim(children, bins, out, Site::ONLY, time_scale).await?;
                n.detail(format!(
                    "proxmox ve   {} (simulated node {})",
                    sim.url, sim.node
                ));
                let hub = stack::start_hub(children, bins, out).await?;
                n.detail(format!(
                    "$ bosun-hubd init && bosun-hubd serve   → {}",
                    hub.url
                ));
                stack::ctl_hub_init(bins, out, &hub).await?;
                n.detail(
                    "$ bosunctl hub init            (pinned certificate, admin token saved 0600)",
                );
                let created =
                    stack::ctl(bins, out, &["enroll-token", "create", "--ttl", "10m"]).await?;
                let token = created["token"].as_str().ok_or_else(|| {
                    DemoError::Check(format!("enroll-token create answered {created}"))
                })?;
                n.detail("$ bosunctl enroll-token create --ttl 10m   (one-time, shown once)");
                let (_, signer) = stack::operator_key(out).await?;
                let helper = helper::start(
                    children,
                    (bins, out),
                    Site::ONLY,
                    &sim,
                    "bosun-test",
                    user,
                )
                .await?;
                n.detail(format!(
                    "bosun-helper (root) under {} via systemd-socket-activate, socket 0660 root:bosun-test",
                    helper.prefix.display()
                ));
                let files = stack::write_agent_files(
                    out,
                    Site::ONLY,
                    &sim,
                    &hub,
                    token,
                    &signer,
                    run_as,
                    Some(helper.socket.as_path()),
                )?;
                stack::start_agent(children, bins, out, &files, run_as)?;
                n.detail(format!(
                    "bosun-agentd started as user bosun-test (uid {}), no root",
                    user.uid
                ));
                let client = HubClient::new(Settings {
                    url: hub.url.clone(),
                    fingerprint: hub.fingerprint.clone(),
                    token: hub.admin_token.clone(),
                    allowed_signers: None,
                })?;
                let fleet = converge(children, &client, "the host to enroll and poll", |f| {
                    f.hosts.len() == 1 && f.hosts[0].summary.liveness.as_str() == "ok"
                })
                .await?;
                let host = &fleet.hosts[0].summary;
                n.detail(format!(
                    "hub shows host {} ({}) {}",
                    host.hostname,
                    host.host_id,
                    host.liveness.as_str()
                ));
                Ok((sim, client, host.host_id, files, run_as, helper, hub))
            },
        )
        .await?;
    outcome.helper_prefix = Some(helper.prefix.clone());
    outcome.host_id = Some(host_id);
    outcome.agent_uid = run_as.map(|u| u.uid);
    let host_arg = host_id.to_string();

    let alpha = Uuid::new_v4();
    let bravo = Uuid::new_v4();
    let (alpha_vmid, bravo_vmid) = n
        .step(
            "desired state with two customer guests: both provisioned from the golden archive",
            async |n| {
                let golden_file = out.join("operator/golden.json");
                let golden_arg = golden_file.display().to_string();
                let key_arg = out.join("operator/id_ed25519").display().to_string();
                stack::ctl(
                    bins,
                    out,
                    &[
                        "golden", "sign", "--volid", &sim.golden_volid, "--sha256",
                        &sim.golden_sha256, "-f", &key_arg, "-o", &golden_arg,
                    ],
                )
                .await
                .or_else(ignore_plain_output)?;
                n.detail("$ bosunctl golden sign --volid … --sha256 … -f id_ed25519 -o golden.json   (ssh-keygen -Y sign -n bosun-golden@v1)");
                let file = out.join("operator/desired-1.json");
                write_json(&file, &desired(out, &[(alpha, "alpha"), (bravo, "bravo")])?)?;
                let file_arg = file.display().to_string();
                stack::ctl(
                    bins,
                    out,
                    &["desired", "set", "--host", &host_arg, &file_arg],
                )
                .await?;
                n.detail("$ bosunctl desired set --host … desired-1.json   (generation 1)");
                let fleet = converge(children, &client, "desired = applied, both running", |f| {
                    applied(f, 1)
                        && observed(f, alpha) == "running"
                        && observed(f, bravo) == "running"
                })
                .await?;
                show(n, &fleet);
                let vmids = (vmid_of(&fleet, alpha)?, vmid_of(&fleet, bravo)?);
                inspect_provisioned(n, &sim, &[("alpha", vmids.0), ("bravo", vmids.1)]).await?;
                Ok(vmids)
            },
        )
        .await?;
    outcome.kept = Some((alpha, alpha_vmid));
    outcome.dropped = Some((bravo, bravo_vmid));

    let step3 = "inside guest alpha the reference client reads its bootstrap, pins the certificate, snapshots, and quiesces for a due backup";
    let step4 = "guest bravo's token is used against guest alpha: refused (403), no proxmox call";
    let boots = n
        .step(step3, async |n| {
            let alpha_boot = guest_steps::bootstrap(&sim, out, alpha_vmid).await?;
            let bravo_boot = guest_steps::bootstrap(&sim, out, bravo_vmid).await?;
            outcome.guest_client =
                Some(guest_steps::reference_client(n, bins, out, &alpha_boot).await?);
            Ok(bravo_boot)
        })
        .await?;
    outcome.cross_guest_status = Some(
        n.step(step4, async |n| {
            guest_steps::cross_guest(n, &sim, &boots, alpha_vmid).await
        })
        .await?,
    );

    n.step(
        "a hostile change drops a guest: the agent refuses to destroy it and reports it orphaned",
        async |n| {
            let file = out.join("operator/desired-2.json");
            write_json(&file, &desired(out, &[(alpha, "alpha")])?)?;
            let file_arg = file.display().to_string();
            stack::ctl(
                bins,
                out,
                &["desired", "set", "--host", &host_arg, &file_arg],
            )
            .await?;
            n.detail("$ bosunctl desired set --host … desired-2.json   (generation 2, bravo gone)");
            let fleet = converge(children, &client, "bravo reported orphaned", |f| {
                applied(f, 2) && observed(f, bravo) == "orphaned"
            })
            .await?;
            show(n, &fleet);
            let destroys = destroys(&sim).await?;
            check(destroys.is_empty(), || {
                format!("the simulator saw destroy calls: {destroys:?}")
            })?;
            n.detail("simulator log: no destroy call was made");
            Ok(())
        },
    )
    .await?;

    n.step(
        "the operator signs a decommission with ssh-keygen -Y sign; it runs once, a replay is refused",
        async |n| {
            let doc = out.join("operator/decommission.json");
            let doc_arg = doc.display().to_string();
            let key_arg = out.join("operator/id_ed25519").display().to_string();
            let (guest_arg, vmid_arg) = (bravo.to_string(), bravo_vmid.to_string());
            stack::ctl(
                bins,
                out,
                &[
                    "job", "new", "--kind", "decommission", "--host", &host_arg, "--guest",
                    &guest_arg, "--vmid", &vmid_arg, "--valid-hours", "1", "-o", &doc_arg,
                ],
            )
            .await
            .or_else(ignore_plain_output)?;
            n.detail("$ bosunctl job new --kind decommission … -o decommission.json");
            stack::ctl(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg])
                .await
                .or_else(ignore_plain_output)?;
            n.detail("$ bosunctl job sign decommission.json -f id_ed25519   (ssh-keygen -Y sign -n bosun-job@v1)");
            let sig_arg = format!("{doc_arg}.sig");
            let first = stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await?;
            check(first["created"] == json!(true), || format!("submit answered {first}"))?;
            n.detail("$ bosunctl job submit decommission.json decommission.json.sig   → queued");
            let job_id = first["job_id"].clone();
            let result = converge_job(children, bins, out, &host_arg, &job_id).await?;
            check(result["outcome"] == json!("succeeded"), || {
                format!("decommission ended {result}")
            })?;
            n.detail(format!("agent: decommission {}", result["outcome"]));
            // The replay goes past the desk's own checks (which refuse it once the hub hears
            // that bravo is gone): the hub and the agent are what refuse it.
            let again = stack::ctl(
                bins,
                out,
                &["job", "submit", "--skip-checks", &doc_arg, &sig_arg],
            )
            .await?;
            check(again["created"] == json!(false), || {
                format!("the replay was queued again: {again}")
            })?;
            n.detail(format!(
                "$ bosunctl job submit --skip-checks decommission.json …   (the same bytes again) → job {} not queued again (state {})",
                job_id, again["state"]
            ));
            tokio::time::sleep(Duration::from_secs(2)).await;
            let destroys = destroys(&sim).await?;
            check(destroys == [bravo_vmid], || {
                format!("expected exactly one destroy of {bravo_vmid}, the simulator saw {destroys:?}")
            })?;
            n.detail(format!("simulator log: guest {bravo_vmid} destroyed exactly once"));
            Ok(())
        },
    )
    .await?;
    outcome.replay_refused = true;

    n.step(
        "the agent stops: the hub shows it stopped, then raises the overdue alert when it does \
         not come back; it starts again: recovery follows",
        async |n| {
            let status = children
                .stop("bosun-agentd", Duration::from_secs(10))
                .await?;
            n.detail(format!("bosun-agentd stopped on SIGTERM ({status})"));
            let begun = Instant::now();
            converge(children, &client, "the host shown stopped", |f| {
                f.hosts
                    .first()
                    .is_some_and(|h| h.summary.liveness.as_str() == "stopped")
            })
            .await?;
            n.detail("hub: stopped (its last poll said it was a planned stop), not paged");
            converge(children, &client, "the host_overdue alert", |f| {
                has_alert(f, AlertKind::HostOverdue)
            })
            .await?;
            n.detail(format!(
                "hub: host_overdue after {} of silence (the demo's stop bound: 5 s)",
                super::narrate::seconds(begun.elapsed())
            ));
            stack::start_agent(children, bins, out, &agent, run_as)?;
            n.detail("bosun-agentd started again");
            let fleet = converge(children, &client, "the host_recovered alert", |f| {
                has_alert(f, AlertKind::HostRecovered)
                    && f.hosts
                        .first()
                        .is_some_and(|h| h.summary.liveness.as_str() == "ok")
                    && applied(f, 2)
                    && observed(f, alpha) == "running"
            })
            .await?;
            n.detail("hub: host_recovered");
            show(n, &fleet);
            let printed = stack::ctl(bins, out, &["status"]).await?;
            let listed = printed["hosts"][0]["host_id"] == json!(host_id)
                && printed["alerts"].as_array().is_some_and(|a| a.len() >= 2);
            check(listed, || {
                format!("`bosunctl status --json` printed {printed}")
            })?;
            let mut alerts = fleet.alerts.clone();
            alerts.sort_by_key(|a| a.id);
            outcome.alerts = alerts.iter().map(|a| a.kind.as_str().to_owned()).collect();
            Ok(())
        },
    )
    .await?;
    outcome.hostile_golden = Some(
        n.step(
            "a hostile hub points a new guest at guest alpha's backup: refused, golden_refused, no restore",
            async |n| super::hostile::hostile_golden(n, children, &client, bins, out, &sim, &host_arg, (alpha, alpha_vmid)).await,
        )
        .await?,
    );
    outcome.destroys = destroys(&sim).await?;
    outcome.tiers = Some(
        n.step(
            "an offsite PBS becomes a second backup tier: sealed password, retention held until the operator signs a floor, then pruned; status shows each tier's age",
            async |n| super::backup_tiers::two_tiers(n, children, &client, bins, out, &sim, (host_id, &agent.state_dir), (alpha, alpha_vmid)).await,
        )
        .await?,
    );
    let recovery = &mut outcome.recovery;
    n.step(
        "restore tests prove the backups: alpha's newest backup restored into a scratch guest with its links down, started, destroyed",
        async |n| super::recovery::restore_test(n, children, &client, (bins, out), &sim, host_id, alpha, recovery).await,
    )
    .await?;
    n.step(
        "guest alpha is destroyed behind Bosun's back: the agent restores it from its newest verified backup (DR auto), the hub gets RPO and RTO",
        async |n| super::recovery::guest_loss(n, children, &client, (bins, out), &sim, host_id, (alpha, alpha_vmid), recovery).await,
    )
    .await?;
    n.step(
        "a changed archive is never restored: the file behind alpha's newest backup is altered on the storage; the signed restore-now naming it is refused before Proxmox is asked (archive_rejected)",
        async |n| super::recovery::changed_archive(n, children, &client, (bins, out), &sim, host_id, (alpha, alpha_vmid), recovery).await,
    )
    .await?;
    let agent_log = out.join(format!("logs/{}.log", agent.site.name("agentd")));
    n.step(
        "the operator's desk: the dashboard after login, hub and agent metrics, and bosunctl by host name with its desired diff",
        async |n| super::operator_view::operator_view(n, children, &client, (bins, out), host_id, &agent_log).await,
    )
    .await?;
    // The agent runs under the unit stand-in from here on; it stops when `unit` drops.
    let (unit, updated) = n
        .step(
            "the agent updates itself: a job the hub forged is refused; the operator's update, rolled out by label (canary first), is staged by the helper into slot b and the health gate commits it after a clean window",
            async |n| super::self_update::self_update(n, children, &client, (bins, out), &helper, &agent, run_as, host_id).await,
        )
        .await?;
    outcome.self_update = Some(updated);
    outcome.break_glass = Some(
        n.step(
            "break-glass: the operator's signed job opens an expiring SSH door through the helper (break_glass_open); the session runs only the support shell, whose commands reach the audit trail; a signed disable closes it (break_glass_closed)",
            async |n| super::break_glass::break_glass(n, children, &client, (bins, out), (&helper, &agent), host_id).await,
        )
        .await?,
    );
    outcome.host_health = Some(
        n.step(
            "host health: the node's CPU goes past the agent's high threshold (host_cpu_high), then back below the low one (host_usage_recovered)",
            async |n| super::host_health::cpu_high(n, children, &client, &sim).await,
        )
        .await?,
    );
    outcome.restore_check = Some(
        n.step(
            "a restore test fails on corrupt data: guest charlie's archive holds a torn copy of its orders; the scratch guest boots and stays up, and only the guest's own check finds it (restore_test_failed)",
            async |n| super::restore_check::corrupt_data(n, children, &client, (bins, out), &sim, host_id).await,
        )
        .await?,
    );
    outcome.audit_log = Some(
        n.step(
            "guest alpha's controller reads its audit log (GET /v1/audit): what was done to alpha and the break-glass door on its host, never bravo's; the operator was notified of bravo's decommission (destructive_operation)",
            async |n| super::audit_log::audit_log(n, children, &client, (&sim, out), alpha, bravo_vmid).await,
        )
        .await?,
    );
    n.step(
        "the operator triages: acknowledges charlie's failed restore test (open and marked, a warning at most) and silences the host's CPU alerts for a load test (kept, not sent to the webhook); the dashboard shows the host's state after it",
        async |n| super::operator_view::triage(n, &client, (bins, out), host_id).await,
    )
    .await?;
    n.step(
        "the dashboard as the day ends: the fleet, host, alerts and events pages saved with their stylesheet, to open once the hub has stopped",
        async |n| super::operator_view::save_pages(n, &client, out, host_id).await,
    )
    .await?;
    let hub = n.step(
        "the hub's key rotates while the agent keeps polling: the operator signs the pin set naming a staged key, the agent takes it from its poll answers, the key is activated once the agent holds it, served without a restart, and the old key retired",
        async |n| super::key_rotation::rotate(n, children, (bins, out), &hub, host_id).await,
    )
    .await?;
    n.step(
        "the host's key rotates after a suspected leak: bosunctl hosts rotate-key; the agent makes a new key, sends the hub only its hash, presents it, and the old key is refused from then on",
        async |n| {
            super::key_rotation::host_key(n, children, (bins, out), &hub, &agent.state_dir, host_id)
                .await
        },
    )
    .await?;
    outcome.adopted = Some(n.step("an adopted guest: a container made on the node before Bosun is adopted by a signed job pinned to its hostname and config digest; one signed for another hostname is refused and writes nothing", async |n| super::adopt::adopted_guest(n, children, (bins, out), &sim, host_id).await).await?);
    n.step(
        "per-guest thresholds and the node's disks: guest alpha past its own CPU threshold (guest_cpu_high, then guest_usage_recovered); a disk of the node degrades in the simulator, read through Proxmox's disk API with no configuration (disk_failing, disk_worn, then disk_recovered)",
        async |n| {
            super::hardware::guest_threshold(n, children, &client, (bins, out), &sim, host_id).await?;
            super::hardware::smart_warning(n, children, &client, &sim).await
        },
    )
    .await?;
    outcome.consent = Some(n.step("break-glass the customer consents to: through a new door, guest alpha's config is refused until alpha's controller consents on its local API (never for another guest, a day at most); it runs, then a revoke refuses the next one; alpha reads each command in its audit log", async |n| super::consent::customer_consent(n, children, &client, (bins, out), (&sim, &agent), (host_id, alpha)).await).await?);
    n.step("labels and capabilities: the operator labels the host (host_labeled) and finds it by label and by what it reported of itself (hosts list --label --capability); a filter it does not match lists nothing; hosts show prints its machine, helper, storage kinds and NICs", async |n| super::labels::labels_and_capabilities(n, (bins, out), host_id).await).await?;
    outcome.verified = Some(n.step("PBS verification between restore tests: the operator's signed plan asks for a verify every hour; the backup server verifies alpha's group (a result per guest and tier in bosunctl status); chunks of the group rot on the server and the next verify fails (verify_failed)", async |n| super::verify::verify_between_restore_tests(n, children, &client, (bins, out), &sim, (host_id, alpha, alpha_vmid)).await).await?);
    outcome.controller = Some(n.step("the controller in every guest is managed: the operator signs a golden recipe; the host builds it through its helper, boots it in a scratch guest and provisions guest delta from it, whose controller record is the recipe's signed digest; delta's controller crashes and the agent restarts it in place (never a destroy or rollback)", async |n| super::controller::managed_controller(n, children, &client, (bins, out), &sim, host_id).await).await?);
    if let Some(managed) = outcome.controller.clone() {
        outcome.controller_update = Some(n.step("a new controller rolled out by label: the operator puts the new image archive on the node and runs bosunctl fleet rollout --kind controller-update --label ring=canary; the agent snapshots golden guest delta, the helper places the signed image (hashed, pushed, loaded, tagged, measured back) and restarts the controller on it, which reports healthy; the hub shows the digest the helper measured", async |n| super::controller_update::controller_update(n, children, &client, (bins, out), (&sim, &helper), (host_id, &managed)).await).await?);
    }
    outcome.tunnel = Some(n.step("the tunnel, managed: the operator's signed plan routes alpha.demo.example to guest alpha; the agent writes the ingress (one rule per hostname to the guest's address on the bridge, the catch-all last) and the credentials sealed to the host, restarting the tunnel's replicas one at a time; a replica whose readiness fails 3 times is restarted; a hub that re-points the hostname unsigned is refused (data_plan.refused)", async |n| super::tunnel::managed_tunnel(n, children, &client, (bins, out), &sim, (&helper, &agent, &unit, run_as), (host_id, alpha)).await).await?);
    outcome.customer_app = Some(n.step("the customer's app (operator guide §14): the operator signs alpha's customer key into the plan (guest_access); the agent delivers alpha a new bootstrap carrying it; alpha's controller, started as the controller image starts it, writes it where the golden image's sshd reads it (keys only, no password) and reads the customer's own apps file, the Compose containers they deployed over SSH", async |n| super::customer_app::customer_app(n, &client, (bins, out), &sim, (host_id, alpha, alpha_vmid)).await).await?);
    n.step("every guest has an address Bosun assigned: each running guest holds its own static address of the host's pool in its net0 (alpha's survived its disaster recovery) with Proxmox's ipfilter on, so it sends from no other; bosunctl status shows it", async |n| super::addresses::assigned_addresses(n, children, &client, &sim, alpha).await).await?;
    let order = n.step("guests come up in an order: a customer's shop of three guests, web on app on db, each naming what it provides and requires; the agent restores and starts db, then app, then web, and sets each one's place in Proxmox's startup order; bosunctl explain --order shows what waits on what; a hub's cycle is refused with its reason and starves no guest, then the operator's order is put back", async |n| super::boot_order::ordered_bring_up(n, children, &client, (bins, out), &sim, host_id).await).await?;
    outcome.share = Some(n.step("a fair share for every guest: the operator signs bounds into the plan (guest_share) and desired state gives the shop's guests share classes, stored by Proxmox as cpuunits, cpulimit and net0's rate=; a hub that loosens a class past the plan, unsigned, gets the plan's ceilings, refused in the report and the audit trail", async |n| super::fair_share::fair_share(n, children, &client, (bins, out), &sim, (host_id, &order)).await).await?);
    outcome.order = Some(order);
    outcome.pve_access = Some(n.step("the node's access, as an operator sets it up: bosunctl pve setup with an administrator's token given for the run finds the roles, user, token, pool and ACLs the agent has used all along and changes nothing; bosunctl pve check passes on the agent's token, the guest agent's reach held on pool bosun and on no other path", async |n| super::pve_access::setup_and_check(n, (bins, out), &sim).await).await?);
    let vm = n.step("a virtual machine beside the containers: the operator signs the node's VM golden base for a VM (golden sign --kind qemu) and desired state adds guest vm-shop of kind qemu; the agent hashes the base through its helper, restores it into Bosun's pool with its own identity through cloud-init, starts it and writes its bootstrap through the guest agent; bosunctl status shows it running as qemu beside the containers (lxc)", async |n| super::vm_guest::vm_beside_containers(n, children, &client, (bins, out), &sim, host_id).await).await?;
    let mut vm_life = super::vm_lifecycle::VmLifecycleOutcome::default();
    n.step("the VM backed up: vm-shop's controller leaves its restore check in the VM while its apps are quiesced; a signed force-backup backs it up to its first tier as a vzdump-qemu archive, vzdump freezing its filesystems through the guest agent (the simulator shows the freeze window)", async |n| super::vm_lifecycle::backed_up(n, children, &client, (bins, out), &sim, (host_id, &vm), &mut vm_life).await).await?;
    n.step("the VM restore-tested: the agent restores vm-shop's archive into a scratch VM with every link down in the restore request, boots it, runs the guest's own check through the guest agent's exec in the scratch only, destroys it with purge; the hub shows the test passed", async |n| super::vm_lifecycle::restore_tested(n, children, &client, (bins, out), &sim, (host_id, &vm), &mut vm_life).await).await?;
    n.step("the VM recovered: root destroys vm-shop behind Bosun's back (qm stop, qm destroy --purge); the agent finds it lost and restores it by DR from its newest verified archive into its vmid with the same MAC (the same cloud-init instance); the hub's guest_restored alert gives the RPO and RTO", async |n| super::vm_lifecycle::recovered(n, children, &client, &sim, &vm, &mut vm_life).await).await?;
    outcome.vm = Some(vm);
    outcome.vm_lifecycle = Some(vm_life);
    let kept = super::settle::Kept {
        client,
        sim,
        host_id,
        alpha_vmid,
        agent_config: agent.config.clone(),
        run_as,
        altered_archive: outcome.recovery.altered_archive.clone(),
    };
    Ok((unit, kept))
}

/// `bosunctl job new|sign` print a path or an id, not JSON: that is success too.
pub(super) fn ignore_plain_output(err: DemoError) -> Result<Value, DemoError> {
    match err {
        DemoError::Check(message) if message.contains("printed no JSON") => Ok(Value::Null),
        other => Err(other),
    }
}

pub(super) fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), DemoError> {
    if ok {
        Ok(())
    } else {
        Err(DemoError::Check(what()))
    }
}

/// Reads the fleet until `done` holds, a child dies, or [`CONVERGE`] passes.
pub(super) async fn converge(
    children: &mut Children,
    client: &HubClient,
    what: &str,
    done: impl Fn(&FleetStatus) -> bool,
) -> Result<FleetStatus, DemoError> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let fleet = FleetStatus::fetch(client, 50).await?;
        if done(&fleet) {
            return Ok(fleet);
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: what.to_owned(),
                after: CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for the job's result through `bosunctl job list`.
pub(super) async fn converge_job(
    children: &mut Children,
    bins: &Path,
    out: &Path,
    host: &str,
    job_id: &Value,
) -> Result<Value, DemoError> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let jobs = stack::ctl(bins, out, &["job", "list", "--host", host]).await?;
        let result = jobs
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| &j["job_id"] == job_id)
            .map(|j| j["result"].clone())
            .filter(|r| !r.is_null());
        if let Some(result) = result {
            return Ok(result);
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("job {job_id} to finish"),
                after: CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Whether the host applied `generation`; from generation 5 on, whose hostile NFS tier the
/// host refuses and so never reports applied (decision 0065), whether it holds the generation
/// and refuses nothing else.
pub(super) fn applied(fleet: &FleetStatus, generation: u64) -> bool {
    fleet.hosts.first().is_some_and(|h| {
        let s = &h.summary;
        let refused = h
            .last_report
            .as_ref()
            .map_or(&[][..], |r| r.refused.as_slice());
        s.desired_generation == generation
            && (s.applied_generation == generation
                || (s.known_generation == generation
                    && !refused.is_empty()
                    && refused
                        .iter()
                        .all(|r| r.name == super::backup_tiers::HOSTILE_NFS)))
    })
}

pub(super) fn observed(fleet: &FleetStatus, guest: Uuid) -> String {
    fleet
        .hosts
        .first()
        .map(status::guest_lines)
        .into_iter()
        .flatten()
        .find(|g| g.guest_id == Some(guest))
        .map_or_else(|| "absent".to_owned(), |g| g.observed)
}

pub(super) fn vmid_of(fleet: &FleetStatus, guest: Uuid) -> Result<u32, DemoError> {
    fleet
        .hosts
        .first()
        .map(status::guest_lines)
        .into_iter()
        .flatten()
        .find(|g| g.guest_id == Some(guest))
        .and_then(|g| g.vmid)
        .ok_or_else(|| DemoError::Check(format!("guest {guest} has no vmid in the report")))
}

pub(super) fn has_alert(fleet: &FleetStatus, kind: AlertKind) -> bool {
    fleet.alerts.iter().any(|a| a.kind == kind)
}

pub(super) fn show(n: &mut Narrator, fleet: &FleetStatus) {
    n.detail("$ bosunctl status");
    for line in status::render(fleet) {
        n.detail(format!("  {line}"));
    }
}

/// Reads each guest's config from Proxmox: named and sized as desired, running, and without
/// the golden archive's MAC (reset: Proxmox assigns a fresh one, so two guests from the same
/// archive never share one).
async fn inspect_provisioned(
    n: &mut Narrator,
    sim: &SimEndpoint,
    guests: &[(&str, u32)],
) -> Result<(), DemoError> {
    use bosun_pve::{GuestStatus, Pve as _, Vmid};
    let client = sim::pve_client(sim)?;
    let mut macs = Vec::new();
    for (name, vmid) in guests {
        let id = Vmid::new(*vmid).map_err(|err| DemoError::Check(format!("vmid {vmid}: {err}")))?;
        let pve = |what| move |source| DemoError::Pve { what, source };
        let config = client.ct_config(id).await.map_err(pve("GET config"))?;
        let status = client.ct_status(id).await.map_err(pve("GET status"))?;
        let hostname = config.hostname().unwrap_or_default();
        let memory = config.get_u64("memory");
        let cores = config.get_u64("cores");
        let net0 = config.get_str("net0").unwrap_or_default();
        let mac = net0
            .split(',')
            .find_map(|p| p.strip_prefix("hwaddr="))
            .map(str::to_owned);
        check(
            hostname == *name
                && memory == Some(512)
                && cores == Some(1)
                && status.status == GuestStatus::Running,
            || {
                format!(
                    "guest {vmid}: hostname {hostname}, memory {memory:?}, cores {cores:?}, {:?}, net0 {net0}",
                    status.status
                )
            },
        )?;
        let shown = mac
            .clone()
            .unwrap_or_else(|| "reset (assigned by proxmox)".to_owned());
        n.detail(format!(
            "proxmox: CT {vmid} hostname {hostname}, 1 core, 512 MiB, running, MAC {shown}"
        ));
        macs.extend(mac);
    }
    let count = macs.len();
    macs.sort();
    macs.dedup();
    check(macs.len() == count, || {
        "two guests from one golden archive share a MAC: identity not reset".to_owned()
    })
}

/// Guest destroy calls (`DELETE …/lxc/{vmid}`) the simulator logged, by vmid.
async fn destroys(sim: &SimEndpoint) -> Result<Vec<u32>, DemoError> {
    let requests = sim::sim_requests(sim).await?;
    Ok(requests
        .iter()
        .filter(|r| r.method == "DELETE")
        .filter_map(|r| {
            let rest = r.path.split_once("/lxc/")?.1;
            if rest.contains('/') {
                return None;
            }
            rest.parse().ok()
        })
        .collect())
}

/// A desired state with `guests`, each starting from the golden archive the operator
/// signed in step 2 (`operator/golden.json`).
pub(super) fn desired(out: &Path, guests: &[(Uuid, &str)]) -> Result<Value, DemoError> {
    let path = out.join("operator/golden.json");
    let text = std::fs::read_to_string(&path).map_err(|source| DemoError::Artifact {
        path: path.clone(),
        source,
    })?;
    let golden: Value = serde_json::from_str(&text)
        .map_err(|err| DemoError::Check(format!("{}: {err}", path.display())))?;
    Ok(json!({
        "schema": "bosun.desired/v1",
        "guests": guests.iter().map(|(id, name)| json!({
            "guest_id": id,
            "hostname": name,
            "customer": { "customer_id": format!("cust-{name}"), "display_name": format!("Customer {name}") },
            "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 8 },
            "power": "running",
            "golden": golden,
        })).collect::<Vec<_>>(),
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    }))
}

pub(super) fn write_json(path: &Path, value: &Value) -> Result<(), DemoError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|err| DemoError::Check(format!("encoding {}: {err}", path.display())))?;
    stack::write(path, &text)
}
