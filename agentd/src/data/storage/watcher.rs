//! The storage watcher: reconciles the manifest's targets into Proxmox and watches them.
//!
//! ```text
//!  every watch interval while a target is attached (or a storage of ours left the
//!  manifest; four intervals, at most 4 s, while every attached target is mounted), and
//!  when desired state changes:
//!    the class of each target's storage ........ published first (`classes.rs`): the local
//!                                                API answers guests' mounts with it
//!    GET /nodes/{node}/storage                   one call for all targets; if it does not
//!                                                answer in time, one status call per target
//!                                                (all at once), so a storage that hangs
//!                                                holds up nobody else
//!    per target of the manifest:
//!      decommissioned / disconnected ........... reported as such, nothing touched
//!      attached, not registered ................ (usb: mount by UUID through the helper)
//!                                                POST /storage with the opened credentials
//!                                                (pbs: and the host's encryption key K)
//!      attached, registered, new generation .... GET /storage/{id}; drift corrected in
//!      (or pbs: K rotated)                       place (PUT; pbs: K as the key), fixed
//!                                                settings reported
//!      pbs, mounted, K replaced others ......... a restore-only storage per retired key
//!                                                (`keys.rs`)
//!      attached, registered, inactive .......... usb: mount again when the disk is back;
//!                                                nfs/cifs/pbs: Proxmox activates it again;
//!                                                its content listing says why not
//!  a status change is published at once (the hub loop reports it without waiting for
//!  the next poll) and audited (`storage.lost`, `storage.recovered`)
//! ```
//!
//! Sealed credentials open only for the target and host they were sealed for: a target
//! carrying another's is reported `refused` (`credentials_refused`), nothing of it reaches
//! Proxmox, and the refusal is audited once per sealed secret and target (`storage.refused`).
//! A `local-dir` target whose path `agent.toml` does not allow ([`super::local_dir`]), a USB
//! target that names no serial, and a disk the helper refuses are reported `refused`, never
//! reach Proxmox, and are audited once per target and reason (`storage.refused`).
//! Every Proxmox call here is bounded ([`WatcherParts::call_timeout`]): a call that does not
//! answer in time makes its target `unreachable` (`watcher/unanswered.rs`). What the hub
//! hears about a target that is not mounted is a [`TargetReason`], never Proxmox's text,
//! which goes to the log only (`reason.rs`).
//!
//! A storage is never deleted here: a target that leaves the manifest is left registered
//! and reported missing; detaching one that holds backups takes a signed job.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{StorageTarget, StorageType, TargetState};
use bosun_proto::helper::{
    DiskSerial, FsType, FsUuid, MountByUuid, MountClass, Output, Refusal, Request, TargetId,
};
use bosun_proto::report::{TargetReason, TargetReport, TargetStatus};
use bosun_pve::{Op, Pve, StorageId, StorageInfo};
use jiff::Timestamp;
use secrecy::SecretString;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::classes::StorageClasses;
use super::naming::{StorageNames, is_bosun_storage, is_restore_only};
use super::reason::{WatchCallError, classify};
use super::target::{Secrets, TargetError, create_request, drift, usb_mount_path};
use crate::clock::SharedClock;
use crate::data::desired::DesiredSnapshot;
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{AuditEvent, JournalHandle};
use crate::trust::keys::credentials::{CredentialError, CredentialOpener};
use crate::trust::keys::pbs_key::{PbsKeySource, PbsKeyring};

mod keys;
mod unanswered;

/// The first wait after a failed registration or mount; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(2);
/// The longest wait between attempts.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// The longest wait between attempts to mount a USB disk again: looking for it is cheap
/// (one `blkid` through the helper) and it should be back in use soon after it is plugged.
const MAX_USB_RETRY: Duration = Duration::from_secs(10);
/// How often a registered storage's settings are compared with the manifest again (and at
/// every new desired generation).
const DRIFT_RECHECK: Duration = Duration::from_secs(60);
/// While every attached target is mounted as the manifest says, the watcher looks this many
/// watch intervals apart, at most [`STEADY_MAX`] (and never more often than the interval): a
/// lost target is still seen within seconds, with a quarter of the Proxmox calls.
const STEADY_FACTOR: u32 = 4;
/// The longest wait between looks at targets that are all mounted.
const STEADY_MAX: Duration = Duration::from_secs(4);

/// How long the watcher waits between looks at targets that are all mounted, given the watch
/// interval.
fn steady_interval(interval: Duration) -> Duration {
    (interval * STEADY_FACTOR).min(STEADY_MAX).max(interval)
}

/// What the watcher publishes: one entry per manifest target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageFacts {
    /// The targets as last seen.
    pub targets: Vec<TargetReport>,
    /// The speed class of each target's storage and directory, from the manifest the watcher
    /// last acted on (what the local API answers a guest's mounts with).
    pub classes: StorageClasses,
}

/// The parts the watcher works with.
#[derive(Debug)]
pub struct WatcherParts<P> {
    /// Proxmox.
    pub pve: Arc<P>,
    /// The journal (audit).
    pub journal: JournalHandle,
    /// The helper, for USB mounts.
    pub helper: Option<HelperClient>,
    /// Opens sealed credentials.
    pub sealing: Arc<CredentialOpener>,
    /// This host: sealed credentials open only if they name it.
    pub host_id: uuid::Uuid,
    /// The PBS key K, read when a PBS storage is added.
    pub pbs_key: PbsKeySource,
    /// Where the helper mounts USB targets.
    pub mount_root: PathBuf,
    /// Where `local-dir` targets may live (`[storage] local_dir_roots`).
    pub local_dir_roots: Vec<PathBuf>,
    /// How often targets are looked at.
    pub interval: Duration,
    /// The longest any one Proxmox call may take (`backup.storage_call_timeout_ms`, 5 s by
    /// default): a healthy Proxmox answers these well within a second, so a storage whose
    /// server stopped answering is reported within seconds instead of holding up the others.
    pub call_timeout: Duration,
    /// The clock (status times).
    pub clock: SharedClock,
}

/// What the watcher remembers of one target.
#[derive(Debug, Clone)]
struct Watched {
    status: TargetStatus,
    reason: Option<TargetReason>,
    /// What was wrong in Proxmox's or the system's words: for the log, never reported.
    detail: Option<String>,
    since: Timestamp,
    /// The desired generation whose settings were last compared with Proxmox's, and when.
    checked: Option<(u64, Instant)>,
    /// The Proxmox storage the target is registered as.
    storage: StorageId,
    /// The target's kind and role, reported after it left the manifest.
    kind: StorageType,
    /// No registration or mount attempt before this.
    retry_at: Option<Instant>,
    failures: u32,
    /// Why the target is refused, once audited.
    refused: Option<TargetReason>,
    /// PBS: the fingerprint of K when the storage's settings were last compared (a
    /// rotation makes them due again).
    key: Option<String>,
}

/// Reconciles and watches the manifest's targets.
#[derive(Debug)]
pub struct StorageWatcher<P> {
    parts: WatcherParts<P>,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    facts: watch::Sender<StorageFacts>,
    watched: HashMap<String, Watched>,
    /// Per target, the last refused sealed credential (a digest of the target's identity
    /// and the ciphertext): audited once, not at every pass.
    refused: HashMap<String, [u8; 32]>,
    /// The host's keys during a pass over PBS targets (read at each pass: a rotation changes
    /// them under the running agent); dropped when the pass ends.
    keys: Option<PbsKeyring>,
    /// Restore-only storages whose registration failed, and when to try again.
    restore_retry: HashMap<String, Instant>,
    /// The manifest's targets' storage ids, made once for each identity.
    names: StorageNames,
}

impl<P: Pve + 'static> StorageWatcher<P> {
    /// A watcher of the targets in `desired`; gives the receiver its facts are published on.
    pub fn new(
        parts: WatcherParts<P>,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> (Self, watch::Receiver<StorageFacts>) {
        let (facts, rx) = watch::channel(StorageFacts::default());
        (
            Self {
                parts,
                desired,
                facts,
                watched: HashMap::new(),
                refused: HashMap::new(),
                keys: None,
                restore_retry: HashMap::new(),
                names: StorageNames::default(),
            },
            rx,
        )
    }

    /// Runs until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        tracing::info!(
            interval_ms = u64::try_from(self.parts.interval.as_millis()).unwrap_or(u64::MAX),
            "storage watcher started"
        );
        loop {
            crate::failpoint::panic_at("storage_watcher.pass.panic");
            let desired = self.desired.borrow_and_update().clone();
            let next = self.pass(desired.as_deref()).await;
            let watching = next.is_some();
            let interval = next.unwrap_or(self.parts.interval);
            // With nothing to look at again, only a new desired state wakes the watcher.
            let look_again = async {
                if watching {
                    tokio::time::sleep(interval).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                () = look_again => {}
                changed = self.desired.changed() => {
                    if changed.is_err() {
                        // The hub loop is gone: the manifest stays what it is.
                        tokio::select! {
                            () = cancel.cancelled() => break,
                            () = tokio::time::sleep(interval), if watching => {}
                        }
                    }
                }
            }
        }
        tracing::info!("storage watcher stopped");
    }

    /// One look at every target. Gives how long to wait before the next, when anything is to
    /// be looked at again: a target attached, or a storage of this agent's the manifest no
    /// longer names (or Proxmox's storage list, when it did not answer), at the watch interval;
    /// every attached target mounted as the manifest says, and nothing else to look at, at
    /// the steadier `steady_interval`. Targets disconnected, decommissioned or refused by
    /// the data plan change only with the desired state: `None` when nothing else is left.
    pub async fn pass(&mut self, desired: Option<&DesiredSnapshot>) -> Option<Duration> {
        let desired = desired?;
        let names = self.names.of_manifest(&desired.state.storage);
        // The classes come from the manifest alone: published before any Proxmox call, so a
        // guest's mounts are classed as soon as its targets are known. Not a reason for a
        // report at once (receivers read them when they answer).
        let mut classes = StorageClasses::of_named(
            desired.state.storage.iter().zip(&names),
            &self.parts.mount_root,
        );
        // The node's own storages (a root volume's) take the class the signed plan gives them.
        if let Some(plan) = &desired.plan {
            classes.insert_node_storages(&plan.plan.node_storages);
        }
        self.facts.send_if_modified(|facts| {
            facts.classes = classes;
            false
        });
        self.keys = self.load_keys(&desired.state.storage);
        let storages = match self
            .call(Op::ListStorage, self.parts.pve.list_storage())
            .await
        {
            Ok(list) => Some(list),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not list Proxmox storages; looking at each target by itself");
                None
            }
        };
        // Without the list, each target's own status, asked all at once and each bounded.
        let mut alone = match &storages {
            Some(_) => HashMap::new(),
            None => self.statuses(&desired.state.storage, &names).await,
        };
        let mut reports = Vec::with_capacity(desired.state.storage.len());
        let mut all_mounted = true;
        for (target, storage) in desired.state.storage.iter().zip(&names) {
            let observed = match (target.state, &storages) {
                (TargetState::Decommissioned, _) => {
                    Observed::plain(TargetStatus::Decommissioned, None)
                }
                (TargetState::Disconnected, _) => Observed::plain(TargetStatus::Detached, None),
                (TargetState::Attached, Some(list)) => {
                    self.attached(target, storage, list, desired.generation)
                        .await
                }
                (TargetState::Attached, None) => {
                    let status = alone.remove(&target.durable_id);
                    self.alone(target, storage, status, desired.generation)
                        .await
                }
            };
            all_mounted &= target.state != TargetState::Attached
                || (observed.status == TargetStatus::Mounted && observed.reason.is_none());
            reports.push(self.note(target, storage, observed).await);
        }
        // What the signed data plan refused: reported, never touched.
        reports.extend(refused_reports(&desired.refused));
        // A storage this agent registered whose target left the manifest: reported, never
        // detached here.
        let mut left = false;
        if let Some(list) = &storages {
            let reported = self.left_manifest(&names, list);
            left = !reported.is_empty();
            reports.extend(reported);
        }
        self.keys = None;
        let steady = all_mounted && !left && storages.is_some();
        let watching = left
            || storages.is_none()
            || desired
                .state
                .storage
                .iter()
                .any(|t| t.state == TargetState::Attached);
        self.facts.send_if_modified(|facts| {
            let status_changed = facts.targets.len() != reports.len()
                || facts.targets.iter().zip(&reports).any(|(a, b)| {
                    a.durable_id != b.durable_id || a.status != b.status || a.reason != b.reason
                });
            facts.targets = reports;
            // Sizes change all the time; only a status change is worth a report at once.
            status_changed
        });
        let interval = self.parts.interval;
        watching.then(|| {
            if steady {
                steady_interval(interval)
            } else {
                interval
            }
        })
    }

    /// Reports for `bosun-…` storages Proxmox has that no manifest target names.
    fn left_manifest(&self, named: &[StorageId], list: &[StorageInfo]) -> Vec<TargetReport> {
        list.iter()
            .filter_map(|info| info.storage.as_deref())
            .filter(|id| {
                is_bosun_storage(id)
                    && !is_restore_only(id)
                    && !named.iter().any(|n| n.as_str() == *id)
            })
            .map(|id| {
                let known = self.watched.iter().find(|(_, w)| w.storage.as_str() == id);
                TargetReport {
                    durable_id: known.map_or_else(|| id.to_owned(), |(d, _)| d.clone()),
                    status: TargetStatus::Detached,
                    free_gib: None,
                    kind: known.map(|(_, w)| w.kind),
                    class: None,
                    role: None,
                    storage_id: Some(id.to_owned()),
                    total_bytes: None,
                    used_bytes: None,
                    reason: Some(TargetReason::LeftPlan),
                    detail: None,
                    since: None,
                }
            })
            .collect()
    }

    /// Records what was observed of `target`; audits a change of status; gives the report.
    async fn note(
        &mut self,
        target: &StorageTarget,
        storage: &StorageId,
        observed: Observed,
    ) -> TargetReport {
        let now = self.parts.clock.now();
        let previous = self.watched.get(&target.durable_id).map(|w| w.status);
        let entry = self
            .watched
            .entry(target.durable_id.clone())
            .or_insert_with(|| Watched::new(target, storage, observed.status, now));
        if previous != Some(observed.status) {
            entry.since = now;
        }
        entry.status = observed.status;
        entry.reason = observed.reason;
        entry.detail.clone_from(&observed.detail);
        let since = entry.since;
        let refused = observed
            .reason
            .filter(|_| observed.status == TargetStatus::Refused);
        let newly_refused = refused.filter(|r| entry.refused != Some(*r));
        entry.refused = refused;
        if previous != Some(observed.status) {
            self.audit_change(target, previous, &observed).await;
        }
        // Refused credentials are audited where they are refused, with the fields that differ.
        if let Some(reason) = newly_refused.filter(|r| *r != TargetReason::CredentialsRefused) {
            self.audit_refused(target, reason).await;
        }
        TargetReport {
            durable_id: target.durable_id.clone(),
            status: observed.status,
            free_gib: observed
                .info
                .as_ref()
                .and_then(|i| i.avail)
                .map(|b| b >> 30),
            kind: Some(target.kind),
            class: Some(target.class),
            role: Some(target.role),
            storage_id: Some(storage.as_str().to_owned()),
            total_bytes: observed.info.as_ref().and_then(|i| i.total),
            used_bytes: observed.info.as_ref().and_then(|i| i.used),
            reason: observed.reason,
            // Proxmox's words stay here; the hub gets the reason.
            detail: None,
            since: Some(since),
        }
    }

    async fn audit_change(
        &self,
        target: &StorageTarget,
        previous: Option<TargetStatus>,
        observed: &Observed,
    ) {
        let lost = matches!(
            observed.status,
            TargetStatus::Disconnected | TargetStatus::Unreachable | TargetStatus::Error
        );
        let action = match (previous, observed.status) {
            (_, _) if lost => "storage.lost",
            (Some(p), TargetStatus::Mounted) if p != TargetStatus::Mounted => "storage.recovered",
            _ => return,
        };
        if lost {
            tracing::warn!(durable_id = %target.durable_id, status = ?observed.status, reason = ?observed.reason, detail = observed.detail.as_deref().unwrap_or(""), "storage target lost");
        } else {
            tracing::info!(durable_id = %target.durable_id, "storage target back");
        }
        let event = AuditEvent {
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "type": target.kind,
                "status": observed.status,
                "reason": observed.reason,
            }),
            ..AuditEvent::new(action)
        };
        if let Err(e) = self.parts.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a storage status change");
        }
    }

    async fn audit_refused(&self, target: &StorageTarget, reason: TargetReason) {
        tracing::warn!(durable_id = %target.durable_id, r#type = ?target.kind, reason = reason.as_str(), "storage target refused");
        let event = AuditEvent {
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "type": target.kind,
                "reason": reason.as_str(),
            }),
            ..AuditEvent::new("storage.refused")
        };
        if let Err(e) = self.parts.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a refused storage target");
        }
    }

    /// Why `target` may not be used on this host at all, checked before anything reaches
    /// Proxmox or the helper: a `local-dir` path `agent.toml` does not allow, a USB target
    /// without its disk's serial.
    fn refusal(&self, target: &StorageTarget) -> Option<Observed> {
        match target.kind {
            StorageType::LocalDir => {
                let checked =
                    super::local_dir::check_target(&target.durable_id, &self.parts.local_dir_roots);
                let err = checked.err()?;
                tracing::warn!(durable_id = %target.durable_id, error = %error_chain(&err), "local-dir target refused");
                // The hub hears the top-level reason only, never where a path resolves to.
                Some(Observed::refused(
                    TargetReason::PathNotAllowed,
                    err.to_string(),
                ))
            }
            StorageType::Usb if target.serial.is_none() => Some(Observed::refused(
                TargetReason::DeviceNotAllowed,
                "a USB target must name its disk's serial".into(),
            )),
            StorageType::Usb | StorageType::Nfs | StorageType::Cifs | StorageType::Pbs => None,
        }
    }

    /// Registers, corrects and looks at one attached target.
    async fn attached(
        &mut self,
        target: &StorageTarget,
        storage: &StorageId,
        storages: &[StorageInfo],
        generation: u64,
    ) -> Observed {
        if let Some(refused) = self.refusal(target) {
            return refused;
        }
        let registered = storages
            .iter()
            .find(|s| s.storage.as_deref() == Some(storage.as_str()));
        let Some(info) = registered else {
            return self.register(target, storage, generation).await;
        };
        let checked = self.watched.get(&target.durable_id).and_then(|w| w.checked);
        let due = checked.is_none_or(|(g, at)| g != generation || at.elapsed() >= DRIFT_RECHECK)
            || self.key_moved(target);
        let mut differs = None;
        if due {
            match self.correct(target, storage).await {
                Ok(fixed) => {
                    differs = fixed;
                    self.mark_checked(&target.durable_id, generation);
                }
                Err(e) => {
                    tracing::warn!(durable_id = %target.durable_id, storage = %storage, error = %error_chain(&e), "could not compare the storage's settings; trying again");
                }
            }
        }
        if info.active {
            self.forget_failures(&target.durable_id);
            if target.kind == StorageType::Pbs {
                self.restore_only_storages(target, storage, storages, due)
                    .await;
            }
            return Observed {
                status: TargetStatus::Mounted,
                reason: differs.is_some().then_some(TargetReason::SettingsDiffer),
                detail: differs,
                info: Some(info.clone()),
            };
        }
        match target.kind {
            StorageType::Usb => self.remount(target, storage).await,
            StorageType::LocalDir => Observed::failing(
                TargetStatus::Error,
                TargetReason::NotActive,
                format!("storage {storage} is not active"),
            ),
            StorageType::Nfs | StorageType::Cifs | StorageType::Pbs => {
                self.why_inactive(target, storage).await
            }
        }
    }

    /// Compares Proxmox's settings with the target and corrects what can change in place;
    /// gives a note of fixed settings that differ.
    async fn correct(
        &self,
        target: &StorageTarget,
        storage: &StorageId,
    ) -> Result<Option<String>, WatchCallError> {
        let config = self
            .call(Op::StorageConfig, self.parts.pve.storage_config(storage))
            .await?;
        let mut found = drift(target, storage, &self.parts.mount_root, &config);
        let switched = if target.kind == StorageType::Pbs {
            self.key_drift(&config, &mut found.update)
        } else {
            None
        };
        if !found.update.is_empty() {
            self.call(
                Op::UpdateStorage,
                self.parts.pve.update_storage(storage, &found.update),
            )
            .await?;
            tracing::info!(durable_id = %target.durable_id, storage = %storage, "storage settings corrected");
            let event = AuditEvent {
                detail: serde_json::json!({
                    "durable_id": target.durable_id,
                    "storage": storage.as_str(),
                    "content": found.update.content.as_ref().map(|c| c.iter().map(|t| t.as_str()).collect::<Vec<_>>()),
                    "fingerprint": found.update.fingerprint,
                    "namespace": found.update.namespace,
                    "is_mountpoint": found.update.is_mountpoint,
                    "enabled": found.update.enable,
                    "options": found.update.options,
                }),
                ..AuditEvent::new("storage.corrected")
            };
            if let Err(e) = self.parts.journal.append_audit(event).await {
                tracing::error!(error = %error_chain(&e), "could not audit a storage correction");
            }
            if let Some((from, to)) = switched {
                self.audit_key_switch(target, storage, from.as_deref(), &to)
                    .await;
            }
        }
        if found.fixed.is_empty() {
            return Ok(None);
        }
        let note = format!(
            "settings Proxmox fixes at creation differ (left as they are): {}",
            found.fixed.join("; ")
        );
        tracing::warn!(durable_id = %target.durable_id, storage = %storage, differences = %note, "storage differs from the manifest");
        Ok(Some(note))
    }

    /// Registers a target Proxmox does not know yet.
    async fn register(
        &mut self,
        target: &StorageTarget,
        storage: &StorageId,
        generation: u64,
    ) -> Observed {
        if let Some(waiting) = self.waiting(&target.durable_id) {
            return waiting;
        }
        // Credentials first: a target carrying another's is neither mounted nor registered.
        let secrets = match self.secrets(target) {
            Ok(secrets) => secrets,
            Err(SecretsUnavailable::Refused(e)) => return self.refused(target, &e).await,
            Err(SecretsUnavailable::Failed(reason, detail)) => {
                tracing::warn!(durable_id = %target.durable_id, error = %detail, "cannot register the storage target");
                return self.failed(
                    target,
                    Observed::failing(TargetStatus::Error, reason, detail),
                );
            }
        };
        self.refused.remove(&target.durable_id);
        if target.kind == StorageType::Usb {
            let mounted = self.mount_usb(target, storage).await;
            if let Err(observed) = mounted {
                return self.failed(target, observed);
            }
        }
        let request = match create_request(target, storage, &self.parts.mount_root, secrets) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(durable_id = %target.durable_id, error = %error, "cannot register the storage target");
                let reason = if matches!(error, TargetError::NoCredentials { .. }) {
                    TargetReason::CredentialsMissing
                } else {
                    TargetReason::Failed
                };
                return self.failed(
                    target,
                    Observed::failing(TargetStatus::Error, reason, error.to_string()),
                );
            }
        };
        match self
            .call(Op::CreateStorage, self.parts.pve.create_storage(&request))
            .await
        {
            Ok(()) => {
                tracing::info!(durable_id = %target.durable_id, storage = %storage, r#type = ?target.kind, "storage target registered");
                let event = AuditEvent {
                    detail: serde_json::json!({
                        "durable_id": target.durable_id,
                        "storage": storage.as_str(),
                        "type": target.kind,
                        "encrypted": target.kind == StorageType::Pbs,
                    }),
                    ..AuditEvent::new("storage.registered")
                };
                if let Err(e) = self.parts.journal.append_audit(event).await {
                    tracing::error!(error = %error_chain(&e), "could not audit a storage registration");
                }
                self.forget_failures(&target.durable_id);
                self.mark_checked(&target.durable_id, generation);
                match self
                    .call(Op::StorageStatus, self.parts.pve.storage_status(storage))
                    .await
                {
                    Ok(info) if info.active => Observed {
                        status: TargetStatus::Mounted,
                        reason: None,
                        detail: None,
                        info: Some(info),
                    },
                    Ok(_) => Observed::failing(
                        TargetStatus::Unreachable,
                        TargetReason::NotActive,
                        format!("storage {storage} registered but not active"),
                    ),
                    Err(e) => {
                        Observed::failing(TargetStatus::Unreachable, classify(&e), error_chain(&e))
                    }
                }
            }
            Err(e) => {
                let detail = error_chain(&e);
                tracing::warn!(durable_id = %target.durable_id, storage = %storage, error = %detail, "could not register the storage target");
                let status = if target.kind == StorageType::LocalDir {
                    TargetStatus::Error
                } else {
                    TargetStatus::Unreachable
                };
                self.failed(target, Observed::failing(status, classify(&e), detail))
            }
        }
    }

    /// Mounts a USB target by filesystem UUID through the helper, unless mounted already.
    async fn mount_usb(&self, target: &StorageTarget, storage: &StorageId) -> Result<(), Observed> {
        let path = usb_mount_path(&self.parts.mount_root, storage);
        if is_mount_point(&path) {
            return Ok(());
        }
        let Some(helper) = &self.parts.helper else {
            return Err(Observed::failing(
                TargetStatus::Error,
                TargetReason::Failed,
                "no helper is configured to mount USB targets".into(),
            ));
        };
        let request = usb_mount_request(target, storage)
            .map_err(|e| Observed::refused(TargetReason::DeviceNotAllowed, e.to_string()))?;
        match helper.call(&request).await {
            Ok(Output::Mounted { device, .. }) => {
                tracing::info!(durable_id = %target.durable_id, device = %device, path = %path, "USB target mounted");
                Ok(())
            }
            Ok(other) => Err(Observed::failing(
                TargetStatus::Error,
                TargetReason::MountFailed,
                format!("the helper answered {other:?} to a mount"),
            )),
            Err(HelperClientError::Refused {
                reason: Refusal::DeviceNotAllowed,
                message,
                ..
            }) => {
                tracing::warn!(durable_id = %target.durable_id, error = %message, "the helper refused the USB target's disk");
                Err(Observed::refused(
                    TargetReason::DeviceNotAllowed,
                    "the disk is not a removable or USB disk with the serial the target names, \
                     or it is mounted elsewhere"
                        .into(),
                ))
            }
            Err(e) => {
                let reason = match &e {
                    HelperClientError::Refused {
                        reason: Refusal::NotFound,
                        ..
                    } => TargetReason::NotFound,
                    _ => TargetReason::MountFailed,
                };
                Err(Observed::failing(
                    TargetStatus::Disconnected,
                    reason,
                    error_chain(&e),
                ))
            }
        }
    }

    /// A registered USB target whose storage is inactive: the disk is gone or unmounted.
    /// Mounts it again when it is back.
    async fn remount(&mut self, target: &StorageTarget, storage: &StorageId) -> Observed {
        if let Some(waiting) = self.waiting(&target.durable_id) {
            return waiting;
        }
        match self.mount_usb(target, storage).await {
            // Proxmox sees it active at the next look.
            Ok(()) => Observed::failing(
                TargetStatus::Disconnected,
                TargetReason::NotActive,
                "mounted again; waiting for Proxmox to see it".into(),
            ),
            Err(observed) => self.failed(target, observed),
        }
    }

    /// Opens the target's sealed credentials (for this target and host only) and, for PBS,
    /// reads K.
    fn secrets(&self, target: &StorageTarget) -> Result<Secrets, SecretsUnavailable> {
        let password = match &target.credentials {
            Some(sealed) => Some(
                self.parts
                    .sealing
                    .open_credential(sealed, self.parts.host_id, &target.identity())
                    .map_err(SecretsUnavailable::Refused)?
                    .secret,
            ),
            None => None,
        };
        let pbs_key = if target.kind == StorageType::Pbs {
            let key = self
                .parts
                .pbs_key
                .load()
                .map_err(|e| {
                    SecretsUnavailable::Failed(
                        TargetReason::Failed,
                        format!("the PBS encryption key: {}", error_chain(&e)),
                    )
                })?
                .ok_or_else(|| {
                    SecretsUnavailable::Failed(
                        TargetReason::KeyMissing,
                        "this box took over a lost host and waits for its PBS encryption key: \
                         run `bosun-agentctl escrow recover` with the customer's recovery code"
                            .to_owned(),
                    )
                })?;
            let json = key.key_file_json();
            Some(SecretString::from(json.as_str().to_owned()))
        } else {
            None
        };
        Ok(Secrets { password, pbs_key })
    }

    /// A target whose sealed credentials do not open for it: reported refused with no
    /// error text (the hub learns only the fixed reason), logged and audited once per sealed
    /// secret and target. Nothing reaches Proxmox.
    async fn refused(&mut self, target: &StorageTarget, error: &CredentialError) -> Observed {
        let key = refusal_key(target);
        if self.refused.get(&target.durable_id) != Some(&key) {
            tracing::error!(durable_id = %target.durable_id, error = %error_chain(error), "sealed credentials refused; nothing sent to Proxmox");
            let mut detail = serde_json::json!({
                "durable_id": target.durable_id,
                "type": target.kind,
                "reason": TargetReason::CredentialsRefused.as_str(),
            });
            let fields = error.differing_fields();
            if !fields.is_empty() {
                detail["fields"] = serde_json::Value::from(fields.join(", "));
            }
            let event = AuditEvent {
                detail,
                ..AuditEvent::new("storage.refused")
            };
            match self.parts.journal.append_audit(event).await {
                Ok(_) => {
                    self.refused.insert(target.durable_id.clone(), key);
                }
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "could not audit refused credentials; trying again next pass");
                }
            }
        }
        Observed {
            status: TargetStatus::Refused,
            detail: None,
            reason: Some(TargetReason::CredentialsRefused),
            info: None,
        }
    }

    /// The target's last status while it waits out a retry.
    fn waiting(&self, durable_id: &str) -> Option<Observed> {
        let w = self.watched.get(durable_id)?;
        let retry_at = w.retry_at?;
        (Instant::now() < retry_at).then(|| Observed {
            status: w.status,
            reason: w.reason,
            detail: w.detail.clone(),
            info: None,
        })
    }

    /// Counts a failed attempt and schedules the next one.
    fn failed(&mut self, target: &StorageTarget, observed: Observed) -> Observed {
        let now = self.parts.clock.now();
        let storage = self.names.of(target);
        let w = self
            .watched
            .entry(target.durable_id.clone())
            // Status unknown until `note` records this observation (and audits it).
            .or_insert_with(|| Watched::new(target, &storage, TargetStatus::Unknown, now));
        w.failures = w.failures.saturating_add(1);
        let doublings = w.failures.saturating_sub(1).min(16);
        let cap = if target.kind == StorageType::Usb {
            MAX_USB_RETRY
        } else {
            MAX_RETRY
        };
        let wait = FIRST_RETRY.saturating_mul(1 << doublings).min(cap);
        w.retry_at = Some(Instant::now() + wait);
        observed
    }

    fn forget_failures(&mut self, durable_id: &str) {
        if let Some(w) = self.watched.get_mut(durable_id) {
            w.failures = 0;
            w.retry_at = None;
        }
    }

    fn mark_checked(&mut self, durable_id: &str, generation: u64) {
        let key = self.keys.as_ref().map(|k| k.current().fingerprint());
        if let Some(w) = self.watched.get_mut(durable_id) {
            w.checked = Some((generation, Instant::now()));
            w.key = key;
        }
    }
}

impl Watched {
    fn new(
        target: &StorageTarget,
        storage: &StorageId,
        status: TargetStatus,
        now: Timestamp,
    ) -> Self {
        Self {
            status,
            reason: None,
            detail: None,
            since: now,
            checked: None,
            storage: storage.clone(),
            kind: target.kind,
            retry_at: None,
            failures: 0,
            refused: None,
            key: None,
        }
    }
}

/// What one look at a target found.
#[derive(Debug, Clone)]
struct Observed {
    status: TargetStatus,
    /// Why it is not mounted (reported).
    reason: Option<TargetReason>,
    /// What went wrong in Proxmox's or the system's words (logged and kept, never reported).
    detail: Option<String>,
    info: Option<StorageInfo>,
}

impl Observed {
    fn plain(status: TargetStatus, reason: Option<TargetReason>) -> Self {
        Self {
            status,
            reason,
            detail: None,
            info: None,
        }
    }

    fn failing(status: TargetStatus, reason: TargetReason, detail: String) -> Self {
        Self {
            status,
            reason: Some(reason),
            detail: Some(detail),
            info: None,
        }
    }

    fn refused(reason: TargetReason, detail: String) -> Self {
        Self::failing(TargetStatus::Refused, reason, detail)
    }
}

/// Reports for the targets the signed data plan refused (tiers are refused by their target).
fn refused_reports(refused: &[crate::data::plan::Refusal]) -> Vec<TargetReport> {
    refused
        .iter()
        .filter(|r| !r.tier)
        .map(|r| TargetReport {
            durable_id: r.durable_id.clone(),
            status: TargetStatus::Refused,
            free_gib: None,
            kind: r.kind,
            class: None,
            role: None,
            storage_id: None,
            total_bytes: None,
            used_bytes: None,
            reason: Some(r.reason),
            detail: None,
            since: None,
        })
        .collect()
}

/// Why a target's secrets are not at hand.
#[derive(Debug)]
enum SecretsUnavailable {
    /// The sealed credentials do not open for this target on this host.
    Refused(CredentialError),
    /// Anything else: the reason reported and, for the log, what went wrong.
    Failed(TargetReason, String),
}

/// Identifies one refused sealed credential on one target: its identity and ciphertext.
fn refusal_key(target: &StorageTarget) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(target.identity().canonical_bytes());
    if let Some(sealed) = &target.credentials {
        hash.update(sealed.armored().as_bytes());
    }
    hash.finalize().into()
}

/// Why no mount of a USB target is asked of the helper (reported `device_not_allowed`).
#[derive(Debug, thiserror::Error)]
enum UsbMountRefusal {
    /// The filesystem UUID or the storage id is not one the helper takes.
    #[error(transparent)]
    Invalid(#[from] bosun_proto::helper::InvalidArgument),
    /// The target names no disk serial.
    #[error("a USB target must name its disk's serial")]
    NoSerial,
    /// The serial is not one.
    #[error("the USB target's serial is malformed")]
    BadSerial,
}

/// The helper request mounting a USB target.
fn usb_mount_request(
    target: &StorageTarget,
    storage: &StorageId,
) -> Result<Request, UsbMountRefusal> {
    let uuid = FsUuid::new(target.durable_id.clone())?;
    let serial = target.serial.clone().ok_or(UsbMountRefusal::NoSerial)?;
    let serial = DiskSerial::new(serial).map_err(|_| UsbMountRefusal::BadSerial)?;
    let target_id = TargetId::new(storage.as_str().to_owned())?;
    Ok(Request::MountByUuid(MountByUuid {
        uuid,
        serial,
        target_id,
        fstype: target.fstype.unwrap_or(FsType::Ext4),
        class: MountClass::Data,
        options: Vec::new(),
    }))
}

/// Whether `path` is a mount point now, from `/proc/self/mountinfo`.
fn is_mount_point(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines()
            .filter_map(|line| line.split(' ').nth(4))
            .any(|mount_point| unescape_mountinfo(mount_point) == path)
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
fn unescape_mountinfo(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usb_mount_names_the_targets_serial_and_none_is_sent_without_one() {
        use bosun_proto::desired::StorageRole;
        let uuid = "0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f";
        let mut target =
            super::super::target::test_target(StorageType::Usb, uuid, StorageRole::VzdumpTarget);
        let storage = crate::data::storage::naming::storage_id_of(StorageType::Usb, uuid);
        target.serial = None;
        assert!(matches!(
            usb_mount_request(&target, &storage),
            Err(UsbMountRefusal::NoSerial)
        ));
        target.serial = Some(" padded".into());
        assert!(matches!(
            usb_mount_request(&target, &storage),
            Err(UsbMountRefusal::BadSerial)
        ));
        target.serial = Some("WD-WX41A12B3C4D".into());
        match usb_mount_request(&target, &storage) {
            Ok(Request::MountByUuid(m)) => {
                assert_eq!(m.serial.as_str(), "WD-WX41A12B3C4D");
                assert_eq!(m.uuid.as_str(), uuid);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mounted_targets_are_looked_at_less_often_but_within_seconds() {
        let ms = Duration::from_millis;
        // The default interval, and the suites' 500 ms.
        assert_eq!(steady_interval(ms(1000)), ms(4000));
        assert_eq!(steady_interval(ms(500)), ms(2000));
        // Never above 4 s, never below the interval itself.
        assert_eq!(steady_interval(ms(2000)), ms(4000));
        assert_eq!(steady_interval(ms(5000)), ms(5000));
    }

    #[test]
    fn mountinfo_paths_unescape() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/odd\x"), r"/odd\x");
        assert!(is_mount_point("/proc"));
        assert!(!is_mount_point("/proc/self"));
    }
}
