//! Restores whose answer was lost and whose landing window passed with no sign of them
//! (DESIGN §9). Proxmox may still carry such a request out later: the journal keeps the
//! vmid it was sent for, the operation that sent it and the tag it carries, so the guest it
//! creates is recognised as that operation's own and destroyed through the gate, instead of
//! staying behind as a stranger nobody may touch.

use jiff::Timestamp;
use rusqlite::params;

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::operations::require_running;
use super::records::{OpId, identity_tag};
use super::store::Store;
use super::store::{from_ms, parse_op_id, to_ms};

fn query_err(operation: &'static str) -> impl Fn(rusqlite::Error) -> JournalError {
    move |source| JournalError::Query { operation, source }
}

const TABLE: &str = "late_landings";

/// A restore that may still land on `vmid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateLanding {
    /// The vmid the restore was sent for.
    pub vmid: u32,
    /// The operation that sent it (closed by now).
    pub op_id: OpId,
    /// The hub's guest id the restore was for, if any.
    pub guest_id: Option<String>,
    /// When the request was sent.
    pub asked_at: Timestamp,
    /// When the watch ends: a request not landed by then is taken as never carried out.
    pub watch_until: Timestamp,
}

impl LateLanding {
    /// The tag the restore writes into the guest it creates.
    pub fn tag(&self) -> String {
        identity_tag(self.op_id)
    }
}

impl Store {
    /// Records, while operation `op_id` is still running, that the restore it sent for
    /// `vmid` at `asked_at` has not landed within its window and may land until
    /// `watch_until`. The operation's provenance row for `vmid` may go (its rollback found
    /// nothing); this row lets a later pass destroy what lands.
    pub fn watch_late_landing(
        &mut self,
        op_id: OpId,
        vmid: u32,
        guest_id: Option<&str>,
        asked_at: Timestamp,
        watch_until: Timestamp,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("watch late landing", |tx| {
            require_running(tx, op_id)?;
            tx.execute(
                "INSERT INTO late_landings (vmid, op_id, guest_id, asked_ms, watch_until_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (vmid) DO UPDATE SET op_id = excluded.op_id,
                     guest_id = excluded.guest_id, asked_ms = excluded.asked_ms,
                     watch_until_ms = excluded.watch_until_ms",
                params![
                    vmid,
                    op_id.to_string(),
                    guest_id,
                    to_ms(asked_at),
                    to_ms(watch_until)
                ],
            )
            .map_err(query_err("watch late landing"))?;
            let mut event = AuditEvent::new("restore.late_landing_watched");
            event.op_id = Some(op_id);
            event.vmid = Some(vmid);
            event.guest_id = guest_id.map(str::to_owned);
            event.detail = serde_json::json!({
                "asked_ms": to_ms(asked_at),
                "watch_until_ms": to_ms(watch_until),
            });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// Every restore that may still land, by vmid.
    pub fn late_landings(&self) -> Result<Vec<LateLanding>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT vmid, op_id, guest_id, asked_ms, watch_until_ms FROM late_landings
                 ORDER BY vmid",
            )
            .map_err(query_err("list late landings"))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, u32>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, i64>(4)?,
                ))
            })
            .map_err(query_err("list late landings"))?;
        let mut out = Vec::new();
        for row in rows {
            let (vmid, op_id, guest_id, asked_ms, until_ms) =
                row.map_err(query_err("list late landings"))?;
            out.push(LateLanding {
                vmid,
                op_id: parse_op_id(op_id, TABLE)?,
                guest_id,
                asked_at: from_ms(asked_ms, TABLE, "asked_ms")?,
                watch_until: from_ms(until_ms, TABLE, "watch_until_ms")?,
            });
        }
        Ok(out)
    }

    /// Ends the watch of `vmid` for `op_id`'s restore, audited with `outcome` (`destroyed`:
    /// it landed and was destroyed; `expired`: it never landed; `foreign`: another guest
    /// took the vmid). Returns whether there was such a watch.
    pub fn end_late_landing(
        &mut self,
        op_id: OpId,
        vmid: u32,
        outcome: &'static str,
    ) -> Result<bool, JournalError> {
        let now = self.now();
        self.write("end late landing", |tx| {
            let removed = tx
                .execute(
                    "DELETE FROM late_landings WHERE vmid = ?1 AND op_id = ?2",
                    params![vmid, op_id.to_string()],
                )
                .map_err(query_err("end late landing"))?;
            if removed > 0 {
                let mut event = AuditEvent::new("restore.late_landing_ended");
                event.op_id = Some(op_id);
                event.vmid = Some(vmid);
                event.detail = serde_json::json!({ "outcome": outcome });
                audit::append(tx, now, &event)?;
            }
            Ok(removed > 0)
        })
    }
}

journal_calls! {
    /// See [`Store::late_landings`].
    fn late_landings() -> Vec<LateLanding> = |s| s.late_landings();
    /// See [`Store::end_late_landing`].
    fn end_late_landing(op_id: OpId, vmid: u32, outcome: &'static str) -> bool
        = |s| s.end_late_landing(op_id, vmid, outcome);
    /// See [`Store::watch_late_landing`].
    fn watch_late_landing(
        op_id: OpId,
        vmid: u32,
        guest_id: Option<String>,
        asked_at: jiff::Timestamp,
        watch_until: jiff::Timestamp,
    ) -> ()
        = |s| s.watch_late_landing(op_id, vmid, guest_id.as_deref(), asked_at, watch_until);
}
