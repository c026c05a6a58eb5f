//! The hosts' sealing recipients the operator confirmed, kept by `bosunctl` the way ssh keeps
//! `known_hosts` (DESIGN §4, "Who the operator seals to is the operator's knowledge, not the
//! hub's word"; docs/decisions/0050-remote-text-is-inert.md).
//!
//! A host's age recipient (`age1…`) reaches the hub in its reports, and a hub that lies could
//! answer with a recipient of its own: whatever `bosunctl secret seal` sealed to it, the hub
//! could open. So the recipient a secret is sealed to is the one the operator pinned: given at
//! `hosts approve --recipient` or `hosts pin-recipient`, read off the node's own console
//! (`bosun-agentctl status` prints it). The hub's answer is only compared with the pin: when
//! it names another recipient (a box that took over the host has a new one; so does a hub that
//! lies), `secret seal` refuses until the operator confirms the new one.
//!
//! The pins live in `known-recipients.json` beside the config file (`~/.config/bosun/`, or the
//! directory of `--config`), mode 0600, replaced whole through a sibling file and a rename.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use bosun_proto::secret::is_age_recipient;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::CtlError;
use crate::global::GlobalArgs;

/// The file's name, beside the config file.
pub const FILE_NAME: &str = "known-recipients.json";
/// The file's schema.
pub const SCHEMA: &str = "bosun.known-recipients/v1";
/// Largest file read (some 10,000 hosts).
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// One host's pinned recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    /// The age X25519 recipient (`age1…`).
    pub recipient: String,
    /// The host's name when it was pinned, for a person reading the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// When the operator confirmed it.
    pub pinned_at: Timestamp,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileBody {
    schema: String,
    #[serde(default)]
    hosts: BTreeMap<Uuid, Pinned>,
}

/// The pins, as read from their file.
#[derive(Debug)]
pub struct KnownRecipients {
    path: PathBuf,
    hosts: BTreeMap<Uuid, Pinned>,
}

/// Where the pins live for these options: beside the config file.
pub fn path(global: &GlobalArgs) -> Result<PathBuf, CtlError> {
    crate::config::path(global)
        .and_then(|config| config.parent().map(|dir| dir.join(FILE_NAME)))
        .ok_or(CtlError::MissingSetting {
            setting: "place for the pinned host recipients",
            flag: "--config",
            env: "BOSUN_CTL_CONFIG (or HOME)",
        })
}

/// Checks a recipient given on the command line.
pub fn parse_recipient(what: &'static str, text: &str) -> Result<String, CtlError> {
    let text = text.trim();
    if is_age_recipient(text) {
        Ok(text.to_owned())
    } else {
        Err(CtlError::BadArgument {
            what,
            reason: "not an age X25519 recipient (age1 and 58 letters and digits), as \
                     `bosun-agentctl status` prints it on the node"
                .to_owned(),
        })
    }
}

impl KnownRecipients {
    /// Reads the pins at `path`; none when the file does not exist yet.
    pub fn load(path: &Path) -> Result<Self, CtlError> {
        let bad = |source: std::io::Error| CtlError::KnownRecipients {
            path: path.to_owned(),
            source,
        };
        let mut bytes = Vec::new();
        match std::fs::File::open(path) {
            Ok(file) => {
                file.take(MAX_FILE + 1)
                    .read_to_end(&mut bytes)
                    .map_err(bad)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    path: path.to_owned(),
                    hosts: BTreeMap::new(),
                });
            }
            Err(e) => return Err(bad(e)),
        }
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE {
            return Err(bad(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("larger than {MAX_FILE} bytes"),
            )));
        }
        let body: FileBody = serde_json::from_slice(&bytes)
            .map_err(|e| bad(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        let wrong =
            body.schema != SCHEMA || body.hosts.values().any(|p| !is_age_recipient(&p.recipient));
        if wrong {
            return Err(bad(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a {SCHEMA} file of age recipients"),
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            hosts: body.hosts,
        })
    }

    /// The file the pins are kept in.
    pub fn file(&self) -> &Path {
        &self.path
    }

    /// The recipient pinned for `host`, if any.
    pub fn get(&self, host: Uuid) -> Option<&Pinned> {
        self.hosts.get(&host)
    }

    /// Pins `recipient` for `host` (the operator confirmed it) and writes the file; the pin it
    /// replaced, if another.
    pub fn pin(
        &mut self,
        host: Uuid,
        recipient: &str,
        hostname: Option<&str>,
    ) -> Result<Option<Pinned>, CtlError> {
        let pinned = Pinned {
            recipient: recipient.to_owned(),
            hostname: hostname.map(str::to_owned),
            pinned_at: Timestamp::now(),
        };
        let old = self.hosts.insert(host, pinned);
        self.save()?;
        Ok(old.filter(|old| old.recipient != recipient))
    }

    /// Writes the file: 0600, through a sibling file and a rename.
    fn save(&self) -> Result<(), CtlError> {
        let err = |source| CtlError::KnownRecipients {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let body = FileBody {
            schema: SCHEMA.to_owned(),
            hosts: self.hosts.clone(),
        };
        let mut text = serde_json::to_vec_pretty(&body)
            .map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        text.push(b'\n');
        crate::config::write_private(&self.path, &text).map_err(err)
    }
}

/// The recipient to seal a secret for `host` to: the pinned one, when the hub's report names
/// it too or names none. Refused when nothing is pinned, or when the hub reports another.
pub fn for_sealing(
    host: Uuid,
    pinned: Option<&Pinned>,
    reported: Option<&str>,
) -> Result<String, CtlError> {
    match (pinned, reported) {
        (None, reported) => Err(CtlError::RecipientNotPinned {
            host,
            reported: reported.map(str::to_owned),
        }),
        (Some(pinned), Some(reported)) if reported != pinned.recipient => {
            Err(CtlError::RecipientChanged {
                host,
                pinned: pinned.recipient.clone(),
                reported: reported.to_owned(),
            })
        }
        (Some(pinned), _) => Ok(pinned.recipient.clone()),
    }
}

/// How the hub's reported recipient stands against the pin, for `hosts show` and approval.
pub fn describe(pinned: Option<&Pinned>, reported: Option<&str>) -> String {
    let reported_text = reported.unwrap_or("none reported yet");
    match pinned {
        None => format!(
            "{reported_text} (NOT pinned: compare with `bosun-agentctl status` on the node, then \
             `bosunctl hosts pin-recipient HOST --recipient age1…`)"
        ),
        Some(p) if reported.is_none_or(|r| r == p.recipient) => format!(
            "{} (pinned {})",
            p.recipient,
            crate::table::when(Some(p.pinned_at))
        ),
        Some(p) => format!(
            "the hub reports {reported_text}, NOT the pinned {} (secret seal refuses until you \
             confirm one with `bosunctl hosts pin-recipient`)",
            p.recipient
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn recipient() -> String {
        age::x25519::Identity::generate().to_public().to_string()
    }

    #[test]
    fn a_pin_survives_a_reload_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bosun").join(FILE_NAME);
        let host = Uuid::new_v4();
        let (first, second) = (recipient(), recipient());
        let mut known = KnownRecipients::load(&path).unwrap();
        assert!(known.get(host).is_none());
        assert_eq!(known.pin(host, &first, Some("pve-a")).unwrap(), None);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut again = KnownRecipients::load(&path).unwrap();
        assert_eq!(again.get(host).unwrap().recipient, first);
        let replaced = again.pin(host, &second, None).unwrap().unwrap();
        assert_eq!(replaced.recipient, first);
        assert_eq!(
            KnownRecipients::load(&path)
                .unwrap()
                .get(host)
                .unwrap()
                .recipient,
            second
        );
    }

    #[test]
    fn a_damaged_file_is_an_error_never_an_empty_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        for text in [
            "{".to_owned(),
            r#"{"schema":"other","hosts":{}}"#.to_owned(),
            format!(
                r#"{{"schema":"{SCHEMA}","hosts":{{"{}":{{"recipient":"age1short","pinned_at":"2026-11-25T00:00:00Z"}}}}}}"#,
                Uuid::new_v4()
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = KnownRecipients::load(&path).unwrap_err();
            assert!(matches!(err, CtlError::KnownRecipients { .. }), "{err:?}");
        }
    }

    #[test]
    fn only_the_pinned_recipient_is_ever_chosen() {
        let host = Uuid::new_v4();
        let (pinned, hubs) = (recipient(), recipient());
        let pin = Pinned {
            recipient: pinned.clone(),
            hostname: None,
            pinned_at: Timestamp::UNIX_EPOCH,
        };
        assert_eq!(
            for_sealing(host, Some(&pin), Some(&pinned)).unwrap(),
            pinned
        );
        assert_eq!(for_sealing(host, Some(&pin), None).unwrap(), pinned);
        assert!(matches!(
            for_sealing(host, Some(&pin), Some(&hubs)),
            Err(CtlError::RecipientChanged { .. })
        ));
        assert!(matches!(
            for_sealing(host, None, Some(&hubs)),
            Err(CtlError::RecipientNotPinned { .. })
        ));
    }
}
