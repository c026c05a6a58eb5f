//! What a vzdump task log says about one guest's backup so far.
//!
//! The lines are PVE's own (`PVE::VZDump` and `PVE::VZDump::LXC`):
//! - `create storage snapshot 'vzdump'` — the storage snapshot exists from this line on; a
//!   controller that quiesced may restart its apps now.
//! - `mode failure - some volumes do not support snapshots` followed by
//!   `trying 'suspend' mode instead`, or `backup mode: suspend|stop` — no storage snapshot
//!   will be taken; the copy is consistent only once the archive is written.
//! - `Finished Backup of VM <vmid>` — the archive is complete.

/// Facts read from a vzdump log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogProgress {
    /// The storage snapshot `vzdump` was created.
    pub snapshot_taken: bool,
    /// vzdump will not (or could not) take a storage snapshot.
    pub no_storage_snapshot: bool,
    /// The archive was written completely.
    pub archive_written: bool,
}

impl LogProgress {
    /// Folds more log lines into what is known.
    pub fn feed<'a>(&mut self, lines: impl IntoIterator<Item = &'a str>) {
        for line in lines {
            let text = line.trim();
            if text.contains("create storage snapshot 'vzdump'") {
                self.snapshot_taken = true;
            } else if text.contains("mode failure - some volumes do not support snapshots")
                || text.contains("trying 'suspend' mode instead")
                || text.ends_with("backup mode: suspend")
                || text.ends_with("backup mode: stop")
            {
                self.no_storage_snapshot = true;
            } else if text.contains("Finished Backup of VM") {
                self.archive_written = true;
            }
        }
    }

    /// Whether a quiesced controller may restart its apps.
    pub fn snapshot_consistent(&self) -> bool {
        (self.snapshot_taken && !self.no_storage_snapshot) || self.archive_written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNAPSHOT_LOG: &[&str] = &[
        "INFO: starting new backup job: vzdump 101 --mode snapshot --storage local --node pve",
        "INFO: Starting Backup of VM 101 (lxc)",
        "INFO: status = running",
        "INFO: backup mode: snapshot",
        "INFO: ionice priority: 7",
        "INFO: create storage snapshot 'vzdump'",
        "INFO: creating vzdump archive '/var/lib/vz/dump/vzdump-lxc-101-2026_01_01-00_00_00.tar.zst'",
        "INFO: Total bytes written: 1000 (1MiB, 120MiB/s)",
        "INFO: cleanup temporary 'vzdump' snapshot",
        "INFO: Finished Backup of VM 101 (00:00:20)",
    ];

    const SUSPEND_LOG: &[&str] = &[
        "INFO: status = running",
        "INFO: mode failure - some volumes do not support snapshots",
        "INFO: trying 'suspend' mode instead",
        "INFO: backup mode: suspend",
        "INFO: suspending guest",
        "INFO: resuming guest",
        "INFO: creating vzdump archive '/var/lib/vz/dump/x.tar.zst'",
        "INFO: Finished Backup of VM 101 (00:00:20)",
    ];

    fn after(lines: &[&str], n: usize) -> LogProgress {
        let mut p = LogProgress::default();
        p.feed(lines[..n].iter().copied());
        p
    }

    #[test]
    fn snapshot_mode_is_consistent_from_the_snapshot_line_on() {
        assert!(!after(SNAPSHOT_LOG, 5).snapshot_consistent());
        let at_snapshot = after(SNAPSHOT_LOG, 6);
        assert!(at_snapshot.snapshot_taken);
        assert!(at_snapshot.snapshot_consistent());
        assert!(!at_snapshot.archive_written);
        assert!(after(SNAPSHOT_LOG, SNAPSHOT_LOG.len()).archive_written);
    }

    #[test]
    fn suspend_fallback_is_consistent_only_with_the_archive() {
        for n in 0..SUSPEND_LOG.len() {
            let p = after(SUSPEND_LOG, n);
            assert!(!p.snapshot_consistent(), "line {n}");
        }
        let done = after(SUSPEND_LOG, SUSPEND_LOG.len());
        assert!(done.no_storage_snapshot);
        assert!(done.snapshot_consistent());
    }

    #[test]
    fn feeding_in_pieces_equals_feeding_at_once() {
        let mut pieces = LogProgress::default();
        for line in SNAPSHOT_LOG {
            pieces.feed([*line]);
        }
        assert_eq!(pieces, after(SNAPSHOT_LOG, SNAPSHOT_LOG.len()));
    }
}
