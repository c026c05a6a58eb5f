//! The controller each guest should run (DESIGN §11): what the last signed
//! `controller-update` job announced, what last reported healthy, where its rollout stands and
//! how often it was restarted in place since it last reported healthy. Also the proof the gate
//! needs to roll a guest back without a signature: a snapshot the operation itself took.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::{OpId, StepState};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// Where a guest's controller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerState {
    /// A rollout announced `digest` and waits for its health report.
    RollingOut,
    /// `running_digest` reported healthy (and is healed in place when it stops reporting).
    Running,
    /// The controller reported the last rollout's digest unhealthy: the guest was rolled back
    /// to the snapshot taken before it, and `digest` is the previous one again.
    RolledBack,
    /// The controller stayed silent through every in-place restart, or through the last
    /// rollout's window (then `digest` is the previous one again, the controller was restarted
    /// in place and the guest was *not* rolled back); nothing more is tried until it reports
    /// healthy again or a new rollout is signed.
    Broken,
}

impl ControllerState {
    /// The stored (and reported) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RollingOut => "rolling_out",
            Self::Running => "running",
            Self::RolledBack => "rolled_back",
            Self::Broken => "broken",
        }
    }

    fn parse(text: &str) -> Result<Self, JournalError> {
        Ok(match text {
            "rolling_out" => Self::RollingOut,
            "running" => Self::Running,
            "rolled_back" => Self::RolledBack,
            "broken" => Self::Broken,
            other => {
                return Err(JournalError::Corrupt {
                    table: "controllers",
                    column: "state",
                    value: other.chars().take(80).collect(),
                });
            }
        })
    }
}

/// One guest's controller record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRecord {
    /// The hub's guest id.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
    /// The digest the guest is told to run (`None`: no signed rollout ever reached it).
    pub digest: Option<String>,
    /// The last digest that reported healthy.
    pub running_digest: Option<String>,
    /// Where it stands.
    pub state: ControllerState,
    /// The rollout operation that last changed `digest`.
    pub op_id: Option<OpId>,
    /// In-place restarts since the last healthy report.
    pub restarts: u32,
    /// When the record last changed.
    pub updated_at: Timestamp,
}

/// A snapshot the journal shows operation `taken_by` took of `vmid` (its `snapshot` step ended
/// well and named it). Only the journal builds one; the gate lets that same operation roll the
/// guest back to it without a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnSnapshot {
    pub(super) taken_by: OpId,
    pub(super) vmid: u32,
    pub(super) name: String,
}

impl OwnSnapshot {
    /// A proof made up for the gate's table tests.
    #[cfg(test)]
    pub(crate) fn for_tests(taken_by: OpId, vmid: u32, name: &str) -> Self {
        Self {
            taken_by,
            vmid,
            name: name.to_owned(),
        }
    }

    /// The operation that took it.
    pub fn taken_by(&self) -> OpId {
        self.taken_by
    }

    /// The guest.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    /// The snapshot's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

const COLUMNS: &str =
    "guest_id, vmid, digest, running_digest, state, op_id, restarts, updated_ms FROM controllers";

type Row = (
    String,
    u32,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    u32,
    i64,
);

fn record(row: Row) -> Result<ControllerRecord, JournalError> {
    let (guest_id, vmid, digest, running_digest, state, op_id, restarts, updated_ms) = row;
    let op_id = match op_id {
        Some(text) => Some(text.parse().map_err(|_| JournalError::Corrupt {
            table: "controllers",
            column: "op_id",
            value: text.chars().take(80).collect(),
        })?),
        None => None,
    };
    Ok(ControllerRecord {
        guest_id,
        vmid,
        digest,
        running_digest,
        state: ControllerState::parse(&state)?,
        op_id,
        restarts,
        updated_at: from_ms(updated_ms, "controllers", "updated_ms")?,
    })
}

impl Store {
    /// A rollout tells `guest_id` to run `digest`: state `rolling_out`.
    pub fn controller_announce(
        &mut self,
        guest_id: &str,
        vmid: u32,
        digest: &str,
        op_id: OpId,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("announce controller", |tx| {
            tx.execute(
                "INSERT INTO controllers (guest_id, vmid, digest, state, op_id, restarts, updated_ms)
                 VALUES (?1, ?2, ?3, 'rolling_out', ?4, 0, ?5)
                 ON CONFLICT (guest_id) DO UPDATE SET vmid = ?2, digest = ?3,
                   state = 'rolling_out', op_id = ?4, restarts = 0, updated_ms = ?5",
                params![guest_id, vmid, digest, op_id.to_string(), now],
            )
            .map_err(query_err("announce controller"))?;
            Ok(())
        })
    }

    /// The announced digest reported healthy: it is the running one (state `running`).
    pub fn controller_commit(&mut self, guest_id: &str, digest: &str) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("commit controller", |tx| {
            tx.execute(
                "UPDATE controllers SET running_digest = ?2, digest = ?2, state = 'running',
                   restarts = 0, updated_ms = ?3 WHERE guest_id = ?1",
                params![guest_id, digest, now],
            )
            .map_err(query_err("commit controller"))?;
            Ok(())
        })
    }

    /// The rollout failed: the previous digest is announced again (state `rolled_back`; a
    /// rollout whose controller stayed silent then sets `broken`).
    pub fn controller_revert(&mut self, guest_id: &str) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("revert controller", |tx| {
            tx.execute(
                "UPDATE controllers SET digest = running_digest, state = 'rolled_back',
                   restarts = 0, updated_ms = ?2 WHERE guest_id = ?1",
                params![guest_id, now],
            )
            .map_err(query_err("revert controller"))?;
            Ok(())
        })
    }

    /// Counts one in-place restart; gives the count since the last healthy report.
    pub fn controller_restarted(&mut self, guest_id: &str) -> Result<u32, JournalError> {
        let now = to_ms(self.now());
        self.write("count controller restart", |tx| {
            tx.query_row(
                "UPDATE controllers SET restarts = restarts + 1, updated_ms = ?2
                 WHERE guest_id = ?1 RETURNING restarts",
                params![guest_id, now],
                |row| row.get(0),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(query_err("count controller restart"))
        })
    }

    /// Sets the state of a committed controller: `broken` after the last restart, `running`
    /// again (restarts cleared) once it reports healthy.
    pub fn controller_set_state(
        &mut self,
        guest_id: &str,
        state: ControllerState,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("set controller state", |tx| {
            tx.execute(
                "UPDATE controllers SET state = ?2,
                   restarts = CASE WHEN ?2 = 'running' THEN 0 ELSE restarts END,
                   updated_ms = ?3 WHERE guest_id = ?1",
                params![guest_id, state.as_str(), now],
            )
            .map_err(query_err("set controller state"))?;
            Ok(())
        })
    }

    /// Every guest's controller record.
    pub fn controllers(&self) -> Result<Vec<ControllerRecord>, JournalError> {
        const WHAT: &str = "read controllers";
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLUMNS} ORDER BY guest_id"))
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<Row>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter().map(record).collect()
    }

    /// The snapshot `name` of `vmid`, if operation `op_id` is about that guest and took it
    /// (a `snapshot` step of its own that ended well naming both).
    pub fn own_snapshot(
        &self,
        op_id: OpId,
        vmid: u32,
        name: &str,
    ) -> Result<Option<OwnSnapshot>, JournalError> {
        let Some(operation) = self.operation(op_id)? else {
            return Ok(None);
        };
        if operation.vmid != Some(vmid) {
            return Ok(None);
        }
        let took = self.steps(op_id)?.iter().any(|step| {
            step.name == crate::ops::operation::StepName::Snapshot
                && step.state == StepState::Ok
                && step.detail.get("vmid").and_then(serde_json::Value::as_u64)
                    == Some(u64::from(vmid))
                && step
                    .detail
                    .get("snapshot")
                    .and_then(serde_json::Value::as_str)
                    == Some(name)
        });
        Ok(took.then(|| OwnSnapshot {
            taken_by: op_id,
            vmid,
            name: name.to_owned(),
        }))
    }
}

journal_calls! {
    /// See [`Store::controller_announce`].
    fn controller_announce(guest_id: String, vmid: u32, digest: String, op_id: OpId) -> ()
        = |s| s.controller_announce(&guest_id, vmid, &digest, op_id);
    /// See [`Store::controller_commit`].
    fn controller_commit(guest_id: String, digest: String) -> ()
        = |s| s.controller_commit(&guest_id, &digest);
    /// See [`Store::controller_revert`].
    fn controller_revert(guest_id: String) -> () = |s| s.controller_revert(&guest_id);
    /// See [`Store::controller_restarted`].
    fn controller_restarted(guest_id: String) -> u32 = |s| s.controller_restarted(&guest_id);
    /// See [`Store::controller_set_state`].
    fn controller_set_state(guest_id: String, state: ControllerState) -> ()
        = |s| s.controller_set_state(&guest_id, state);
    /// See [`Store::controllers`].
    fn controllers() -> Vec<ControllerRecord> = |s| s.controllers();
    /// See [`Store::own_snapshot`].
    fn own_snapshot(op_id: OpId, vmid: u32, name: String) -> Option<OwnSnapshot>
        = |s| s.own_snapshot(op_id, vmid, &name);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::ops::journal::{NewOperation, StepOutcome};
    use crate::ops::op_kind::OpKind;

    async fn journal() -> (tempfile::TempDir, JournalHandle) {
        let dir = tempfile::tempdir().unwrap();
        let journal = JournalHandle::open(&dir.path().join("j.sqlite"), SystemClock::shared())
            .await
            .unwrap();
        (dir, journal)
    }

    #[tokio::test]
    async fn a_rollout_moves_the_record_through_its_states() {
        let (_dir, journal) = journal().await;
        let op = OpId::new();
        let (a, b) = (
            format!("sha256:{}", "a".repeat(64)),
            format!("sha256:{}", "b".repeat(64)),
        );
        journal
            .controller_announce("g".into(), 101, a.clone(), op)
            .await
            .unwrap();
        journal
            .controller_commit("g".into(), a.clone())
            .await
            .unwrap();
        journal
            .controller_announce("g".into(), 101, b.clone(), OpId::new())
            .await
            .unwrap();
        let rolling = journal.controllers().await.unwrap().remove(0);
        assert_eq!(rolling.state, ControllerState::RollingOut);
        assert_eq!(rolling.digest.as_deref(), Some(b.as_str()));
        assert_eq!(rolling.running_digest.as_deref(), Some(a.as_str()));
        journal.controller_revert("g".into()).await.unwrap();
        let back = journal.controllers().await.unwrap().remove(0);
        assert_eq!(back.state, ControllerState::RolledBack);
        assert_eq!(
            back.digest.as_deref(),
            Some(a.as_str()),
            "the previous digest again"
        );
        assert_eq!(journal.controller_restarted("g".into()).await.unwrap(), 1);
        assert_eq!(journal.controller_restarted("g".into()).await.unwrap(), 2);
        journal
            .controller_set_state("g".into(), ControllerState::Running)
            .await
            .unwrap();
        assert_eq!(journal.controllers().await.unwrap()[0].restarts, 0);
        assert_eq!(
            journal.controller_restarted("nobody".into()).await.unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn only_a_snapshot_the_operation_took_of_its_guest_is_its_own() {
        let (_dir, journal) = journal().await;
        let new = |vmid| NewOperation {
            kind: OpKind::ControllerUpdateJob,
            guest_id: Some("g".into()),
            vmid: Some(vmid),
            job_id: None,
            request_id: None,
        };
        let op = journal.begin_operation(new(101)).await.unwrap();
        let detail = serde_json::json!({ "vmid": 101, "snapshot": "bosun-ctl-1" });
        let seq = journal
            .step_intent(op, "snapshot", detail.clone())
            .await
            .unwrap();
        assert_eq!(
            journal
                .own_snapshot(op, 101, "bosun-ctl-1".into())
                .await
                .unwrap(),
            None,
            "an intent is no snapshot yet"
        );
        journal
            .step_finished(op, seq, StepOutcome::Ok { warnings: 0 })
            .await
            .unwrap();
        let own = journal
            .own_snapshot(op, 101, "bosun-ctl-1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (own.taken_by(), own.vmid(), own.name()),
            (op, 101, "bosun-ctl-1")
        );
        assert!(
            journal
                .own_snapshot(op, 101, "customer-snap".into())
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            journal
                .own_snapshot(op, 102, "bosun-ctl-1".into())
                .await
                .unwrap()
                .is_none()
        );
        let other = journal.begin_operation(new(101)).await.unwrap();
        assert!(
            journal
                .own_snapshot(other, 101, "bosun-ctl-1".into())
                .await
                .unwrap()
                .is_none()
        );
    }
}
