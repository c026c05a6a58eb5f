//! Where the agent's link to the hub stands: the hub loop's [`HubStatus`] (a `watch` the rest
//! of the agent reads), and its [`HubLink`] kept in `STATE_DIR/hub-link.json` for
//! `bosun-agentctl status`, a separate process that reads this file and never the journal or
//! the state lock the running agent holds.
//!
//! The file is written by [`follow`] when the link changes (not on every poll), atomically
//! (temp file, rename), mode 0600, and holds no secret: the host id, the state, since when,
//! the agent's pid, and after a stop whether the hub was told it was a planned one.

use std::path::{Path, PathBuf};

use bosun_errchain::error_chain;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use uuid::Uuid;

use crate::clock::SharedClock;

/// The file name under the state directory.
pub const FILE: &str = "hub-link.json";

/// The largest link file read (it is a few hundred bytes).
const MAX_FILE_BYTES: u64 = 4096;

/// What the hub loop tells the rest of the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStatus {
    /// Whether the last poll succeeded.
    pub connected: bool,
    /// Successful polls.
    pub polls: u64,
    /// Failed polls in a row (a poll refused because the host awaits approval counts).
    pub failures: u32,
    /// Reports sent because the observed state changed or an action ran.
    pub prompted_reports: u64,
    /// Answered polls that carried a full report.
    pub full_reports: u64,
    /// Answered polls that carried a delta.
    pub delta_reports: u64,
    /// Where the link stands.
    pub link: HubLink,
    /// Once [`HubLink::Stopped`]: whether the hub acknowledged the last poll announcing a
    /// planned stop (it then shows the host `stopped`, not overdue).
    pub stop_announced: bool,
}

/// Where the link to the hub stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HubLink {
    /// No poll answered yet since the agent started.
    #[default]
    Starting,
    /// The last poll was answered.
    Connected,
    /// Polls fail (network, hub down, an answer refused); retried with backoff while the
    /// agent keeps reconciling from its cached desired state.
    Unreachable,
    /// The host enrolled with a token that requires an operator's approval, and the hub has
    /// not approved it yet: polled slowly (`[poll] pending_interval_ms`) until it does.
    PendingApproval,
    /// The hub refuses the host's key (revoked, or taken over by another box).
    Refused,
    /// The agent stopped (the hub loop ended).
    Stopped,
}

impl HubLink {
    /// The state in a few words.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Connected => "connected",
            Self::Unreachable => "unreachable",
            Self::PendingApproval => "pending approval",
            Self::Refused => "refused",
            Self::Stopped => "stopped",
        }
    }
}

/// The link file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// The host's id at the hub.
    pub host_id: Uuid,
    /// Where the link stands.
    pub link: HubLink,
    /// Since when.
    pub since: jiff::Timestamp,
    /// After a stop: whether the hub acknowledged the planned stop.
    #[serde(default)]
    pub stop_announced: bool,
    /// The agent process that wrote it.
    pub pid: u32,
}

/// Why the link file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LinkFileError {
    /// Reading or writing failed.
    #[error("hub link file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a link record.
    #[error("hub link file {path} is malformed")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

impl LinkRecord {
    /// Reads the record the agent last wrote (`None`: it never ran with this state
    /// directory since enrolling).
    pub fn load(state_dir: &Path) -> Result<Option<Self>, LinkFileError> {
        use std::io::Read as _;
        let path = state_dir.join(FILE);
        let io = |source| LinkFileError::Io {
            path: path.clone(),
            source,
        };
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let mut text = Vec::new();
        file.take(MAX_FILE_BYTES)
            .read_to_end(&mut text)
            .map_err(io)?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|source| LinkFileError::Malformed { path, source })
    }

    /// Writes the record (temp file, sync, rename), mode 0600.
    pub fn store(&self, state_dir: &Path) -> Result<(), LinkFileError> {
        let path = state_dir.join(FILE);
        let body = serde_json::to_vec(self).map_err(|source| LinkFileError::Malformed {
            path: path.clone(),
            source,
        })?;
        crate::links::hub_client::identity::replace_private(&path, &body)
            .map_err(|source| LinkFileError::Io { path, source })
    }

    /// Whether the process that wrote the record still runs (its `/proc` entry exists; a
    /// reused pid is taken as running).
    pub fn writer_running(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// What `bosun-agentctl status` prints of the link, one line each.
    pub fn describe(&self, pending_interval: std::time::Duration) -> Vec<String> {
        let since = self.since.strftime("%Y-%m-%d %H:%M:%S UTC");
        let running = self.writer_running();
        let mut lines = vec![if running {
            format!("agent: running (pid {})", self.pid)
        } else {
            format!("agent: not running (last pid {})", self.pid)
        }];
        let link = match self.link {
            HubLink::Starting => format!("hub link: starting since {since}: no poll answered yet"),
            HubLink::Connected => format!("hub link: connected since {since}"),
            HubLink::Unreachable => format!(
                "hub link: unreachable since {since}: polls fail and are retried with backoff; \
                 the agent keeps acting on its cached desired state"
            ),
            HubLink::PendingApproval => format!(
                "hub link: pending approval since {since}: the hub holds this host until an \
                 operator approves it (bosunctl hosts approve {}); the agent asks again every \
                 {}s",
                self.host_id,
                pending_interval.as_secs()
            ),
            HubLink::Refused => format!(
                "hub link: refused since {since}: the hub does not accept this host's key \
                 (revoked, or taken over by another box); an operator must act"
            ),
            HubLink::Stopped if self.stop_announced => format!(
                "hub link: stopped at {since}: a planned stop the hub was told of (it shows \
                 the host stopped, and pages it if it does not come back)"
            ),
            HubLink::Stopped => format!(
                "hub link: stopped at {since}: the hub was not told (it pages the host overdue \
                 after its grace window)"
            ),
        };
        lines.push(link);
        if !running && self.link != HubLink::Stopped {
            lines.push(
                "the agent ended without stopping cleanly (killed or crashed): the hub pages \
                 the host overdue after its grace window"
                    .to_owned(),
            );
        }
        lines
    }
}

/// Keeps `STATE_DIR/hub-link.json` in step with `status` until the hub loop ends (its
/// sender is dropped), then writes the final state. A write that fails is logged once per
/// state and the agent goes on.
pub async fn follow(
    mut status: watch::Receiver<HubStatus>,
    state_dir: PathBuf,
    host_id: Uuid,
    clock: SharedClock,
) {
    let mut written: Option<(HubLink, bool)> = None;
    loop {
        let now = {
            let s = status.borrow_and_update();
            (s.link, s.stop_announced)
        };
        if written != Some(now) {
            written = Some(now);
            let record = LinkRecord {
                host_id,
                link: now.0,
                since: clock.now(),
                stop_announced: now.1,
                pid: std::process::id(),
            };
            let dir = state_dir.clone();
            match tokio::task::spawn_blocking(move || record.store(&dir)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %error_chain(&e), "could not write the hub link file; `bosun-agentctl status` shows an older state");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the hub link file writer failed");
                }
            }
        }
        if status.changed().await.is_err() {
            // The hub loop ended: what it said last is written above on the next turn, if new.
            let last = {
                let s = status.borrow();
                (s.link, s.stop_announced)
            };
            if written == Some(last) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    use super::*;

    fn record(link: HubLink) -> LinkRecord {
        LinkRecord {
            host_id: Uuid::from_u128(7),
            link,
            since: jiff::Timestamp::from_second(1_800_000_000).expect("time"),
            stop_announced: false,
            pid: std::process::id(),
        }
    }

    #[test]
    fn stored_0600_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(LinkRecord::load(dir.path()).expect("load"), None);
        let written = record(HubLink::PendingApproval);
        written.store(dir.path()).expect("store");
        let mode = std::fs::metadata(dir.path().join(FILE))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            LinkRecord::load(dir.path()).expect("load"),
            Some(written.clone())
        );
        // Written again over the old one.
        let stopped = LinkRecord {
            stop_announced: true,
            ..record(HubLink::Stopped)
        };
        stopped.store(dir.path()).expect("store");
        assert_eq!(LinkRecord::load(dir.path()).expect("load"), Some(stopped));
    }

    #[test]
    fn pending_approval_says_who_must_act_and_how_often_the_agent_asks() {
        let lines = record(HubLink::PendingApproval).describe(Duration::from_secs(60));
        assert_eq!(
            lines[0],
            format!("agent: running (pid {})", std::process::id())
        );
        assert!(lines[1].starts_with("hub link: pending approval since 2027-01-15"));
        assert!(
            lines[1].contains(&format!("bosunctl hosts approve {}", Uuid::from_u128(7))),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("every 60s"), "{}", lines[1]);
    }

    #[test]
    fn a_dead_writer_that_did_not_stop_cleanly_is_called_out() {
        let gone = LinkRecord {
            // Beyond the kernel's pid range.
            pid: u32::MAX,
            ..record(HubLink::Connected)
        };
        let lines = gone.describe(Duration::from_secs(60));
        assert!(lines[0].starts_with("agent: not running"), "{lines:?}");
        assert!(lines[2].contains("without stopping cleanly"), "{lines:?}");
        let stopped = LinkRecord {
            pid: u32::MAX,
            stop_announced: true,
            ..record(HubLink::Stopped)
        };
        let lines = stopped.describe(Duration::from_secs(60));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].contains("a planned stop the hub was told of"));
    }

    #[tokio::test]
    async fn the_file_follows_the_link_and_keeps_the_last_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tx, rx) = watch::channel(HubStatus::default());
        let task = tokio::spawn(follow(
            rx,
            dir.path().to_owned(),
            Uuid::from_u128(7),
            crate::clock::SystemClock::shared(),
        ));
        let link_is = |want: HubLink| {
            let dir = dir.path().to_owned();
            async move {
                for _ in 0..200 {
                    if LinkRecord::load(&dir).ok().flatten().map(|r| r.link) == Some(want) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("the link file never said {want:?}");
            }
        };
        link_is(HubLink::Starting).await;
        tx.send_modify(|s| s.link = HubLink::PendingApproval);
        link_is(HubLink::PendingApproval).await;
        tx.send_modify(|s| {
            s.link = HubLink::Stopped;
            s.stop_announced = true;
        });
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the follower ends with the hub loop")
            .expect("no panic");
        let last = LinkRecord::load(dir.path())
            .expect("load")
            .expect("written");
        assert_eq!((last.link, last.stop_announced), (HubLink::Stopped, true));
    }
}
