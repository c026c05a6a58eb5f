//! The start-up side of restore tests: a test the agent was stopped in the middle of has
//! its open step closed (its task looked up and followed), its scratch guest destroyed as
//! compensation of the test's own operation (a scratch VM as a VM: stopped, destroyed with
//! `purge`, only while it carries the test's tag), and is recorded `interrupted`. A golden build's
//! boot test (`golden_verify`) is cleaned up the same way and closed failed: its build stays
//! unverified.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{PveQemu, Vmid};
use serde_json::Value;

use crate::guests::reconcile::compensate::compensate_with_retries;
use crate::guests::reconcile::provision::compensate_vm_with_retries;
use crate::guests::reconcile::replay::wait_unlocked;
use crate::ops::journal::{JournalHandle, RestoreTestResult, TestOutcome, UnfinishedOperation};
use crate::ops::operation::OpJournal;
use crate::ops::operation::OpKind;

/// Destroys the scratch guests of restore tests a stop interrupted and records each test
/// `interrupted`. Gives how many were closed.
pub async fn close_interrupted<P: PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    unfinished: Vec<UnfinishedOperation>,
) -> usize {
    let mut closed = 0;
    for unfinished in unfinished {
        let kind = unfinished
            .operation
            .op_kind()
            .unwrap_or(OpKind::RestoreTest);
        let op = OpJournal::resume(journal, unfinished.operation.op_id, kind);
        crate::ops::operation::replay::close_open_step(pve, &op, &unfinished).await;
        let scratch: Vec<u32> = match journal.all_provenance().await {
            Ok(all) => all
                .into_iter()
                .filter(|p| p.created_by_op() == op.op_id())
                .map(|p| p.vmid())
                .collect(),
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "could not read scratch guests; left for the next start");
                continue;
            }
        };
        let chosen = journal
            .steps(op.op_id())
            .await
            .ok()
            .and_then(|steps| steps.into_iter().find(|s| s.name == "choose_archive"))
            .map(|s| s.detail);
        let field = |name: &str| {
            chosen
                .as_ref()
                .and_then(|d| d.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        // A VM's test journals its kind with its archive; a test without one (a container's,
        // or one written before VMs were tested) restored a container.
        let vm = field("kind").as_deref() == Some(GuestKind::Qemu.as_str());
        let mut clean = true;
        for vmid in scratch {
            let Ok(vmid) = Vmid::new(vmid) else { continue };
            let destroyed = if vm {
                compensate_vm_with_retries(pve, &op, Some(vmid)).await
            } else {
                if let Err(e) = wait_unlocked(pve, vmid).await {
                    tracing::warn!(vmid = vmid.get(), error = %e, "the scratch guest stays locked; destroying it anyway");
                }
                compensate_with_retries(pve, &op, Some(vmid)).await
            };
            if let Err(e) = destroyed {
                tracing::error!(vmid = vmid.get(), error = %error_chain(&e), "an interrupted restore test's scratch guest could not be destroyed; left for the next start");
                clean = false;
            }
        }
        if !clean {
            continue;
        }
        if kind == OpKind::GoldenVerify {
            // A golden build's boot test: the build stays unverified and is tried again.
            let closed_failed = journal
                .finish_operation(
                    op.op_id(),
                    crate::ops::journal::OpStatus::Failed,
                    Some("interrupted: the agent stopped during the golden boot test".into()),
                )
                .await;
            match closed_failed {
                Ok(()) => closed += 1,
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "could not close an interrupted golden boot test")
                }
            }
            continue;
        }
        let result = RestoreTestResult {
            guest_id: unfinished.operation.guest_id.clone().unwrap_or_default(),
            storage: field("storage").unwrap_or_default(),
            archive: field("archive"),
            outcome: TestOutcome::Interrupted,
            duration_ms: 0,
            detail: Some("the agent stopped during the test; its scratch guest was destroyed at the next start".into()),
        };
        match journal.finish_restore_test(op.op_id(), result).await {
            Ok(()) => closed += 1,
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "could not record an interrupted restore test")
            }
        }
    }
    closed
}
