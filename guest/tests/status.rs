//! `bosun-guest status` against a real local API: the guest whose PBS verification has only
//! failed to run for three plan intervals is told it is overdue (exit 3, the item named, its
//! cause shown), judged against the signed plan although the hub turned verification off;
//! another guest's token sees its own, clean protection (exit 0) and never this one's.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[path = "../../agentd/tests/localapi_support/mod.rs"]
mod localapi_support;

use std::path::Path;
use std::sync::Arc;

use bosun_agentd::clock::ManualClock;
use bosun_agentd::data::desired::DesiredSnapshot;
use bosun_agentd::data::plan::{VerifiedPlan, apply};
use bosun_agentd::ops::journal::Verification;
use bosun_proto::bootstrap::{Bootstrap, LocalApi, PinnedEndpoint};
use bosun_proto::data_plan::{DataPlan, PLAN_SCHEMA, PlanBackup};
use bosun_proto::desired::{
    BackupPolicy, CustomerIdentity, DesiredState, DrPolicy, RestoreTestPolicy, Retention,
    StorageClass, StorageRole, StorageTarget, StorageType, TargetPolicy, TargetState,
};
use bosun_proto::secret::SecretToken;
use bosun_proto::verify::{VerifyOutcome, VerifyPolicy};
use localapi_support::{Harness, Options};
use serde_json::Value;

const PBS: &str = "backup@pbs!bosun@pbs.example:8007:store1#ab";

fn pbs() -> StorageTarget {
    StorageTarget {
        kind: StorageType::Pbs,
        durable_id: PBS.into(),
        class: StorageClass::Slow,
        role: StorageRole::PbsOffsite,
        policy: TargetPolicy {
            schedule: Some("daily".into()),
            retention: Retention::default(),
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: Some("hosts/this".into()),
        fstype: None,
        serial: None,
    }
}

/// The agent's desired state: the hub's document (verification off, the PBS target without
/// its credential) held to a plan that verifies every hour.
fn snapshot() -> DesiredSnapshot {
    let plan = DataPlan {
        schema: PLAN_SCHEMA.into(),
        host_id: uuid::Uuid::from_u128(1),
        serial: 5,
        issued_at: jiff::Timestamp::UNIX_EPOCH,
        targets: vec![pbs()],
        backup: PlanBackup {
            schedule: "02:00".into(),
            retention: Retention::default(),
            target: None,
            further_tiers: vec![PBS.into()],
            min_interval_seconds: 60,
            restore_test_days: None,
            verify_hours: Some(1),
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    };
    let hubs = DesiredState {
        schema: bosun_proto::desired::SCHEMA.into(),
        guests: Vec::new(),
        storage: vec![pbs()],
        backup_policy: BackupPolicy {
            schedule: "02:00".into(),
            retention: Retention::default(),
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: vec![PBS.into()],
            floor: None,
        },
        verify_policy: VerifyPolicy {
            enabled: false,
            interval_hours: 8760,
        },
        restore_test_policy: RestoreTestPolicy {
            enabled: false,
            interval_days: 7,
            timeout_minutes: 30,
            window: None,
        },
        dr_policy: DrPolicy::Auto,
        golden_recipe: None,
        data_plan: None,
        tunnel_credentials: None,
        share_classes: Vec::new(),
    };
    DesiredSnapshot {
        generation: 1,
        state: apply(&hubs, Some(&plan)).state,
        request_id: None,
        correlation_id: None,
        plan: Some(Arc::new(VerifiedPlan {
            plan,
            signer: "SHA256:operator".into(),
        })),
        refused: Vec::new(),
        unknown_kinds: Vec::new(),
    }
}

fn write_bootstrap(path: &Path, h: &Harness, n: usize) {
    let guest = h.guest(n);
    let bootstrap = Bootstrap {
        schema: bosun_proto::bootstrap::SCHEMA.to_owned(),
        guest_id: guest.guest_id.parse().unwrap(),
        customer: CustomerIdentity {
            customer_id: "acme-01".to_owned(),
            display_name: "Acme".to_owned(),
        },
        hub: PinnedEndpoint {
            url: "https://hub.example.net".to_owned(),
            fingerprint: "ab".repeat(32),
        },
        local_api: LocalApi {
            url: h.base.clone(),
            fingerprint: h.fingerprint.clone(),
            token: SecretToken::new(guest.token.clone()),
        },
        ssh_authorized_keys: Vec::new(),
    };
    std::fs::write(path, serde_json::to_vec(&bootstrap).unwrap()).unwrap();
}

/// `bosun-guest --bootstrap <guest n's> status [extra]`: exit code and stdout.
async fn status(h: &Harness, n: usize, extra: &[&str]) -> (i32, String) {
    let path = h.dir.path().join(format!("bootstrap-{n}.json"));
    write_bootstrap(&path, h, n);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
        .env_clear()
        .arg("--bootstrap")
        .arg(&path)
        .arg("status")
        .args(extra)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap(), stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_the_guest_its_verification_is_overdue_and_exits_3() {
    // The journal's clock stands three hours back: the verifications recorded now were first
    // tried three hours before the agent answers.
    let past = ManualClock::new(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(3));
    let h = Harness::start_with(Options {
        guests: 2,
        journal_clock: Some(past.shared()),
        ..Options::default()
    })
    .await;
    h.desired.send_replace(Some(Arc::new(snapshot())));
    // Guest 0's group on the PBS tier: never verified, every attempt could not run.
    h.journal
        .record_verification(Verification {
            guest_id: h.guest(0).guest_id.clone(),
            tier: PBS.into(),
            outcome: VerifyOutcome::Error,
            duration_ms: 3,
            detail: "the target's sealed credentials are not at hand".into(),
        })
        .await
        .unwrap();

    let (code, text) = status(&h, 0, &[]).await;
    eprintln!("{text}");
    assert_eq!(code, 3, "overdue protection exits 3: {text}");
    assert!(
        text.contains("judged against the signed data plan (serial 5)"),
        "{text}"
    );
    assert!(text.contains("OVERDUE: 1 of 3 items"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("- verification, tier 1"))
        .unwrap_or_else(|| panic!("no verification line: {text}"));
    assert!(
        line.contains(&format!(
            "on {PBS}: every 1h (signed plan); never ok; last run could not run"
        )) && line.contains("sealed credentials are not at hand")
            && line.contains("OVERDUE since 1h"),
        "{line}"
    );

    // The JSON answer is the agent's, for this guest only.
    let (code, json) = status(&h, 0, &["--json"]).await;
    assert_eq!(code, 3);
    let answer: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(answer["guest_id"], h.guest(0).guest_id.as_str());
    assert_eq!(answer["overdue"], true);

    // Guest 1 reads its own protection, not guest 0's failures; naming guest 0 is refused.
    let (code, text) = status(&h, 1, &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("nothing overdue (3 items)"), "{text}");
    assert!(!text.contains("could not run"), "{text}");
    let (code, body) = h.get(1, "/v1/protection").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["guest_id"], h.guest(1).guest_id.as_str());
    for query in [
        format!("guest_id={}", h.guest(0).guest_id),
        format!("vmid={}", h.guest(0).vmid),
    ] {
        let (code, body) = h.get(1, &format!("/v1/protection?{query}")).await;
        assert_eq!(code, 403, "{query}: {body}");
        assert!(body.get("items").is_none(), "{body}");
    }

    // `bosun-guest run` raises the guest's own signal: a warning naming the overdue item, and
    // the answer kept in the protection file.
    let path = h.dir.path().join("bootstrap-0.json");
    let file = h.dir.path().join("protection.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
        .env_clear()
        .env("RUST_LOG", "info")
        .arg("--bootstrap")
        .arg(&path)
        .arg("--marker")
        .arg(h.dir.path().join("quiesce.marker"))
        .args(["run", "--state"])
        .arg(h.dir.path().join("controller.digest"))
        .arg("--protection-file")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !file.exists() {
        assert!(
            std::time::Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "no protection file"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(kept["overdue"], true, "{kept}");
    assert_eq!(kept["guest_id"], h.guest(0).guest_id.as_str());
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains("this guest's protection is overdue"))
        .unwrap_or_else(|| panic!("no warning: {stderr}"));
    assert!(
        warning.contains("WARN")
            && warning.contains("verification, tier 1")
            && warning.contains("OVERDUE since"),
        "{warning}"
    );
    h.shutdown().await;
}
