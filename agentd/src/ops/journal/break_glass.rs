//! Break-glass doors (DESIGN §12): which signed job opened the emergency SSH door, for
//! which key, until when, and how it closed. At most one door is open; opening another
//! closes the first as `replaced` (the helper writes one line, so only the newest key is in
//! the file). Each opening and closing is written with its audit row in one transaction
//! (`break_glass.opened`, `break_glass.closed`), which the hub turns into the
//! `break_glass_open` and `break_glass_closed` alerts.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// The audit action of an opened door.
pub const OPENED_ACTION: &str = "break_glass.opened";
/// The audit action of a closed door.
pub const CLOSED_ACTION: &str = "break_glass.closed";
/// The audit action of one command run (or refused) in a break-glass session.
pub const COMMAND_ACTION: &str = "break_glass.command";

/// One line of the support shell's spool (decision 0035), checked by the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportCommand {
    /// The door's job id, which the forced command names.
    pub session: String,
    /// The command in its canonical spelling, or `refused`.
    pub command: String,
    /// Its first word (`status`, `restart`, `logs`, `guests`, `guest-config`, `refused`):
    /// what a guest of the host is shown.
    pub kind: String,
    /// The command's exit status; none for a refused line.
    pub status: Option<u8>,
    /// The guest the command touches (`guest-config VMID`), whose consent it needs; none for
    /// a host-level command.
    pub vmid: Option<u32>,
    /// Why a command that parsed did not run (`no_consent`).
    pub refused: Option<&'static str>,
    /// When the support shell ran it.
    pub ran_at: Timestamp,
}

/// Why a door closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorClosed {
    /// Its deadline passed.
    Expiry,
    /// A signed `break-glass-disable` closed it.
    Disable,
    /// A newer `break-glass-enable` replaced its key.
    Replaced,
}

impl DoorClosed {
    /// The name stored and audited.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expiry => "expiry",
            Self::Disable => "disable",
            Self::Replaced => "replaced",
        }
    }
}

/// One door the journal knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Door {
    /// The `break-glass-enable` job that opened it.
    pub job_id: String,
    /// The operator key's `SHA256:` fingerprint.
    pub fingerprint: String,
    /// The operator's reason.
    pub reason: String,
    /// Fingerprint of the key that signed the job.
    pub signer: String,
    /// When it opened.
    pub opened_at: Timestamp,
    /// When sshd stops accepting the key.
    pub expires_at: Timestamp,
}

impl Door {
    fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "job_id": self.job_id,
            "fingerprint": self.fingerprint,
            "reason": self.reason,
            "signer": self.signer,
            "account": bosun_proto::break_glass::BREAK_GLASS_ACCOUNT,
            "expires_at": self.expires_at.to_string(),
        })
    }
}

fn close_in(
    tx: &rusqlite::Transaction<'_>,
    door: &Door,
    how: DoorClosed,
    now: Timestamp,
    by_job: Option<&str>,
) -> Result<(), JournalError> {
    tx.execute(
        "UPDATE break_glass_doors SET closed_ms = ?2, closed_by = ?3
         WHERE job_id = ?1 AND closed_ms IS NULL",
        params![door.job_id, to_ms(now), how.as_str()],
    )
    .map_err(query_err("close break-glass door"))?;
    let mut event = AuditEvent::new(CLOSED_ACTION);
    event.job_id = Some(by_job.unwrap_or(&door.job_id).to_owned());
    let mut detail = door.facts();
    detail["closed_by"] = how.as_str().into();
    event.detail = detail;
    audit::append(tx, now, &event)?;
    Ok(())
}

/// The Bosun guest that holds `vmid` now (none for a container Bosun did not create, adopt
/// or restore, or a scratch guest).
fn guest_of_vmid(
    tx: &rusqlite::Transaction<'_>,
    vmid: u32,
) -> Result<Option<String>, JournalError> {
    let guest: Option<Option<String>> = tx
        .query_row(
            "SELECT guest_id FROM guest_provenance WHERE vmid = ?1 AND scratch = 0",
            params![vmid],
            |r| r.get(0),
        )
        .optional()
        .map_err(query_err("read the guest a break-glass command touched"))?;
    Ok(guest.flatten())
}

impl Store {
    /// The open door, if any.
    pub fn open_door(&self) -> Result<Option<Door>, JournalError> {
        const WHAT: &str = "read break-glass door";
        let row: Option<(String, String, String, String, i64, i64)> = self
            .conn
            .query_row(
                "SELECT job_id, fingerprint, reason, signer, opened_ms, expires_ms
                 FROM break_glass_doors WHERE closed_ms IS NULL
                 ORDER BY opened_ms DESC LIMIT 1",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional()
            .map_err(query_err(WHAT))?;
        row.map(|(job_id, fingerprint, reason, signer, opened, expires)| {
            Ok(Door {
                job_id,
                fingerprint,
                reason,
                signer,
                opened_at: from_ms(opened, "break_glass_doors", "opened_ms")?,
                expires_at: from_ms(expires, "break_glass_doors", "expires_ms")?,
            })
        })
        .transpose()
    }

    /// Records `door` as open (closing an earlier open door as replaced) with its audit
    /// row; a door of the same job already recorded is left as it is (a resumed job).
    /// Gives whether it was recorded now.
    pub fn record_door_opened(&mut self, door: &Door) -> Result<bool, JournalError> {
        let now = self.now();
        let earlier = self.open_door()?;
        self.write("record break-glass door", |tx| {
            let known: Option<String> = tx
                .query_row(
                    "SELECT job_id FROM break_glass_doors WHERE job_id = ?1",
                    params![door.job_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(query_err("record break-glass door"))?;
            if known.is_some() {
                return Ok(false);
            }
            if let Some(earlier) = earlier.as_ref().filter(|e| e.job_id != door.job_id) {
                close_in(tx, earlier, DoorClosed::Replaced, now, Some(&door.job_id))?;
            }
            tx.execute(
                "INSERT INTO break_glass_doors
                 (job_id, fingerprint, reason, signer, opened_ms, expires_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    door.job_id,
                    door.fingerprint,
                    door.reason,
                    door.signer,
                    to_ms(door.opened_at),
                    to_ms(door.expires_at)
                ],
            )
            .map_err(query_err("record break-glass door"))?;
            let mut event = AuditEvent::new(OPENED_ACTION);
            event.job_id = Some(door.job_id.clone());
            event.detail = door.facts();
            audit::append(tx, now, &event)?;
            Ok(true)
        })
    }

    /// How far the support shell's spool has been read (0 before the first command).
    pub fn spool_offset(&self) -> Result<u64, JournalError> {
        let offset: Option<i64> = self
            .conn
            .query_row(
                "SELECT offset FROM break_glass_spool WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(query_err("read the break-glass spool offset"))?;
        Ok(offset.and_then(|o| u64::try_from(o).ok()).unwrap_or(0))
    }

    /// Journals one `break_glass.command` audit row per command and the spool's new
    /// `offset`, in one transaction: a command is recorded once, even if the agent stops
    /// between two reads.
    pub fn record_support_commands(
        &mut self,
        commands: &[SupportCommand],
        offset: u64,
    ) -> Result<(), JournalError> {
        let now = self.now();
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        self.write("record break-glass commands", |tx| {
            for command in commands {
                let mut event = AuditEvent::new(COMMAND_ACTION);
                event.job_id = Some(command.session.clone());
                event.detail = serde_json::json!({
                    "account": bosun_proto::break_glass::BREAK_GLASS_ACCOUNT,
                    "command": command.command,
                    "kind": command.kind,
                    "status": command.status,
                    "ran_at": command.ran_at.to_string(),
                });
                if let Some(refused) = command.refused {
                    event.detail["refused"] = refused.into();
                }
                // A command on one of Bosun's guests is that guest's row: its customer reads
                // it in full, other guests do not see it.
                if let Some(vmid) = command.vmid {
                    event.vmid = Some(vmid);
                    event.guest_id = guest_of_vmid(tx, vmid)?;
                }
                audit::append(tx, now, &event)?;
            }
            tx.execute(
                "INSERT INTO break_glass_spool (id, offset) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET offset = excluded.offset",
                params![offset],
            )
            .map_err(query_err("record the break-glass spool offset"))?;
            Ok(())
        })
    }

    /// Records the open door (if any) as closed `how`, with its audit row; `by_job` is the
    /// disabling job. Gives the door that closed.
    pub fn record_door_closed(
        &mut self,
        how: DoorClosed,
        by_job: Option<&str>,
    ) -> Result<Option<Door>, JournalError> {
        let now = self.now();
        let Some(door) = self.open_door()? else {
            return Ok(None);
        };
        self.write("close break-glass door", |tx| {
            close_in(tx, &door, how, now, by_job)
        })?;
        Ok(Some(door))
    }
}

journal_calls! {
    /// See [`Store::open_door`].
    fn open_door() -> Option<Door> = |s| s.open_door();
    /// See [`Store::record_door_opened`].
    fn record_door_opened(door: Door) -> bool = |s| s.record_door_opened(&door);
    /// See [`Store::spool_offset`].
    fn spool_offset() -> u64 = |s| s.spool_offset();
    /// See [`Store::record_support_commands`].
    fn record_support_commands(commands: Vec<SupportCommand>, offset: u64) -> ()
        = |s| s.record_support_commands(&commands, offset);
    /// See [`Store::record_door_closed`].
    fn record_door_closed(how: DoorClosed, by_job: Option<String>) -> Option<Door>
        = |s| s.record_door_closed(how, by_job.as_deref());
}
