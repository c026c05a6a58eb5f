//! Round-trip, example and rejection tests for every document.

use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::admin::{CreateEnrollToken, ErrorBody};
use crate::bootstrap::Bootstrap;
use crate::desired::DesiredState;
use crate::enroll::{EnrollRequest, EnrollResponse};
use crate::escrow::EscrowBlob;
use crate::job::{JobDocument, JobResult, SignedJob};
use crate::poll::{PollRequest, PollResponse};
use crate::report::StateReport;
use crate::{ValidationError, fingerprint};

type Edit = fn(&mut serde_json::Value);

macro_rules! example {
    ($name:literal) => {
        include_str!(concat!("../../docs/proto/", $name))
    };
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) -> T {
    let value: T = serde_json::from_str(text).expect("example parses");
    let again: T = serde_json::from_str(&serde_json::to_string(&value).expect("serializes"))
        .expect("reparses");
    assert_eq!(value, again);
    value
}

#[test]
fn docs_examples_parse_validate_and_round_trip() {
    round_trip::<DesiredState>(example!("desired.json"))
        .validate()
        .unwrap();
    let ordered = round_trip::<DesiredState>(example!("desired-ordered.json"));
    ordered.validate().unwrap();
    let order = crate::desired::order::boot_order(&ordered.guests);
    assert!(order.refused.is_empty(), "{order:?}");
    let place = |name: &str| {
        let guest = ordered.guests.iter().find(|g| g.hostname == name).unwrap();
        order.position[&guest.guest_id]
    };
    assert_eq!(
        (place("acme-db"), place("acme-app"), place("acme-web")),
        (1, 2, 3)
    );
    round_trip::<JobDocument>(example!("job.json"))
        .validate()
        .unwrap();
    round_trip::<SignedJob>(example!("signed-job.json"))
        .validate()
        .unwrap();
    round_trip::<JobResult>(example!("job-result.json"))
        .validate()
        .unwrap();
    round_trip::<EnrollRequest>(example!("enroll-request.json"))
        .validate()
        .unwrap();
    let enrolled = round_trip::<EnrollResponse>(example!("enroll-response.json"));
    enrolled.config.validate().unwrap();
    assert_eq!(enrolled.replaces, None);
    let replacement = round_trip::<EnrollResponse>(example!("enroll-response-replacement.json"));
    replacement.config.validate().unwrap();
    assert_eq!(
        replacement.replaces.map(|r| r.hostname).as_deref(),
        Some("pve-shop-01")
    );
    round_trip::<StateReport>(example!("report.json"))
        .validate()
        .unwrap();
    round_trip::<PollRequest>(example!("poll-request.json"))
        .validate()
        .unwrap();
    round_trip::<PollResponse>(example!("poll-response.json"))
        .validate()
        .unwrap();
    round_trip::<crate::delta::ReportDelta>(example!("report-delta.json"))
        .validate()
        .unwrap();
    let delta_poll = round_trip::<PollRequest>(example!("poll-request-delta.json"));
    delta_poll.validate().unwrap();
    assert!(delta_poll.report.is_none() && delta_poll.delta.is_some());
    round_trip::<EscrowBlob>(example!("escrow.json"))
        .validate()
        .unwrap();
    round_trip::<Bootstrap>(example!("bootstrap.json"))
        .validate()
        .unwrap();
    round_trip::<ErrorBody>(example!("error.json"));
}

#[test]
fn signed_job_example_carries_the_job_example_byte_exact() {
    let signed: SignedJob = serde_json::from_str(example!("signed-job.json")).unwrap();
    assert_eq!(
        signed.document_bytes().unwrap(),
        example!("job.json").as_bytes()
    );
}

/// Applies `edit` to the parsed example and returns the validation (or parse) outcome.
fn edited<T: DeserializeOwned>(
    text: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    validate: impl Fn(&T) -> Result<(), ValidationError>,
) -> Result<(), String> {
    let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
    edit(&mut value);
    let doc: T = serde_json::from_value(value).map_err(|e| format!("parse: {e}"))?;
    validate(&doc).map_err(|e| format!("field {}: {e}", e.field()))
}

#[test]
fn desired_state_rejections_name_the_field() {
    let cases: &[(&str, Edit, &str)] = &[
        (
            "unknown top-level field",
            |v| v["surprise"] = 1.into(),
            "parse: unknown field `surprise`",
        ),
        (
            "unknown guest field",
            |v| v["guests"][0]["extra"] = true.into(),
            "parse: unknown field `extra`",
        ),
        (
            "wrong schema",
            |v| v["schema"] = "bosun.desired/v2".into(),
            "field schema",
        ),
        (
            "nil guest id",
            |v| v["guests"][0]["guest_id"] = uuid::Uuid::nil().to_string().into(),
            "field guests[0].guest_id",
        ),
        (
            "a bulk volume with no bulk-data target",
            |v| {
                v["guests"][0]["bulk_volumes"] = serde_json::json!([{
                    "name": "media", "size_gib": 10, "path": "/mnt/media", "class": "slow",
                    "backup": { "kind": "none", "acknowledged_by": "ops" },
                }])
            },
            "field guests[0].bulk_volumes[0].target",
        ),
        (
            "a bulk volume outside the guest's tree",
            |v| {
                v["storage"][0]["role"] = "bulk-data".into();
                v["backup_policy"]["target"] = serde_json::Value::Null;
                v["guests"][0]["bulk_volumes"] = serde_json::json!([{
                    "name": "media", "size_gib": 10, "path": "/mnt/../etc", "class": "slow",
                    "backup": { "kind": "none", "acknowledged_by": "ops" },
                }])
            },
            "field guests[0].bulk_volumes[0].path",
        ),
        (
            "no backup, acknowledged by nobody",
            |v| {
                v["storage"][0]["role"] = "bulk-data".into();
                v["backup_policy"]["target"] = serde_json::Value::Null;
                v["guests"][0]["bulk_volumes"] = serde_json::json!([{
                    "name": "media", "size_gib": 10, "path": "/mnt/media", "class": "slow",
                    "backup": { "kind": "none", "acknowledged_by": " " },
                }])
            },
            "field guests[0].bulk_volumes[0].backup.acknowledged_by",
        ),
        (
            "a further tier on a target that is not a backup target",
            |v| v["backup_policy"]["further_tiers"] = serde_json::json!(["nope"]),
            "field backup_policy.further_tiers[0]",
        ),
        (
            "a retention beyond bounds",
            |v| v["backup_policy"]["retention"]["keep_last"] = 100_001.into(),
            "field backup_policy.retention.keep_last",
        ),
        (
            "bad hostname",
            |v| v["guests"][0]["hostname"] = "-bad-".into(),
            "field guests[0].hostname",
        ),
        (
            "vmid too small",
            |v| v["guests"][0]["vmid"] = 99.into(),
            "field guests[0].vmid",
        ),
        (
            "zero cores",
            |v| v["guests"][0]["resources"]["cores"] = 0.into(),
            "field guests[0].resources.cores",
        ),
        (
            "short sha",
            |v| v["guests"][0]["golden"]["sha256"] = "abc".into(),
            "field guests[0].golden.sha256",
        ),
        (
            "volid without storage",
            |v| v["guests"][0]["golden"]["volid"] = "archive.tar".into(),
            "field guests[0].golden.volid",
        ),
        (
            "bad customer id",
            |v| v["guests"][0]["customer"]["customer_id"] = "a b".into(),
            "field guests[0].customer.customer_id",
        ),
        (
            "duplicate guest",
            |v| {
                let g = v["guests"][0].clone();
                v["guests"].as_array_mut().unwrap().push(g);
            },
            "field guests[1].guest_id",
        ),
        (
            "usb id not a uuid",
            |v| v["storage"][0]["durable_id"] = "/dev/sdb1".into(),
            "field storage[0].durable_id",
        ),
        (
            "unknown storage type",
            |v| v["storage"][0]["type"] = "floppy".into(),
            "parse: unknown variant `floppy`",
        ),
        (
            "restore interval zero",
            |v| v["restore_test_policy"]["interval_days"] = 0.into(),
            "field restore_test_policy.interval_days",
        ),
        (
            "restore window hour out of range",
            |v| {
                v["restore_test_policy"]["window"] =
                    serde_json::json!({"start_hour": 24, "hours": 4});
            },
            "field restore_test_policy.window.start_hour",
        ),
        (
            "restore window empty",
            |v| {
                v["restore_test_policy"]["window"] =
                    serde_json::json!({"start_hour": 2, "hours": 0});
            },
            "field restore_test_policy.window.hours",
        ),
        (
            "unknown dr policy",
            |v| v["dr_policy"] = "sometimes".into(),
            "parse: unknown variant `sometimes`",
        ),
        (
            "empty schedule",
            |v| v["backup_policy"]["schedule"] = " ".into(),
            "field backup_policy.schedule",
        ),
        (
            "schedule not a calendar event",
            |v| v["backup_policy"]["schedule"] = "every night".into(),
            "field backup_policy.schedule: field `backup_policy.schedule` is invalid: unknown weekday",
        ),
        (
            "target schedule out of range",
            |v| v["storage"][0]["policy"] = serde_json::json!({"schedule": "25:00"}),
            "field storage[0].policy.schedule: field `storage[0].policy.schedule` is invalid: bad hour list",
        ),
        (
            "share class nobody names",
            |v| v["guests"][0]["share_class"] = "gold".into(),
            "field guests[0].share_class: field `guests[0].share_class` is invalid: no share class is named \"gold\"",
        ),
        (
            "share class twice",
            |v| {
                let class = v["share_classes"][0].clone();
                v["share_classes"].as_array_mut().unwrap().push(class);
            },
            "field share_classes[2].name",
        ),
        (
            "cpu weight zero",
            |v| v["share_classes"][0]["cpu_weight"] = 0.into(),
            "field share_classes[0].cpu_weight",
        ),
        (
            "network rate zero, which Proxmox reads as no limit",
            |v| v["share_classes"][0]["net_rate_mbytes_per_s"] = 0.into(),
            "field share_classes[0].net_rate_mbytes_per_s",
        ),
        (
            "cpu limit below a hundredth of a core",
            |v| v["share_classes"][0]["cpu_limit_millicores"] = 9.into(),
            "field share_classes[0].cpu_limit_millicores",
        ),
        (
            "missing policy",
            |v| {
                v.as_object_mut().unwrap().remove("backup_policy");
            },
            "parse: missing field `backup_policy`",
        ),
    ];
    for (name, edit, expected) in cases {
        let outcome =
            edited::<DesiredState>(example!("desired.json"), *edit, DesiredState::validate);
        let err = outcome.expect_err(name);
        assert!(
            err.starts_with(expected),
            "{name}: got {err:?}, expected prefix {expected:?}"
        );
    }
}

#[test]
fn a_qemu_guests_volume_names_fit_a_disk_serial() {
    let named = |kind: &'static str, hot: usize, bulk_name: Option<usize>| {
        move |v: &mut serde_json::Value| {
            let guest = &mut v["guests"][0];
            guest["kind"] = kind.into();
            guest["hot_volumes"] = serde_json::json!([{
                "name": "d".repeat(hot), "size_gib": 2, "path": "/var/lib/db",
            }]);
            if let Some(len) = bulk_name {
                guest["hot_volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({
                        "name": "m".repeat(len), "size_gib": 2, "path": "/srv/m",
                    }));
            }
        }
    };
    fn check(edit: impl FnOnce(&mut serde_json::Value)) -> Result<(), String> {
        edited::<DesiredState>(example!("desired.json"), edit, DesiredState::validate)
    }
    assert_eq!(check(named("qemu", 20, None)), Ok(()));
    assert_eq!(
        check(named("qemu", 21, None))
            .unwrap_err()
            .split(':')
            .next(),
        Some("field guests[0].hot_volumes[0].name")
    );
    assert_eq!(
        check(named("qemu", 4, Some(21)))
            .unwrap_err()
            .split(':')
            .next(),
        Some("field guests[0].hot_volumes[1].name")
    );
    // A container's volume names keep their own bound.
    assert_eq!(check(named("lxc", 32, None)), Ok(()));
}

#[test]
fn job_document_rejections_name_the_field() {
    let cases: &[(&str, Edit, &str)] = &[
        (
            "unknown field",
            |v| v["urgency"] = 1.into(),
            "parse: unknown field `urgency`",
        ),
        (
            "timeout too short",
            |v| v["timeout_s"] = 9.into(),
            "field timeout_s",
        ),
        (
            "timeout too long",
            |v| v["timeout_s"] = 86_401.into(),
            "field timeout_s",
        ),
        (
            "priority out of range",
            |v| v["priority"] = 101.into(),
            "field priority",
        ),
        (
            "unknown kind",
            |v| v["kind"] = "format-disk".into(),
            "parse: unknown variant `format-disk`",
        ),
        (
            "guest job without guest",
            |v| {
                v["target"].as_object_mut().unwrap().remove("guest_id");
            },
            "field target.guest_id",
        ),
        (
            "guest job without vmid",
            |v| {
                v["target"].as_object_mut().unwrap().remove("vmid");
            },
            "field target.vmid",
        ),
        (
            "host job with guest",
            |v| {
                v["kind"] = "break-glass-enable".into();
                v["params"] = serde_json::json!({});
            },
            "field target.guest_id",
        ),
        (
            "empty backup",
            |v| v["params"] = serde_json::json!({ "backup": " " }),
            "field params.backup",
        ),
        (
            "backup not a string",
            |v| v["params"] = serde_json::json!({ "backup": 7 }),
            "field params.backup",
        ),
        ("short nonce", |v| v["nonce"] = "abc".into(), "field nonce"),
        (
            "expires before valid",
            |v| v["expires_at"] = "2099-11-20T00:00:00Z".into(),
            "field expires_at",
        ),
        (
            "window too long",
            |v| v["expires_at"] = "2099-12-30T00:00:00Z".into(),
            "field expires_at",
        ),
        (
            "bad timestamp",
            |v| v["not_before"] = "yesterday".into(),
            "parse:",
        ),
    ];
    for (name, edit, expected) in cases {
        let outcome = edited::<JobDocument>(example!("job.json"), *edit, JobDocument::validate);
        let err = outcome.expect_err(name);
        assert!(
            err.starts_with(expected),
            "{name}: got {err:?}, expected prefix {expected:?}"
        );
    }
}

#[test]
fn timeout_and_priority_are_signed_and_absent_when_unset() {
    let mut doc: serde_json::Value = serde_json::from_str(example!("job.json")).unwrap();
    let plain: JobDocument = serde_json::from_value(doc.clone()).unwrap();
    assert_eq!((plain.timeout_s, plain.priority), (None, 0));
    // A document without them serializes without them: older agents read it as before.
    let text = serde_json::to_string(&plain).unwrap();
    assert!(
        !text.contains("timeout_s") && !text.contains("priority"),
        "{text}"
    );
    doc["timeout_s"] = 600.into();
    doc["priority"] = (-5).into();
    let job: JobDocument = serde_json::from_value(doc).unwrap();
    job.validate().unwrap();
    assert_eq!((job.timeout_s, job.priority), (Some(600), -5));
}

#[test]
fn a_job_result_from_an_older_agent_reads_and_the_hub_bounds_a_newer_one() {
    let old = serde_json::json!({
        "schema": "bosun.job-result/v1", "job_id": uuid::Uuid::nil(), "outcome": "failed",
        "finished_at": "2026-11-20T00:00:10Z", "detail": "x",
    });
    let result: JobResult = serde_json::from_value(old).unwrap();
    assert_eq!((result.started_at, result.retriable), (None, false));
    assert!(result.log_tail.is_empty());
    result.validate().unwrap();

    let mut hostile = result.clone();
    hostile.started_at = Some("2026-11-20T00:00:00Z".parse().unwrap());
    hostile.duration_ms = Some(1);
    hostile.retriable_reason = format!("\u{1b}[2J{}", "r".repeat(5000));
    hostile.log_tail = (0..500)
        .map(|i| format!("{i} password=hunter2 \u{9b}31m{}", "z".repeat(1000)))
        .collect();
    assert!(hostile.validate().is_err(), "unbounded sizes are refused");
    hostile.bound();
    hostile.validate().unwrap();
    assert_eq!(
        hostile.duration_ms,
        Some(10_000),
        "the duration is the hub's own sum"
    );
    assert!(hostile.log_tail.len() <= crate::job_log::MAX_LINES);
    assert!(
        hostile
            .log_tail
            .last()
            .unwrap()
            .starts_with("499 password=[redacted]")
    );
    assert!(hostile.log_tail.iter().all(|l| !l.contains("hunter2")));
    assert!(!crate::inert::has_control(&hostile.retriable_reason));

    let mut backwards = result;
    backwards.started_at = Some("2026-11-21T00:00:00Z".parse().unwrap());
    backwards.bound();
    assert_eq!((backwards.started_at, backwards.duration_ms), (None, None));
}

#[test]
fn restore_now_without_a_backup_is_valid_it_restores_the_fastest_tier() {
    let mut doc: serde_json::Value = serde_json::from_str(example!("job.json")).unwrap();
    assert_eq!(doc["kind"], "restore-now");
    doc["params"] = serde_json::json!({});
    let job: JobDocument = serde_json::from_value(doc).unwrap();
    job.validate().unwrap();
}

#[test]
fn signed_job_envelope_rejections() {
    let good: SignedJob = serde_json::from_str(example!("signed-job.json")).unwrap();
    let mut unarmored = good.clone();
    unarmored.signature = "not a signature".into();
    assert_eq!(unarmored.validate().unwrap_err().field(), "signature");
    let mut bad_b64 = good.clone();
    bad_b64.document = "!!!".into();
    assert_eq!(bad_b64.validate().unwrap_err().field(), "document");
    let not_json = SignedJob::new(b"hello", &good.signature);
    assert_eq!(not_json.validate().unwrap_err().field(), "document");
    let mut doc: serde_json::Value = serde_json::from_str(example!("job.json")).unwrap();
    doc["nonce"] = "x".into();
    let inner = SignedJob::new(doc.to_string().as_bytes(), &good.signature);
    assert_eq!(inner.validate().unwrap_err().field(), "document.nonce");
    let extra = r#"{"schema":"bosun.signed-job/v1","document":"","signature":"","x":1}"#;
    assert!(serde_json::from_str::<SignedJob>(extra).is_err());
}

#[test]
fn reports_tolerate_unknown_fields_and_values() {
    let mut value: serde_json::Value = serde_json::from_str(example!("report.json")).unwrap();
    value["guests"][0]["status"] = "hibernating".into();
    value["storage"][0]["status"] = "spinning-up".into();
    value["host"]["gpu_count"] = 2.into();
    let report: StateReport = serde_json::from_value(value).unwrap();
    report.validate().unwrap();
    assert_eq!(report.guests[0].status, crate::report::GuestStatus::Unknown);
    assert_eq!(
        report.storage[0].status,
        crate::report::TargetStatus::Unknown
    );
}

#[test]
fn a_reported_guest_says_its_kind_and_a_containers_report_reads_as_before() {
    use crate::desired::GuestKind;
    let before: serde_json::Value = serde_json::from_str(example!("report.json")).unwrap();
    // A report written before VMs names no kind: its guests are containers, and the report
    // serializes as it was written.
    let report: StateReport = serde_json::from_value(before.clone()).unwrap();
    assert!(report.guests.iter().all(|g| g.kind == GuestKind::Lxc));
    let again = serde_json::to_value(&report).unwrap();
    assert!(
        again["guests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g.get("kind").is_none()),
        "{again}"
    );
    // A VM's kind is written and read back.
    let mut value = before;
    value["guests"][0]["kind"] = "qemu".into();
    let report: StateReport = serde_json::from_value(value).unwrap();
    report.validate().unwrap();
    assert_eq!(report.guests[0].kind, GuestKind::Qemu);
    assert_eq!(report.guests[1].kind, GuestKind::Lxc);
    let again = serde_json::to_value(&report).unwrap();
    assert_eq!(again["guests"][0]["kind"], "qemu");
    assert!(again["guests"][1].get("kind").is_none(), "{again}");
}

#[test]
fn poll_answers_keep_their_bounds() {
    let response = example!("poll-response.json");
    let check = |edit: fn(&mut serde_json::Value)| edited(response, edit, PollResponse::validate);
    assert!(check(|_| {}).is_ok());
    let parked = check(|v| v["config"]["poll_interval_seconds"] = 86_400.into()).unwrap_err();
    assert!(parked.contains("config.poll_interval_seconds"), "{parked}");
    assert!(check(|v| v["config"]["poll_interval_seconds"] = 300.into()).is_ok());
    assert!(check(|v| v["config"]["long_poll_seconds"] = 61.into()).is_err());
    let flood = check(|v| {
        let job = v["jobs"][0].clone();
        v["jobs"] = serde_json::Value::Array(vec![job; crate::poll::MAX_JOBS_PER_POLL + 1]);
    })
    .unwrap_err();
    assert!(flood.contains("jobs"), "{flood}");
    let mut request: PollRequest = serde_json::from_str(example!("poll-request.json")).unwrap();
    request.acked_jobs = vec![uuid::Uuid::nil(); crate::poll::MAX_ACKED_JOBS];
    assert!(request.validate().is_ok());
    request.acked_jobs.push(uuid::Uuid::nil());
    assert_eq!(request.validate().unwrap_err().field(), "acked_jobs");
}

#[test]
fn a_planned_stop_travels_as_an_optional_flag() {
    // An older agent's poll says nothing of stopping: it is an ordinary poll.
    let older: PollRequest = serde_json::from_str(example!("poll-request-delta.json")).unwrap();
    assert!(!older.stopping);
    // An ordinary poll is sent as before, without the field.
    let sent = serde_json::to_value(&older).unwrap();
    assert!(sent.get("stopping").is_none(), "{sent}");
    // The last poll before a planned stop carries it, and it survives the trip.
    let mut value: serde_json::Value =
        serde_json::from_str(example!("poll-request-delta.json")).unwrap();
    value["stopping"] = true.into();
    let last = round_trip::<PollRequest>(&value.to_string());
    assert!(last.stopping);
    last.validate().unwrap();
}

#[test]
fn report_and_poll_rejections_name_the_field() {
    let cases: &[(&str, Edit, &str)] = &[
        (
            "cpu share",
            |v| v["report"]["host"]["cpu_usage"] = 1.5.into(),
            "report.host.cpu_usage",
        ),
        (
            "no agent version",
            |v| v["report"]["versions"]["agent"] = "".into(),
            "report.versions.agent",
        ),
        (
            "audit order",
            |v| v["report"]["audit"][1]["seq"] = 1.into(),
            "report.audit",
        ),
        (
            "applied ahead",
            |v| v["applied_generation"] = 9.into(),
            "applied_generation",
        ),
        (
            "report schema",
            |v| v["report"]["schema"] = "x".into(),
            "report.schema",
        ),
    ];
    for (name, edit, field) in cases {
        let mut value: serde_json::Value =
            serde_json::from_str(example!("poll-request.json")).unwrap();
        edit(&mut value);
        let req: PollRequest = serde_json::from_value(value).unwrap();
        assert_eq!(req.validate().unwrap_err().field(), *field, "{name}");
    }
}

#[test]
fn enrollment_escrow_bootstrap_and_admin_rejections() {
    let mut enroll: EnrollRequest = serde_json::from_str(example!("enroll-request.json")).unwrap();
    enroll.hostname = String::new();
    assert_eq!(enroll.validate().unwrap_err().field(), "hostname");

    let mut escrow: EscrowBlob = serde_json::from_str(example!("escrow.json")).unwrap();
    escrow.ciphertext = "plaintext key".into();
    assert_eq!(escrow.validate().unwrap_err().field(), "ciphertext");

    let mut boot: Bootstrap = serde_json::from_str(example!("bootstrap.json")).unwrap();
    boot.hub.url = "http://hub".into();
    assert_eq!(boot.validate().unwrap_err().field(), "hub.url");
    let mut boot: Bootstrap = serde_json::from_str(example!("bootstrap.json")).unwrap();
    boot.local_api.fingerprint = "AB:CD".into();
    assert_eq!(
        boot.validate().unwrap_err().field(),
        "local_api.fingerprint"
    );

    let token = CreateEnrollToken {
        ttl_seconds: 5,
        require_approval: false,
        note: None,
        restore_host: None,
    };
    assert_eq!(token.validate().unwrap_err().field(), "ttl_seconds");
    let nil = CreateEnrollToken {
        ttl_seconds: 600,
        restore_host: Some(uuid::Uuid::nil()),
        ..token
    };
    assert_eq!(nil.validate().unwrap_err().field(), "restore_host");
}

#[test]
fn restore_tokens_escrow_states_and_replacements_have_stable_json() {
    use crate::admin::{EnrollTokenCreated, EscrowState, HostDetail, HostSummary};
    use serde_json::json;

    // A restore-mode token request; without `restore_host` it is a plain one, and the field
    // is not sent.
    let host = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
    let restore: CreateEnrollToken =
        serde_json::from_value(json!({ "ttl_seconds": 3600, "restore_host": host })).unwrap();
    restore.validate().unwrap();
    assert_eq!(
        restore.restore_host.map(|h| h.to_string()).as_deref(),
        Some(host)
    );
    let plain: CreateEnrollToken = serde_json::from_value(json!({ "ttl_seconds": 3600 })).unwrap();
    assert_eq!(plain.restore_host, None);
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("restore_host")
    );
    assert!(
        serde_json::from_value::<CreateEnrollToken>(
            json!({ "ttl_seconds": 3600, "restore_host": "pve1" })
        )
        .is_err()
    );
    let created: EnrollTokenCreated = serde_json::from_value(json!({
        "token": "bet_x", "expires_at": "2026-11-20T00:00:00Z", "require_approval": false,
        "restore_host": host,
    }))
    .unwrap();
    assert_eq!(created.restore_host, restore.restore_host);

    // The escrow state, each shape exactly.
    let at: jiff::Timestamp = "2026-11-20T00:00:00Z".parse().unwrap();
    for (state, wire) in [
        (EscrowState::None, json!({ "state": "none" })),
        (
            EscrowState::Stored {
                key_fingerprint: "aa:bb".into(),
                updated_at: at,
            },
            json!({ "state": "stored", "key_fingerprint": "aa:bb", "updated_at": "2026-11-20T00:00:00Z" }),
        ),
        (
            EscrowState::Verified {
                key_fingerprint: "aa:bb".into(),
                updated_at: at,
            },
            json!({ "state": "verified", "key_fingerprint": "aa:bb", "updated_at": "2026-11-20T00:00:00Z" }),
        ),
    ] {
        assert_eq!(serde_json::to_value(&state).unwrap(), wire);
        assert_eq!(serde_json::from_value::<EscrowState>(wire).unwrap(), state);
    }

    // A host view from an older hub (no escrow state, no replacement fields) still reads.
    let summary = json!({
        "host_id": host, "hostname": "pve1", "status": "active", "liveness": "ok",
        "last_seen": null, "agent_version": null, "controller_version": null,
        "desired_generation": 1, "known_generation": 1, "applied_generation": 1,
        "pending_jobs": 0,
    });
    let old: HostSummary = serde_json::from_value(summary.clone()).unwrap();
    assert_eq!(old.escrow, EscrowState::None);
    let mut detail = summary;
    detail["enrolled_at"] = json!("2026-03-02T09:15:00Z");
    detail["poll_interval_seconds"] = json!(30);
    detail["desired"] = json!(null);
    detail["last_report"] = json!(null);
    detail["escrow_updated_at"] = json!(null);
    let old: HostDetail = serde_json::from_value(detail.clone()).unwrap();
    assert_eq!((old.replaced_at, old.reseal_required_since), (None, None));
    // And a current one round-trips with them.
    detail["escrow"] = json!({ "state": "verified", "key_fingerprint": "aa:bb", "updated_at": "2026-11-20T00:00:00Z" });
    detail["replaced_at"] = json!("2026-11-19T08:00:00Z");
    detail["reseal_required_since"] = json!("2026-11-19T08:00:00Z");
    let new: HostDetail = serde_json::from_value(detail.clone()).unwrap();
    assert_eq!(serde_json::to_value(&new).unwrap(), detail);
    assert_eq!(new.summary.escrow.as_str(), "verified");
}

#[test]
fn secrets_are_redacted_in_debug() {
    let enroll: EnrollRequest = serde_json::from_str(example!("enroll-request.json")).unwrap();
    let shown = format!("{enroll:?}");
    assert!(!shown.contains(enroll.token.expose()), "{shown}");
    assert!(shown.contains("REDACTED"));
}

#[test]
fn fingerprint_normalization() {
    let hex = "3b8f0c1d2e4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344";
    let colons: String = hex
        .as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap().to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(fingerprint::normalize(&colons).as_deref(), Some(hex));
    assert_eq!(
        fingerprint::normalize(&format!("sha256:{hex}")).as_deref(),
        Some(hex)
    );
    assert_eq!(fingerprint::normalize("abc"), None);
    assert_eq!(fingerprint::normalize(&hex.replace('3', "g")), None);
    assert_eq!(fingerprint::cert_sha256(b"").len(), 64);
}

proptest! {
    #[test]
    fn signed_job_preserves_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let job = SignedJob::new(&bytes, "sig");
        let wire = serde_json::to_string(&job).unwrap();
        let back: SignedJob = serde_json::from_str(&wire).unwrap();
        prop_assert_eq!(back.document_bytes().unwrap(), bytes);
    }

    #[test]
    fn desired_guest_sizes_validate_iff_in_range(cores in 0u16..600, memory in 0u32..5_000_000, disk in 0u32..70_000) {
        let mut desired: DesiredState = serde_json::from_str(example!("desired.json")).unwrap();
        desired.guests[0].resources.cores = cores;
        desired.guests[0].resources.memory_mib = memory;
        desired.guests[0].resources.rootfs_gib = disk;
        let in_range = (1..=512).contains(&cores)
            && (64..=4_194_304).contains(&memory)
            && (1..=65_536).contains(&disk);
        prop_assert_eq!(desired.validate().is_ok(), in_range);
        let again: DesiredState = serde_json::from_str(&serde_json::to_string(&desired).unwrap()).unwrap();
        prop_assert_eq!(again, desired);
    }

    #[test]
    fn arbitrary_json_never_panics_the_validators(text in "\\PC{0,200}") {
        if let Ok(doc) = serde_json::from_str::<DesiredState>(&text) { let _ = doc.validate(); }
        if let Ok(doc) = serde_json::from_str::<PollRequest>(&text) { let _ = doc.validate(); }
        if let Ok(doc) = serde_json::from_str::<SignedJob>(&text) { let _ = doc.validate(); }
    }
}

#[test]
fn a_restore_window_wraps_past_midnight() {
    use crate::desired::TestWindow;
    let night = TestWindow {
        start_hour: 22,
        hours: 4,
    };
    let inside: Vec<u8> = (0..24).filter(|h| night.contains_hour(*h)).collect();
    assert_eq!(inside, vec![0, 1, 22, 23]);
    let all = TestWindow {
        start_hour: 5,
        hours: 24,
    };
    assert!((0..24).all(|h| all.contains_hour(h)));
}

#[test]
fn dr_policy_is_auto_unless_said_otherwise() {
    use crate::desired::DrPolicy;
    assert_eq!(DrPolicy::default(), DrPolicy::Auto);
    let manual: DrPolicy = serde_json::from_str("\"manual\"").unwrap();
    assert_eq!(manual, DrPolicy::Manual);
}

#[test]
fn a_targets_why_is_its_reason_or_an_older_agents_text_cut_short() {
    use crate::report::{MAX_LEGACY_DETAIL_CHARS, TargetReason, TargetReport};
    let report: StateReport = serde_json::from_str(example!("report.json")).unwrap();
    let mut target: TargetReport = report.storage[1].clone();
    assert_eq!(target.reason, Some(TargetReason::Unreachable));
    target.detail = Some("Proxmox's words".into());
    assert_eq!(target.why().as_deref(), Some("unreachable"));
    target.reason = None;
    assert_eq!(target.why().as_deref(), Some("Proxmox's words"));
    target.detail = Some(format!("a\nb\t{}", "c".repeat(500)));
    let why = target.why().unwrap();
    assert!(why.starts_with("a b c"), "{why}");
    assert_eq!(why.chars().count(), MAX_LEGACY_DETAIL_CHARS + 1);
    target.detail = Some("   ".into());
    assert_eq!(target.why(), None);
    // An unknown reason from a newer agent still reads as something.
    let newer: TargetReport = serde_json::from_value(serde_json::json!({
        "durable_id": "x", "status": "error", "reason": "quota_exceeded",
    }))
    .unwrap();
    assert_eq!(newer.why().as_deref(), Some("unknown"));
}

#[test]
fn a_bulk_volume_is_placed_only_on_an_attached_bulk_target_of_its_class() {
    use crate::desired::{BulkVolume, PlacementRefusal, StorageClass};
    let target = |id: &str, class: &str, role: &str, state: &str| {
        serde_json::json!({
            "type": "local-dir", "durable_id": id, "class": class, "role": role,
            "policy": {}, "state": state,
        })
    };
    let volume = |class: StorageClass, target: Option<&str>| BulkVolume {
        name: "db".into(),
        size_gib: 4,
        path: "/mnt/db".into(),
        class,
        target: target.map(str::to_owned),
        backup: crate::desired::BulkBackup::None {
            acknowledged_by: "ops".into(),
        },
    };
    let state = |targets: Vec<serde_json::Value>| {
        let mut value: serde_json::Value = serde_json::from_str(example!("desired.json")).unwrap();
        value["storage"] = targets.into();
        value["guests"] = serde_json::json!([]);
        value["backup_policy"]["target"] = serde_json::Value::Null;
        value["backup_policy"]["further_tiers"] = serde_json::json!([]);
        serde_json::from_value::<DesiredState>(value).unwrap()
    };
    let only_slow = state(vec![
        target("/srv/slow", "slow", "bulk-data", "attached"),
        // Fast, but not where bulk volumes go or not attached.
        target("/srv/backups", "fast", "vzdump-target", "attached"),
        target("/srv/gone", "fast", "bulk-data", "disconnected"),
    ]);
    let both = state(vec![
        target("/srv/slow", "slow", "bulk-data", "attached"),
        target("/srv/fast", "fast", "bulk-data", "attached"),
    ]);
    let placed = |s: &DesiredState, v: &BulkVolume| {
        s.place_bulk(v)
            .map(|t| t.durable_id.clone())
            .map_err(|r| r.as_str())
    };
    let cases: [(&DesiredState, BulkVolume, Result<String, &str>); 8] = [
        (
            &only_slow,
            volume(StorageClass::Fast, None),
            Err("no_target_of_class"),
        ),
        (
            &only_slow,
            volume(StorageClass::Slow, None),
            Ok("/srv/slow".into()),
        ),
        (
            &only_slow,
            volume(StorageClass::Fast, Some("/srv/slow")),
            Err("target_of_other_class"),
        ),
        (
            &only_slow,
            volume(StorageClass::Fast, Some("/srv/gone")),
            Err("target_unavailable"),
        ),
        (
            &only_slow,
            volume(StorageClass::Fast, Some("/srv/backups")),
            Err("target_unavailable"),
        ),
        (
            &both,
            volume(StorageClass::Fast, None),
            Ok("/srv/fast".into()),
        ),
        (
            &both,
            volume(StorageClass::Slow, None),
            Ok("/srv/slow".into()),
        ),
        (
            &both,
            volume(StorageClass::Fast, Some("/srv/fast")),
            Ok("/srv/fast".into()),
        ),
    ];
    for (i, (state, volume, want)) in cases.iter().enumerate() {
        assert_eq!(&placed(state, volume), want, "case {i}");
        assert_eq!(
            state.bulk_target(volume).is_some(),
            want.is_ok(),
            "case {i}"
        );
    }
    // The reason reads as words, and one a newer agent sends decodes as `unknown`.
    assert_eq!(
        PlacementRefusal::NoTargetOfClass.describe(StorageClass::Fast),
        "no attached bulk-data target of class fast"
    );
    let later: PlacementRefusal = serde_json::from_str("\"quota_exceeded\"").unwrap();
    assert_eq!(later, PlacementRefusal::Unknown);
}

#[test]
fn a_liveness_a_newer_hub_adds_reads_as_unknown() {
    use crate::admin::Liveness;
    for known in [
        Liveness::Never,
        Liveness::Ok,
        Liveness::Stopped,
        Liveness::Overdue,
    ] {
        let wire = serde_json::to_string(&known).unwrap();
        assert_eq!(wire, format!("\"{}\"", known.as_str()));
        assert_eq!(serde_json::from_str::<Liveness>(&wire).unwrap(), known);
    }
    assert_eq!(
        serde_json::from_str::<Liveness>("\"hibernating\"").unwrap(),
        Liveness::Unknown
    );
}

#[test]
fn every_job_kind_is_listed_once_and_named_as_serde_names_it() {
    use crate::job::JobKind;
    let mut names: Vec<&str> = JobKind::ALL.iter().map(|k| k.as_str()).collect();
    for kind in JobKind::ALL {
        let wire = serde_json::to_value(kind).unwrap();
        assert_eq!(wire, serde_json::Value::String(kind.as_str().to_owned()));
        assert_eq!(JobKind::from_wire(kind.as_str()), Some(kind));
        // A new variant fails to compile here, so whoever adds one is pointed at ALL.
        match kind {
            JobKind::RestoreNow
            | JobKind::Decommission
            | JobKind::StorageDetach
            | JobKind::StorageWipe
            | JobKind::ForceBackup
            | JobKind::BreakGlassEnable
            | JobKind::BreakGlassDisable
            | JobKind::AgentUpdate
            | JobKind::ControllerUpdate
            | JobKind::Adopt
            | JobKind::RestoreBulk => {}
        }
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), JobKind::ALL.len());
    assert_eq!(JobKind::from_wire("restore_now"), None);
}

/// The JSON blocks of the docs parse as what they show: the local API's protection answer,
/// the guide's share classes and its apps file's shape (the apps themselves are checked by
/// `bosun-guest`'s tests, which know the format).
#[test]
fn the_docs_json_blocks_parse_as_what_they_show() {
    fn blocks(text: &str) -> Vec<&str> {
        text.split("```json\n")
            .skip(1)
            .filter_map(|b| b.split_once("```").map(|(block, _)| block))
            .collect()
    }
    let protection = blocks(include_str!("../../docs/localapi-protection.md"));
    assert_eq!(protection.len(), 1);
    let answer: crate::protection::GuestProtection =
        serde_json::from_str(protection[0]).expect("the protection example parses");
    assert!(!answer.items.is_empty());
    let guide = blocks(include_str!("../../docs/operator-guide.md"));
    assert!(guide.len() >= 2, "{guide:?}");
    for block in guide {
        let text = block.trim();
        if let Some(fragment) = text.strip_prefix("\"share_classes\":") {
            let classes: Vec<crate::share::ShareClass> =
                serde_json::from_str(fragment).expect("the share classes parse");
            assert_eq!(classes.len(), 2);
        } else {
            let apps: Vec<serde_json::Value> =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(
                apps.iter()
                    .all(|a| a["stop"].is_array() && a["start"].is_array()),
                "{text}"
            );
        }
    }
}

#[test]
fn a_guest_status_is_named_as_reports_write_it() {
    use crate::report::GuestStatus;
    for status in [
        GuestStatus::Running,
        GuestStatus::Stopped,
        GuestStatus::Provisioning,
        GuestStatus::Orphaned,
        GuestStatus::Broken,
        GuestStatus::Lost,
        GuestStatus::Migrated,
        GuestStatus::Unknown,
    ] {
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            serde_json::Value::from(status.as_str())
        );
    }
}
