//! The golden version being built right now, shared between the builder that sets it
//! ([`crate::guests::golden_build`]) and the check that reads it ([`super::GoldenCheck`]):
//! a guest naming that version waits for the build instead of being reported refused.

use std::sync::Arc;

use parking_lot::Mutex;

/// The golden version being built right now, if any.
#[derive(Debug, Clone, Default)]
pub struct PendingBuild(Arc<Mutex<Option<String>>>);

impl PendingBuild {
    /// Whether `version` is being built.
    pub fn is(&self, version: &str) -> bool {
        self.0.lock().as_deref() == Some(version)
    }

    /// Marks `version` as being built (`None`: nothing is).
    pub(crate) fn set(&self, version: Option<String>) {
        *self.0.lock() = version;
    }
}
