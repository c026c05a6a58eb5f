//! The tunnel, managed (decision 0082), against the real hub, the simulator and a cloudflared
//! stand-in of two replicas (`bosun_pvesim::cloudflared`, run in process; the demo runs the same
//! stand-in as `bosun-cloudflared-sim`):
//!
//! - the operator-signed data plan's routes become one ingress rule per hostname to the
//!   guest's address on the bridge (which the agent reads from Proxmox), written where the
//!   stand-in reads it, with the catch-all last; the replicas are restarted one at a time, so
//!   the tunnel is never without a ready replica; every guest concerned reads the change in
//!   its audit log;
//! - a hub cannot re-point a hostname: renaming a guest in desired state, altering the signed
//!   plan's bytes and replaying an older plan all leave the routes as the operator signed
//!   them; a plan the operator signs that moves a hostname is audited to both guests; a
//!   guest whose container is destroyed loses its hostnames instead of keeping its old address,
//!   and a signed plan that names no tunnel withdraws every hostname;
//! - a replica that stays unready is restarted after `restart_after` failed probes (the time
//!   from the failure to the restart is printed), and the report carries the tunnel's
//!   connections, version and restarts;
//! - the tunnel's credentials, sealed to the host and bound to it and to the tunnel
//!   (decision 0084), are written where the configuration names them (mode 0640) and the
//!   replicas restarted to read them; a hub that swaps the sealed blob (another tunnel's,
//!   another host's, one sealed to another box, a storage password) changes nothing, and the
//!   secret reaches neither the report nor the hub;
//! - guest-loss disaster recovery keeps the guest's hostname: restored at another vmid (its
//!   source may still run), the same hostname reaches the restored guest's address, and the
//!   guest reads in its audit log that it left the old container and reached the new one;
//! - a guest on DHCP that names another guest's address, the node's own or loopback on its
//!   interface is not routed there, and the guest that held the address keeps its hostname.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::cloudflared;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_support::*;
use bosun_proto::signed::SignedDocument;
use bosun_proto::tunnel::{PlanTunnel, TunnelRoute};
use serde_json::Value;
use uuid::Uuid;

const TUNNEL_ID: u128 = 0x6ff4_2ae2_765d_4adf_8112_31c5_5c15_51ef;

fn append_config(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

/// `desired` with an operator-signed plan whose tunnel carries `routes`.
pub(crate) fn with_routes(desired: &Value, host: Uuid, routes: &[(&str, Uuid, u16)]) -> Value {
    let mut plan = signing::plan_of(desired, host);
    plan.tunnel = Some(PlanTunnel {
        tunnel_id: Uuid::from_u128(TUNNEL_ID),
        routes: routes
            .iter()
            .map(|(hostname, guest_id, port)| TunnelRoute {
                hostname: (*hostname).to_owned(),
                guest_id: *guest_id,
                port: *port,
            })
            .collect(),
    });
    let mut desired = desired.clone();
    desired["data_plan"] = signing::signed_plan(&plan);
    desired
}

fn service(vmid: u32, port: u16) -> String {
    format!("http://{}:{port}", bosun_pvesim::dhcp_address(vmid))
}

pub(crate) async fn both_replicas_route(
    stand_in: &cloudflared::StandIn,
    want: &BTreeMap<String, String>,
) {
    eventually(
        Duration::from_secs(30),
        &format!("both replicas run with {want:?}"),
        || async { stand_in.routes(0) == *want && stand_in.routes(1) == *want },
    )
    .await;
}

async fn audit_events(agent: &InProcessAgent, guest: Uuid) -> Vec<(String, Value)> {
    agent
        .handles
        .journal
        .guest_audit(guest.to_string(), None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event.starts_with("tunnel."))
        .map(|r| (r.event, r.detail))
        .collect()
}

fn initial_config(path: &Path, credentials: &Path) {
    std::fs::write(
        path,
        format!(
            "tunnel: {}\ncredentials-file: \"{}\"\ningress:\n  - service: http_status:404\n",
            Uuid::from_u128(TUNNEL_ID),
            credentials.display()
        ),
    )
    .unwrap();
}

/// A tunnel of two stand-in replicas in a new directory (`config.yml` naming
/// `credentials.json`, both inside it) that `files`' agent manages, probing every 100 ms and
/// restarting a replica after 3 failed probes.
pub(crate) async fn tunnel_of(
    files: &AgentFiles,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    cloudflared::StandIn,
) {
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.yml");
    let credentials = dir.path().join("credentials.json");
    initial_config(&config_file, &credentials);
    let stand_in = cloudflared::StandIn::start(
        dir.path(),
        &config_file,
        &["bosun-tunnel@a.service", "bosun-tunnel@b.service"],
    )
    .await
    .unwrap();
    append_config(
        files,
        &stand_in.agent_config(
            &credentials,
            "interval_ms = 100\ntimeout_ms = 300\ndown_after_ms = 1000\nrestart_after = 3\nrestart_timeout_ms = 5000\n",
        ),
    );
    (dir, config_file, credentials, stand_in)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signed_routes_reach_the_guests_and_a_hub_cannot_repoint_them() {
    let (sim, hub, files) = enrolled_stack().await;
    let (_dir, config_file, credentials, stand_in) = tunnel_of(&files).await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let base = desired(&sim, &[(a, "shop"), (b, "blog")], "running");
    hub.put_desired(host, &base).await;
    let vmid_a = running_vmid(&agent.handles.reconcile, a).await;
    let vmid_b = running_vmid(&agent.handles.reconcile, b).await;

    // The operator signs the routes: each hostname reaches its guest's address on the bridge.
    let signed = with_routes(
        &base,
        host,
        &[("shop.example.com", a, 80), ("blog.example.com", b, 8080)],
    );
    hub.put_desired_unplanned(host, &signed).await;
    let want = BTreeMap::from([
        ("shop.example.com".to_owned(), service(vmid_a, 80)),
        ("blog.example.com".to_owned(), service(vmid_b, 8080)),
    ]);
    both_replicas_route(&stand_in, &want).await;
    let text = std::fs::read_to_string(&config_file).unwrap();
    let parsed = cloudflared::parse(&text).unwrap();
    assert_eq!(parsed.route("other.example.com"), Some("http_status:404"));
    assert_eq!(parsed.credentials_file, credentials.display().to_string());
    // One at a time: the second replica restarted only after the first was ready again.
    let (first, second) = (stand_in.restarts(0), stand_in.restarts(1));
    assert_eq!(
        (first.len(), second.len()),
        (1, 1),
        "one restart each: {first:?} {second:?} {:?} {:?}",
        audit_events(&agent, a).await,
        audit_events(&agent, b).await
    );
    assert!(second[0] >= first[0] + cloudflared::RESTART_TAKES);
    assert_eq!(
        stand_in.all_down_samples(),
        0,
        "never without a ready replica"
    );
    let added = audit_events(&agent, a).await;
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0].0, "tunnel.route_added");
    assert_eq!(added[0].1["hostname"], "shop.example.com");

    // A hostile hub: renames guest A after B's hostname, alters the signed plan so that
    // shop.example.com points at B, then replays the plan after the operator's next one.
    let mut renamed = signed.clone();
    renamed["guests"][0]["hostname"] = "blog.example.com".into();
    hub.put_desired_unplanned(host, &renamed).await;
    let mut forged = signed.clone();
    let plan: SignedDocument = serde_json::from_value(forged["data_plan"].clone()).unwrap();
    let text = String::from_utf8(plan.bytes_within("data_plan", 1 << 20).unwrap()).unwrap();
    let altered = text.replace(&a.to_string(), &b.to_string());
    assert_ne!(altered, text, "the forgery changes the signed bytes");
    forged["data_plan"] =
        serde_json::to_value(SignedDocument::new(altered.as_bytes(), &plan.signature)).unwrap();
    hub.put_desired_unplanned(host, &forged).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(stand_in.routes(0), want, "the hub moved nothing");
    assert_eq!(stand_in.restarts(0).len(), 1, "and restarted nothing");

    // The operator moves shop.example.com to B: both guests read it in their audit log.
    let moved = with_routes(
        &base,
        host,
        &[("shop.example.com", b, 80), ("blog.example.com", b, 8080)],
    );
    hub.put_desired_unplanned(host, &moved).await;
    let want_moved = BTreeMap::from([
        ("shop.example.com".to_owned(), service(vmid_b, 80)),
        ("blog.example.com".to_owned(), service(vmid_b, 8080)),
    ]);
    both_replicas_route(&stand_in, &want_moved).await;
    let told_a = audit_events(&agent, a).await;
    assert_eq!(told_a[0].0, "tunnel.route_moved");
    assert_eq!(told_a[0].1["direction"], "away");
    assert!(!told_a[0].1.to_string().contains(&b.to_string()));
    let told_b = audit_events(&agent, b).await;
    assert_eq!(told_b[0].0, "tunnel.route_moved");
    assert_eq!(told_b[0].1["direction"], "here");
    // The hub replays the earlier plan: refused, the operator's newest stays.
    hub.put_desired_unplanned(host, &signed).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        stand_in.routes(0),
        want_moved,
        "a replayed plan moves nothing"
    );
    assert_eq!(stand_in.routes(1), want_moved);

    // B's container is destroyed behind the agent's back (no backup brings it back): its
    // hostname leaves the ingress rather than keep an address someone else may hold next.
    let again = with_routes(
        &base,
        host,
        &[("shop.example.com", a, 80), ("blog.example.com", b, 8080)],
    );
    hub.put_desired_unplanned(host, &again).await;
    both_replicas_route(&stand_in, &want).await;
    destroy_behind_its_back(&sim, vmid_b).await;
    let only_a = BTreeMap::from([("shop.example.com".to_owned(), service(vmid_a, 80))]);
    both_replicas_route(&stand_in, &only_a).await;

    // The operator signs a plan that names no tunnel: every hostname is withdrawn.
    let mut withdrawn = base.clone();
    withdrawn["data_plan"] = signing::signed_plan(&signing::plan_of(&base, host));
    hub.put_desired_unplanned(host, &withdrawn).await;
    both_replicas_route(&stand_in, &BTreeMap::new()).await;
    let told_a = audit_events(&agent, a).await;
    assert_eq!(told_a[0].0, "tunnel.route_removed", "{told_a:?}");

    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unready_replica_is_restarted_and_the_report_says_so() {
    let (sim, hub, files) = enrolled_stack().await;
    let (_dir, _config_file, _credentials, stand_in) = tunnel_of(&files).await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let report = || async { hub.host(host).await["last_report"]["tunnel"].clone() };
    eventually(
        Duration::from_secs(30),
        "the report carries the tunnel's connections and version",
        || async {
            let t = report().await;
            t["managed"]["connections"] == 8 && t["managed"]["version"] == cloudflared::VERSION
        },
    )
    .await;
    assert!(
        stand_in.restarts(0).is_empty(),
        "a ready tunnel is left alone"
    );

    // Replica a loses the edge: restarted after three failed probes.
    stand_in.lose_edge(0, true);
    let failed_at = Instant::now();
    eventually(Duration::from_secs(30), "replica a restarted", || async {
        !stand_in.restarts(0).is_empty()
    })
    .await;
    let took = stand_in.restarts(0)[0] - failed_at;
    println!("tunnel failure to restart: {} ms", took.as_millis());
    assert!(
        took >= Duration::from_millis(200),
        "not before three probes: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        stand_in.restarts(1).is_empty(),
        "the ready replica is left alone"
    );
    stand_in.lose_edge(0, false);
    eventually(
        Duration::from_secs(30),
        "the report counts the restart",
        || async {
            let t = report().await;
            t["managed"]["restarts"].as_u64() >= Some(1) && t["managed"]["last_restart"].is_string()
        },
    )
    .await;
    let t = report().await;
    assert!(!t.to_string().contains("credentials"), "{t}");

    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    drop(sim);
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_credentials_reach_the_tunnel_and_a_hub_cannot_swap_them() {
    use std::os::unix::fs::PermissionsExt;
    let (sim, hub, files) = enrolled_stack().await;
    let (_dir, _config_file, credentials, stand_in) = tunnel_of(&files).await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let a = Uuid::new_v4();
    let base = desired(&sim, &[(a, "shop")], "running");
    hub.put_desired(host, &base).await;
    let vmid = running_vmid(&agent.handles.reconcile, a).await;
    let recipient = hub_recipient(&hub, host).await;
    let tunnel = Uuid::from_u128(TUNNEL_ID);

    // The operator signs the route and seals the tunnel's credentials to the host.
    let secret = format!("tunnel-secret-{}", Uuid::new_v4().simple());
    let file = cloudflared::credentials_json(tunnel, &secret);
    let mut signed = with_routes(&base, host, &[("shop.example.com", a, 80)]);
    signed["tunnel_credentials"] =
        cloudflared::seal_credentials(&recipient, host, tunnel, &file).into();
    hub.put_desired_unplanned(host, &signed).await;
    let want = BTreeMap::from([("shop.example.com".to_owned(), service(vmid, 80))]);
    both_replicas_route(&stand_in, &want).await;
    eventually(
        Duration::from_secs(30),
        "both replicas run with the sealed credentials",
        || async {
            let id = Some(tunnel.to_string());
            stand_in.credentials(0) == id && stand_in.credentials(1) == id
        },
    )
    .await;
    assert_eq!(std::fs::read_to_string(&credentials).unwrap(), file);
    let mode = std::fs::metadata(&credentials)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640, "the tunnel's group reads it, nobody else");
    let restarts = (stand_in.restarts(0).len(), stand_in.restarts(1).len());

    // What a hub holding the host's recipient can make itself: the plan's tunnel with its own
    // secret, signed with its own key; and the same sealed unsigned, as before signatures.
    let hubs_file = cloudflared::credentials_json(tunnel, "the-hubs-own-secret");
    let hubs_document = serde_json::to_vec(&bosun_proto::sealed_credential::TunnelCredential::new(
        host,
        tunnel,
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new(hubs_file),
    ))
    .unwrap();
    let hub_key = agent_support::signing::OperatorKey::new("hub@attacker");
    let hub_signed = bosunctl::secret::seal(
        &recipient,
        &bosun_proto::sealed_credential::CredentialEnvelope::new(
            &hubs_document,
            &hub_key.sign(
                &hubs_document,
                bosun_proto::sealed_credential::CREDENTIAL_NAMESPACE,
            ),
        ),
    )
    .unwrap()
    .armored()
    .to_owned();
    let mut unsigned = serde_json::from_slice::<serde_json::Value>(&hubs_document).unwrap();
    unsigned["schema"] = "bosun.sealed-credential/v1".into();
    unsigned.as_object_mut().unwrap().remove("issued_at");
    let unsigned = age::encrypt_and_armor(
        &<age::x25519::Recipient as std::str::FromStr>::from_str(&recipient).unwrap(),
        unsigned.to_string().as_bytes(),
    )
    .unwrap();

    // A hostile hub swaps the sealed blob, six ways; each is refused and changes nothing.
    let other_tunnel = Uuid::new_v4();
    let other_box = tempfile::tempdir().unwrap();
    let stranger =
        bosun_agentd::trust::keys::sealing::StorageIdentity::load_or_create(other_box.path())
            .unwrap()
            .recipient();
    let pbs_target = serde_json::json!({
        "type": "pbs", "durable_id": "backup@pbs@pbs.example.net:store1", "class": "slow",
        "role": "pbs-offsite", "policy": {}, "state": "attached",
    });
    let swaps = [
        (
            cloudflared::seal_credentials(
                &recipient,
                host,
                other_tunnel,
                &cloudflared::credentials_json(other_tunnel, "other-tunnel-secret"),
            ),
            "sealed for tunnel",
        ),
        (
            cloudflared::seal_credentials(&recipient, Uuid::new_v4(), tunnel, &file),
            "sealed for host",
        ),
        (
            cloudflared::seal_credentials(&stranger, host, tunnel, &file),
            "do not open",
        ),
        (
            seal_for(&recipient, host, &pbs_target, "pbs-password"),
            "not bound to a tunnel",
        ),
        (hub_signed, "carry no signature this host trusts"),
        (unsigned, "not signed by an operator"),
    ];
    for (blob, why) in &swaps {
        let mut swapped = signed.clone();
        swapped["tunnel_credentials"] = blob.clone().into();
        hub.put_desired_unplanned(host, &swapped).await;
        eventually(
            Duration::from_secs(30),
            &format!("the report says the credentials were refused ({why})"),
            || async {
                hub.host(host).await["last_report"]["tunnel"]["managed"]["credentials_error"]
                    .as_str()
                    .is_some_and(|e| e.contains(why))
            },
        )
        .await;
        assert_eq!(
            std::fs::read_to_string(&credentials).unwrap(),
            file,
            "{why}: the file in place stays"
        );
    }
    assert_eq!(
        (stand_in.restarts(0).len(), stand_in.restarts(1).len()),
        restarts,
        "a refused blob restarts nothing"
    );
    assert_eq!(stand_in.credentials(0), Some(tunnel.to_string()));
    let audit = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|r| r.event.event == "tunnel.credentials_refused")
        .collect();
    assert_eq!(refused.len(), swaps.len(), "each refused blob audited once");
    assert!(
        refused
            .iter()
            .any(|r| r.event.detail["fields"] == "tunnel_id")
    );
    assert!(
        refused
            .iter()
            .any(|r| r.event.detail["fields"] == "host_id")
    );
    assert_eq!(
        audit
            .iter()
            .filter(|r| r.event.event == "tunnel.credentials_written")
            .count(),
        1
    );

    // The operator's blob again: nothing to write, the report clears.
    hub.put_desired_unplanned(host, &signed).await;
    eventually(
        Duration::from_secs(30),
        "the report no longer says the credentials were refused",
        || async {
            let t = hub.host(host).await["last_report"]["tunnel"].clone();
            t["managed"]["routes"] == 1 && t["managed"].get("credentials_error").is_none()
        },
    )
    .await;
    // The operator rotates the tunnel's secret: the newer credentials are written, the
    // replicas restarted. The hub then replays the operator's earlier blob: older, refused
    // before the tunnel sees it; the newer file stays.
    let rotated_secret = format!("tunnel-secret-{}", Uuid::new_v4().simple());
    let rotated = cloudflared::credentials_json(tunnel, &rotated_secret);
    let mut newer = signed.clone();
    newer["tunnel_credentials"] =
        cloudflared::seal_credentials(&recipient, host, tunnel, &rotated).into();
    hub.put_desired_unplanned(host, &newer).await;
    eventually(
        Duration::from_secs(30),
        "the rotated credentials are written",
        || async { std::fs::read_to_string(&credentials).is_ok_and(|f| f == rotated) },
    )
    .await;
    hub.put_desired_unplanned(host, &signed).await;
    eventually(
        Duration::from_secs(30),
        "the replay is refused and audited",
        || async {
            agent
                .handles
                .journal
                .audit_since(0, 10_000)
                .await
                .unwrap()
                .iter()
                .any(|r| {
                    r.event.event == "tunnel.credentials_refused"
                        && r.event.detail["fields"] == "issued_at"
                })
        },
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&credentials).unwrap(),
        rotated,
        "an older signed credential does not come back"
    );

    // The secret never left the host: not in the report, not anywhere in the hub's data.
    assert!(!hub.host(host).await.to_string().contains(&secret));
    for (place, bytes) in files_under(hub.dir.path()) {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the tunnel's secret reached {place}"
        );
    }

    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_restored_elsewhere_keeps_its_hostname_at_its_new_address() {
    use agent_support::jobs::{job_result, submit};
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    files.use_sim_pct(&sim);
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.yml");
    let credentials = dir.path().join("credentials.json");
    initial_config(&config_file, &credentials);
    let stand_in =
        cloudflared::StandIn::start(dir.path(), &config_file, &["bosun-tunnel@a.service"])
            .await
            .unwrap();
    append_config(
        &files,
        &stand_in.agent_config(
            &credentials,
            "interval_ms = 100\ntimeout_ms = 300\ndown_after_ms = 1000\nrestart_timeout_ms = 5000\n",
        ),
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let a = Uuid::new_v4();
    let base = desired(&sim, &[(a, "shop")], "running");
    hub.put_desired(host, &base).await;
    let vmid = running_vmid(&agent.handles.reconcile, a).await;
    let signed = with_routes(&base, host, &[("shop.example.com", a, 80)]);
    hub.put_desired_unplanned(host, &signed).await;
    eventually(Duration::from_secs(30), "the route placed", || async {
        stand_in.routes(0).get("shop.example.com") == Some(&service(vmid, 80))
    })
    .await;

    // Backed up, then its identity taken off the container at its vmid (its source may still
    // run there): disaster recovery brings it back at another vmid.
    let (h, g, v) = (host.to_string(), a.to_string(), vmid.to_string());
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &h,
        "--guest",
        &g,
        "--vmid",
        &v,
    ];
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    assert_eq!(job_result(&hub, host, job).await["outcome"], "succeeded");
    let update = bosun_pve::ConfigUpdate {
        delete: vec!["tags".to_owned()],
        ..bosun_pve::ConfigUpdate::default()
    };
    use bosun_pve::Pve as _;
    root_client(&sim)
        .update_ct_config(bosun_pve::Vmid::new(vmid).unwrap(), &update)
        .await
        .unwrap();
    let restored = || {
        agent
            .handles
            .reconcile
            .borrow()
            .guests
            .iter()
            .find(|g| g.guest_id == Some(a) && g.vmid != vmid)
            .map(|g| g.vmid)
    };
    eventually(
        Duration::from_secs(60),
        "the guest restored elsewhere",
        || async { restored().is_some() },
    )
    .await;
    let new_vmid = restored().unwrap();
    assert_ne!(service(new_vmid, 80), service(vmid, 80));
    eventually(
        Duration::from_secs(30),
        "the hostname reaches the restored guest",
        || async {
            stand_in.routes(0)
                == BTreeMap::from([("shop.example.com".to_owned(), service(new_vmid, 80))])
        },
    )
    .await;
    // The guest reads it: the hostname left the container that stopped being it, and reached
    // it where it came back. A placement that ran between the two (every few ticks) took the
    // route away first, and the catch-all answered meanwhile; a restore quicker than that moved
    // it in one step. Either way its old address is what the guest is told it left.
    let told = audit_events(&agent, a).await;
    assert_eq!(told[0].1["hostname"], "shop.example.com", "{told:?}");
    assert_eq!(told[0].1["service"], service(new_vmid, 80).as_str());
    match told[0].0.as_str() {
        "tunnel.route_added" => {
            assert_eq!(told[1].0, "tunnel.route_removed", "{told:?}");
            assert_eq!(told[1].1["service"], service(vmid, 80).as_str());
        }
        "tunnel.route_readdressed" => {
            assert_eq!(told[0].1["previous_service"], service(vmid, 80).as_str());
        }
        other => panic!("the guest was told {other}: {told:?}"),
    }

    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    drop(sim);
}

/// A guest on DHCP says its own address (Proxmox reads it from the container): one that
/// names another guest's address, the node's own or loopback is not routed to, and the guest
/// that held the address keeps its hostname. Its own lease again, and it is routed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_naming_another_guests_or_the_nodes_address_is_not_routed_there() {
    let (sim, hub, files) = enrolled_stack().await;
    let (_dir, config_file, _credentials, stand_in) = tunnel_of(&files).await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let base = desired(&sim, &[(a, "shop"), (b, "blog")], "running");
    hub.put_desired(host, &base).await;
    let vmid_a = running_vmid(&agent.handles.reconcile, a).await;
    let vmid_b = running_vmid(&agent.handles.reconcile, b).await;
    let signed = with_routes(
        &base,
        host,
        &[("shop.example.com", a, 80), ("blog.example.com", b, 8080)],
    );
    hub.put_desired_unplanned(host, &signed).await;
    let both = BTreeMap::from([
        ("shop.example.com".to_owned(), service(vmid_a, 80)),
        ("blog.example.com".to_owned(), service(vmid_b, 8080)),
    ]);
    both_replicas_route(&stand_in, &both).await;

    let blog_only = BTreeMap::from([("blog.example.com".to_owned(), service(vmid_b, 8080))]);
    let node: std::net::Ipv4Addr = "192.0.2.10".parse().unwrap();
    for claimed in [
        bosun_pvesim::dhcp_address(vmid_b),
        node,
        std::net::Ipv4Addr::LOCALHOST,
    ] {
        assert!(sim.set_guest_own_address(vmid_a, Some(claimed)));
        both_replicas_route(&stand_in, &blog_only).await;
        let text = std::fs::read_to_string(&config_file).unwrap();
        assert!(
            !text.contains(&format!("service: http://{claimed}:80\n")),
            "{claimed} is never a route's service: {text}"
        );
    }

    assert!(sim.set_guest_own_address(vmid_a, None));
    both_replicas_route(&stand_in, &both).await;
    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
