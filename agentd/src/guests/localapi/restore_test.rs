//! Restore-test results per guest, as the local API reports them. The restore-test runner
//! records into a [`RestoreTestBoard`]; until it has, the API says plainly that none ran.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ops::journal::TestOutcome;

/// One finished restore test of a guest's backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RestoreTestRecord {
    /// When it finished (RFC 3339).
    #[schema(value_type = String, format = DateTime)]
    pub finished_at: Timestamp,
    /// Whether the restored guest booted and passed its restore check.
    pub passed: bool,
    /// How it ended: `passed`, `failed`, `interrupted`, or `not_checked` (booted, but the
    /// guest installs no restore check at `/etc/bosun/restore-check`, or the agent has no
    /// helper to run it: its data was not verified).
    pub outcome: TestOutcome,
    /// How long it took, in seconds.
    pub duration_s: u64,
    /// The archive that was restored.
    pub archive: String,
    /// What failed, or why the guest was not checked; for a failed check, the first lines
    /// of its output.
    pub detail: Option<String>,
}

/// The answer of `GET /v1/restore-test/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RestoreTestStatus {
    /// `never_run`, `passed`, `failed` (an interrupted test too) or `not_checked` (booted,
    /// its data not verified: never a pass).
    pub state: String,
    /// A sentence for the controller's UI.
    pub message: String,
    /// The last result, if any.
    pub last: Option<RestoreTestRecord>,
}

/// The latest restore-test result of each guest. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct RestoreTestBoard {
    results: Arc<RwLock<HashMap<String, RestoreTestRecord>>>,
}

impl RestoreTestBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a guest's latest result, replacing the previous one.
    pub fn record(&self, guest_id: &str, record: RestoreTestRecord) {
        self.results.write().insert(guest_id.to_owned(), record);
    }

    /// What the API answers for `guest_id`.
    pub fn status(&self, guest_id: &str) -> RestoreTestStatus {
        match self.results.read().get(guest_id) {
            None => RestoreTestStatus {
                state: "never_run".to_owned(),
                message: "no restore test has run for this guest yet".to_owned(),
                last: None,
            },
            Some(r) => {
                let detail = r.detail.as_deref().unwrap_or("no detail recorded");
                let (state, message) = match r.outcome {
                    TestOutcome::Passed => (
                        "passed",
                        format!("the last restore test passed in {} s", r.duration_s),
                    ),
                    TestOutcome::NotChecked => (
                        "not_checked",
                        format!(
                            "the last restore test booted the guest but did not check its data: {detail}"
                        ),
                    ),
                    TestOutcome::Failed | TestOutcome::Interrupted => {
                        ("failed", format!("the last restore test failed: {detail}"))
                    }
                };
                RestoreTestStatus {
                    state: state.to_owned(),
                    message,
                    last: Some(r.clone()),
                }
            }
        }
    }
}
