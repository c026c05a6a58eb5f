//! The agent's side of its own update (DESIGN §11): it fetches the artifact a signed
//! `agent-update` job names, checks its SHA-256, and asks the helper to stage it
//! ([`crate::ops::jobs`] runs the job). It never decides whether the new binary is good: the
//! health gate (`bosun-update-gate`, a program of its own run by systemd) does, from what
//! systemd sees and from the mark this module writes after every successful hub poll
//! ([`UpdateContext::poll_succeeded`]). Whichever binary runs afterwards reads the gate's
//! verdict from the root-owned record beside the slots and audits it once
//! (`agent_update.committed` / `agent_update.failed`), which the hub turns into an event or
//! the `agent_update_failed` alert.
//!
//! | file | writer | meaning |
//! |---|---|---|
//! | `<state>/update/incoming/bosun-agentd` | agent | the downloaded artifact (checked before staging) |
//! | `<state>/update/poll-ok.json` | agent | last successful poll: time and pid ([`PollMark`]) |
//! | `<state>/update/reported` | agent | the last verdict audited (`<update id> <phase>`) |
//! | `<slots>/update.json` | helper, then gate | the trial and its verdict ([`UpdateRecord`]) |

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bosun_errchain::error_chain;
use bosun_proto::poll::UpdateWindow;
use bosun_proto::update::{PollMark, RECORD_FILE, UpdatePhase, UpdateRecord};
use serde_json::json;

use crate::ops::journal::{AuditEvent, JournalHandle};

/// The production slots root.
pub use bosun_proto::update::DEFAULT_SLOTS_ROOT;

/// What the update job and the verdict reporting need.
#[derive(Debug)]
pub struct UpdateContext {
    state_dir: PathBuf,
    slots_root: PathBuf,
    window: Mutex<Option<UpdateWindow>>,
}

impl UpdateContext {
    /// Paths under the agent's `state_dir`, the record under `slots_root`.
    pub fn new(state_dir: &Path, slots_root: &Path) -> Self {
        Self {
            state_dir: state_dir.into(),
            slots_root: slots_root.into(),
            window: Mutex::new(None),
        }
    }

    fn dir(&self) -> PathBuf {
        self.state_dir.join("update")
    }

    /// Where the artifact is downloaded (the helper's `update_inbox`).
    pub fn inbox(&self) -> PathBuf {
        self.dir()
            .join("incoming")
            .join(bosun_proto::update::SLOT_BINARY)
    }

    /// The poll mark the gate reads.
    pub fn poll_mark(&self) -> PathBuf {
        self.dir().join("poll-ok.json")
    }

    /// The update window of the hub's last accepted poll config.
    pub fn set_window(&self, window: Option<UpdateWindow>) {
        if let Ok(mut w) = self.window.lock() {
            *w = window;
        }
    }

    /// The update window in force.
    pub fn window(&self) -> Option<UpdateWindow> {
        self.window.lock().ok().and_then(|w| w.clone())
    }

    /// The update record, if the slots hold one that parses.
    pub fn record(&self) -> Option<UpdateRecord> {
        let text = read_bounded(&self.slots_root.join(RECORD_FILE), 64 * 1024)?;
        let record: UpdateRecord = serde_json::from_slice(&text).ok()?;
        record.validate().ok().map(|()| record)
    }

    /// After each successful hub poll: writes the poll mark, then audits the gate's verdict
    /// on the last update once.
    pub async fn poll_succeeded(&self, journal: &JournalHandle, at_ms: i64) {
        let mark = PollMark {
            at_ms,
            pid: std::process::id(),
        };
        let dir = self.dir();
        let path = self.poll_mark();
        let written = tokio::task::spawn_blocking(move || write_mark(&dir, &path, &mark)).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "could not write the poll mark the update gate reads");
        }
        self.report_verdict(journal).await;
    }

    async fn report_verdict(&self, journal: &JournalHandle) {
        let Some(record) = self.record() else {
            return;
        };
        let action = match record.phase {
            UpdatePhase::Committed => "agent_update.committed",
            UpdatePhase::RolledBack => "agent_update.failed",
            UpdatePhase::Trial | UpdatePhase::RollingBack => return,
        };
        let key = format!("{} {}", record.update_id, record.phase.as_str());
        let reported = self.dir().join("reported");
        if read_bounded(&reported, 256).is_some_and(|t| t == key.as_bytes()) {
            return;
        }
        let mut event = AuditEvent::new(action);
        event.job_id = Some(record.update_id.to_string());
        let seconds = record
            .decided_at_ms
            .map(|d| (d - record.staged_at_ms).max(0) / 1000);
        event.detail = json!({
            "update_id": record.update_id.to_string(),
            "version": record.version,
            "sha256": record.sha256,
            "failure": record.failure.map(|f| f.as_str()),
            "detail": record.detail,
            "running_version": record.previous_version,
            "seconds_to_commit": seconds,
        });
        if let Err(e) = journal.append_audit(event).await {
            tracing::warn!(error = %error_chain(&e), "could not audit the update verdict");
            return;
        }
        match record.phase {
            UpdatePhase::Committed => {
                tracing::info!(update_id = %record.update_id, version = %record.version, "agent update committed by the health gate");
            }
            _ => {
                tracing::error!(update_id = %record.update_id, version = %record.version, failure = record.failure.map_or("-", |f| f.as_str()), detail = record.detail.as_deref().unwrap_or(""), "agent update rolled back by the health gate");
            }
        }
        // A crash before this line audits the verdict again: twice beats never.
        if let Err(e) = std::fs::write(&reported, key.as_bytes()) {
            tracing::warn!(error = %e, "could not remember the audited update verdict");
        }
    }
}

fn write_mark(dir: &Path, path: &Path, mark: &PollMark) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(".poll-ok.json.new");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec(mark).map_err(std::io::Error::other)?)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

fn read_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).ok()?;
    let mut out = Vec::new();
    file.take(max).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Whether `now` falls inside the daily `window` (host local time, `HH:MM` + minutes).
pub fn in_window(window: &UpdateWindow, now: jiff::Timestamp) -> bool {
    let local = now.to_zoned(jiff::tz::TimeZone::system());
    let minutes_now =
        u32::try_from(i32::from(local.hour()) * 60 + i32::from(local.minute())).unwrap_or(0);
    let start = window
        .start
        .split_once(':')
        .and_then(|(h, m)| Some(h.parse::<u32>().ok()? * 60 + m.parse::<u32>().ok()?));
    start.is_some_and(|s| bosun_proto::update::in_window(minutes_now, s, window.duration_minutes))
}
