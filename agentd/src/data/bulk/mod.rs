//! Bulk volumes' own backups (DESIGN §8, decision 0090). A bulk volume is left out of its
//! guest's vzdump; the signed data plan names, per volume, the directory target its archives
//! go to, how often and how many are kept. The root helper archives it from inside the
//! running guest (`bulk_archive`), since Proxmox cannot back one volume of a running
//! container up on its own.
//!
//! ```text
//!  wake ──► verified plan? ──► every (guest, volume) the plan names that desired state has,
//!           whose guest is desired running and runs:
//!             archived since the schedule's most recent time? ... not due
//!             failed less than the retry wait ago? ............. not yet
//!             otherwise ─► the most overdue (never archived first), in the guest's queue slot:
//!                          helper bulk_archive ─► archived | failed ─► journaled, audited,
//!                          reported per volume
//! ```
//!
//! Desired state cannot move a volume's data: only the plan's entry is acted on, and a
//! desired decision naming another target is refused
//! (`guests::reconcile::refusals`, through [`disagreeing_target`]). One archive runs at a
//! time.

mod archiver;
mod vm_volumes;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{BulkBackup, DesiredState, Power};
use bosun_proto::report::{BulkArchiveReport, BulkNotArchived, BulkVolumeReport};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use archiver::{ArchiveDone, Archiver, ArchiverError, BulkRequest, NoHelper};
pub use vm_volumes::vm_guests;

use crate::clock::SharedClock;
use crate::data::backup::scheduler::GuestSource;
use crate::data::backup::{CalendarEvent, schedule};
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::naming::target_storage_id;
use crate::data::storage::target::directory_of;
use crate::guests::queue::{GuestKey, GuestQueue};
use crate::ops::journal::{AuditEvent, BulkArchived, JournalHandle, LastBulk};

/// Most characters of a failure kept (what the hub takes).
const MAX_ERROR: usize = bosun_proto::verify::MAX_DETAIL_CHARS;

/// How the bulk scheduler paces itself.
#[derive(Debug, Clone)]
pub struct BulkConfig {
    /// The longest sleep between looks.
    pub check_interval: Duration,
    /// The least wait after a failed archive before the volume is tried again.
    pub retry_after: Duration,
    /// The longest one archive may take.
    pub archive_timeout: Duration,
    /// Where the helper mounts USB targets (their directories).
    pub mount_root: PathBuf,
    /// The node's time zone, in which schedules are read.
    pub time_zone: TimeZone,
}

/// One volume the signed plan archives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The guest.
    pub guest_id: String,
    /// The volume.
    pub volume: String,
    /// Where it is mounted in the guest.
    pub path: String,
    /// Its size in GiB (bounds the archive).
    pub size_gib: u32,
    /// The plan's target (`durable_id`).
    pub target: String,
    /// Where the node reaches that target as a directory.
    pub storage_dir: String,
    /// The plan's calendar event.
    pub schedule: String,
    /// Archives kept.
    pub keep_last: u32,
    /// Whether desired state wants the guest running (a stopped guest cannot be entered).
    pub running: bool,
}

/// Every bulk backup `plan` names for a guest of `state`, with where it goes. What is archived
/// (the mount point's path) and where are the plan's: a volume desired state drops from its
/// list, or lists at another path, is archived all the same. Only the size bound is desired
/// state's (the volume's size; the largest a volume may be when it no longer lists it), and an
/// archive past it fails, reported. An entry whose target is not a directory is left out.
pub fn planned(
    state: &DesiredState,
    plan: &DataPlan,
    mount_root: &std::path::Path,
) -> Vec<Planned> {
    let mut out = Vec::new();
    for entry in &plan.bulk_backups {
        let Some(guest) = state.guests.iter().find(|g| g.guest_id == entry.guest_id) else {
            continue;
        };
        let Some(target) = plan.target(&entry.target) else {
            continue;
        };
        let storage = target_storage_id(target);
        let Some(storage_dir) = directory_of(target, &storage, mount_root) else {
            continue;
        };
        let size_gib = guest
            .bulk_volumes
            .iter()
            .find(|v| v.name == entry.volume)
            .map_or(MAX_VOLUME_GIB, |v| v.size_gib);
        out.push(Planned {
            guest_id: guest.guest_id.to_string(),
            volume: entry.volume.clone(),
            path: entry.path.clone(),
            size_gib,
            target: entry.target.clone(),
            storage_dir,
            schedule: entry.schedule.clone(),
            keep_last: entry.keep_last,
            running: guest.power == Power::Running,
        });
    }
    out
}

/// The largest a bulk volume may be, in GiB (desired state's bound).
const MAX_VOLUME_GIB: u32 = 65_536;

/// The bulk scheduler's loop.
pub struct BulkScheduler {
    journal: JournalHandle,
    /// The VMs' volumes already audited as not archived (once per volume while the agent
    /// runs).
    noted: BTreeSet<(Uuid, String)>,
    clock: SharedClock,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    guests: Arc<dyn GuestSource>,
    queue: GuestQueue,
    archiver: Arc<dyn Archiver>,
    config: BulkConfig,
}

impl std::fmt::Debug for BulkScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkScheduler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl BulkScheduler {
    /// A scheduler of the volumes `desired`'s verified plan names, entering the guests
    /// `guests` says run, through `archiver`, in `queue`'s guest slots.
    pub fn new(
        journal: JournalHandle,
        clock: SharedClock,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        guests: Arc<dyn GuestSource>,
        queue: GuestQueue,
        archiver: Arc<dyn Archiver>,
        config: BulkConfig,
    ) -> Self {
        Self {
            journal,
            noted: BTreeSet::new(),
            clock,
            desired,
            guests,
            queue,
            archiver,
            config,
        }
    }

    /// Runs passes until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let ran = tokio::select! {
                () = cancel.cancelled() => return,
                ran = self.pass() => ran,
            };
            if ran {
                continue;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.clock.sleep(self.config.check_interval) => {}
                _ = self.desired.changed() => {}
            }
        }
    }

    /// Archives the most overdue volume, if one is due; whether one was archived (after a
    /// failure the loop waits its look interval, so a journal that cannot record the failure
    /// never turns it into a tight retry).
    pub async fn pass(&mut self) -> bool {
        let Some(snapshot) = self.desired.borrow().clone() else {
            return false;
        };
        vm_volumes::note(&self.journal, &snapshot, &mut self.noted).await;
        let planned = match &snapshot.plan {
            Some(plan) => planned(&snapshot.state, &plan.plan, &self.config.mount_root),
            None => Vec::new(),
        };
        let keep: BTreeSet<(String, String)> = planned
            .iter()
            .map(|p| (p.guest_id.clone(), p.volume.clone()))
            .collect();
        match self.journal.prune_bulk_archives(keep).await {
            Ok(0) => {}
            Ok(gone) => tracing::info!(
                gone,
                "bulk archive records of volumes no longer planned removed"
            ),
            Err(e) => tracing::warn!(error = %error_chain(&e), "bulk archive records not pruned"),
        }
        if planned.iter().all(|p| !p.running) {
            return false;
        }
        let Some((due, vmid)) = self.due(planned).await else {
            return false;
        };
        self.archive(&due, vmid).await
    }

    /// The most overdue planned volume of a running guest: never tried first, then the
    /// longest ago.
    async fn due(&self, planned: Vec<Planned>) -> Option<(Planned, u32)> {
        let running = match self.guests.running_guests().await {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "bulk archives: the running guests are unknown");
                return None;
            }
        };
        let last = match self.journal.last_bulk_archives().await {
            Ok(last) => last,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "bulk archives: the journal is unreadable");
                return None;
            }
        };
        let now = self.clock.now();
        let mut best: Option<(Option<Timestamp>, Planned, u32)> = None;
        for p in planned.into_iter().filter(|p| p.running) {
            let Some(guest) = running.iter().find(|g| g.guest_id == p.guest_id) else {
                continue;
            };
            let previous = last
                .iter()
                .find(|l| l.guest_id == p.guest_id && l.volume == p.volume);
            if !self.is_due(&p, previous, now) {
                continue;
            }
            let at = previous.and_then(LastBulk::last_attempt);
            if best.as_ref().is_none_or(|(b, _, _)| at < *b) {
                best = Some((at, p, guest.vmid.get()));
            }
        }
        best.map(|(_, p, vmid)| (p, vmid))
    }

    /// Whether `p`, whose journal row is `previous`, is due at `now`: no archive since its
    /// schedule's most recent time, and no failure within the retry wait.
    fn is_due(&self, p: &Planned, previous: Option<&LastBulk>, now: Timestamp) -> bool {
        let Ok(event) = CalendarEvent::parse(&p.schedule) else {
            return false;
        };
        let archived = previous.and_then(|l| l.archive.as_ref().map(|(_, at)| *at));
        let verdict = schedule::evaluate(&event, 0, archived, now, &self.config.time_zone);
        if !verdict.due {
            return false;
        }
        let wait = SignedDuration::try_from(self.config.retry_after).unwrap_or(SignedDuration::MAX);
        match previous.and_then(|l| l.error.as_ref()) {
            Some((_, failed_at)) => now.duration_since(*failed_at) >= wait,
            None => true,
        }
    }

    /// Archives one volume in its guest's queue slot, and journals and audits how it went;
    /// whether it was archived.
    async fn archive(&self, p: &Planned, vmid: u32) -> bool {
        let request = BulkRequest {
            vmid,
            guest_id: p.guest_id.clone(),
            volume: p.volume.clone(),
            path: p.path.clone(),
            storage_dir: p.storage_dir.clone(),
            keep_last: p.keep_last,
            max_bytes: max_bytes(p.size_gib),
            timeout: self.config.archive_timeout,
        };
        let archiver = Arc::clone(&self.archiver);
        let started = tokio::time::Instant::now();
        let outcome = match self
            .queue
            .run(GuestKey::guest(&p.guest_id), async move {
                archiver.archive(&request).await
            })
            .await
        {
            Ok(outcome) => outcome,
            Err(e) => Err(ArchiverError::Queue(e)),
        };
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut event;
        let archived = outcome.is_ok();
        match outcome {
            Ok(done) => {
                tracing::info!(guest_id = %p.guest_id, volume = %p.volume, target = %p.target, archive = %done.name, size = done.size, took_ms, removed = done.removed, "bulk volume archived");
                event = AuditEvent::new("bulk.archived");
                event.detail = serde_json::json!({
                    "volume": p.volume, "target": p.target, "archive": done.name,
                    "size_bytes": done.size, "sha256": done.sha256, "removed": done.removed,
                    "took_ms": took_ms,
                });
                let record = BulkArchived {
                    guest_id: p.guest_id.clone(),
                    volume: p.volume.clone(),
                    target: p.target.clone(),
                    name: done.name,
                    size_bytes: done.size,
                    sha256: done.sha256,
                };
                if let Err(e) = self.journal.record_bulk_archive(record, p.keep_last).await {
                    tracing::error!(error = %error_chain(&e), "could not record a bulk archive");
                }
            }
            Err(e) => {
                let error = bounded(&error_chain(&e));
                tracing::warn!(guest_id = %p.guest_id, volume = %p.volume, target = %p.target, took_ms, error = %error, "bulk volume not archived");
                event = AuditEvent::new("bulk.failed");
                event.detail = serde_json::json!({
                    "volume": p.volume, "target": p.target, "error": error, "took_ms": took_ms,
                });
                let recorded = self
                    .journal
                    .record_bulk_failure(p.guest_id.clone(), p.volume.clone(), error)
                    .await;
                if let Err(e) = recorded {
                    tracing::error!(error = %error_chain(&e), "could not record a failed bulk archive");
                }
            }
        }
        event.guest_id = Some(p.guest_id.clone());
        event.vmid = Some(vmid);
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::warn!(error = %error_chain(&e), "could not audit a bulk archive");
        }
        archived
    }
}

/// The most bytes an archive of a `size_gib` volume may take: the volume, a tenth more for
/// tar's headers and padding, and 64 MiB.
pub fn max_bytes(size_gib: u32) -> u64 {
    let volume = u64::from(size_gib) << 30;
    volume.saturating_add(volume / 10).saturating_add(64 << 20)
}

/// Text kept printable and short.
fn bounded(text: &str) -> String {
    text.chars()
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                ' '
            } else {
                c
            }
        })
        .take(MAX_ERROR)
        .collect()
}

/// Every desired guest's bulk volumes as the report carries them: placement, the desired
/// decision, the signed target (from `snapshot`'s verified plan) and what the journal's `rows`
/// hold of its newest archive and failure.
///
/// A volume of a guest in `vm_guests` (the journal's VMs) is reported `not_archived:
/// vm_disk`, whatever the plan names for it: nothing archives a VM's disk (decision 0124).
pub fn reports(
    snapshot: Option<&DesiredSnapshot>,
    rows: &[LastBulk],
    vm_guests: &BTreeSet<Uuid>,
) -> Vec<BulkVolumeReport> {
    let Some(snapshot) = snapshot else {
        return Vec::new();
    };
    let state = &snapshot.state;
    let plan = snapshot.plan.as_ref().map(|p| &p.plan);
    state
        .guests
        .iter()
        .flat_map(|guest| guest.bulk_volumes.iter().map(move |v| (guest.guest_id, v)))
        .map(|(guest_id, volume)| {
            let placed = state.place_bulk(volume);
            let target = placed.ok();
            let signed_target = plan
                .and_then(|p| p.bulk_backup(guest_id, &volume.name))
                .map(|b| b.target.clone());
            let id = guest_id.to_string();
            let row = rows
                .iter()
                .find(|r| r.guest_id == id && r.volume == volume.name);
            BulkVolumeReport {
                guest_id,
                name: volume.name.clone(),
                path: volume.path.clone(),
                size_gib: volume.size_gib,
                class: Some(volume.class),
                target: target.map(|t| t.durable_id.clone()),
                storage_id: target.map(|t| target_storage_id(t).as_str().to_owned()),
                refused: placed.err(),
                backup: volume.backup.clone(),
                signed_target,
                last_archive: row.and_then(|r| r.archive.as_ref()).map(|(a, at)| {
                    BulkArchiveReport {
                        at: *at,
                        target: a.target.clone(),
                        name: a.name.clone(),
                        size_bytes: a.size_bytes,
                        sha256: a.sha256.clone(),
                    }
                }),
                last_error: row.and_then(|r| r.error.as_ref()).map(|(e, _)| bounded(e)),
                not_archived: vm_guests
                    .contains(&guest_id)
                    .then_some(BulkNotArchived::VmDisk),
            }
        })
        .collect()
}

/// Whether desired state's decision for a volume asks for a backup the signed plan puts
/// elsewhere: the target it names, when that differs from the plan's.
pub fn disagreeing_target<'a>(backup: &'a BulkBackup, signed: Option<&str>) -> Option<&'a str> {
    match (backup, signed) {
        (BulkBackup::Target { target }, Some(signed)) if target != signed => Some(target),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
