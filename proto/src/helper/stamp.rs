//! `bosun.guest-stamp/v1`: the mark by which the helper knows a guest as one of Bosun's own
//! (decision 0048).
//!
//! The helper writes it, and only the helper can make one that verifies: one line at
//! [`GUEST_STAMP_PATH`] inside the guest, an HMAC-SHA256 under a 32-byte key that only root on
//! the host reads, over the guest id the stamp is bound to (or none yet) and a fresh nonce.
//! `build_golden` writes an unbound stamp into the golden image, so every guest created or
//! restored from it carries one, and so does every backup of such a guest; the first
//! `push_bootstrap` binds it to the guest id its document names.
//!
//! ```text
//! bosun.guest-stamp/v1 <key id: 16 hex> <guest id | -> <nonce: 32 hex> <mac: 64 hex>
//! ```

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Where the stamp lives inside a guest (the directory the golden image creates 0700 for the
/// bootstrap).
pub const GUEST_STAMP_PATH: &str = "/etc/bosun-bootstrap/guest-stamp";
/// The stamp's first word.
pub const STAMP_SCHEMA: &str = "bosun.guest-stamp/v1";
/// Largest stamp file the helper reads; a longer one is no stamp.
pub const MAX_STAMP_BYTES: usize = 256;
/// Length of the helper's stamp key.
pub const STAMP_KEY_BYTES: usize = 32;

/// The helper's stamp key.
pub type StampKey = [u8; STAMP_KEY_BYTES];

/// One parsed stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestStamp {
    /// [`key_id`] of the key it claims to be made with.
    pub key_id: String,
    /// The guest it is bound to; `None` until the first bootstrap.
    pub guest_id: Option<Uuid>,
    /// 32 hex digits.
    pub nonce: String,
    /// 64 hex digits.
    pub mac: String,
}

/// Why a stamp is not a valid one of this key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// The guest has no stamp file.
    #[error("it has no stamp")]
    Missing,
    /// Not one well-formed stamp line.
    #[error("not a {STAMP_SCHEMA} line: {0}")]
    Malformed(&'static str),
    /// Made (or claimed to be made) with another key: a guest from another host's image.
    #[error("stamped with key {found}, this host's key is {ours}")]
    OtherKey {
        /// Its key id.
        found: String,
        /// Ours.
        ours: String,
    },
    /// The MAC does not verify.
    #[error("its MAC does not verify under this host's key")]
    BadMac,
}

/// The public name of `key`: the first 8 bytes of SHA-256 over a label and the key, in hex.
pub fn key_id(key: &StampKey) -> String {
    let digest = Sha256::new()
        .chain_update(b"bosun.guest-stamp-key-id\0")
        .chain_update(key)
        .finalize();
    hex::encode(&digest[..8])
}

fn mac(key: &StampKey, guest: &str, nonce: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{STAMP_SCHEMA}\0{guest}\0{nonce}").as_bytes());
    mac
}

fn guest_word(guest_id: Option<Uuid>) -> String {
    guest_id.map_or_else(|| "-".to_owned(), |g| g.to_string())
}

impl GuestStamp {
    /// A stamp for `guest_id` (or unbound) with `nonce`, under `key`.
    pub fn sign(key: &StampKey, guest_id: Option<Uuid>, nonce: [u8; 16]) -> GuestStamp {
        let nonce = hex::encode(nonce);
        let tag = mac(key, &guest_word(guest_id), &nonce)
            .finalize()
            .into_bytes();
        GuestStamp {
            key_id: key_id(key),
            guest_id,
            nonce,
            mac: hex::encode(tag),
        }
    }

    /// Parses the file's bytes: one line, exactly five fields.
    pub fn parse(bytes: &[u8]) -> Result<GuestStamp, StampError> {
        let text = std::str::from_utf8(bytes).map_err(|_| StampError::Malformed("not UTF-8"))?;
        let line = text.strip_suffix('\n').unwrap_or(text);
        let fields: Vec<&str> = line.split(' ').collect();
        let [schema, key_id, guest, nonce, mac] = fields[..] else {
            return Err(StampError::Malformed("not five fields on one line"));
        };
        let hex_of = |s: &str, n: usize| {
            s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if schema != STAMP_SCHEMA {
            return Err(StampError::Malformed("another schema"));
        }
        if !hex_of(key_id, 16) || !hex_of(nonce, 32) || !hex_of(mac, 64) {
            return Err(StampError::Malformed(
                "a field of the wrong length or alphabet",
            ));
        }
        let guest_id = match guest {
            "-" => None,
            g => Some(Uuid::parse_str(g).map_err(|_| StampError::Malformed("guest id"))?),
        };
        Ok(GuestStamp {
            key_id: key_id.to_owned(),
            guest_id,
            nonce: nonce.to_owned(),
            mac: mac.to_owned(),
        })
    }

    /// Checks that `key` made this stamp (the MAC compared in constant time).
    pub fn verify(&self, key: &StampKey) -> Result<(), StampError> {
        let ours = key_id(key);
        if self.key_id != ours {
            return Err(StampError::OtherKey {
                found: self.key_id.clone(),
                ours,
            });
        }
        let tag = hex::decode(&self.mac).map_err(|_| StampError::Malformed("mac"))?;
        mac(key, &guest_word(self.guest_id), &self.nonce)
            .verify_slice(&tag)
            .map_err(|_| StampError::BadMac)
    }

    /// The stamp in `bytes` (`None`: no file), if `key` made it.
    pub fn check(bytes: Option<&[u8]>, key: &StampKey) -> Result<GuestStamp, StampError> {
        let stamp = GuestStamp::parse(bytes.ok_or(StampError::Missing)?)?;
        stamp.verify(key)?;
        Ok(stamp)
    }

    /// The file's content.
    pub fn line(&self) -> String {
        let guest = guest_word(self.guest_id);
        format!(
            "{STAMP_SCHEMA} {} {guest} {} {}\n",
            self.key_id, self.nonce, self.mac
        )
    }
}
