//! Per-host change signals that wake held long-polls.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

/// One `watch` channel per host; a send means "something for this host changed".
#[derive(Debug, Default)]
pub struct HostSignals {
    senders: Mutex<HashMap<Uuid, watch::Sender<u64>>>,
}

impl HostSignals {
    /// Subscribes to changes for `host_id`. Subscribe **before** reading the state the wait
    /// depends on, so a change in between is not missed.
    pub fn subscribe(&self, host_id: Uuid) -> watch::Receiver<u64> {
        let mut senders = self.senders.lock();
        senders
            .entry(host_id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes every poll held for `host_id`.
    pub fn notify(&self, host_id: Uuid) {
        let senders = self.senders.lock();
        if let Some(sender) = senders.get(&host_id) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every held poll (a wake-up from another replica may have been missed).
    pub fn notify_all(&self) {
        let senders = self.senders.lock();
        for sender in senders.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
