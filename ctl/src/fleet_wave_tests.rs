use super::*;

#[test]
fn the_gate_verdict_is_the_entry_of_this_job_and_says_why() {
    let job = Uuid::new_v4();
    let entry = |action: &str, id: Uuid| bosun_proto::admin::AuditRecord {
        host_id: Uuid::nil(),
        hostname: None,
        seq: 1,
        at: jiff::Timestamp::UNIX_EPOCH,
        action: action.to_owned(),
        detail: serde_json::json!({
            "job_id": id.to_string(),
            "detail": {"failure": "no_poll", "detail": "silent for 30 s"},
        }),
        repeats: 1,
        last_at: None,
    };
    let page = |entries| AuditPage {
        entries,
        next_before: None,
    };
    assert_eq!(
        gate_verdict(&page(vec![entry(COMMITTED, Uuid::new_v4())]), job),
        None
    );
    assert_eq!(
        gate_verdict(&page(vec![entry(COMMITTED, job)]), job),
        Some(Phase::Passed)
    );
    let Some(Phase::Failed(why)) = gate_verdict(&page(vec![entry(ROLLED_BACK, job)]), job) else {
        panic!("not a failure");
    };
    assert!(
        why.contains("no_poll") && why.contains("silent for 30 s"),
        "{why}"
    );
}

#[test]
fn the_jobs_parameters_and_bounds_are_checked_before_the_hub_is_asked() {
    let settings = |kind, params: &[&str], wait: &str| {
        let params: Vec<String> = params.iter().map(|p| (*p).to_owned()).collect();
        Settings::new(
            kind,
            &params,
            None,
            PathBuf::from("ssh-keygen"),
            (wait, "6h"),
            24,
        )
    };
    let digest = format!("digest=sha256:{}", "ab".repeat(32));
    let ok = settings(FleetKind::ControllerUpdate, &[&digest], "30m").unwrap();
    assert_eq!(ok.want, format!("sha256:{}", "ab".repeat(32)));
    let refused = |result: Result<Settings, CtlError>| match result {
        Err(CtlError::BadArgument { what, reason }) => format!("{what}: {reason}"),
        other => panic!("not refused: {other:?}"),
    };
    let why = refused(settings(FleetKind::AgentUpdate, &[], "30m"));
    assert!(why.contains("version="), "{why}");
    let why = refused(settings(
        FleetKind::AgentUpdate,
        &["version=0.3.0", "sha256=not-hex"],
        "30m",
    ));
    assert!(why.contains("sha256"), "{why}");
    let why = refused(settings(
        FleetKind::ControllerUpdate,
        &["digest=latest"],
        "30m",
    ));
    assert!(why.contains("digest"), "{why}");
    for wait in ["5s", "2d", "soon"] {
        let why = refused(settings(FleetKind::ControllerUpdate, &[&digest], wait));
        assert!(why.starts_with("--wait"), "{wait}: {why}");
    }
}

#[test]
fn a_wave_signs_only_for_hosts_the_operator_approved() {
    let (mine, theirs) = (Uuid::new_v4(), Uuid::new_v4());
    let target = |host: Uuid, job_host: Uuid| Target {
        host_id: host,
        hostname: "pve-a".to_owned(),
        labels: std::collections::BTreeMap::new(),
        jobs: vec![JobTarget {
            host_id: job_host,
            guest_id: None,
            vmid: None,
        }],
    };
    let approval = Approval::new([mine]);
    assert!(approved(&approval, &target(mine, mine)));
    assert!(!approved(&approval, &target(theirs, theirs)));
    assert!(
        !approved(&approval, &target(mine, theirs)),
        "a job for another host"
    );
}
