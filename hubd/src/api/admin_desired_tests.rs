use bosun_proto::desired::{DesiredState, GuestResources};
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::report::StateReport;
use jiff::Timestamp;

use super::*;

fn document() -> DesiredState {
    serde_json::from_str(include_str!("../../../docs/proto/desired.json")).unwrap()
}

fn seen(spec: &GuestSpec, status: GuestStatus, memory_mib: u32) -> GuestReport {
    GuestReport {
        guest_id: Some(spec.guest_id),
        vmid: 100,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: spec.hostname.clone(),
        status,
        resources: Some(GuestResources {
            cores: spec.resources.cores,
            memory_mib,
            rootfs_gib: spec.resources.rootfs_gib,
        }),
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

fn failed_op(spec: &GuestSpec) -> OperationRecord {
    OperationRecord {
        op_id: Uuid::now_v7(),
        kind: "set_spec".into(),
        guest_id: Some(spec.guest_id.to_string()),
        vmid: Some(100),
        job_id: None,
        request_id: None,
        correlation_id: Some("c-1".into()),
        status: "failed".into(),
        error: Some("proxmox said no".into()),
        started_at: Timestamp::UNIX_EPOCH,
        ended_at: None,
        steps: Vec::new(),
        steps_omitted: 0,
    }
}

fn facts(
    applied_generation: u64,
    guests: Vec<GuestReport>,
    ops: Vec<OperationRecord>,
) -> DesiredFacts {
    let report: StateReport = serde_json::from_value(serde_json::json!({
        "schema": "bosun.report/v1", "host": {}, "versions": { "agent": "0.1.0" }
    }))
    .unwrap();
    DesiredFacts {
        current: Some(DesiredRevision {
            generation: 2,
            correlation_id: Some("c-1".into()),
            set_by: Some("alice".into()),
            stored_at: Timestamp::UNIX_EPOCH,
            document: document(),
        }),
        applied: None,
        known_generation: 2,
        applied_generation,
        last_seen: None,
        report: Some(StateReport { guests, ..report }),
        operations: ops,
    }
}

#[test]
fn a_guest_is_pending_until_it_matches_or_the_host_applied_the_generation() {
    let spec = document().guests[0].clone();
    let host = Uuid::now_v7();
    let wrong_size = seen(&spec, GuestStatus::Running, spec.resources.memory_mib + 1);
    let status = status(host, facts(1, vec![wrong_size.clone()], Vec::new()));
    assert_eq!(status.guests[0].state, ProgressState::Pending);
    let right = seen(&spec, GuestStatus::Running, spec.resources.memory_mib);
    let now = super::status(host, facts(1, vec![right], Vec::new()));
    assert_eq!(now.guests[0].state, ProgressState::Applied);
    let applied = super::status(host, facts(2, vec![wrong_size], Vec::new()));
    assert_eq!(applied.guests[0].state, ProgressState::Applied);
    let stopped = seen(&spec, GuestStatus::Stopped, spec.resources.memory_mib);
    let wrong_power = super::status(host, facts(1, vec![stopped], Vec::new()));
    assert_eq!(wrong_power.guests[0].state, ProgressState::Pending);
}

#[test]
fn a_failed_operation_gives_the_agents_reason_and_broken_is_final() {
    let spec = document().guests[0].clone();
    let host = Uuid::now_v7();
    let missing = super::status(host, facts(1, Vec::new(), vec![failed_op(&spec)]));
    let guest = &missing.guests[0];
    assert_eq!(guest.state, ProgressState::Failed);
    assert!(!guest.terminal);
    assert!(guest.reason.as_deref().unwrap().contains("proxmox said no"));
    let broken = seen(&spec, GuestStatus::Broken, spec.resources.memory_mib);
    let status = super::status(host, facts(1, vec![broken], Vec::new()));
    assert_eq!(status.guests[0].state, ProgressState::Failed);
    assert!(status.guests[0].terminal);
}

#[test]
fn a_root_disk_asked_smaller_than_the_guests_is_refused_even_after_the_host_converged() {
    let spec = document().guests[0].clone();
    let host = Uuid::now_v7();
    let mut larger = seen(&spec, GuestStatus::Running, spec.resources.memory_mib);
    larger.resources.as_mut().unwrap().rootfs_gib = spec.resources.rootfs_gib + 4;
    // The host says it applied the generation: the shrink is still not applied.
    let status = super::status(host, facts(2, vec![larger.clone()], Vec::new()));
    let guest = &status.guests[0];
    assert_eq!(guest.state, ProgressState::Refused);
    assert!(guest.terminal);
    let reason = guest.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("rootfs_gib: the root disk is") && reason.contains("is never shrunk"),
        "{reason}"
    );
    // Asked as large as it is: applied.
    let mut same = larger;
    same.resources.as_mut().unwrap().rootfs_gib = spec.resources.rootfs_gib;
    let status = super::status(host, facts(1, vec![same], Vec::new()));
    assert_eq!(status.guests[0].state, ProgressState::Applied);
}

#[test]
fn guests_the_document_does_not_name_are_unmanaged() {
    let spec = document().guests[0].clone();
    let mut stranger = seen(&spec, GuestStatus::Running, 512);
    stranger.guest_id = None;
    stranger.vmid = 555;
    let status = super::status(Uuid::now_v7(), facts(2, vec![stranger], Vec::new()));
    assert_eq!(status.unmanaged.len(), 1);
    assert_eq!(status.unmanaged[0].vmid, 555);
}

#[test]
fn a_correlation_id_header_is_checked() {
    let mut headers = HeaderMap::new();
    assert_eq!(correlation_id(&headers).unwrap(), None);
    headers.insert(
        super::super::CORRELATION_ID,
        "op-2026-11-23".parse().unwrap(),
    );
    assert_eq!(
        correlation_id(&headers).unwrap().as_deref(),
        Some("op-2026-11-23")
    );
    headers.insert(
        super::super::CORRELATION_ID,
        "x".repeat(129).parse().unwrap(),
    );
    assert!(correlation_id(&headers).is_err());
}
