//! The reporter: the report state of the hub loop. It builds each poll's report body
//! (full or delta, see [`super::report`]) from what the reconciler, the journal and
//! Proxmox say, keeps what the hub acknowledged (reports and audit sequence), and
//! decides when a changed observation is worth a prompt report.

use bosun_errchain::error_chain;
use bosun_proto::delta::ReportDelta;
use std::sync::Arc;

use bosun_proto::report::TierReport;
use bosun_proto::report::{
    AuditEntry as WireAudit, GuestReport, HostMetrics, PlanReport, StateReport, Versions,
};
use bosun_pve::Pve;
use serde_json::json;
use tokio::sync::watch;

use crate::trust::keys::pbs_key::PbsKeySource;
use tokio::time::Instant;

use super::capabilities::{CapabilityState, LocalFacts};
use super::report::{ReportBody, Reporter};
use crate::data::backup::tiers::TierPlan;
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::StorageFacts;
use crate::guests::controller::ControllerBoard;
use crate::guests::reconcile::reconcile_task::ReconcileStatus;
use crate::ops::journal::{ControllerState, JournalHandle};

/// Bytes in a GiB.
const GIB: u64 = 1 << 30;

/// Audit entries one poll carries at most.
const AUDIT_PER_POLL: u32 = 500;

/// The report state.
#[derive(Debug)]
pub struct ReportState {
    reporter: Reporter,
    audit_acked: u64,
    throttle: PromptThrottle,
    pve_version: Option<String>,
    sources: ReportSources,
    capabilities: CapabilityState,
}

/// What the last answered report showed of the reconciler, and when it went: whether a change
/// of the reconciler's status is worth a report now. Pure: "now" is given, so the throttle is
/// tested without waiting.
#[derive(Debug, Clone, Default)]
pub struct PromptThrottle {
    last_report: Option<Instant>,
    reported_acting: u64,
    reported_guests: Vec<GuestReport>,
    reported_refused: Vec<bosun_proto::refused::Refused>,
}

impl PromptThrottle {
    /// The report sent at `sent_at`, observing `status`, was answered.
    pub fn reported(&mut self, sent_at: Instant, status: &ReconcileStatus) {
        self.last_report = Some(sent_at);
        self.reported_acting = status.acting_passes;
        self.reported_guests.clone_from(&status.guests);
        self.reported_refused.clone_from(&status.refused);
    }

    /// What `status` asks for at `now`: `Ok(true)` report now (an acting pass, or a change
    /// when the last report is `min_interval` old), `Ok(false)` nothing new, `Err(at)` a change
    /// to report at `at`, `min_interval` after the last report.
    pub fn prompted_by(
        &self,
        status: &ReconcileStatus,
        min_interval: std::time::Duration,
        now: Instant,
    ) -> Result<bool, Instant> {
        if status.acting_passes > self.reported_acting {
            return Ok(true);
        }
        if status.guests != self.reported_guests || status.refused != self.reported_refused {
            let next = self.last_report.map_or(now, |t| t + min_interval);
            if next <= now {
                return Ok(true);
            }
            return Err(next);
        }
        Ok(false)
    }
}

/// Where the report's host facts come from besides Proxmox and the journal.
#[derive(Debug, Clone)]
pub struct ReportSources {
    /// The host's keys.
    pub keys: HostKeys,
    /// The storage watcher's view of the manifest's targets.
    pub storage: watch::Receiver<StorageFacts>,
    /// The backup tiers as planned.
    pub tiers: watch::Receiver<TierPlan>,
    /// The desired state acted on (bulk volumes and their backup decisions).
    pub desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    /// Host health and the tunnel, from the health task.
    pub health: watch::Receiver<crate::health::HealthFacts>,
    /// What each guest's controller reports it runs (its health reports).
    pub controllers: ControllerBoard,
    /// Whether a root helper is configured (the capabilities say so).
    pub helper: bool,
    /// Whether `agent.toml` has an address pool (the capabilities say so).
    pub address_pool: bool,
}

/// What the report says of the host's keys (public halves and fingerprints only).
#[derive(Debug, Clone)]
pub struct HostKeys {
    /// The age recipient storage credentials are sealed to.
    pub storage_recipient: Option<String>,
    /// The PBS encryption key K, whose fingerprint is reported (absent on a restore-mode
    /// box until the escrow is recovered).
    pub pbs_key: PbsKeySource,
}

impl ReportState {
    /// A reporter numbering from the start time; `pve_version` as Proxmox told it, `keys`
    /// what the report says of the host's keys.
    pub fn new(pve_version: Option<String>, sources: ReportSources) -> Self {
        Self {
            reporter: Reporter::new(
                u64::try_from(jiff::Timestamp::now().as_millisecond()).unwrap_or(1),
            ),
            audit_acked: 0,
            throttle: PromptThrottle::default(),
            pve_version,
            sources,
            capabilities: CapabilityState::new(super::capabilities::SYS_CLASS_NET),
        }
    }

    /// What the host is and has, for the next poll: with every full report, otherwise only
    /// when it changed since the hub last acknowledged it ([`CapabilityState`]).
    pub async fn capabilities<P: Pve>(
        &mut self,
        pve: &P,
        full_report: bool,
    ) -> Option<bosun_proto::capabilities::HostCapabilities> {
        let health = self.sources.health.borrow().clone();
        let smart = health.host.as_ref().is_some_and(|h| {
            !h.smart.is_empty()
                || h.disks.iter().any(|d| {
                    matches!(
                        d.state,
                        bosun_proto::health::SmartState::Passed
                            | bosun_proto::health::SmartState::Failing
                    )
                })
        });
        let plan_targets = plan_report(self.sources.desired.borrow().as_deref())
            .map(|p| p.targets)
            .unwrap_or_default();
        let local = LocalFacts {
            helper: self.sources.helper,
            address_pool: self.sources.address_pool,
            tunnel: health.tunnel.is_some(),
            smart,
            plan_targets,
        };
        self.capabilities.to_send(pve, local, full_report).await
    }

    /// The body of the next poll: a full report or a delta (exactly one is `Some`).
    pub async fn body<P: Pve>(
        &mut self,
        journal: &JournalHandle,
        pve: &P,
        status: &ReconcileStatus,
    ) -> (Option<StateReport>, Option<ReportDelta>) {
        let audit = match journal.audit_since(self.audit_acked, AUDIT_PER_POLL).await {
            Ok(entries) => entries
                .into_iter()
                .map(|e| WireAudit {
                    seq: e.seq,
                    at: e.at,
                    action: e.event.event.clone(),
                    detail: json!({
                        "op_id": e.event.op_id.map(|o| o.to_string()),
                        "job_id": e.event.job_id,
                        "guest_id": e.event.guest_id,
                        "vmid": e.event.vmid,
                        "request_id": e.event.request_id,
                        "detail": e.event.detail,
                        "hash": hex::encode(e.hash),
                    }),
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "audit tail unreadable; report sent without it");
                Vec::new()
            }
        };
        // Absent, not zeros, when the node list cannot be read or lacks this node.
        let host = match pve.nodes().await {
            Ok(nodes) => nodes
                .into_iter()
                .find(|n| n.node == pve.node().as_str())
                .map(|n| HostMetrics {
                    cpu_count: n.maxcpu.and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
                    cpu_usage: n.cpu.unwrap_or(0.0).clamp(0.0, 1.0),
                    memory_total_mib: n.maxmem.unwrap_or(0) / (1024 * 1024),
                    memory_used_mib: n.mem.unwrap_or(0) / (1024 * 1024),
                    disk_total_gib: n.maxdisk.unwrap_or(0) / GIB,
                    disk_used_gib: n.disk.unwrap_or(0) / GIB,
                }),
            Err(e) => {
                tracing::debug!(error = %error_chain(&e), "host metrics unread; the report carries none");
                None
            }
        };
        let guests = with_controllers(journal, &self.sources.controllers, &status.guests).await;
        let controller = uniform_controller(&guests);
        let last_backups = super::report::last_backups(journal).await;
        let restore_tests = super::report::restore_tests(journal).await;
        let last_restore_test = restore_tests.iter().max_by_key(|t| t.finished_at).cloned();
        let verifications = crate::data::verify::reports(journal).await;
        let golden = crate::guests::golden_build::report::report(journal).await;
        let storage = self.sources.storage.borrow().targets.clone();
        let last_backups =
            super::restored_backups::with_restored(journal, last_backups, &storage).await;
        let tiers = tier_reports(&self.sources.tiers.borrow());
        let bulk_rows = match journal.last_bulk_archives().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "bulk archive records unreadable; the report carries bulk volumes without them");
                Vec::new()
            }
        };
        // A VM's bulk volume is a disk nothing archives (decision 0124); the guest's kind is
        // the journal's, never desired state's (decision 0123).
        let vm_guests = match journal.all_provenance().await {
            Ok(rows) => crate::data::bulk::vm_guests(&rows),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "guest records unreadable; the report's bulk volumes name no vm");
                Default::default()
            }
        };
        let bulk_volumes = crate::data::bulk::reports(
            self.sources.desired.borrow().as_deref(),
            &bulk_rows,
            &vm_guests,
        );
        let data_plan = plan_report(self.sources.desired.borrow().as_deref());
        let health = self.sources.health.borrow().clone();
        let current = StateReport {
            schema: bosun_proto::report::SCHEMA.to_owned(),
            seq: 0,
            host,
            guests,
            storage,
            last_backups,
            last_restore_test,
            restore_tests,
            verifications,
            tunnel: health.tunnel,
            versions: Versions {
                agent: env!("CARGO_PKG_VERSION").to_owned(),
                controller,
                pve: self.pve_version.clone(),
            },
            audit,
            storage_recipient: self.sources.keys.storage_recipient.clone(),
            pbs_key_fingerprint: self.sources.keys.pbs_key.fingerprint(),
            tiers,
            bulk_volumes,
            host_health: health.host,
            data_plan,
            refused: status.refused.clone(),
            golden,
        };
        match self.reporter.body(current) {
            ReportBody::Full(report) => (Some(report), None),
            ReportBody::Delta(delta) => (None, Some(delta)),
        }
    }

    /// The poll sent at `sent_at`, observing `status`, was answered. Gives whether a
    /// full report should go out at once (the hub asked after a delta).
    pub fn answered(
        &mut self,
        sent_at: Instant,
        status: &ReconcileStatus,
        report_seq: Option<u64>,
        full_report: bool,
        audit_acked_seq: Option<u64>,
    ) -> bool {
        self.throttle.reported(sent_at, status);
        self.capabilities.answered();
        if let Some(seq) = audit_acked_seq {
            self.audit_acked = seq;
        }
        self.reporter.answered(report_seq, full_report)
    }

    /// The held poll was abandoned to report something at once.
    pub fn abandoned(&mut self) {
        self.reporter.abandoned();
        self.capabilities.unanswered();
    }

    /// The poll failed: the next report is full.
    pub fn failed(&mut self) {
        self.reporter.failed();
        self.capabilities.unanswered();
    }

    /// What a change of the reconciler's status asks for at `now`: `Ok(true)` report now,
    /// `Ok(false)` nothing, `Err(at)` report at `at` (at most one unprompted report per
    /// `min_interval`; see [`PromptThrottle::prompted_by`]).
    pub fn prompted_by(
        &self,
        status: &ReconcileStatus,
        min_interval: std::time::Duration,
        now: Instant,
    ) -> Result<bool, Instant> {
        self.throttle.prompted_by(status, min_interval, now)
    }
}

/// The signed data plan the desired state acted on was held to.
fn plan_report(desired: Option<&DesiredSnapshot>) -> Option<PlanReport> {
    let verified = desired?.plan.as_ref()?;
    let plan = &verified.plan;
    Some(PlanReport {
        serial: plan.serial,
        issued_at: plan.issued_at,
        signer: verified.signer.clone(),
        targets: plan.targets.iter().map(|t| t.durable_id.clone()).collect(),
        min_interval_seconds: plan.backup.min_interval_seconds,
    })
}

/// The tiers as the report shows them.
fn tier_reports(plan: &TierPlan) -> Vec<TierReport> {
    plan.tiers
        .iter()
        .map(|t| TierReport {
            tier: t.index,
            target: t.report_key().to_owned(),
            storage_id: t.storage.as_str().to_owned(),
            schedule: t.schedule.clone(),
            extra_schedule: t.extra_schedule.clone(),
            desired: t.desired,
            applied: t.applied,
            held: t.held.map(str::to_owned),
        })
        .collect()
}

/// `guests` with each one's controller digests: the one the helper measured in the guest at its
/// last restart, or where none was measured the one its controller says it runs (its last
/// health report on `board`), and, once settled, the one the journal's signed record says it
/// should run (the hub alerts when they differ). A journal that cannot be read leaves the
/// expected digests out (the report still goes).
async fn with_controllers(
    journal: &JournalHandle,
    board: &ControllerBoard,
    guests: &[GuestReport],
) -> Vec<GuestReport> {
    let records = match journal.controllers().await {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "controller records unreadable; the report carries no expected digests");
            Vec::new()
        }
    };
    let expected: std::collections::HashMap<String, String> = records
        .into_iter()
        .filter(|r| r.state != ControllerState::RollingOut)
        .filter_map(|r| r.digest.map(|d| (r.guest_id, d)))
        .collect();
    guests
        .iter()
        .map(|g| {
            let id = g.guest_id.map(|id| id.to_string());
            GuestReport {
                controller_digest: id.as_deref().and_then(|id| {
                    board
                        .last_measured(id)
                        .or_else(|| board.last_report(id).map(|r| r.digest))
                }),
                controller_expected: id.and_then(|id| expected.get(&id).cloned()),
                ..g.clone()
            }
        })
        .collect()
}

/// The one controller digest every managed guest runs, if they all run the same one.
fn uniform_controller(guests: &[GuestReport]) -> Option<String> {
    let mut digests = guests
        .iter()
        .filter(|g| g.guest_id.is_some())
        .map(|g| g.controller_digest.as_deref());
    let first = digests.next()??;
    digests.all(|d| d == Some(first)).then(|| first.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bosun_proto::report::{GuestReport, GuestStatus};
    use tokio::time::Instant;

    use super::{PromptThrottle, uniform_controller};
    use crate::config::DEFAULT_REPORT_MIN_INTERVAL;
    use crate::guests::reconcile::reconcile_task::ReconcileStatus;

    fn guest(id: Option<u128>, digest: Option<&str>) -> GuestReport {
        GuestReport {
            guest_id: id.map(uuid::Uuid::from_u128),
            vmid: 100,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: String::new(),
            status: GuestStatus::Running,
            resources: None,
            controller_digest: digest.map(str::to_owned),
            controller_expected: None,
            addresses: Vec::new(),
        }
    }

    #[test]
    fn the_host_names_a_controller_only_when_every_managed_guest_runs_it() {
        let a = Some("sha256:aa");
        let b = Some("sha256:bb");
        assert_eq!(uniform_controller(&[]), None);
        assert_eq!(
            uniform_controller(&[guest(Some(1), a), guest(Some(2), a), guest(None, None)]),
            a.map(str::to_owned),
            "a stranger does not count"
        );
        assert_eq!(
            uniform_controller(&[guest(Some(1), a), guest(Some(2), b)]),
            None
        );
        assert_eq!(
            uniform_controller(&[guest(Some(1), a), guest(Some(2), None)]),
            None
        );
        assert_eq!(
            uniform_controller(&[guest(Some(1), None), guest(Some(2), a)]),
            None
        );
    }

    fn observing(guests: Vec<GuestReport>, acting_passes: u64) -> ReconcileStatus {
        ReconcileStatus {
            guests,
            acting_passes,
            ..ReconcileStatus::default()
        }
    }

    #[test]
    fn observed_changes_are_reported_at_most_once_per_the_default_interval() {
        // The production default, as the config docs state it.
        assert_eq!(DEFAULT_REPORT_MIN_INTERVAL, Duration::from_secs(5));
        let min = DEFAULT_REPORT_MIN_INTERVAL;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut throttle = PromptThrottle::default();
        let reported = observing(vec![guest(Some(1), None)], 0);
        throttle.reported(t0, &reported);

        // Nothing new: nothing to report, however late.
        assert_eq!(throttle.prompted_by(&reported, min, at(60_000)), Ok(false));
        // A guest changed 1 s after the last report: held until 5 s after it, not sooner.
        let changed = observing(vec![guest(Some(1), None), guest(Some(2), None)], 0);
        assert_eq!(
            throttle.prompted_by(&changed, min, at(1_000)),
            Err(at(5_000))
        );
        assert_eq!(
            throttle.prompted_by(&changed, min, at(4_999)),
            Err(at(5_000))
        );
        assert_eq!(throttle.prompted_by(&changed, min, at(5_000)), Ok(true));
        assert_eq!(throttle.prompted_by(&changed, min, at(9_000)), Ok(true));
        // Reported at 5 s: the next change waits for 10 s.
        throttle.reported(at(5_000), &changed);
        let again = observing(vec![guest(Some(2), None)], 0);
        assert_eq!(
            throttle.prompted_by(&again, min, at(5_001)),
            Err(at(10_000))
        );
        // An action is reported at once, whatever the interval.
        let acted = observing(vec![guest(Some(2), None)], 1);
        assert_eq!(throttle.prompted_by(&acted, min, at(5_001)), Ok(true));
    }

    #[test]
    fn a_change_before_any_answered_report_goes_at_once() {
        let throttle = PromptThrottle::default();
        let now = Instant::now();
        let changed = observing(vec![guest(Some(1), None)], 0);
        assert_eq!(
            throttle.prompted_by(&changed, DEFAULT_REPORT_MIN_INTERVAL, now),
            Ok(true)
        );
    }
}
