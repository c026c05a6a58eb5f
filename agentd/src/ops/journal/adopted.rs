//! Guests a signed `adopt` job brought under the agent (decision 0073): their provenance row,
//! written like a created guest's, and the `adopted_guests` row that says whether the job
//! asked for a bootstrap.

use std::collections::BTreeSet;

use bosun_proto::desired::GuestKind;
use rusqlite::{OptionalExtension, params};

use super::audit::AuditEvent;
use super::error::JournalError;
use super::guests::{insert_provenance, query_err};
use super::handle::{JournalHandle, journal_calls};
use super::records::{AdoptedAs, OpId};
use super::store::{Store, to_ms};

impl Store {
    /// Records that running operation `op_id` (a signed `adopt` job) is about to write its
    /// identity into guest `vmid` of `kind` (the kind its check found there), which was on the node before the agent, as guest
    /// `guest_id`: refused if the journal holds a guest at the vmid, or the guest id at
    /// another vmid. Like [`Store::record_created`], the row comes before the Proxmox call.
    pub fn record_adopted(
        &mut self,
        op_id: OpId,
        vmid: u32,
        guest_id: &str,
        adopted: AdoptedAs,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record adopted guest", |tx| {
            let elsewhere: Option<u32> = tx
                .query_row(
                    "SELECT vmid FROM guest_provenance WHERE guest_id = ?1",
                    [guest_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err("record adopted guest"))?;
            if let Some(at) = elsewhere.filter(|at| *at != vmid) {
                return Err(JournalError::GuestIdAlreadyRecorded {
                    guest_id: guest_id.to_owned(),
                    vmid: at,
                });
            }
            let mut event = AuditEvent::new("guest.adopt_recorded");
            event.detail = serde_json::json!({
                "bootstrap": adopted == AdoptedAs::WithBootstrap,
            });
            insert_provenance(
                tx,
                now,
                op_id,
                vmid,
                Some(guest_id),
                false,
                kind,
                event,
                "record adopted guest",
            )?;
            tx.execute(
                "INSERT INTO adopted_guests (guest_id, op_id, bootstrap, adopted_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    guest_id,
                    op_id.to_string(),
                    i64::from(adopted == AdoptedAs::WithBootstrap),
                    to_ms(now)
                ],
            )
            .map_err(query_err("record adopted guest"))?;
            Ok(())
        })
    }

    /// The guests a signed `adopt` job brought in without a bootstrap: nothing is pushed into
    /// them on the agent's own account.
    pub fn adopted_without_bootstrap(&self) -> Result<BTreeSet<String>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT guest_id FROM adopted_guests WHERE bootstrap = 0")
            .map_err(query_err("list guests adopted without a bootstrap"))?;
        let rows = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(query_err("list guests adopted without a bootstrap"))?;
        rows.collect::<Result<_, _>>()
            .map_err(query_err("list guests adopted without a bootstrap"))
    }

    /// The job ids of the `adopt` jobs whose adoption the journal holds: a replay of one is
    /// judged by its claim (run once), not refused for the guest its own run recorded.
    pub fn adopting_jobs(&self) -> Result<BTreeSet<String>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT o.job_id FROM adopted_guests a JOIN operations o ON o.op_id = a.op_id
                 WHERE o.job_id IS NOT NULL",
            )
            .map_err(query_err("list adopting jobs"))?;
        let rows = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(query_err("list adopting jobs"))?;
        rows.collect::<Result<_, _>>()
            .map_err(query_err("list adopting jobs"))
    }
}

journal_calls! {
    /// See [`Store::adopting_jobs`].
    fn adopting_jobs() -> BTreeSet<String> = |s| s.adopting_jobs();
    /// See [`Store::record_adopted`].
    fn record_adopted(
        op_id: OpId,
        vmid: u32,
        guest_id: String,
        adopted: AdoptedAs,
        kind: GuestKind,
    ) -> ()
        = |s| s.record_adopted(op_id, vmid, &guest_id, adopted, kind);
    /// See [`Store::adopted_without_bootstrap`].
    fn adopted_without_bootstrap() -> BTreeSet<String> = |s| s.adopted_without_bootstrap();
}
