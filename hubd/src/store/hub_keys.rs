//! The hub's TLS keys through a rotation, for both stores (`hub_keys`): a key is **staged**
//! (announced to agents in poll answers, not served), then **active** (served; the one it
//! replaces becomes **retiring**, still announced so agents that have not yet polled through
//! the switch keep trusting it), then **retired** (announced no more; its private half is
//! dropped). Every replica of a store reads the same rows, so they serve and announce alike.
//! Which keys each host holds comes from its polls (`hosts.hub_pins`).
//!
//! Agents take a key only from the operator's signed pin set (`bosun.hub-pins/v1`, decision
//! 0049): the store keeps the newest one the operator published (`meta`: its bytes, signature
//! and serial), and every replica carries it in its poll answers. The hub cannot sign one.

use rusqlite::params;
use secrecy::{ExposeSecret as _, SecretString};

use super::tx::Tx;
use super::{StoreError, StoreResult};

/// Where a key is in its rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyState {
    /// Announced to agents, not served yet.
    Staged,
    /// Served.
    Active,
    /// Replaced by the active key; still announced until it is retired.
    Retiring,
    /// Announced no more; its private key is gone.
    Retired,
}

impl KeyState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Staged => "staged",
            Self::Active => "active",
            Self::Retiring => "retiring",
            Self::Retired => "retired",
        }
    }

    fn parse(text: &str) -> StoreResult<Self> {
        match text {
            "staged" => Ok(Self::Staged),
            "active" => Ok(Self::Active),
            "retiring" => Ok(Self::Retiring),
            "retired" => Ok(Self::Retired),
            other => Err(StoreError::Corrupt {
                what: "hub key state",
                reason: format!("unknown state `{other}`"),
            }),
        }
    }
}

/// A key with its certificate, as stored.
#[derive(Debug, Clone)]
pub struct KeyMaterial {
    /// Its key pin, `spki:…`.
    pub pin: String,
    /// The certificate chain (PEM), leaf first.
    pub cert_pem: String,
    /// The private key (PEM).
    pub key_pem: SecretString,
}

/// One key of the rotation, and how many of the live hosts hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubKeyInfo {
    /// Its key pin.
    pub pin: String,
    /// Where it is.
    pub state: KeyState,
    /// When it was staged (or first recorded as the served key).
    pub created_ms: i64,
    /// When its state last changed.
    pub changed_ms: i64,
    /// Live hosts (active, polled, not overdue) that hold it.
    pub holders: u64,
}

/// The rotation as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRotation {
    /// Every key recorded, staged first, then active, retiring and retired (newest first).
    pub keys: Vec<HubKeyInfo>,
    /// Live hosts: active, polled at least once, not overdue.
    pub live_hosts: u64,
    /// Active hosts that have polled but do not hold the active key (at most
    /// [`MAX_LISTED_HOSTS`]): after a retirement, the hosts that must be enrolled again.
    pub without_active: Vec<String>,
}

impl KeyRotation {
    /// The key in `state`, if any (there is at most one staged, active and retiring key).
    pub fn key(&self, state: KeyState) -> Option<&HubKeyInfo> {
        self.keys.iter().find(|k| k.state == state)
    }
}

/// Most hostnames [`KeyRotation::without_active`] lists.
pub const MAX_LISTED_HOSTS: usize = 50;

/// Most retired keys kept on record.
const KEEP_RETIRED: i64 = 16;

pub use super::error::KeyRefusal;

fn refused(refusal: KeyRefusal) -> StoreError {
    StoreError::KeyRotation(refusal)
}

/// The live hosts' condition: active, polled, not overdue.
const LIVE: &str = "status = 'active' AND last_seen_ms IS NOT NULL AND overdue_since_ms IS NULL";

/// The rotation as it stands.
pub(super) fn rotation(tx: Tx<'_, '_>) -> StoreResult<KeyRotation> {
    let rows: Vec<(String, String, i64, i64)> = tx.query_map(
        "read hub keys",
        "SELECT pin, state, created_ms, changed_ms FROM hub_keys",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let live: i64 = tx.query_row(
        "read hub keys",
        &format!("SELECT COUNT(*) FROM hosts WHERE {LIVE}"),
        &[],
        |r| r.get(0),
    )?;
    let mut keys = Vec::with_capacity(rows.len());
    for (pin, state, created_ms, changed_ms) in rows {
        let state = KeyState::parse(&state)?;
        let holders: i64 = if state == KeyState::Retired {
            0
        } else {
            holders(tx, &pin)?
        };
        keys.push(HubKeyInfo {
            pin,
            state,
            created_ms,
            changed_ms,
            holders: super::codec::unsigned(holders),
        });
    }
    keys.sort_by(|a, b| a.state.cmp(&b.state).then(b.changed_ms.cmp(&a.changed_ms)));
    let without_active = match keys.iter().find(|k| k.state == KeyState::Active) {
        Some(active) => tx.query_map(
            "read hub keys",
            &format!(
                "SELECT hostname FROM hosts
                 WHERE status = 'active' AND last_seen_ms IS NOT NULL
                   AND (hub_pins IS NULL OR hub_pins NOT LIKE ?1)
                 ORDER BY hostname LIMIT {MAX_LISTED_HOSTS}"
            ),
            params![held_pattern(&active.pin)],
            |r| r.get(0),
        )?,
        None => Vec::new(),
    };
    Ok(KeyRotation {
        keys,
        live_hosts: super::codec::unsigned(live),
        without_active,
    })
}

/// `LIKE` pattern of a pin inside a host's JSON array of pins (a pin holds only `spki:` and
/// hex digits, nothing `LIKE` reads specially).
fn held_pattern(pin: &str) -> String {
    format!("%\"{pin}\"%")
}

fn holders(tx: Tx<'_, '_>, pin: &str) -> StoreResult<i64> {
    tx.query_row(
        "read hub keys",
        &format!("SELECT COUNT(*) FROM hosts WHERE {LIVE} AND hub_pins LIKE ?1"),
        params![held_pattern(pin)],
        |r| r.get(0),
    )
}

/// What the hub serves and announces, read cheaply (no host is counted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Announced {
    /// The active key's pin, when the store records one (none before the first rotation: the
    /// hub serves the key of its files).
    pub active: Option<String>,
    /// The staged, active and retiring pins, sorted.
    pub pins: Vec<String>,
    /// The operator's signed pin set published last, carried in every poll answer.
    pub signed: Option<SignedPins>,
}

/// An operator-signed pin set as the store keeps it: the exact bytes and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPins {
    /// Its serial (read from the document when it was published).
    pub serial: u64,
    /// The signed bytes.
    pub document: Vec<u8>,
    /// The armored signature.
    pub signature: String,
}

const META_DOCUMENT: &str = "hub_pins_document";
const META_SIGNATURE: &str = "hub_pins_signature";
const META_SERIAL: &str = "hub_pins_serial";

fn meta(tx: Tx<'_, '_>, key: &str) -> StoreResult<Option<Vec<u8>>> {
    tx.query_opt(
        "read the signed pin set",
        "SELECT value FROM meta WHERE key = ?1",
        params![key],
        |r| r.get(0),
    )
}

/// The signed pin set published last, if any.
pub(super) fn signed(tx: Tx<'_, '_>) -> StoreResult<Option<SignedPins>> {
    let (Some(document), Some(signature), Some(serial)) = (
        meta(tx, META_DOCUMENT)?,
        meta(tx, META_SIGNATURE)?,
        meta(tx, META_SERIAL)?,
    ) else {
        return Ok(None);
    };
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "signed hub pin set",
        reason,
    };
    let signature = String::from_utf8(signature).map_err(|e| corrupt(e.to_string()))?;
    let serial = std::str::from_utf8(&serial)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt("the serial is not a number".into()))?;
    Ok(Some(SignedPins {
        serial,
        document,
        signature,
    }))
}

/// Publishes `pins` (its serial above the one published), replacing the one before.
pub(super) fn publish(tx: Tx<'_, '_>, pins: &SignedPins, now_ms: i64) -> StoreResult<()> {
    if let Some(held) = signed(tx)?
        && held.serial >= pins.serial
    {
        return Err(refused(KeyRefusal::StaleSerial {
            offered: pins.serial,
            held: held.serial,
        }));
    }
    let serial = pins.serial.to_string();
    for (key, value) in [
        (META_DOCUMENT, pins.document.as_slice()),
        (META_SIGNATURE, pins.signature.as_bytes()),
        (META_SERIAL, serial.as_bytes()),
    ] {
        tx.execute(
            "publish the signed pin set",
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
    }
    tx.event(
        now_ms,
        None,
        "hub_pins_published",
        &serde_json::json!({ "serial": pins.serial }),
    )
}

/// The active pin and the announced pins.
pub(super) fn announced(tx: Tx<'_, '_>) -> StoreResult<Announced> {
    let rows: Vec<(String, String)> = tx.query_map(
        "read hub keys",
        "SELECT pin, state FROM hub_keys WHERE state <> 'retired' ORDER BY pin",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let active = rows
        .iter()
        .find(|(_, state)| state == "active")
        .map(|(pin, _)| pin.clone());
    Ok(Announced {
        active,
        pins: rows.into_iter().map(|(pin, _)| pin).collect(),
        signed: signed(tx)?,
    })
}

/// The served key with its certificate, if the store records one.
pub(super) fn active(tx: Tx<'_, '_>) -> StoreResult<Option<KeyMaterial>> {
    let row: Option<(String, String, Option<String>)> = tx.query_opt(
        "read the active hub key",
        "SELECT pin, cert_pem, key_pem FROM hub_keys WHERE state = 'active'",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    row.map(|(pin, cert_pem, key_pem)| {
        let key_pem = key_pem.ok_or_else(|| StoreError::Corrupt {
            what: "hub key",
            reason: format!("the active key {pin} has no private key"),
        })?;
        Ok(KeyMaterial {
            pin,
            cert_pem,
            key_pem: SecretString::from(key_pem),
        })
    })
    .transpose()
}

/// Stages `next`. The first rotation records `serving` (the key the hub serves from its files)
/// as the active key first.
pub(super) fn stage(
    tx: Tx<'_, '_>,
    serving: &KeyMaterial,
    next: &KeyMaterial,
    now_ms: i64,
) -> StoreResult<()> {
    let states: Vec<(String, String)> = tx.query_map(
        "stage hub key",
        "SELECT pin, state FROM hub_keys",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if let Some((pin, _)) = states.iter().find(|(_, state)| state == "staged") {
        return Err(refused(KeyRefusal::AlreadyStaged { pin: pin.clone() }));
    }
    if states.iter().any(|(pin, _)| *pin == next.pin) || next.pin == serving.pin {
        return Err(refused(KeyRefusal::KeyReused {
            pin: next.pin.clone(),
        }));
    }
    if !states.iter().any(|(_, state)| state == "active") {
        insert(tx, serving, KeyState::Active, now_ms)?;
    }
    insert(tx, next, KeyState::Staged, now_ms)?;
    tx.event(
        now_ms,
        None,
        "hub_key_staged",
        &serde_json::json!({ "pin": next.pin }),
    )
}

fn insert(tx: Tx<'_, '_>, key: &KeyMaterial, state: KeyState, now_ms: i64) -> StoreResult<()> {
    tx.execute(
        "record hub key",
        "INSERT INTO hub_keys (pin, state, cert_pem, key_pem, created_ms, changed_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
        params![
            key.pin,
            state.as_str(),
            key.cert_pem,
            key.key_pem.expose_secret(),
            now_ms
        ],
    )?;
    Ok(())
}

/// Makes the staged key the active one (the active one retiring, a retiring one retired):
/// refused while a live host does not hold it, unless `force`. Returns the new active pin.
pub(super) fn activate(tx: Tx<'_, '_>, force: bool, now_ms: i64) -> StoreResult<String> {
    let rotation = rotation(tx)?;
    let staged = rotation
        .key(KeyState::Staged)
        .ok_or_else(|| refused(KeyRefusal::NothingStaged))?
        .clone();
    if !force && staged.holders < rotation.live_hosts {
        let hosts: Vec<String> = tx.query_map(
            "activate hub key",
            &format!(
                "SELECT hostname FROM hosts WHERE {LIVE}
                   AND (hub_pins IS NULL OR hub_pins NOT LIKE ?1)
                 ORDER BY hostname LIMIT 10"
            ),
            params![held_pattern(&staged.pin)],
            |r| r.get(0),
        )?;
        return Err(refused(KeyRefusal::NotHeld {
            missing: rotation.live_hosts - staged.holders,
            live: rotation.live_hosts,
            hosts: hosts.join(", "),
        }));
    }
    if let Some(retiring) = rotation.key(KeyState::Retiring) {
        retire_key(tx, &retiring.pin, now_ms)?;
    }
    tx.execute(
        "activate hub key",
        "UPDATE hub_keys SET state = 'retiring', changed_ms = ?1 WHERE state = 'active'",
        params![now_ms],
    )?;
    tx.execute(
        "activate hub key",
        "UPDATE hub_keys SET state = 'active', changed_ms = ?1 WHERE pin = ?2",
        params![now_ms, staged.pin],
    )?;
    tx.event(
        now_ms,
        None,
        "hub_key_activated",
        &serde_json::json!({
            "pin": staged.pin,
            "holders": staged.holders,
            "live_hosts": rotation.live_hosts,
            "forced": force && staged.holders < rotation.live_hosts,
        }),
    )?;
    Ok(staged.pin)
}

/// Retires the retiring key: agents are told to trust it no more, and its private key is
/// dropped. Returns the rotation after it.
pub(super) fn retire(tx: Tx<'_, '_>, now_ms: i64) -> StoreResult<KeyRotation> {
    let rotation = rotation(tx)?;
    let retiring = rotation
        .key(KeyState::Retiring)
        .ok_or_else(|| refused(KeyRefusal::NothingRetiring))?;
    retire_key(tx, &retiring.pin, now_ms)?;
    let after = self::rotation(tx)?;
    tx.event(
        now_ms,
        None,
        "hub_key_retired",
        &serde_json::json!({
            "pin": retiring.pin,
            "hosts_without_active_key": after.without_active,
        }),
    )?;
    Ok(after)
}

fn retire_key(tx: Tx<'_, '_>, pin: &str, now_ms: i64) -> StoreResult<()> {
    tx.execute(
        "retire hub key",
        "UPDATE hub_keys SET state = 'retired', key_pem = NULL, changed_ms = ?1 WHERE pin = ?2",
        params![now_ms, pin],
    )?;
    // Old retired keys leave the record, the newest few stay.
    tx.execute(
        "retire hub key",
        "DELETE FROM hub_keys WHERE state = 'retired' AND pin NOT IN
           (SELECT pin FROM hub_keys WHERE state = 'retired'
            ORDER BY changed_ms DESC, pin LIMIT ?1)",
        params![KEEP_RETIRED],
    )?;
    Ok(())
}
