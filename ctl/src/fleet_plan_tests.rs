use serde_json::{Value, json};

use super::*;

const WANT: &str = "0.3.0";

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// A host as the hub describes it: `extra` overrides the summary's and detail's fields.
fn host(name: &str, extra: Value) -> HostDetail {
    let mut value = json!({
        "host_id": Uuid::new_v4(), "hostname": name, "status": "active", "liveness": "ok",
        "last_seen": null, "agent_version": "0.2.0", "controller_version": null,
        "desired_generation": 0, "known_generation": 0, "applied_generation": 0,
        "pending_jobs": 0, "enrolled_at": "2026-11-01T00:00:00Z", "poll_interval_seconds": 30,
        "desired": null, "escrow_updated_at": null,
        "capabilities": { "arch": "x86_64", "helper": true },
        "last_report": {
            "schema": "bosun.report/v1", "versions": { "agent": "0.2.0" }, "guests": []
        },
    });
    for (key, v) in extra.as_object().unwrap() {
        value[key] = v.clone();
    }
    serde_json::from_value(value).unwrap()
}

fn seen(detail: HostDetail) -> Seen {
    Seen {
        detail,
        jobs: Vec::new(),
    }
}

fn reasons(plan: &Plan) -> Vec<(String, SkipReason)> {
    plan.skipped
        .iter()
        .map(|s| (s.hostname.clone(), s.reason.clone()))
        .collect()
}

#[test]
fn an_agent_update_skips_hosts_that_cannot_or_need_not_take_it_and_says_why() {
    let mut pending = seen(host("pve-e", json!({})));
    let pending_job = Uuid::new_v4();
    pending.jobs = vec![
        serde_json::from_value(json!({
            "job_id": pending_job, "host_id": pending.detail.summary.host_id,
            "kind": "agent-update", "state": "acked", "submitted_at": "2026-11-01T00:00:00Z",
            "acked_at": null, "result": null,
        }))
        .unwrap(),
    ];
    let hosts = vec![
        seen(host("pve-f", json!({}))),
        seen(host("pve-b", json!({ "liveness": "overdue" }))),
        seen(host("pve-c", json!({ "agent_version": WANT }))),
        seen(host(
            "pve-d",
            json!({ "capabilities": { "arch": "x86_64", "helper": false } }),
        )),
        pending,
        seen(host("pve-a", json!({ "status": "revoked" }))),
        seen(host("pve-g", json!({}))),
    ];
    let plan = plan(FleetKind::AgentUpdate, WANT, &hosts);
    let names: Vec<&str> = plan.targets.iter().map(|t| t.hostname.as_str()).collect();
    assert_eq!(names, ["pve-f", "pve-g"], "by hostname");
    assert!(
        plan.targets
            .iter()
            .all(|t| t.jobs.len() == 1 && t.jobs[0].guest_id.is_none())
    );
    assert_eq!(
        reasons(&plan),
        vec![
            (
                "pve-a".to_owned(),
                SkipReason::NotActive {
                    status: "revoked".into()
                }
            ),
            (
                "pve-b".to_owned(),
                SkipReason::Offline {
                    liveness: "overdue".into()
                }
            ),
            (
                "pve-c".to_owned(),
                SkipReason::AlreadyAtTarget {
                    running: format!("agent {WANT}")
                }
            ),
            ("pve-d".to_owned(), SkipReason::NoHelper),
            (
                "pve-e".to_owned(),
                SkipReason::Pending {
                    job_id: pending_job
                }
            ),
        ]
    );
    let shown = plan.skipped[1].reason.to_string();
    assert_eq!(shown, "offline (liveness overdue)");
}

#[test]
fn a_controller_rollout_sends_a_job_for_each_running_guest_with_a_controller_not_yet_at_the_digest()
{
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (d, e) = (Uuid::new_v4(), Uuid::new_v4());
    let guests = json!([
        { "guest_id": a, "vmid": 101, "hostname": "web", "status": "running", "controller_digest": digest(1) },
        { "guest_id": b, "vmid": 102, "hostname": "db", "status": "running", "controller_digest": digest(2) },
        { "guest_id": c, "vmid": 103, "hostname": "off", "status": "stopped" },
        { "vmid": 104, "hostname": "stranger", "status": "running" },
        // A golden guest whose controller has not reported yet: the agent records its digest.
        { "guest_id": d, "vmid": 105, "hostname": "golden", "status": "running", "controller_expected": digest(1) },
        // A guest running no controller at all.
        { "guest_id": e, "vmid": 106, "hostname": "bare", "status": "running" },
    ]);
    let report = |guests: Value| {
        json!({ "last_report": {
            "schema": "bosun.report/v1", "versions": { "agent": "0.2.0" }, "guests": guests
        }})
    };
    let hosts = vec![
        seen(host("pve-a", report(guests))),
        seen(host(
            "pve-b",
            report(json!([
                { "guest_id": a, "vmid": 101, "hostname": "web", "status": "running", "controller_digest": digest(2) },
            ])),
        )),
        seen(host("pve-c", report(json!([])))),
    ];
    let plan = plan(FleetKind::ControllerUpdate, &digest(2), &hosts);
    assert_eq!(plan.targets.len(), 1);
    let host_id = hosts[0].detail.summary.host_id;
    assert_eq!(
        plan.targets[0].jobs,
        vec![
            JobTarget {
                host_id,
                guest_id: Some(a),
                vmid: Some(101),
            },
            JobTarget {
                host_id,
                guest_id: Some(d),
                vmid: Some(105),
            },
        ]
    );
    assert_eq!(
        reasons(&plan),
        vec![
            (
                "pve-b".to_owned(),
                SkipReason::AlreadyAtTarget {
                    running: format!("every guest's controller runs {}", digest(2))
                }
            ),
            ("pve-c".to_owned(), SkipReason::NoGuests),
        ]
    );
}

#[test]
fn waves_are_the_canary_then_bounded_batches() {
    let targets: Vec<Target> = (0..8)
        .map(|n| Target {
            host_id: Uuid::new_v4(),
            hostname: format!("pve-{n}"),
            labels: BTreeMap::new(),
            jobs: Vec::new(),
        })
        .collect();
    let sizes = |canary, batch| -> Vec<usize> {
        waves(&targets, canary, batch)
            .iter()
            .map(Vec::len)
            .collect()
    };
    assert_eq!(sizes(1, 3), [1, 3, 3, 1]);
    assert_eq!(sizes(2, 10), [2, 6]);
    assert_eq!(
        sizes(10, 2),
        [8],
        "a canary larger than the fleet is the fleet"
    );
    assert_eq!(waves(&targets, 1, 3)[0][0].hostname, "pve-0");
    assert!(waves(&[], 1, 3).is_empty());
}
