//! The restore check in a scratch VM (DESIGN §8b): the same contract as a container's
//! (`check.rs`: [`RESTORE_CHECK_PROBE`], then [`RESTORE_CHECK_PATH`], judged by the same
//! `check::judge`), run through the guest agent's `exec` and `exec-status` instead of the
//! helper's `pct exec` (decision 0113: the token's `VM.GuestAgent.Unrestricted` on Bosun's pool).
//!
//! The guest agent runs code inside a VM, so every `exec` goes through a [`ScratchVm`], which
//! only [`ScratchVm::admit`] makes, right before each call: the vmid must be the journaled
//! scratch guest of this running restore test (never the guest's own vmid, never a VM the
//! journal does not hold as this test's scratch), and its config must carry the test's tag
//! with every `netN` down. Waiting is bounded by the check's limit (`exec-status` polled), and
//! what the agent keeps of the output by [`RESTORE_CHECK_MAX_BYTES`] before
//! [`restore_check_lines`]. A check still running at its limit is left to die with the
//! scratch VM, which the tester destroys next.

use std::time::Duration;

use bosun_proto::helper::{
    Output, RESTORE_CHECK_MAX_BYTES, RESTORE_CHECK_PATH, RESTORE_CHECK_PROBE, Vmid as HelperVmid,
    restore_check_lines,
};
use bosun_pve::{AgentExec, ExecStatus, PveError, PveQemu, VmConfig, Vmid};
use serde_json::json;

use super::check::{self, Verdict};
use crate::guests::reconcile::lookup::has_tag;
use crate::ops::journal::{JournalError, JournalHandle, OpId, OpStatus, identity_tag};
use crate::ops::operation::{OpJournal, OpKind, StepError, StepName};

/// Between two `exec-status` reads (and two pings of a booting scratch VM's agent).
const POLL: Duration = Duration::from_millis(250);

/// How long the probe (`test -x`) may take.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

/// Why the agent refuses to run anything in a VM through its guest agent.
#[derive(Debug, thiserror::Error)]
pub enum ExecRefused {
    /// The journal holds nothing at the vmid.
    #[error("refused: vm {vmid} is not in the agent's journal")]
    NotJournaled {
        /// The VM.
        vmid: u32,
    },
    /// The journal holds a guest there, not a scratch guest.
    #[error("refused: vm {vmid} is not a restore test's scratch guest")]
    NotScratch {
        /// The VM.
        vmid: u32,
    },
    /// The scratch guest of another operation.
    #[error(
        "refused: vm {vmid} is the scratch guest of operation {owner}, not of restore test {op_id}"
    )]
    OtherOperation {
        /// The VM.
        vmid: u32,
        /// The operation that recorded it.
        owner: OpId,
        /// The restore test asking.
        op_id: OpId,
    },
    /// The asking operation is not a restore test still running.
    #[error("refused: operation {op_id} is not a running restore test")]
    NotRunningTest {
        /// The operation.
        op_id: OpId,
    },
    /// The VM's config names a link up, or lacks the test's tag.
    #[error("refused: vm {vmid} is not isolated as a scratch guest: {why}")]
    NotIsolated {
        /// The VM.
        vmid: u32,
        /// What is wrong.
        why: String,
    },
    /// The journal could not be read.
    #[error("the journal could not be read before an exec in vm {vmid}")]
    Journal {
        /// The VM.
        vmid: u32,
        /// The cause.
        #[source]
        source: JournalError,
    },
    /// The VM's config could not be read.
    #[error("the config of vm {vmid} could not be read before an exec")]
    Config {
        /// The VM.
        vmid: u32,
        /// The cause.
        #[source]
        source: PveError,
    },
}

/// Why a scratch VM's check could not be run to a verdict.
#[derive(Debug, thiserror::Error)]
pub enum VmCheckError {
    /// The exec was refused before any call.
    #[error(transparent)]
    Refused(#[from] ExecRefused),
    /// The guest agent never answered.
    #[error("the guest agent in scratch vm {vmid} did not answer within {seconds} s")]
    AgentSilent {
        /// The VM.
        vmid: u32,
        /// How long it was waited for.
        seconds: u64,
        /// Its last answer.
        #[source]
        source: PveError,
    },
    /// An `exec` or `exec-status` failed.
    #[error("the guest agent in scratch vm {vmid} failed to run {program}")]
    Exec {
        /// The VM.
        vmid: u32,
        /// The program.
        program: &'static str,
        /// The cause.
        #[source]
        source: PveError,
    },
    /// The probe answered neither "installed" nor "not installed".
    #[error("the restore check's probe in scratch vm {vmid} answered {answer}")]
    Probe {
        /// The VM.
        vmid: u32,
        /// What it answered.
        answer: String,
    },
    /// The vmid has no helper form (never for a Proxmox vmid).
    #[error("vm {vmid} cannot be named in a restore check's answer")]
    Vmid {
        /// The VM.
        vmid: u32,
    },
}

/// A VM the agent may run programs in: the journaled, isolated scratch guest of one running
/// restore test. Only [`ScratchVm::admit`] makes one.
#[derive(Debug)]
pub struct ScratchVm {
    vmid: Vmid,
}

impl ScratchVm {
    /// Admits `vmid` for restore test `op_id` (see the module docs), or says why not.
    pub async fn admit<Q: PveQemu>(
        pve: &Q,
        journal: &JournalHandle,
        op_id: OpId,
        vmid: Vmid,
    ) -> Result<Self, ExecRefused> {
        admit_journal(journal, op_id, vmid).await?;
        let config = pve
            .vm_config(vmid)
            .await
            .map_err(|source| ExecRefused::Config {
                vmid: vmid.get(),
                source,
            })?;
        isolated(&config, op_id).map_err(|why| ExecRefused::NotIsolated {
            vmid: vmid.get(),
            why,
        })?;
        Ok(Self { vmid })
    }

    /// Starts `argv` in the admitted VM; gives its guest pid.
    async fn exec<Q: PveQemu>(
        &self,
        pve: &Q,
        argv: &[&str],
        program: &'static str,
    ) -> Result<u64, VmCheckError> {
        let exec = AgentExec {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            input: None,
        };
        pve.agent_exec(self.vmid, &exec)
            .await
            .map(|started| started.pid)
            .map_err(|source| VmCheckError::Exec {
                vmid: self.vmid.get(),
                program,
                source,
            })
    }

    /// Reads `pid`'s status until it exits or `limit` passes (`None`: still running).
    async fn wait<Q: PveQemu>(
        &self,
        pve: &Q,
        pid: u64,
        limit: Duration,
        program: &'static str,
    ) -> Result<Option<ExecStatus>, VmCheckError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let status = pve
                .agent_exec_status(self.vmid, pid)
                .await
                .map_err(|source| VmCheckError::Exec {
                    vmid: self.vmid.get(),
                    program,
                    source,
                })?;
            if status.exited {
                return Ok(Some(status));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL.min(limit)).await;
        }
    }
}

/// The journal's half of [`ScratchVm::admit`]: `vmid` is recorded scratch by `op_id`, a
/// restore test still running.
pub async fn admit_journal(
    journal: &JournalHandle,
    op_id: OpId,
    vmid: Vmid,
) -> Result<(), ExecRefused> {
    let failed = |source| ExecRefused::Journal {
        vmid: vmid.get(),
        source,
    };
    let provenance = journal
        .provenance(vmid.get())
        .await
        .map_err(failed)?
        .ok_or(ExecRefused::NotJournaled { vmid: vmid.get() })?;
    if !provenance.is_scratch() {
        return Err(ExecRefused::NotScratch { vmid: vmid.get() });
    }
    if provenance.created_by_op() != op_id {
        return Err(ExecRefused::OtherOperation {
            vmid: vmid.get(),
            owner: provenance.created_by_op(),
            op_id,
        });
    }
    let operation = journal.operation(op_id).await.map_err(failed)?;
    let running_test = operation
        .is_some_and(|o| o.op_kind() == Some(OpKind::RestoreTest) && o.status == OpStatus::Running);
    if !running_test {
        return Err(ExecRefused::NotRunningTest { op_id });
    }
    Ok(())
}

/// Whether `config` is a scratch VM of `op_id` cut off from every network: the test's tag,
/// and every `netN` with `link_down=1`; `Err` says what is not.
pub fn isolated(config: &VmConfig, op_id: OpId) -> Result<(), String> {
    if !has_tag(config.get_str("tags").as_deref(), &identity_tag(op_id)) {
        return Err("it does not carry the restore test's tag".into());
    }
    let up: Vec<&str> = config
        .values
        .iter()
        .filter(|(key, _)| net_index(key).is_some())
        .filter(|(_, value)| !value.as_str().is_some_and(link_is_down))
        .map(|(key, _)| key.as_str())
        .collect();
    if up.is_empty() {
        Ok(())
    } else {
        Err(format!("link up on {}", up.join(", ")))
    }
}

/// The index of a `netN` key.
pub(super) fn net_index(key: &str) -> Option<u8> {
    key.strip_prefix("net")
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// Whether a `netN` property string holds `link_down=1`.
pub(super) fn link_is_down(value: &str) -> bool {
    value.split(',').any(|p| {
        matches!(
            p.split_once('='),
            Some(("link_down", "1" | "on" | "yes" | "true"))
        )
    })
}

/// `agent_ping` until the scratch VM's guest agent answers, for at most `wait`.
pub(super) async fn await_agent<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    vmid: Vmid,
    wait: Duration,
) -> Result<(), StepError> {
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    op.local_typed(
        StepName::AgentPing,
        json!({ "vmid": vmid.get(), "wait_ms": millis }),
        async {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                match pve.agent_ping(vmid).await {
                    Ok(()) => return Ok(()),
                    Err(source) if tokio::time::Instant::now() >= deadline => {
                        return Err(VmCheckError::AgentSilent {
                            vmid: vmid.get(),
                            seconds: wait.as_secs(),
                            source,
                        });
                    }
                    Err(_) => tokio::time::sleep(POLL.min(wait)).await,
                }
            }
        },
    )
    .await
}

/// Runs the guest's restore check in scratch VM `vmid` for at most `limit`, as the journaled
/// step `restore_check`, and judges it as a container's.
pub(super) async fn run<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    vmid: Vmid,
    limit: Duration,
) -> Result<Verdict, StepError> {
    let seconds = limit.as_secs().max(1);
    let answer = op
        .local_typed(
            StepName::RestoreCheck,
            json!({ "vmid": vmid.get(), "path": RESTORE_CHECK_PATH, "timeout_secs": seconds, "via": "guest_agent" }),
            checked(pve, op, vmid, limit),
        )
        .await?;
    Ok(check::judge(&answer, seconds))
}

/// The probe, then the check, each admitted right before its `exec`; the answer in the
/// helper's form, so both kinds of guest are judged alike.
async fn checked<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    vmid: Vmid,
    limit: Duration,
) -> Result<Output, VmCheckError> {
    let named = HelperVmid::new(u64::from(vmid.get()))
        .map_err(|_| VmCheckError::Vmid { vmid: vmid.get() })?;
    let scratch = ScratchVm::admit(pve, op.journal(), op.op_id(), vmid).await?;
    let pid = scratch.exec(pve, &RESTORE_CHECK_PROBE, "test").await?;
    let probe = scratch.wait(pve, pid, PROBE_LIMIT, "test").await?;
    let installed = match probe.as_ref().map(|s| s.exitcode) {
        Some(Some(0)) => true,
        Some(Some(1)) => false,
        other => {
            return Err(VmCheckError::Probe {
                vmid: vmid.get(),
                answer: format!("{other:?}"),
            });
        }
    };
    if !installed {
        return Ok(Output::RestoreChecked {
            vmid: named,
            installed,
            exit_code: None,
            timed_out: false,
            output: Vec::new(),
        });
    }
    let scratch = ScratchVm::admit(pve, op.journal(), op.op_id(), vmid).await?;
    let pid = scratch
        .exec(pve, &[RESTORE_CHECK_PATH], "the restore check")
        .await?;
    let status = scratch.wait(pve, pid, limit, "the restore check").await?;
    tracing::info!(
        vmid = vmid.get(),
        exited = status.is_some(),
        "restore check ran in a scratch vm"
    );
    let (exit_code, output) = match &status {
        Some(s) => (
            s.exitcode.and_then(|c| i32::try_from(c).ok()),
            kept_output(s),
        ),
        None => (None, Vec::new()),
    };
    Ok(Output::RestoreChecked {
        vmid: named,
        installed,
        // A signal ends it without a code.
        exit_code: exit_code.filter(|_| status.as_ref().is_some_and(|s| s.signal.is_none())),
        timed_out: status.is_none(),
        output,
    })
}

/// The first lines of what the check wrote, standard output then standard error, at most
/// [`RESTORE_CHECK_MAX_BYTES`] of them read.
pub(super) fn kept_output(status: &ExecStatus) -> Vec<String> {
    let mut text = String::new();
    for stream in [&status.out_data, &status.err_data].into_iter().flatten() {
        let room = RESTORE_CHECK_MAX_BYTES.saturating_sub(text.len());
        let mut end = stream.len().min(room);
        while !stream.is_char_boundary(end) {
            end -= 1;
        }
        text.push_str(&stream[..end]);
    }
    restore_check_lines(&text)
}

#[cfg(test)]
#[path = "vm_check_tests.rs"]
mod tests;
