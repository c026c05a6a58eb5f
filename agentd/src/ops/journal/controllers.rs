//! The controller each guest should run (DESIGN §8, §11): the signed controller digest its
//! golden base was built with (from provisioning on), what the last signed
//! `controller-update` job announced, what last reported healthy, where its rollout stands and
//! how often it was restarted in place since it last reported healthy. Also the proof the gate
//! needs to roll a guest back without a signature: a snapshot the operation itself took.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::records::{OpId, StepState};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms, tuple_rows};

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
    /// The digest the helper last measured of the controller image in this guest (`None`:
    /// not measured since the guest was provisioned or recovered, or no image there).
    pub measured: Option<String>,
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

const COLUMNS: &str = "guest_id, vmid, digest, running_digest, state, op_id, restarts, updated_ms, measured FROM controllers";

type Row = (
    String,
    u32,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    u32,
    i64,
    Option<String>,
);

fn record(row: Row) -> Result<ControllerRecord, JournalError> {
    let (guest_id, vmid, digest, running_digest, state, op_id, restarts, updated_ms, measured) =
        row;
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
        measured,
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

    /// The rollout failed: the previous digest is announced again, in `state`: `rolled_back`
    /// after an unhealthy report; `rolling_out` still after silence, so the heal task leaves
    /// the controller to the rollout, which restarts it once and then sets `broken`.
    pub fn controller_revert(
        &mut self,
        guest_id: &str,
        state: ControllerState,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("revert controller", |tx| {
            tx.execute(
                "UPDATE controllers SET digest = running_digest, state = ?3,
                   restarts = 0, updated_ms = ?2 WHERE guest_id = ?1",
                params![guest_id, now, state.as_str()],
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

    /// Provisioning's `manage_controller` step: the guest operation `op_id` restored onto
    /// `vmid` runs the controller its golden base was built with, so its record is the
    /// controller digest the journal holds for the archive that operation's `restore` step
    /// named (a golden build of a signed recipe); state `running`, as a committed rollout.
    /// An archive without a signed controller digest leaves the guest without a record
    /// (gives `None`). Replay-safe: a record this operation wrote already is left as it is;
    /// one of an earlier guest under the same id is replaced (the new guest runs the base's).
    pub fn controller_provisioned(
        &mut self,
        op_id: OpId,
        guest_id: &str,
        vmid: u32,
    ) -> Result<Option<String>, JournalError> {
        let archive = self
            .steps(op_id)?
            .into_iter()
            .rev()
            .find(|step| {
                step.name == crate::ops::operation::StepName::Restore
                    && step.state == StepState::Ok
                    && step.detail.get("vmid").and_then(serde_json::Value::as_u64)
                        == Some(u64::from(vmid))
            })
            .and_then(|step| {
                step.detail
                    .get("archive")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            });
        let Some(archive) = archive else {
            return Ok(None);
        };
        let now = to_ms(self.now());
        self.write("record provisioned controller", |tx| {
            let digest: Option<String> = tx
                .query_row(
                    "SELECT controller_digest FROM golden_archives
                     WHERE volid = ?1 AND source = 'built' AND controller_digest IS NOT NULL",
                    params![archive],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err("read golden controller digest"))?;
            let Some(digest) = digest else {
                return Ok(None);
            };
            tx.execute(
                "INSERT INTO controllers
                   (guest_id, vmid, digest, running_digest, state, op_id, restarts, updated_ms)
                 VALUES (?1, ?2, ?3, ?3, 'running', ?4, 0, ?5)
                 ON CONFLICT (guest_id) DO UPDATE SET vmid = ?2, digest = ?3,
                   running_digest = ?3, state = 'running', op_id = ?4, restarts = 0,
                   updated_ms = ?5, measured = NULL
                 WHERE controllers.op_id IS NOT ?4",
                params![guest_id, vmid, digest, op_id.to_string(), now],
            )
            .map_err(query_err("record provisioned controller"))?;
            Ok(Some(digest))
        })
    }

    /// A guest restored by DR onto `vmid` keeps its controller record (the backup holds the
    /// controller it ran); only the vmid the heal task restarts it at follows the guest, and
    /// what was measured in the guest before is forgotten.
    pub fn controller_moved(&mut self, guest_id: &str, vmid: u32) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("move controller", |tx| {
            tx.execute(
                "UPDATE controllers SET vmid = ?2, updated_ms = ?3, measured = NULL
                 WHERE guest_id = ?1 AND vmid != ?2",
                params![guest_id, vmid, now],
            )
            .map_err(query_err("move controller"))?;
            Ok(())
        })
    }

    /// The helper measured `digest` of the controller image in `guest_id` (`None`: the guest
    /// holds no image to measure).
    pub fn controller_measured(
        &mut self,
        guest_id: &str,
        digest: Option<&str>,
    ) -> Result<(), JournalError> {
        self.write("record controller measurement", |tx| {
            tx.execute(
                "UPDATE controllers SET measured = ?2 WHERE guest_id = ?1",
                params![guest_id, digest],
            )
            .map_err(query_err("record controller measurement"))?;
            Ok(())
        })
    }

    /// A provisioning rolled back: the record its `manage_controller` step wrote goes with
    /// the guest (a record of another operation stays).
    pub fn controller_forget(&mut self, guest_id: &str, op_id: OpId) -> Result<(), JournalError> {
        self.write("forget controller", |tx| {
            tx.execute(
                "DELETE FROM controllers WHERE guest_id = ?1 AND op_id = ?2",
                params![guest_id, op_id.to_string()],
            )
            .map_err(query_err("forget controller"))?;
            Ok(())
        })
    }

    /// Every guest's controller record.
    pub fn controllers(&self) -> Result<Vec<ControllerRecord>, JournalError> {
        const WHAT: &str = "read controllers";
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} ORDER BY guest_id"))
            .map_err(query_err(WHAT))?;
        let rows: Vec<Row> = tuple_rows(&mut stmt, [], WHAT)?;
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
    fn controller_revert(guest_id: String, state: ControllerState) -> ()
        = |s| s.controller_revert(&guest_id, state);
    /// See [`Store::controller_restarted`].
    fn controller_restarted(guest_id: String) -> u32 = |s| s.controller_restarted(&guest_id);
    /// See [`Store::controller_set_state`].
    fn controller_set_state(guest_id: String, state: ControllerState) -> ()
        = |s| s.controller_set_state(&guest_id, state);
    /// See [`Store::controller_provisioned`].
    fn controller_provisioned(op_id: OpId, guest_id: String, vmid: u32) -> Option<String>
        = |s| s.controller_provisioned(op_id, &guest_id, vmid);
    /// See [`Store::controller_moved`].
    fn controller_moved(guest_id: String, vmid: u32) -> () = |s| s.controller_moved(&guest_id, vmid);
    /// See [`Store::controller_measured`].
    fn controller_measured(guest_id: String, digest: Option<String>) -> ()
        = |s| s.controller_measured(&guest_id, digest.as_deref());
    /// See [`Store::controller_forget`].
    fn controller_forget(guest_id: String, op_id: OpId) -> () = |s| s.controller_forget(&guest_id, op_id);
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
        journal
            .controller_revert("g".into(), ControllerState::RolledBack)
            .await
            .unwrap();
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

    /// A provision operation of guest `g` whose `restore` step put `archive` on `vmid`.
    async fn restored(journal: &JournalHandle, archive: &str, vmid: u32) -> OpId {
        let op = journal
            .begin_operation(NewOperation {
                kind: OpKind::Provision,
                guest_id: Some("g".into()),
                vmid: None,
                job_id: None,
                request_id: None,
            })
            .await
            .unwrap();
        let detail = serde_json::json!({ "vmid": vmid, "archive": archive, "storage": "local" });
        let seq = journal.step_intent(op, "restore", detail).await.unwrap();
        journal
            .step_finished(op, seq, StepOutcome::Ok { warnings: 0 })
            .await
            .unwrap();
        op
    }

    #[tokio::test]
    async fn a_provisioned_guest_runs_its_golden_builds_signed_controller() {
        let (_dir, journal) = journal().await;
        let digest = format!("sha256:{}", "c".repeat(64));
        let built = "local:backup/vzdump-lxc-9000-2026_11_26-05_00_00.tar.zst";
        journal
            .record_golden_build(crate::ops::journal::GoldenBuild {
                volid: built.into(),
                sha256: "d".repeat(64),
                size: 4096,
                version: "2026.11".into(),
                controller_digest: digest.clone(),
                built_at: Timestamp::now(),
                recipe_serial: 0,
            })
            .await
            .unwrap();
        let op = restored(&journal, built, 101).await;
        assert_eq!(
            journal
                .controller_provisioned(op, "g".into(), 102)
                .await
                .unwrap(),
            None,
            "only the vmid the restore step put the archive on"
        );
        assert_eq!(
            journal
                .controller_provisioned(op, "g".into(), 101)
                .await
                .unwrap(),
            Some(digest.clone())
        );
        let record = journal.controllers().await.unwrap().remove(0);
        assert_eq!(
            (
                record.digest.as_deref(),
                record.running_digest.as_deref(),
                record.state,
                record.op_id
            ),
            (
                Some(digest.as_str()),
                Some(digest.as_str()),
                ControllerState::Running,
                Some(op)
            )
        );
        assert_eq!(record.measured, None, "nothing measured in a new guest");
        // Replayed, the step leaves what happened since alone, the measurement too.
        journal.controller_restarted("g".into()).await.unwrap();
        journal
            .controller_measured("g".into(), Some(digest.clone()))
            .await
            .unwrap();
        journal
            .controller_provisioned(op, "g".into(), 101)
            .await
            .unwrap();
        let record = journal.controllers().await.unwrap().remove(0);
        assert_eq!(
            (record.restarts, record.measured.as_deref()),
            (1, Some(digest.as_str()))
        );
        // Measured again, the last one counts; replayed on the same vmid, a move keeps it.
        journal
            .controller_measured("g".into(), Some("sha256:other".into()))
            .await
            .unwrap();
        journal.controller_moved("g".into(), 101).await.unwrap();
        assert_eq!(
            journal.controllers().await.unwrap()[0].measured.as_deref(),
            Some("sha256:other")
        );
        // A DR restore moves it and forgets what was measured in the guest it replaced; a
        // rollback of another operation leaves it.
        journal.controller_moved("g".into(), 105).await.unwrap();
        let record = journal.controllers().await.unwrap().remove(0);
        assert_eq!((record.vmid, record.measured), (105, None));
        journal
            .controller_forget("g".into(), OpId::new())
            .await
            .unwrap();
        assert_eq!(journal.controllers().await.unwrap().len(), 1);
        journal.controller_forget("g".into(), op).await.unwrap();
        assert!(journal.controllers().await.unwrap().is_empty());
        // An archive no golden build names (a signed archive) leaves the guest unmanaged.
        let other = restored(&journal, "local:backup/vzdump-lxc-1-x.tar.zst", 103).await;
        assert_eq!(
            journal
                .controller_provisioned(other, "g".into(), 103)
                .await
                .unwrap(),
            None
        );
        assert!(journal.controllers().await.unwrap().is_empty());
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
