//! Which encryption key each PBS storage holds.
//!
//! - The target's own storage holds the current K. Its `encryption-key` (the fingerprint PVE
//!   keeps in `storage.cfg`) is compared with K's whenever the storage's settings are due,
//!   and at once when K changed under the running agent (`escrow rotate`); a storage with
//!   another key, or none, gets K (`PUT /storage/{id}` with `encryption-key`). K changes
//!   only once the hub holds the escrow of the new key, so every backup is encrypted with a
//!   key the escrow holds.
//! - Each key a rotation retired gets a restore-only storage
//!   ([`restore_only_id`]) on the same server, datastore and namespace, holding that
//!   key: PVE hands PBS the storage's one key, and PBS reads an archive only with the key it
//!   was made with, so an archive made before a rotation is restored through the storage of
//!   its key (`recovery::BackupSource::restore_volume`). Nothing is ever backed up to one,
//!   it is never reported as a target, and, like every storage here, never deleted.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{StorageTarget, StorageType, TargetState};
use bosun_pve::{Op, Pve, StorageId, StorageInfo, StorageUpdate};
use secrecy::SecretString;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::super::naming::restore_only_id;
use super::super::reason::WatchCallError;
use super::super::target::{Secrets, TargetError, create_request};
use super::{SecretsUnavailable, StorageWatcher};
use crate::ops::journal::AuditEvent;
use crate::trust::keys::credentials::CredentialError;
use crate::trust::keys::pbs_key::PbsKeyring;

/// Why the restore-only storage of a retired key could not be registered or given its key.
#[derive(Debug, thiserror::Error)]
enum RestoreOnlyError {
    /// The retired key left the keyring meanwhile.
    #[error("the key is no longer in the keyring")]
    KeyGone,
    /// The target's sealed credentials do not open on this host.
    #[error(transparent)]
    Credentials(CredentialError),
    /// The target's credentials are not at hand (the reason the target reports).
    #[error("{detail}")]
    Secrets {
        /// Why not.
        detail: String,
    },
    /// The registration cannot be made from the target.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Proxmox refused or did not answer.
    #[error(transparent)]
    Pve(#[from] WatchCallError),
}

/// How long a restore-only storage whose registration failed waits for the next attempt.
const RESTORE_ONLY_RETRY: Duration = Duration::from_secs(60);

impl<P: Pve + 'static> StorageWatcher<P> {
    /// The host's keys, when an attached PBS target needs them this pass.
    pub(super) fn load_keys(&self, manifest: &[StorageTarget]) -> Option<PbsKeyring> {
        let needed = manifest
            .iter()
            .any(|t| t.kind == StorageType::Pbs && t.state == TargetState::Attached);
        if !needed {
            return None;
        }
        match self.parts.pbs_key.ring() {
            Ok(ring) => ring,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read the pbs encryption keys");
                None
            }
        }
    }

    /// Whether K changed since `target`'s storage was last compared with it.
    pub(super) fn key_moved(&self, target: &StorageTarget) -> bool {
        if target.kind != StorageType::Pbs {
            return false;
        }
        let Some(keys) = &self.keys else {
            return false;
        };
        let current = keys.current().fingerprint();
        self.watched
            .get(&target.durable_id)
            .is_some_and(|w| w.key.as_deref() != Some(current.as_str()))
    }

    /// Sets `update` to give the storage K when its key (`config`'s `encryption-key`) is not
    /// K's; gives (the key it had, K's fingerprint) when it does.
    pub(super) fn key_drift(
        &self,
        config: &Map<String, Value>,
        update: &mut StorageUpdate,
    ) -> Option<(Option<String>, String)> {
        let current = self.keys.as_ref()?.current();
        let wanted = current.fingerprint();
        let found = config.get("encryption-key").and_then(Value::as_str);
        if found.is_some_and(|f| f.eq_ignore_ascii_case(&wanted)) {
            return None;
        }
        update.encryption_key = Some(SecretString::from(
            current.key_file_json().as_str().to_owned(),
        ));
        Some((found.map(str::to_owned), wanted))
    }

    /// Audits (and logs) that `storage` now encrypts with K.
    pub(super) async fn audit_key_switch(
        &self,
        target: &StorageTarget,
        storage: &StorageId,
        from: Option<&str>,
        to: &str,
    ) {
        tracing::info!(durable_id = %target.durable_id, storage = %storage, from = from.unwrap_or("none"), to, "pbs storage switched to the current encryption key");
        let event = AuditEvent {
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "storage": storage.as_str(),
                "from": from,
                "to": to,
            }),
            ..AuditEvent::new("storage.key_switched")
        };
        if let Err(e) = self.parts.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a storage key switch");
        }
    }

    /// Registers the restore-only storage of each retired key for PBS `target` (registered as
    /// `storage`, mounted), and when `due` gives one that lost its key its key again.
    pub(super) async fn restore_only_storages(
        &mut self,
        target: &StorageTarget,
        storage: &StorageId,
        storages: &[StorageInfo],
        due: bool,
    ) {
        let retired: Vec<(StorageId, String)> = match &self.keys {
            Some(keys) => keys
                .retired()
                .iter()
                .map(|r| {
                    let fingerprint = r.key.fingerprint();
                    (restore_only_id(storage, &fingerprint), fingerprint)
                })
                .collect(),
            None => return,
        };
        for (restore, fingerprint) in retired {
            let registered = storages
                .iter()
                .any(|s| s.storage.as_deref() == Some(restore.as_str()));
            let outcome = if registered {
                if !due {
                    continue;
                }
                self.rekey_restore_only(&restore, &fingerprint).await
            } else {
                if self
                    .restore_retry
                    .get(restore.as_str())
                    .is_some_and(|at| Instant::now() < *at)
                {
                    continue;
                }
                self.register_restore_only(target, &restore, &fingerprint)
                    .await
            };
            match outcome {
                Ok(()) => {
                    self.restore_retry.remove(restore.as_str());
                }
                Err(e) => {
                    tracing::warn!(durable_id = %target.durable_id, storage = %restore, key = %fingerprint, error = %error_chain(&e), "could not set up the restore-only storage of a retired key; trying again");
                    self.restore_retry.insert(
                        restore.as_str().to_owned(),
                        Instant::now() + RESTORE_ONLY_RETRY,
                    );
                }
            }
        }
    }

    /// `POST /storage` for the restore-only storage `restore` of `target` holding the retired
    /// key `fingerprint`.
    async fn register_restore_only(
        &self,
        target: &StorageTarget,
        restore: &StorageId,
        fingerprint: &str,
    ) -> Result<(), RestoreOnlyError> {
        let key = self
            .retired_key_file(fingerprint)
            .ok_or(RestoreOnlyError::KeyGone)?;
        let password = match self.secrets(target) {
            Ok(secrets) => secrets.password,
            Err(SecretsUnavailable::Refused(e)) => return Err(RestoreOnlyError::Credentials(e)),
            Err(SecretsUnavailable::Failed(_, detail)) => {
                return Err(RestoreOnlyError::Secrets { detail });
            }
        };
        let secrets = Secrets {
            password,
            pbs_key: Some(key),
        };
        let request = create_request(target, restore, &self.parts.mount_root, secrets)?;
        self.call(Op::CreateStorage, self.parts.pve.create_storage(&request))
            .await?;
        tracing::info!(durable_id = %target.durable_id, storage = %restore, key = %fingerprint, "restore-only storage of a retired key registered");
        let event = AuditEvent {
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "storage": restore.as_str(),
                "key": fingerprint,
                "restore_only": true,
            }),
            ..AuditEvent::new("storage.registered")
        };
        if let Err(e) = self.parts.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a storage registration");
        }
        Ok(())
    }

    /// Gives the restore-only storage `restore` its retired key `fingerprint` again when
    /// its `encryption-key` is another.
    async fn rekey_restore_only(
        &self,
        restore: &StorageId,
        fingerprint: &str,
    ) -> Result<(), RestoreOnlyError> {
        let config = self
            .call(Op::StorageConfig, self.parts.pve.storage_config(restore))
            .await?;
        let found = config.get("encryption-key").and_then(Value::as_str);
        if found.is_some_and(|f| f.eq_ignore_ascii_case(fingerprint)) {
            return Ok(());
        }
        let update = StorageUpdate {
            encryption_key: Some(
                self.retired_key_file(fingerprint)
                    .ok_or(RestoreOnlyError::KeyGone)?,
            ),
            ..StorageUpdate::default()
        };
        self.call(
            Op::UpdateStorage,
            self.parts.pve.update_storage(restore, &update),
        )
        .await?;
        tracing::info!(storage = %restore, key = %fingerprint, from = found.unwrap_or("none"), "restore-only storage given its retired key again");
        Ok(())
    }

    /// The key file of the retired key `fingerprint`, as `encryption-key` takes it.
    fn retired_key_file(&self, fingerprint: &str) -> Option<SecretString> {
        let retired = self.keys.as_ref()?.retired_key(fingerprint)?;
        Some(SecretString::from(
            retired.key.key_file_json().as_str().to_owned(),
        ))
    }
}
