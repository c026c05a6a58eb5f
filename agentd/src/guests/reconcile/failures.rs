//! The reconciler's failure counts ([`FailureBook`]): consecutive failed starts (after
//! `restart_limit` of them the planner reports the guest `broken` and stops starting it) and
//! consecutive failed DR restores. They are kept in the journal, so neither an agent restart
//! nor a republished desired state (a new generation with the same guest) gives a guest that
//! keeps failing a fresh set of attempts.
//!
//! A count holds under the desired spec it was made under (a digest of the guest's
//! `GuestSpec`): when the operator changes the guest (its size, its power, its golden
//! archive) the count starts again, which is also how a broken guest is given another go
//! (desired `stopped`, then `running`). A successful start or restore clears it.

use std::collections::BTreeMap;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::ops::journal::{FailureKind, JournalHandle};

/// The counts that hold under the current desired state, by guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failures {
    /// Consecutive failed starts.
    pub start: BTreeMap<Uuid, u32>,
    /// Consecutive failed DR restores.
    pub recover: BTreeMap<Uuid, u32>,
}

/// The failure counts, in the journal, with the desired specs they are judged against.
#[derive(Debug)]
pub struct FailureBook {
    journal: JournalHandle,
    /// The digest of each desired guest's spec, as of the last [`FailureBook::read`].
    specs: Mutex<BTreeMap<Uuid, String>>,
    /// The last counts read, given again while the journal cannot be read.
    last: Mutex<Failures>,
    /// Each desired guest's spec as last digested, with its digest: a spec unchanged since
    /// is not written out and hashed again (every pass reads the counts).
    digested: Mutex<BTreeMap<Uuid, (GuestSpec, String)>>,
}

impl FailureBook {
    /// A book kept in `journal`.
    pub fn new(journal: JournalHandle) -> Self {
        Self {
            journal,
            specs: Mutex::default(),
            last: Mutex::default(),
            digested: Mutex::default(),
        }
    }

    /// The digest of each of `guests`' specs ([`spec_digest`]), by guest.
    fn digests(&self, guests: &[GuestSpec]) -> BTreeMap<Uuid, String> {
        let mut digested = self.digested.lock();
        let specs: BTreeMap<Uuid, String> = guests
            .iter()
            .map(|g| {
                let digest = match digested.get(&g.guest_id) {
                    Some((spec, digest)) if spec == g => digest.clone(),
                    _ => {
                        let digest = spec_digest(g);
                        digested.insert(g.guest_id, (g.clone(), digest.clone()));
                        digest
                    }
                };
                (g.guest_id, digest)
            })
            .collect();
        digested.retain(|guest_id, _| specs.contains_key(guest_id));
        specs
    }

    /// The counts that hold for `guests` (the desired ones): those made under each guest's
    /// current spec. Remembers the specs for the counts [`FailureBook::note`] makes.
    pub async fn read(&self, guests: &[GuestSpec]) -> Failures {
        let specs = self.digests(guests);
        let stored = match self.journal.failure_counts().await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read the guests' failure counts; using the last ones read");
                *self.specs.lock() = specs;
                return self.last.lock().clone();
            }
        };
        let mut failures = Failures::default();
        for ((guest, kind), count) in stored {
            let Ok(guest_id) = Uuid::parse_str(&guest) else {
                continue;
            };
            if specs.get(&guest_id) != Some(&count.spec) {
                continue;
            }
            let into = match kind {
                FailureKind::Start => &mut failures.start,
                FailureKind::Recover => &mut failures.recover,
            };
            into.insert(guest_id, count.count);
        }
        *self.specs.lock() = specs;
        *self.last.lock() = failures.clone();
        failures
    }

    /// Records how one start (or DR restore) of `guest_id` went: a success clears its count,
    /// a failure adds one under the guest's current spec.
    pub async fn note(&self, guest_id: Uuid, kind: FailureKind, succeeded: bool) {
        let written = if succeeded {
            self.journal
                .clear_failures(guest_id.to_string(), kind)
                .await
                .map(|_| ())
        } else {
            let spec = self
                .specs
                .lock()
                .get(&guest_id)
                .cloned()
                .unwrap_or_default();
            self.journal
                .count_failure(guest_id.to_string(), kind, spec)
                .await
                .map(|count| tracing::debug!(%guest_id, kind = kind.as_str(), count, "guest failure counted"))
        };
        if let Err(e) = written {
            tracing::warn!(%guest_id, kind = kind.as_str(), error = %error_chain(&e), "could not record a guest's failure count");
        }
        // The cached counts follow, for a pass that cannot read the journal.
        let mut last = self.last.lock();
        let counts = match kind {
            FailureKind::Start => &mut last.start,
            FailureKind::Recover => &mut last.recover,
        };
        if succeeded {
            counts.remove(&guest_id);
        } else {
            *counts.entry(guest_id).or_default() += 1;
        }
    }
}

/// The digest a count is kept under: SHA-256 of the guest's spec as JSON, hex.
pub fn spec_digest(spec: &GuestSpec) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guests::reconcile::plan::tests::spec;
    use bosun_proto::desired::Power;

    #[tokio::test]
    async fn a_spec_is_digested_again_when_it_changes_and_forgotten_when_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let journal = JournalHandle::open(
            &dir.path().join("journal.sqlite"),
            crate::clock::SystemClock::shared(),
        )
        .await
        .unwrap();
        let book = FailureBook::new(journal);
        let (one, two) = (spec(1, Power::Running), spec(2, Power::Running));
        let digests = book.digests(&[one.clone(), two.clone()]);
        assert_eq!(digests[&one.guest_id], spec_digest(&one));
        assert_eq!(digests[&two.guest_id], spec_digest(&two));
        // The operator stops guest one: its digest follows the new spec.
        let stopped = spec(1, Power::Stopped);
        assert_ne!(spec_digest(&stopped), spec_digest(&one));
        let digests = book.digests(std::slice::from_ref(&stopped));
        assert_eq!(digests.len(), 1);
        assert_eq!(digests[&one.guest_id], spec_digest(&stopped));
        // Guest two left desired state, and so did what was kept of it.
        assert_eq!(book.digested.lock().len(), 1);
    }
}
