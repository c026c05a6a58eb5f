//! Why an `agent-update` job did not reach its trial ([`AgentUpdateError`]); the failure a
//! job error ([`super::error::JobError`]) carries and the update's audit row names.

use std::path::PathBuf;

/// Why an `agent-update` job did not reach its trial. The text leads with the failure's
/// code ([`AgentUpdateError::code`]), the `failure` of its `agent_update.failed` audit row.
#[derive(Debug, thiserror::Error)]
pub enum AgentUpdateError {
    /// The hub did not serve the artifact.
    #[error("artifact_unavailable: fetching {sha256} from the hub")]
    Fetch {
        /// The signed digest.
        sha256: String,
        /// The cause.
        #[source]
        source: crate::links::hub_client::client::HubClientError,
    },
    /// The inbox has no directory to write in.
    #[error("artifact_unavailable: {} has no parent", path.display())]
    NoInbox {
        /// The inbox.
        path: PathBuf,
    },
    /// The artifact could not be written to the inbox.
    #[error("artifact_unavailable: {what} {}", dir.display())]
    Keep {
        /// What was being done.
        what: &'static str,
        /// The inbox's directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The hub served other bytes than the signed digest names.
    #[error(
        "digest_mismatch: the hub served {size} bytes hashing to {found}, not the signed {want}"
    )]
    DigestMismatch {
        /// How many bytes.
        size: u64,
        /// Their digest.
        found: String,
        /// The signed digest.
        want: String,
    },
    /// No helper is configured to stage the update.
    #[error("no helper is configured to stage the update")]
    NoHelper,
    /// The helper refused or failed to stage it.
    #[error("stage_failed")]
    Stage(#[source] crate::links::helper::HelperClientError),
    /// The health gate rolled the staged trial of this job back.
    #[error("rolled back by the health gate ({failure}): {detail}")]
    RolledBack {
        /// The gate's failure.
        failure: &'static str,
        /// Its detail.
        detail: String,
    },
}

impl AgentUpdateError {
    /// The short code the hub's `agent_update_failed` alert names.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Fetch { .. } | Self::NoInbox { .. } | Self::Keep { .. } => "artifact_unavailable",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::NoHelper => "no_helper",
            Self::Stage(_) => "stage_failed",
            Self::RolledBack { .. } => "rolled_back",
        }
    }
}
