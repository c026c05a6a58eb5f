//! Break-glass end to end: an operator authors `break-glass-enable` with `bosunctl job
//! new|sign` (stock `ssh-keygen -Y sign`), the real hub forwards it, the in-process agent
//! checks it and has the helper's real verb write the expiring line beneath a temp root;
//! the hub raises `break_glass_open`, then `break_glass_closed` after a signed
//! `break-glass-disable`. A job signed by a key the host does not trust is refused and never
//! reaches the helper. What the operator runs through the door, with the real support shell
//! (`bosun-support`), reaches the hub's audit trail naming the door. A command touching a
//! guest runs only while that guest's controller consents through the local API
//! (`a_guest_command_needs_that_guests_live_consent_and_the_customer_sees_it`), and a consent
//! dies with its guest: a new guest given the vmid of a decommissioned one has none
//! (`a_decommissioned_guests_consent_opens_nothing_on_the_next_guest_at_its_vmid`). (Expiry on the clock seam: `agentd/tests/break_glass.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::consent::{ConsentStack, Controller, consent_stack, support_shell};
use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use serde_json::Value;

/// The hub's alerts of `kind`.
async fn alerts(hub: &RealHub, kind: &str) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_job_opens_the_door_the_hub_hears_and_a_signed_disable_closes_it() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let spool = files.dir.path().join("support-commands.jsonl");
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(&format!(
        "[break_glass]\nspool = {spool:?}\nscan_interval_seconds = 1\n"
    ));
    std::fs::write(&files.config_path, config).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let host_s = host.to_string();
    let door_key = OperatorKey::new("oncall@desk");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let key_param = format!("ssh_public_key={}", public.trim());

    // Signed by a key this host does not trust: refused, nothing written.
    let mallory = OperatorKey::new("mallory@example");
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=let me in",
    ];
    let forged = submit(&hub, &mallory, files.dir.path(), &args).await;
    let result = job_result(&hub, host, forged).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "unknown_signer", "{result}");
    assert!(files.helper.break_glass_keys().is_none());
    assert!(!files.helper.verbs().contains(&"break_glass_open"));

    // The operator's signed job.
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=poll loop wedged",
    ];
    let before = jiff::Timestamp::now();
    let enable = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, enable).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let line = files.helper.break_glass_keys().expect("the door is open");
    let key_blob = public.split_whitespace().nth(1).unwrap();
    assert!(
        line.starts_with("expiry-time=\"")
            && line.contains(&format!(
                ",restrict,pty,command=\"/usr/libexec/bosun/bosun-support --session {enable}\" ssh-ed25519 "
            )),
        "{line}"
    );
    assert!(line.contains(key_blob) && line.ends_with(&format!(" bosun-break-glass {enable}\n")));
    assert!(
        !line.contains("oncall@desk"),
        "the comment is not carried over: {line}"
    );
    // The deadline is the job's duration from when the agent accepted it, in UTC.
    let expiry = result["output"]["expires_at"].as_str().unwrap();
    let expiry: jiff::Timestamp = expiry.parse().unwrap();
    let hour = jiff::SignedDuration::from_hours(1);
    assert!(expiry >= before + hour && expiry <= jiff::Timestamp::now() + hour);
    assert!(line.contains(&format!("\"{}\"", expiry.strftime("%Y%m%d%H%M%SZ"))));

    eventually(
        Duration::from_secs(30),
        "the hub raises break_glass_open",
        || async { !alerts(&hub, "break_glass_open").await.is_empty() },
    )
    .await;
    let open = alerts(&hub, "break_glass_open").await;
    let message = open[0]["message"].as_str().unwrap();
    assert!(
        message.contains("SHA256:") && message.contains("poll loop wedged"),
        "{message}"
    );

    // The operator logs in: sshd runs the line's forced command, the support shell, with
    // what the client asked. One support command runs (through a stand-in for sudo here),
    // anything else is refused; both reach the hub's audit trail, naming the door.
    let session = enable.to_string();
    let consent = files.dir.path().join("consent.json");
    let shell = |asked| {
        let ran = support_shell(&files, &sim, &session, &spool, &consent, asked);
        ran.status.code().unwrap()
    };
    assert_eq!(shell("status"), 0);
    assert_eq!(shell("bash -i"), 2);
    let path = format!("/v1/admin/audit?host={host}&limit=500");
    let commands = || async {
        let (_, page) = hub.admin(reqwest::Method::GET, &path, None).await;
        page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["action"] == "break_glass.command")
            .map(|e| e["detail"].clone())
            .collect::<Vec<Value>>()
    };
    eventually(
        Duration::from_secs(30),
        "the hub's audit trail holds both commands",
        || async { commands().await.len() == 2 },
    )
    .await;
    // Newest first; each names the door it came through.
    let trail = commands().await;
    assert_eq!(trail[0]["detail"]["command"], "refused", "{trail:?}");
    assert_eq!(trail[0]["detail"]["status"], Value::Null, "{trail:?}");
    assert_eq!(trail[1]["detail"]["command"], "status", "{trail:?}");
    assert_eq!(trail[1]["detail"]["status"], 0, "{trail:?}");
    assert!(
        trail.iter().all(|e| e["job_id"] == session.as_str()),
        "each row names the door {session}: {trail:?}"
    );

    // The signed disable closes it early.
    let args = ["--kind", "break-glass-disable", "--host", &host_s];
    let disable = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, disable).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["removed"], true, "{result}");
    assert!(files.helper.break_glass_keys().is_none());
    eventually(
        Duration::from_secs(30),
        "the hub raises break_glass_closed",
        || async { !alerts(&hub, "break_glass_closed").await.is_empty() },
    )
    .await;
    let closed = alerts(&hub, "break_glass_closed").await;
    let message = closed[0]["message"].as_str().unwrap();
    assert!(
        message.contains("a signed break-glass-disable"),
        "{message}"
    );
    assert_eq!(alerts(&hub, "break_glass_open").await.len(), 1);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_command_needs_that_guests_live_consent_and_the_customer_sees_it() {
    let ConsentStack {
        sim,
        hub,
        files,
        spool,
        consent,
        agent,
    } = consent_stack().await;
    let host = agent.handles.host_id;
    let (alpha, beta) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    hub.put_desired(
        host,
        &desired(&sim, &[(alpha, "alpha"), (beta, "beta")], "running"),
    )
    .await;
    let status = agent.handles.reconcile.clone();
    let (a, b) = (
        running_vmid(&status, alpha).await,
        running_vmid(&status, beta).await,
    );
    let (ctl_a, ctl_b) = (
        Controller::of(&files, a).await,
        Controller::of(&files, b).await,
    );

    // The operator's door is open (a signed job the hub forwards): that alone reaches no
    // guest. Host-level commands run; a command on a guest without its consent is refused,
    // and the operator is told why.
    let operator = files.trusted_operator();
    let door_key = OperatorKey::new("oncall@desk");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let key_param = format!("ssh_public_key={}", public.trim());
    let host_s = host.to_string();
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=customer ticket 4711",
    ];
    let enable = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, enable).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let session = enable.to_string();
    let shell = |asked: String| {
        let ran = support_shell(&files, &sim, &session, &spool, &consent, &asked);
        ran.status.code().unwrap()
    };
    let config_a = format!("guest-config {a}");
    let config_b = format!("guest-config {b}");
    assert_eq!(
        shell("status".into()),
        0,
        "a host-level command needs no consent"
    );
    assert_eq!(shell(config_a.clone()), 3, "no consent yet");

    // Guest beta tries to consent for alpha: refused, and alpha's config stays closed.
    for (query, body) in [
        (
            String::new(),
            serde_json::json!({"duration_seconds": 600, "vmid": a}),
        ),
        (
            String::new(),
            serde_json::json!({"duration_seconds": 600, "guest_id": alpha}),
        ),
        (
            format!("?vmid={a}"),
            serde_json::json!({"duration_seconds": 600}),
        ),
    ] {
        let (code, answer) = ctl_b.call(reqwest::Method::POST, &query, Some(body)).await;
        assert_eq!(code, 403, "{answer}");
        assert_eq!(answer["code"], "foreign_guest", "{answer}");
    }
    assert_eq!(shell(config_a.clone()), 3, "beta cannot consent for alpha");
    // Beyond the bound: a clear error, no consent.
    let (code, answer) = ctl_a
        .call(
            reqwest::Method::POST,
            "",
            Some(serde_json::json!({"duration_seconds": 90_000})),
        )
        .await;
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("24 h"),
        "{answer}"
    );

    // Alpha consents: its command runs, beta's stays refused.
    let (code, answer) = ctl_a
        .call(
            reqwest::Method::POST,
            "",
            Some(serde_json::json!({"duration_seconds": 600, "reason": "ticket 4711"})),
        )
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(shell(config_a.clone()), 0, "alpha consented");
    assert_eq!(shell(config_b.clone()), 3, "beta did not");
    // A revoke holds from the next command on.
    let (code, _) = ctl_a.call(reqwest::Method::DELETE, "", None).await;
    assert_eq!(code, 200);
    assert_eq!(shell(config_a.clone()), 3, "revoked");
    // A consent cannot outlive its bound.
    let (code, _) = ctl_a
        .call(
            reqwest::Method::POST,
            "",
            Some(serde_json::json!({"duration_seconds": 1})),
        )
        .await;
    assert_eq!(code, 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(shell(config_a.clone()), 3, "expired");

    // Alpha's customer reads every command on alpha, run or refused, in full, and its own
    // consents; beta sees the host-level command's kind, never alpha's.
    let on_alpha = |entries: &[Value]| {
        entries
            .iter()
            .filter(|e| {
                e["event"] == "break_glass.command" && e["detail"]["command"] == config_a.as_str()
            })
            .map(|e| {
                (
                    e["detail"]["status"].clone(),
                    e["detail"]["refused"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    eventually(
        Duration::from_secs(30),
        "alpha's audit holds the commands on alpha",
        || async { on_alpha(&ctl_a.audit().await).len() == 5 },
    )
    .await;
    let refused = Value::from("no_consent");
    assert_eq!(
        on_alpha(&ctl_a.audit().await),
        [
            (Value::Null, refused.clone()),
            (Value::Null, refused.clone()),
            (Value::from(0), Value::Null),
            (Value::Null, refused.clone()),
            (Value::Null, refused),
        ],
        "newest first: expired, revoked, run, after beta's attempt, before any consent"
    );
    let events: Vec<Value> = ctl_a
        .audit()
        .await
        .iter()
        .map(|e| e["event"].clone())
        .collect();
    for event in ["break_glass.consent_granted", "break_glass.consent_revoked"] {
        assert!(events.contains(&Value::from(event)), "{event}: {events:?}");
    }
    let seen_by_beta = ctl_b.audit().await;
    assert!(on_alpha(&seen_by_beta).is_empty(), "{seen_by_beta:?}");
    assert!(
        seen_by_beta
            .iter()
            .all(|e| !e["event"].as_str().unwrap().contains("consent")),
        "{seen_by_beta:?}"
    );
    assert!(
        seen_by_beta
            .iter()
            .any(|e| e["event"] == "break_glass.command" && e["detail"] == serde_json::json!({"account": "bosun-breakglass", "kind": "status", "status": 0})),
        "{seen_by_beta:?}"
    );
    // The hub's trail holds them too, each naming the door and the guest it touched.
    let path = format!("/v1/admin/audit?host={host}&limit=500");
    let at_hub = || async {
        let (_, page) = hub.admin(reqwest::Method::GET, &path, None).await;
        page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["action"] == "break_glass.command"
                    && e["detail"]["detail"]["command"] == config_a.as_str()
            })
            .cloned()
            .collect::<Vec<Value>>()
    };
    // The hub keeps a command refused again at once as one row with its count (decision 0106).
    let counted = |rows: &[Value]| {
        rows.iter()
            .map(|e| e["repeats"].as_u64().unwrap_or(1))
            .sum::<u64>()
    };
    eventually(
        Duration::from_secs(30),
        "the hub holds alpha's commands",
        || async { counted(&at_hub().await) == 5 },
    )
    .await;
    let rows = at_hub().await;
    assert!(
        rows.iter()
            .all(|e| e["detail"]["job_id"] == session.as_str()
                && e["detail"]["guest_id"] == alpha.to_string().as_str()
                && e["detail"]["vmid"] == a),
        "{rows:?}"
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_guests_consent_opens_nothing_on_the_next_guest_at_its_vmid() {
    let ConsentStack {
        sim,
        hub,
        files,
        spool,
        consent,
        agent,
    } = consent_stack().await;
    let host = agent.handles.host_id;
    let (alpha, gamma) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    hub.put_desired(host, &desired(&sim, &[(alpha, "alpha")], "running"))
        .await;
    let status = agent.handles.reconcile.clone();
    let vmid = running_vmid(&status, alpha).await;
    let ctl_alpha = Controller::of(&files, vmid).await;
    let session = uuid::Uuid::new_v4().to_string();
    let asked = format!("guest-config {vmid}");
    let shell = || support_shell(&files, &sim, &session, &spool, &consent, &asked);

    // Alpha consents: its command runs.
    let (code, answer) = ctl_alpha
        .call(
            reqwest::Method::POST,
            "",
            Some(serde_json::json!({"duration_seconds": 3600})),
        )
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(shell().status.code(), Some(0), "alpha consented");
    let alphas = std::fs::read(&consent).unwrap();
    assert!(String::from_utf8_lossy(&alphas).contains(&alpha.to_string()));

    // A signed decommission destroys alpha: its consent leaves the file with it.
    let operator = files.trusted_operator();
    let args = format!("--kind decommission --host {host} --guest {alpha} --vmid {vmid}");
    let args: Vec<&str> = args.split(' ').collect();
    let decommission = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, decommission).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let file = consent.clone();
    eventually(
        Duration::from_secs(10),
        "the decommissioned guest's consent leaves the file",
        || {
            let file = file.clone();
            async move {
                std::fs::read_to_string(&file).is_ok_and(|t| !t.contains(&alpha.to_string()))
            }
        },
    )
    .await;
    assert_eq!(shell().status.code(), Some(3), "no guest, no consent");

    // A new guest is given the same vmid: it has not consented, so nothing runs on it.
    // (Alpha's bootstrap goes first, so gamma's controller reads gamma's.)
    std::fs::remove_file(files.helper.bootstrap_path(vmid)).unwrap();
    hub.put_desired(host, &desired(&sim, &[(gamma, "gamma")], "running"))
        .await;
    assert_eq!(
        running_vmid(&status, gamma).await,
        vmid,
        "Proxmox gives the freed vmid to the next guest"
    );
    let ctl_gamma = Controller::of(&files, vmid).await;
    let (_, state) = ctl_gamma.call(reqwest::Method::GET, "", None).await;
    assert_eq!(state["granted"], false, "{state}");
    assert_eq!(shell().status.code(), Some(3), "gamma did not consent");

    // Even were alpha's consent still in the file (an agent that died between the destroy and
    // the rewrite), the shell sees that the guest at the vmid is not alpha and refuses.
    std::fs::write(&consent, &alphas).unwrap();
    let refused = shell();
    assert_eq!(refused.status.code(), Some(3));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("is not the guest that consented") && said.contains(&alpha.to_string()),
        "{said}"
    );
    // Gamma's own consent opens it.
    let (code, answer) = ctl_gamma
        .call(
            reqwest::Method::POST,
            "",
            Some(serde_json::json!({"duration_seconds": 600})),
        )
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(shell().status.code(), Some(0), "gamma consented");
    let text = std::fs::read_to_string(&consent).unwrap();
    assert!(
        text.contains(&gamma.to_string()) && !text.contains(&alpha.to_string()),
        "{text}"
    );
    agent.stop().await;
}
