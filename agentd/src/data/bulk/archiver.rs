//! What archives one bulk volume: the root helper's `bulk_archive`, behind a trait so the
//! scheduler's choices are tested without root.

use std::time::Duration;

use bosun_proto::helper::{
    ArchiveBytes, ArchiveSeconds, BulkArchive, GuestPath, InvalidArgument, KeepCount, Output,
    Request, StorageDir, Vmid, VolumeName,
};
use futures::future::BoxFuture;

use crate::guests::queue::QueueError;
use crate::links::helper::{HelperClient, HelperClientError};

/// How long the agent waits for the helper's answer beyond the archive's own time limit: a
/// minute, and the time the helper takes to read the archive back for its SHA-256 (after the
/// limit) at 50 MiB/s.
fn answer_slack(max_bytes: u64) -> Duration {
    Duration::from_secs(60 + max_bytes / (50 << 20))
}

/// One archive to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkRequest {
    /// The guest's vmid.
    pub vmid: u32,
    /// The guest.
    pub guest_id: String,
    /// The volume.
    pub volume: String,
    /// Where it is mounted in the guest.
    pub path: String,
    /// The target's directory on the node.
    pub storage_dir: String,
    /// Archives kept.
    pub keep_last: u32,
    /// The most bytes the archive may have.
    pub max_bytes: u64,
    /// The longest it may take.
    pub timeout: Duration,
}

/// A written archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveDone {
    /// Its file name.
    pub name: String,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Older archives removed to keep `keep_last`.
    pub removed: u32,
}

/// Why a volume was not archived; `Display` (with its causes) is what the report carries.
#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    /// A value of the request is not one the helper takes.
    #[error("the archive request is invalid")]
    Request(#[source] InvalidArgument),
    /// The guest identity is not a UUID.
    #[error("the guest id {0:?} is not a UUID")]
    GuestId(String),
    /// The helper refused or failed.
    #[error(transparent)]
    Helper(#[from] HelperClientError),
    /// The helper answered something else.
    #[error("the helper answered {answer}")]
    Answer {
        /// The answer, as debug text.
        answer: String,
    },
    /// The agent has no root helper (`[helper]` in `agent.toml`), which alone can enter a
    /// guest.
    #[error(
        "no root helper is configured ([helper] in agent.toml): a bulk volume is archived through it"
    )]
    NoHelper,
    /// The guest's queue did not run it (the agent is stopping).
    #[error("the guest's work queue did not run the archive")]
    Queue(#[source] QueueError),
}

/// Writes bulk archives.
pub trait Archiver: Send + Sync + std::fmt::Debug {
    /// Archives what `request` names.
    fn archive<'a>(
        &'a self,
        request: &'a BulkRequest,
    ) -> BoxFuture<'a, Result<ArchiveDone, ArchiverError>>;
}

impl BulkRequest {
    /// The helper's request for it.
    pub fn to_helper(&self) -> Result<BulkArchive, ArchiverError> {
        let bad = ArchiverError::Request;
        Ok(BulkArchive {
            vmid: Vmid::new(u64::from(self.vmid)).map_err(bad)?,
            guest_id: uuid::Uuid::parse_str(&self.guest_id)
                .map_err(|_| ArchiverError::GuestId(self.guest_id.clone()))?,
            volume: VolumeName::new(self.volume.clone()).map_err(bad)?,
            path: GuestPath::new(self.path.clone()).map_err(bad)?,
            storage_dir: StorageDir::new(self.storage_dir.clone()).map_err(bad)?,
            keep_last: KeepCount::new(u64::from(self.keep_last)).map_err(bad)?,
            max_bytes: ArchiveBytes::new(self.max_bytes.min(ArchiveBytes::MAX)).map_err(bad)?,
            timeout_secs: ArchiveSeconds::new(self.timeout.as_secs().clamp(1, 86_400))
                .map_err(bad)?,
        })
    }
}

impl Archiver for HelperClient {
    fn archive<'a>(
        &'a self,
        request: &'a BulkRequest,
    ) -> BoxFuture<'a, Result<ArchiveDone, ArchiverError>> {
        Box::pin(async move {
            let args = request.to_helper()?;
            let wait = Duration::from_secs(u64::from(args.timeout_secs.get()))
                + answer_slack(args.max_bytes.get());
            let client = self.clone().with_timeout(wait);
            match client.call(&Request::BulkArchive(args)).await? {
                Output::BulkArchived {
                    archive,
                    sha256,
                    size,
                    removed,
                } => Ok(ArchiveDone {
                    name: archive.rsplit('/').next().unwrap_or(&archive).to_owned(),
                    sha256,
                    size,
                    removed,
                }),
                other => Err(ArchiverError::Answer {
                    answer: format!("{other:?}"),
                }),
            }
        })
    }
}

/// The archiver of an agent without a root helper: every archive fails, saying why.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHelper;

impl Archiver for NoHelper {
    fn archive<'a>(
        &'a self,
        _request: &'a BulkRequest,
    ) -> BoxFuture<'a, Result<ArchiveDone, ArchiverError>> {
        Box::pin(async { Err(ArchiverError::NoHelper) })
    }
}
