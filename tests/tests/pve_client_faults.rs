//! The PVE client against the simulator's failure modes: authentication, permissions, busy
//! answers, locks, id races, failed tasks, dropped connections and TLS pinning.

use crate::pve_support;

use std::time::{Duration, Instant};

use bosun_pve::{
    Backoff, ConfigUpdate, CtOptions, Op, Pve, PveClient, PveError, RestoreRequest, RetryPolicy,
    TlsTrust, run_task_waiting_out_locks,
};
use bosun_pvesim::{EndpointFault, FaultConfig, StaleLock, TokenCredential};
use pve_support::{
    bounded, client_for, config_for, fast_sim, golden, local_lvm, restore_golden, start, vmid,
};

fn fault(method: &str, path: &str) -> EndpointFault {
    EndpointFault {
        method: Some(method.into()),
        path: path.into(),
        ..Default::default()
    }
}

fn cores(n: u32) -> ConfigUpdate {
    ConfigUpdate {
        set: CtOptions {
            cores: Some(n),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_401() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let wrong = TokenCredential {
            id: rig.sim.endpoint().tokens.agent.id.clone(),
            secret: "not-the-secret".into(),
        };
        let client = client_for(&rig.sim, &wrong, RetryPolicy::fast());
        let err = client.version().await.unwrap_err();
        assert!(
            matches!(err, PveError::Unauthorized { op: Op::Version }),
            "{err:?}"
        );
        assert_eq!(err.status(), Some(401));
        assert!(
            !err.to_string().contains("not-the-secret"),
            "the secret stays out of errors"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_privilege_gets_403_naming_it() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 200).await;
        rig.sim
            .add_role("Watcher", &["VM.Audit", "Sys.Audit"])
            .unwrap();
        rig.sim.add_user("watcher@pve");
        let token = rig.sim.create_token("watcher@pve", "ro", false).unwrap();
        rig.sim.grant("/", "watcher@pve", "Watcher", true).unwrap();
        let client = client_for(&rig.sim, &token, RetryPolicy::fast());
        assert!(
            client.ct_status(vmid(200)).await.is_ok(),
            "VM.Audit suffices to read"
        );
        match client.start_ct(vmid(200)).await {
            Err(PveError::Forbidden {
                path,
                privilege,
                vmid: v,
                op,
                ..
            }) => {
                assert_eq!(path.as_deref(), Some("/vms/200"));
                assert_eq!(privilege.as_deref(), Some("VM.PowerMgmt"));
                assert_eq!(v, Some(vmid(200)));
                assert_eq!(op, Op::StartCt);
            }
            other => panic!("expected 403, got {other:?}"),
        }
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_596_is_retried_for_reads_and_reported_for_writes() {
    bounded(async {
        let rig = start(fast_sim()).await;
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![
                EndpointFault {
                    busy_rate: 1.0,
                    ..fault("GET", "/version")
                },
                EndpointFault {
                    busy_rate: 1.0,
                    ..fault("POST", "/nodes/{node}/lxc/{vmid}/status/start")
                },
            ],
            ..Default::default()
        });
        rig.sim.clear_requests();
        let err = rig.client.version().await.unwrap_err();
        assert!(matches!(err, PveError::Busy { status: 596, .. }), "{err:?}");
        assert!(err.is_retry_safe());
        let reads = rig
            .sim
            .requests()
            .iter()
            .filter(|r| r.path == "/version")
            .count();
        assert_eq!(
            reads,
            usize::try_from(RetryPolicy::fast().transient_attempts).unwrap(),
            "reads are retried"
        );

        rig.sim.clear_requests();
        let err = rig.client.start_ct(vmid(100)).await.unwrap_err();
        assert!(
            matches!(
                err,
                PveError::Busy {
                    op: Op::StartCt,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            !err.is_retry_safe(),
            "a busy write may have been handled; look first"
        );
        assert_eq!(
            rig.sim.requests().len(),
            1,
            "writes are not retried blindly"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

/// A read a handler failed with a 500 is asked again up to the transient bound and succeeds
/// once the hiccup clears; a read of a guest that does not exist is asked once; a mutation
/// failed by its handler is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_failed_by_its_handler_is_asked_again_and_a_mutation_is_not() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 120).await;
        let attempts = usize::try_from(RetryPolicy::fast().transient_attempts).unwrap();
        let count = |path: &str, method: &str| {
            rig.sim
                .requests()
                .iter()
                .filter(|r| r.path == path && r.method == method)
                .count()
        };
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![
                EndpointFault {
                    error_rate: 1.0,
                    ..fault("GET", "/nodes/{node}/lxc/{vmid}/config")
                },
                EndpointFault {
                    error_rate: 1.0,
                    ..fault("PUT", "/nodes/{node}/lxc/{vmid}/config")
                },
            ],
            ..Default::default()
        });
        rig.sim.clear_requests();
        let err = rig.client.ct_config(vmid(120)).await.unwrap_err();
        assert!(matches!(err, PveError::Api { status: 500, .. }), "{err:?}");
        assert_eq!(
            count("/nodes/pve/lxc/120/config", "GET"),
            attempts,
            "a failed read is asked again up to the bound"
        );
        let err = rig
            .client
            .update_ct_config(vmid(120), &cores(2))
            .await
            .unwrap_err();
        assert!(matches!(err, PveError::Api { status: 500, .. }), "{err:?}");
        assert_eq!(
            count("/nodes/pve/lxc/120/config", "PUT"),
            1,
            "a failed mutation is never sent again blindly"
        );

        // The hiccup clears while the client waits after its first attempt: the read succeeds.
        let patient = RetryPolicy {
            transient_backoff: Backoff {
                initial: Duration::from_secs(2),
                max: Duration::from_secs(2),
            },
            ..RetryPolicy::fast()
        };
        let patient = client_for(&rig.sim, &rig.sim.endpoint().tokens.agent.clone(), patient);
        rig.sim.clear_requests();
        let sim = rig.sim.clone();
        let heal = tokio::spawn(async move {
            while sim.requests().is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sim.set_faults(FaultConfig::default());
        });
        let config = patient.ct_config(vmid(120)).await;
        heal.await.unwrap();
        assert!(config.is_ok(), "{config:?}");

        rig.sim.clear_requests();
        let err = rig.client.ct_config(vmid(121)).await.unwrap_err();
        assert!(err.is_missing(), "{err:?}");
        assert_eq!(
            count("/nodes/pve/lxc/121/config", "GET"),
            1,
            "a missing guest is an answer"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_the_bound_is_refused_unread() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 100).await;
        let bound = |max_answer_bytes| {
            client_for(
                &rig.sim,
                &rig.sim.endpoint().tokens.agent.clone(),
                RetryPolicy {
                    max_answer_bytes,
                    ..RetryPolicy::fast()
                },
            )
        };
        // A read whose answer is longer than the bound: refused, and nothing was changed.
        let tight = bound(16);
        let err = tight.version().await.unwrap_err();
        assert!(
            matches!(
                err,
                PveError::AnswerTooLarge {
                    op: Op::Version,
                    limit: 16,
                    status: 200,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_outcome_unknown());
        // A mutation Proxmox accepted whose answer (the task's UPID) is too long to read: it
        // took effect, so its outcome is unknown to the caller, who looks before retrying.
        let err = tight.start_ct(vmid(100)).await.unwrap_err();
        assert!(
            matches!(
                err,
                PveError::AnswerTooLarge {
                    op: Op::StartCt,
                    status: 200,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_outcome_unknown());
        // An error answer past the bound: its message is not read either.
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                error_rate: 1.0,
                error_message: "x".repeat(4096),
                ..fault("GET", "/version")
            }],
            ..Default::default()
        });
        let err = bound(1024).version().await.unwrap_err();
        assert!(
            matches!(err, PveError::AnswerTooLarge { status: 500, .. }),
            "{err:?}"
        );
        // Within the bound the same answers read as always.
        let err = bound(64 * 1024).version().await.unwrap_err();
        assert!(matches!(err, PveError::Api { .. }), "{err:?}");
        rig.sim.set_faults(FaultConfig::default());
        assert!(rig.client.version().await.is_ok());
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_lock_is_waited_out() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 210).await;
        assert!(rig.sim.set_guest_lock(210, Some("backup")));
        let sim = rig.sim.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            sim.set_guest_lock(210, None);
        });
        rig.sim.clear_requests();
        rig.client
            .update_ct_config(vmid(210), &cores(3))
            .await
            .unwrap();
        release.await.unwrap();
        let puts: Vec<_> = rig
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .collect();
        assert!(
            puts.len() >= 2,
            "refused while locked, then accepted: {puts:?}"
        );
        assert!(puts.iter().any(|r| r.status == 500) && puts.last().unwrap().status == 200);
        assert_eq!(
            rig.sim
                .guest_config(210)
                .unwrap()
                .get("cores")
                .map(String::as_str),
            Some("3")
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lock_ends_in_a_bounded_locked_error() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 220).await;
        rig.sim.set_faults(FaultConfig {
            stale_locks: vec![StaleLock {
                vmid: 220,
                lock: "backup".into(),
            }],
            ..Default::default()
        });
        let mut policy = RetryPolicy::fast();
        policy.lock_attempts = 4;
        policy.lock_backoff = Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(10),
        };
        let client = client_for(&rig.sim, &rig.sim.endpoint().tokens.agent.clone(), policy);
        rig.sim.clear_requests();
        let started = Instant::now();
        match client.update_ct_config(vmid(220), &cores(2)).await {
            Err(e @ PveError::Locked { .. }) => {
                assert!(e.is_lock_contention());
                let PveError::Locked { lock, vmid: v, .. } = e else {
                    unreachable!()
                };
                assert_eq!(lock.as_deref(), Some("backup"));
                assert_eq!(v, Some(vmid(220)));
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert_eq!(rig.sim.requests().len(), 4, "exactly lock_attempts tries");
        assert!(started.elapsed() < Duration::from_secs(2));
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_finds_the_guest_locked_is_issued_again() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 230).await;
        assert!(rig.sim.set_guest_lock(230, Some("snapshot")));
        let sim = rig.sim.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            sim.set_guest_lock(230, None);
        });
        let c = &rig.client;
        let out = run_task_waiting_out_locks(c, Op::StartCt, || c.start_ct(vmid(230)))
            .await
            .unwrap();
        release.await.unwrap();
        assert_eq!(out.warnings, 0);
        assert_eq!(rig.sim.guest_running(230), Some(true));
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_restores_onto_the_next_id_both_succeed_on_different_ids() {
    bounded(async {
        let rig = start(fast_sim()).await;
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                latency: Duration::from_millis(400),
                ..fault("POST", "/nodes/{node}/lxc")
            }],
            ..Default::default()
        });
        let req = RestoreRequest::new(vmid(100), golden(&rig.sim), local_lvm());
        let other = client_for(
            &rig.sim,
            &rig.sim.endpoint().tokens.agent.clone(),
            RetryPolicy::fast(),
        );
        let (a, b) = tokio::join!(
            rig.client.restore_ct_next_id(&req),
            other.restore_ct_next_id(&req)
        );
        let ((ida, upa), (idb, upb)) = (a.unwrap(), b.unwrap());
        assert_ne!(ida, idb);
        rig.client.wait_task(Op::RestoreCt, &upa).await.unwrap();
        rig.client.wait_task(Op::RestoreCt, &upb).await.unwrap();
        let refused = rig
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/lxc") && r.status == 500)
            .count();
        // At least one POST lost the race; under a fully loaded machine a second refusal has
        // been seen. Whatever the count, exactly the two guests exist: no retry left a guest
        // behind.
        assert!(
            refused >= 1,
            "one restore lost the race and took another id"
        );
        let mut ids = rig.sim.guest_ids();
        ids.sort_unstable();
        let mut expected = vec![ida.get(), idb.get()];
        expected.sort_unstable();
        assert_eq!(ids, expected, "no guest besides the two restores");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_reports_its_exit_status_and_log_tail() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 240).await;
        rig.sim.set_faults(FaultConfig {
            failed_task_rate: 1.0,
            failed_task_types: vec!["vzstart".into()],
            ..Default::default()
        });
        let up = rig.client.start_ct(vmid(240)).await.unwrap();
        match rig.client.wait_task(Op::StartCt, &up).await {
            Err(PveError::TaskFailed {
                exitstatus,
                log_tail,
                upid,
                op,
            }) => {
                assert_eq!(op, Op::StartCt);
                assert_eq!(upid, up);
                assert!(!exitstatus.is_empty() && exitstatus != "OK");
                let last = log_tail.last().expect("log tail");
                assert!(
                    last.starts_with("TASK ERROR:") && last.contains(&exitstatus),
                    "{log_tail:?}"
                );
                assert_eq!(
                    rig.sim.task_exitstatus(up.as_str()).as_deref(),
                    Some(exitstatus.as_str())
                );
            }
            other => panic!("expected TaskFailed, got {other:?}"),
        }
        rig.sim.shutdown().await;
    })
    .await;
}

/// Starts a slow `vzstart`, makes every task-status poll fail with `fault` for 150 ms, and
/// checks that the wait rode it out: the task is reported, the guest runs, and the request
/// log shows at least one status poll answered with `seen_status` (0: connection dropped).
async fn wait_rides_out(ct: u32, fault: EndpointFault, seen_status: u16) {
    let mut sim_cfg = fast_sim();
    sim_cfg.durations.vzstart = Duration::from_secs(30);
    let rig = start(sim_cfg).await;
    restore_golden(&rig, ct).await;
    let up = rig.client.start_ct(vmid(ct)).await.expect("start accepted");
    rig.sim.set_faults(FaultConfig {
        endpoints: vec![fault],
        ..Default::default()
    });
    let sim = rig.sim.clone();
    let heal = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        sim.set_faults(FaultConfig::default());
    });
    let out = rig
        .client
        .wait_task(Op::StartCt, &up)
        .await
        .expect("the wait rides out the fault");
    heal.await.expect("the healing task ran");
    assert_eq!(out.upid, up);
    let faulted = rig
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/status") && r.status == seen_status)
        .count();
    assert!(
        faulted >= 1,
        "the wait saw status polls answered {seen_status}"
    );
    assert_eq!(rig.sim.guest_running(ct), Some(true));
    rig.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_survives_connections_dropped_mid_wait() {
    let status = fault("GET", "/nodes/{node}/tasks/{upid}/status");
    let dropped = EndpointFault {
        drop_rate: 1.0,
        ..status
    };
    bounded(wait_rides_out(250, dropped, 0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_survives_server_errors_mid_wait() {
    let status = fault("GET", "/nodes/{node}/tasks/{upid}/status");
    let failing = EndpointFault {
        error_rate: 1.0,
        ..status
    };
    bounded(wait_rides_out(255, failing, 500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_sent_and_outcome_unknown_are_told_apart() {
    bounded(async {
        let rig = start(fast_sim()).await;
        restore_golden(&rig, 260).await;

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let mut cfg = config_for(
            &rig.sim,
            &rig.sim.endpoint().tokens.agent.clone(),
            RetryPolicy::fast(),
        );
        cfg.base_url = format!("https://127.0.0.1:{port}/api2/json")
            .parse()
            .unwrap();
        let nowhere = PveClient::new(cfg).unwrap();
        let err = nowhere.start_ct(vmid(260)).await.unwrap_err();
        assert!(
            matches!(
                err,
                PveError::NotSent {
                    op: Op::StartCt,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_retry_safe());

        rig.sim.set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                drop_rate: 1.0,
                ..fault("POST", "/nodes/{node}/lxc/{vmid}/status/start")
            }],
            ..Default::default()
        });
        rig.sim.clear_requests();
        let err = rig.client.start_ct(vmid(260)).await.unwrap_err();
        assert!(
            matches!(
                err,
                PveError::OutcomeUnknown {
                    op: Op::StartCt,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_outcome_unknown() && !err.is_retry_safe());
        assert_eq!(
            rig.sim.requests().len(),
            1,
            "a write with an unknown outcome is not resent"
        );

        let mut policy = RetryPolicy::fast();
        policy.request_timeout = Duration::from_millis(100);
        let impatient = client_for(&rig.sim, &rig.sim.endpoint().tokens.agent.clone(), policy);
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                latency: Duration::from_millis(500),
                ..fault("POST", "/nodes/{node}/lxc/{vmid}/status/start")
            }],
            ..Default::default()
        });
        let err = impatient.start_ct(vmid(260)).await.unwrap_err();
        assert!(
            matches!(err, PveError::OutcomeUnknown { .. }),
            "a timeout after sending: {err:?}"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_with_another_fingerprint_is_refused() {
    bounded(async {
        let rig = start(fast_sim()).await;
        let mut cfg = config_for(
            &rig.sim,
            &rig.sim.endpoint().tokens.agent.clone(),
            RetryPolicy::fast(),
        );
        let mut wrong = rig.sim.endpoint().fingerprint.clone();
        let flipped = if wrong.starts_with('0') { "1" } else { "0" };
        wrong.replace_range(0..1, flipped);
        cfg.trust = TlsTrust::PinnedSha256(wrong);
        let client = PveClient::new(cfg).unwrap();
        rig.sim.clear_requests();
        let err = client.version().await.unwrap_err();
        assert!(matches!(err, PveError::NotSent { .. }), "{err:?}");
        assert!(rig.sim.requests().is_empty(), "no request got through");
        let chain = format!("{:?}", std::error::Error::source(&err));
        assert!(chain.to_lowercase().contains("certificate"), "{chain}");
        rig.sim.shutdown().await;
    })
    .await;
}
