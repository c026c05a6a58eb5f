//! Signed documents refused before, remembered by the digest of their bytes and signature, so
//! a hub that sends the same refused document with every poll gets it audited once, not once a
//! poll. The memory is bounded: past [`MAX_REMEMBERED`] it starts over (a document refused
//! again is audited again, never accepted).

use std::collections::HashSet;

use bosun_proto::signed::SignedDocument;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// Refused documents remembered.
pub const MAX_REMEMBERED: usize = 256;

/// The digests of refused documents.
#[derive(Debug, Default)]
pub struct RefusedDocuments {
    digests: Mutex<HashSet<[u8; 32]>>,
}

impl RefusedDocuments {
    /// What a document is remembered by: its bytes and its signature.
    pub fn digest(signed: &SignedDocument) -> [u8; 32] {
        Sha256::new()
            .chain_update(signed.document.as_bytes())
            .chain_update([0])
            .chain_update(signed.signature.as_bytes())
            .finalize()
            .into()
    }

    /// Whether the document with `digest` was refused before.
    pub fn contains(&self, digest: &[u8; 32]) -> bool {
        self.digests.lock().contains(digest)
    }

    /// Remembers a refused document.
    pub fn remember(&self, digest: [u8; 32]) {
        let mut digests = self.digests.lock();
        if digests.len() >= MAX_REMEMBERED {
            digests.clear();
        }
        digests.insert(digest);
    }
}
