//! `bosun-agentctl escrow rotate`: a new recovery code, and with it a new K for the backups
//! made from now on.
//!
//! Rotating only the words would leave an old sheet, together with any copy of the old blob
//! (the hub's, or the block printed on the sheet), opening K for ever — and with it every
//! backup made after the rotation. So a rotation makes a new key K′: the new words open
//! {K′, K, the keys K replaced}, the old words keep opening only what they always opened
//! (the archives made before this rotation), and backups from now on are encrypted with K′.
//!
//! The steps, and what a kill between two of them leaves:
//!
//! 1. K′ is made in memory; {K′ + every older key} is wrapped under the new words and
//!    opened again from the words as printed; the sheet is printed. Nothing has left the
//!    box: a kill leaves K current and the old escrow at the hub.
//! 2. The blob is stored at the hub (if that fails, the sheet is deleted and nothing
//!    changes: K stays current). A kill after it leaves K current, and K is in the hub's new
//!    blob as in its old one; running `rotate` again makes another K′ (this one never
//!    encrypted anything).
//! 3. The keyring on the box is switched (`PbsKeyring::commit_rotation`: K joins the retired
//!    keys, then K′ replaces the key file). Only now can anything encrypt with K′, and the
//!    hub already holds it.
//! 4. The escrow record is updated.
//!
//! The running agent sees K′ at its next storage check and switches the PBS storages to it
//! (`PUT /storage/{id}` with `encryption-key`), and reads archives of a retired key through
//! a restore-only storage holding that key (`storage::watcher::keys`).

use std::path::PathBuf;

use jiff::Timestamp;

use super::command::{EscrowError, SheetOptions, hub, identity, keyring, seal, store_or_discard};
use super::record::{self, EscrowRecord};
use super::sheet::OlderKey;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::trust::keys::pbs_key::PbsKey;
use bosun_agentd::trust::keys::pbs_key::keyring::MAX_KEYS;

/// What `rotate` did.
#[derive(Debug)]
pub struct Rotated {
    /// The new sheet's PDF.
    pub sheet: PathBuf,
    /// K′'s fingerprint: backups from now on are encrypted with it.
    pub fingerprint: String,
    /// The key it replaced: the newest the old words open.
    pub previous: String,
    /// Every older key the new words open too, newest first (`previous` first).
    pub older: Vec<OlderKey>,
}

/// `escrow rotate`.
pub async fn rotate(
    config: &AgentConfig,
    options: &SheetOptions,
    hostname: &str,
) -> Result<Rotated, EscrowError> {
    let identity = identity(config)?;
    let existing = record::load(&config.state_dir)
        .map_err(EscrowError::Record)?
        .ok_or(EscrowError::NothingToRotate)?;
    let ring = keyring(config, &identity)?;
    if ring.len() >= MAX_KEYS {
        return Err(EscrowError::KeyringFull);
    }
    let hub = hub(config)?;
    let now = Timestamp::now();
    let previous = ring.current().fingerprint();
    let next = PbsKey::generate(&config.state_dir).map_err(EscrowError::Key)?;
    let ring = ring.rotated(next, now);
    let sealed = seal(&ring, &identity, options, hostname, now, true).await?;
    store_or_discard(&hub, &identity, &sealed).await?;
    bosun_agentd::failpoint::hit("escrow.rotate.store.done");
    ring.commit_rotation(&config.state_dir)
        .map_err(|source| EscrowError::Switch {
            sheet: sealed.sheet.clone(),
            source,
        })?;
    bosun_agentd::failpoint::hit("escrow.rotate.replace.done");
    let fingerprint = ring.current().fingerprint();
    let record = EscrowRecord {
        host_id: identity.host_id,
        key_fingerprint: fingerprint.clone(),
        created_at: existing.created_at,
        code_made_at: now,
        rotations: existing.rotations.saturating_add(1),
    };
    record::store(&config.state_dir, &record).map_err(EscrowError::Record)?;
    tracing::info!(
        host_id = %identity.host_id,
        fingerprint = %fingerprint,
        previous = %previous,
        keys = ring.len(),
        "escrow rotated: a new key for future backups, stored at the hub with the older ones"
    );
    Ok(Rotated {
        sheet: sealed.sheet,
        fingerprint,
        previous,
        older: ring
            .retired()
            .iter()
            .map(|r| OlderKey {
                fingerprint: r.key.fingerprint(),
                retired_at: r.retired_at,
            })
            .collect(),
    })
}
