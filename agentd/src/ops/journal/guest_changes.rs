//! The journal calls that change which guest holds which vmid (a guest created or recovered
//! at a vmid, retired by a decommission, forgotten after a failed creation), and the signal
//! they raise: whoever keeps something per guest and vmid (the break-glass consents,
//! decision 0080) follows it to drop what belonged to a guest that left its vmid.

use bosun_proto::desired::GuestKind;
use tokio::sync::watch;

use super::error::JournalError;
use super::handle::JournalHandle;
use super::records::OpId;

impl JournalHandle {
    /// Changes whenever a call through this handle (or a clone) changed which guest holds
    /// which vmid.
    pub fn guests_changed(&self) -> watch::Receiver<u64> {
        self.guests.subscribe()
    }

    fn guests_touched(&self) {
        self.guests.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// See [`Store::record_created`](super::Store::record_created).
    pub async fn record_created(
        &self,
        op_id: OpId,
        vmid: u32,
        guest_id: Option<String>,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_created(op_id, vmid, guest_id.as_deref(), kind))
            .await?;
        self.guests_touched();
        Ok(())
    }

    /// See [`Store::record_recovered`](super::Store::record_recovered).
    pub async fn record_recovered(
        &self,
        op_id: OpId,
        guest_id: String,
        lost_vmid: u32,
        vmid: u32,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_recovered(op_id, &guest_id, lost_vmid, vmid, kind))
            .await?;
        self.guests_touched();
        Ok(())
    }

    /// See [`Store::retire_guest`](super::Store::retire_guest).
    pub async fn retire_guest(&self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        let retired = self.call(move |s| s.retire_guest(op_id, vmid)).await?;
        self.guests_touched();
        Ok(retired)
    }

    /// See [`Store::forget_guest`](super::Store::forget_guest).
    pub async fn forget_guest(&self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        let forgotten = self.call(move |s| s.forget_guest(op_id, vmid)).await?;
        self.guests_touched();
        Ok(forgotten)
    }
}
