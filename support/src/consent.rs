//! The consent file (decision 0080): which guests' controllers consented to break-glass
//! commands touching them, and until when.
//!
//! The agent writes it whenever a controller grants or revokes consent through the local API;
//! the support shell reads it before every command that touches a guest, and runs the command
//! only while that guest's consent lasts by its own clock. The file is the agent's (the
//! break-glass account may read it, never write it), so the door's account cannot consent on
//! a guest's behalf, and a consent ends at its deadline even if the agent is gone.
//!
//! A consent is bound to one guest, not to its vmid: each entry names the guest's Bosun id and
//! the identity tag the agent wrote into that guest's Proxmox config when it created it
//! (`bosun-op-…`). The support shell runs a command on a vmid only while the guest there still
//! carries that tag, so a consent left behind by a destroyed guest opens nothing on a new guest
//! given the same vmid, even before the agent has removed it.
//!
//! Its text: `{"version":2,"consents":[{"vmid":101,"guest_id":"…","identity":"bosun-op-…",
//! "expires_at":1764150000}]}` (`expires_at` in Unix seconds). Anything else (a version 1
//! file among it, which named no identity) reads as no consent at all.

use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};

/// Where the agent writes the file and the support shell reads it (the package makes the
/// directory, the agent's, readable by the break-glass account's group).
pub const DEFAULT_CONSENT_FILE: &str = "/var/lib/bosun-consent/consent.json";
/// The version this code writes and reads.
pub const CONSENT_VERSION: u64 = 2;
/// Most consents the file holds (one per guest; a host holds far fewer guests).
pub const MAX_CONSENTS: usize = 4096;
/// Longest identity tag accepted, in bytes.
pub const MAX_IDENTITY: usize = 64;
/// Largest file read, in bytes (an entry takes about 140).
pub const MAX_CONSENT_FILE: u64 = 512 * 1024;

/// One guest's consent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consent {
    /// The guest's Proxmox id, as the agent's records hold it.
    pub vmid: u32,
    /// The guest's Bosun id.
    pub guest_id: String,
    /// The identity tag the guest carries in its Proxmox config (`tags`): the guest at
    /// `vmid` is this guest only while its config holds it.
    pub identity: String,
    /// When it ends, in Unix seconds.
    pub expires_at: u64,
}

/// Why a consent file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ConsentFileError {
    /// It could not be opened or read.
    #[error("reading the consent file")]
    Read(#[source] std::io::Error),
    /// It is not a regular file, or others than its owner may write it.
    #[error("the consent file is not a regular file that only its owner may write")]
    Unsafe,
    /// It is larger than [`MAX_CONSENT_FILE`].
    #[error("the consent file is larger than {MAX_CONSENT_FILE} bytes")]
    TooLarge,
    /// Its text is not a consent file of [`CONSENT_VERSION`].
    #[error("the consent file is malformed: {reason}")]
    Malformed {
        /// What is wrong.
        reason: &'static str,
    },
}

/// The consents a file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsentFile {
    /// One per guest at most.
    pub consents: Vec<Consent>,
}

impl ConsentFile {
    /// The consent given for `vmid` that lasts past `now` (Unix seconds), if any; it holds
    /// only for the guest that carries its [`Consent::identity`] (see [`holds_identity`]).
    pub fn live_for(&self, vmid: u32, now: u64) -> Option<&Consent> {
        self.consents
            .iter()
            .find(|c| c.vmid == vmid && c.expires_at > now)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let consents: Vec<Value> = self
            .consents
            .iter()
            .map(|c| {
                json!({
                    "vmid": c.vmid,
                    "guest_id": c.guest_id,
                    "identity": c.identity,
                    "expires_at": c.expires_at,
                })
            })
            .collect();
        let mut text = json!({"version": CONSENT_VERSION, "consents": consents}).to_string();
        text.push('\n');
        text
    }

    /// Reads a file's text; every entry must be well formed, one per vmid and guest.
    pub fn parse(text: &[u8]) -> Result<Self, ConsentFileError> {
        let bad = |reason| ConsentFileError::Malformed { reason };
        let doc: Value = serde_json::from_slice(text).map_err(|_| bad("not JSON"))?;
        if doc.get("version").and_then(Value::as_u64) != Some(CONSENT_VERSION) {
            return Err(bad("unknown version"));
        }
        let entries = doc
            .get("consents")
            .and_then(Value::as_array)
            .ok_or(bad("no consents list"))?;
        if entries.len() > MAX_CONSENTS {
            return Err(bad("too many consents"));
        }
        let mut consents: Vec<Consent> = Vec::with_capacity(entries.len());
        for entry in entries {
            let vmid = entry
                .get("vmid")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v >= 100)
                .ok_or(bad("an entry's vmid"))?;
            let guest_id = entry
                .get("guest_id")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty() && g.len() <= 64)
                .ok_or(bad("an entry's guest_id"))?;
            let identity = entry
                .get("identity")
                .and_then(Value::as_str)
                .filter(|i| is_identity(i))
                .ok_or(bad("an entry's identity"))?;
            let expires_at = entry
                .get("expires_at")
                .and_then(Value::as_u64)
                .ok_or(bad("an entry's expires_at"))?;
            if consents
                .iter()
                .any(|c| c.vmid == vmid || c.guest_id == guest_id)
            {
                return Err(bad("two entries for one guest"));
            }
            consents.push(Consent {
                vmid,
                guest_id: guest_id.to_owned(),
                identity: identity.to_owned(),
                expires_at,
            });
        }
        Ok(Self { consents })
    }

    /// Reads `path` without following a symbolic link, at most [`MAX_CONSENT_FILE`] bytes; a
    /// missing file holds no consent.
    pub fn read(path: &Path) -> Result<Self, ConsentFileError> {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path);
        let file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(ConsentFileError::Read(e)),
        };
        let meta = file.metadata().map_err(ConsentFileError::Read)?;
        if !meta.is_file() || meta.permissions().mode() & 0o022 != 0 {
            return Err(ConsentFileError::Unsafe);
        }
        if meta.len() > MAX_CONSENT_FILE {
            return Err(ConsentFileError::TooLarge);
        }
        let mut text = Vec::new();
        file.take(MAX_CONSENT_FILE + 1)
            .read_to_end(&mut text)
            .map_err(ConsentFileError::Read)?;
        if text.len() as u64 > MAX_CONSENT_FILE {
            return Err(ConsentFileError::TooLarge);
        }
        Self::parse(&text)
    }
}

/// Whether `text` is an identity tag as the agent writes them: `bosun-op-` then letters and
/// digits, at most [`MAX_IDENTITY`] bytes (a Proxmox tag, which needs no quoting anywhere).
pub fn is_identity(text: &str) -> bool {
    text.len() <= MAX_IDENTITY
        && text
            .strip_prefix("bosun-op-")
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Whether the text `pct config VMID` printed holds `identity` among the guest's `tags`
/// (separated by `;`, `,` or spaces, as Proxmox accepts them). Only the first `tags:` line
/// at the start of a line counts; the description (`#` lines) never does.
pub fn holds_identity(pct_config: &str, identity: &str) -> bool {
    pct_config
        .lines()
        .find_map(|line| line.strip_prefix("tags:"))
        .is_some_and(|tags| tags.split([';', ',', ' ']).any(|t| t.trim() == identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(vmid: u32, guest: &str, expires_at: u64) -> Consent {
        Consent {
            vmid,
            guest_id: guest.to_owned(),
            identity: format!("bosun-op-{guest}{vmid}"),
            expires_at,
        }
    }

    #[test]
    fn a_consent_allows_its_own_guest_until_its_deadline_and_no_other() {
        let file = ConsentFile {
            consents: vec![one(101, "a", 1000), one(102, "b", 10)],
        };
        let back = ConsentFile::parse(file.render().as_bytes()).unwrap();
        assert_eq!(back, file);
        assert_eq!(back.live_for(101, 999), Some(&file.consents[0]));
        assert!(
            back.live_for(101, 1000).is_none(),
            "the deadline itself is past"
        );
        assert!(
            back.live_for(102, 11).is_none(),
            "an expired consent allows nothing"
        );
        assert!(back.live_for(103, 0).is_none(), "a guest without an entry");
    }

    #[test]
    fn a_consent_holds_only_for_the_guest_whose_tags_carry_its_identity() {
        let config = "# bosun-op-abc in the description\narch: amd64\ntags: web;bosun-op-abc\n";
        assert!(holds_identity(config, "bosun-op-abc"));
        assert!(
            !holds_identity(config, "bosun-op-ab"),
            "a prefix is not the tag"
        );
        assert!(
            !holds_identity("# tags: bosun-op-abc\narch: amd64\n", "bosun-op-abc"),
            "a description line is not the tags"
        );
        assert!(!holds_identity("arch: amd64\n", "bosun-op-abc"), "no tags");
        assert!(is_identity("bosun-op-0f3a"));
        for bad in [
            "",
            "bosun-op-",
            "op-1",
            "bosun-op-a;b",
            &format!("bosun-op-{}", "a".repeat(60)),
        ] {
            assert!(!is_identity(bad), "{bad}");
        }
    }

    #[test]
    fn anything_but_a_well_formed_file_is_refused() {
        for bad in [
            "",
            "[]",
            r#"{"version":1,"consents":[]}"#,
            r#"{"version":2}"#,
            r#"{"version":1,"consents":[{"vmid":101,"guest_id":"a","expires_at":1}]}"#,
            r#"{"version":2,"consents":[{"vmid":101,"guest_id":"a","expires_at":1}]}"#,
            r#"{"version":2,"consents":[{"vmid":101,"guest_id":"a","identity":"x","expires_at":1}]}"#,
            r#"{"version":2,"consents":[{"vmid":99,"guest_id":"a","identity":"bosun-op-1","expires_at":1}]}"#,
            r#"{"version":2,"consents":[{"vmid":101,"guest_id":"","identity":"bosun-op-1","expires_at":1}]}"#,
            r#"{"version":2,"consents":[{"vmid":101,"guest_id":"a","identity":"bosun-op-1","expires_at":-1}]}"#,
            r#"{"version":2,"consents":[{"vmid":101,"guest_id":"a","identity":"bosun-op-1","expires_at":1},{"vmid":101,"guest_id":"b","identity":"bosun-op-2","expires_at":1}]}"#,
        ] {
            assert!(ConsentFile::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_file_holds_nothing_and_a_writable_or_linked_one_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("consent.json");
        assert_eq!(ConsentFile::read(&path).unwrap(), ConsentFile::default());
        let file = ConsentFile {
            consents: vec![one(101, "a", u64::MAX)],
        };
        std::fs::write(&path, file.render()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(ConsentFile::read(&path).unwrap(), file);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o662)).unwrap();
        assert!(matches!(
            ConsentFile::read(&path),
            Err(ConsentFileError::Unsafe)
        ));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(ConsentFile::read(&link).is_err());
    }
}
