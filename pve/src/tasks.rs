//! Task waiting and the multi-call operations built on the `Pve` primitives: waiting a task
//! out, restoring onto the next free id, and a backup with its archive's volid.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Instant;

use regex::Regex;

use super::api::Pve;
use super::catalogue::Op;
use super::error::PveError;
use super::model::{BackupOutcome, TaskLogLine, TaskOutcome, TaskState};
use super::requests::{ContentFilter, ContentType, RestoreRequest, TaskFilter, VzdumpRequest};
use super::types::{Upid, Vmid};

/// Log lines fetched per page when reading a whole task log.
const LOG_PAGE: u64 = 500;

pub(crate) async fn wait_task<P: Pve + ?Sized>(
    pve: &P,
    op: Op,
    upid: &Upid,
) -> Result<TaskOutcome, PveError> {
    let policy = pve.retry_policy();
    let started = Instant::now();
    let mut delay = policy.task_poll.initial;
    let mut poll_errors = 0u32;
    let mut last_error: Option<PveError>;
    loop {
        match pve.task_status(upid).await {
            Ok(info) => {
                poll_errors = 0;
                last_error = None;
                match info.state() {
                    TaskState::Running => {}
                    TaskState::Ok => {
                        tracing::debug!(upid = %upid, "task finished");
                        return Ok(TaskOutcome {
                            upid: upid.clone(),
                            warnings: 0,
                        });
                    }
                    TaskState::Warnings(n) => {
                        tracing::warn!(upid = %upid, warnings = n, "task finished with warnings");
                        return Ok(TaskOutcome {
                            upid: upid.clone(),
                            warnings: n,
                        });
                    }
                    TaskState::Failed(exitstatus) => {
                        let log_tail = match read_log(pve, upid).await {
                            Ok(lines) => tail(&lines, policy.log_tail_lines),
                            Err(e) => {
                                tracing::warn!(upid = %upid, error = %e, "could not read the failed task's log");
                                Vec::new()
                            }
                        };
                        return Err(PveError::TaskFailed {
                            op,
                            upid: upid.clone(),
                            exitstatus,
                            log_tail,
                        });
                    }
                }
            }
            Err(e) if poll_error_is_transient(&e) => {
                poll_errors += 1;
                tracing::warn!(upid = %upid, attempt = poll_errors, error = %e, "task status poll failed; still tracking");
                if poll_errors > policy.task_poll_errors {
                    return Err(e);
                }
                last_error = Some(e);
            }
            Err(e) => return Err(e),
        }
        if started.elapsed() >= policy.task_wait_limit {
            return Err(PveError::TaskWaitTimedOut {
                op,
                upid: upid.clone(),
                waited_secs: started.elapsed().as_secs(),
                last_error: last_error.map(Box::new),
            });
        }
        tokio::time::sleep(delay).await;
        delay = policy.task_poll.next(delay);
    }
}

/// While polling a task known to exist, a 5xx answer (a daemon restarting, a proxy error) is
/// as passing as a lost connection; 4xx answers (`no such task`, 401, 403) are not.
fn poll_error_is_transient(e: &PveError) -> bool {
    e.is_transient() || matches!(e, PveError::Api { status, .. } if *status >= 500)
}

/// Reads a task's whole log, page by page.
pub async fn read_log<P: Pve + ?Sized>(pve: &P, upid: &Upid) -> Result<Vec<TaskLogLine>, PveError> {
    let mut lines = Vec::new();
    loop {
        let start = u64::try_from(lines.len()).unwrap_or(u64::MAX);
        let page = pve.task_log(upid, start, LOG_PAGE).await?;
        let got = page.lines.len();
        lines.extend(page.lines);
        let read = u64::try_from(lines.len()).unwrap_or(u64::MAX);
        if got == 0 || read >= page.total {
            return Ok(lines);
        }
    }
}

fn tail(lines: &[TaskLogLine], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.t.clone())
        .collect()
}

fn is_already_exists(e: &PveError) -> bool {
    match e {
        PveError::Api { message, .. } => message.contains("already exists"),
        PveError::BadRequest { errors, .. } => errors
            .get("vmid")
            .is_some_and(|m| m.contains("already exists")),
        _ => false,
    }
}

pub(crate) async fn restore_ct_next_id<P: Pve + ?Sized>(
    pve: &P,
    request: &RestoreRequest,
) -> Result<(Vmid, Upid), PveError> {
    let attempts = pve.retry_policy().nextid_attempts.max(1);
    let mut request = request.clone();
    for attempt in 1..=attempts {
        request.vmid = pve.next_id().await?;
        match pve.restore_ct(&request).await {
            Ok(upid) => return Ok((request.vmid, upid)),
            Err(e) if is_already_exists(&e) => {
                tracing::info!(vmid = %request.vmid, attempt, "next free id was taken meanwhile; asking again");
            }
            Err(e) => return Err(e),
        }
    }
    Err(PveError::NoFreeVmid {
        op: Op::RestoreCt,
        attempts,
    })
}

static DIR_ARCHIVE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"creating vzdump archive '([^']+)'").expect("constant regex is valid")
});
static PBS_ARCHIVE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"creating Proxmox Backup Server archive '([^']+)'")
        .expect("constant regex is valid")
});

/// Finds the archive a vzdump task wrote for storage `storage` from its log lines.
pub fn archive_volid_from_log<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    storage: &str,
) -> Option<String> {
    for line in lines {
        if let Some(c) = DIR_ARCHIVE_RE.captures(line) {
            let path = c[1].strip_suffix(".dat").unwrap_or(&c[1]);
            let file = path.rsplit('/').next().unwrap_or(path);
            return Some(format!("{storage}:backup/{file}"));
        }
        if let Some(c) = PBS_ARCHIVE_RE.captures(line) {
            return Some(format!("{storage}:backup/{}", &c[1]));
        }
    }
    None
}

pub(crate) async fn backup_ct<P: Pve + ?Sized>(
    pve: &P,
    request: &VzdumpRequest,
) -> Result<BackupOutcome, PveError> {
    let upid = pve.vzdump(request).await?;
    let task = pve.wait_task(Op::Vzdump, &upid).await?;
    let storage = request.storage.as_str();
    match read_log(pve, &upid).await {
        Ok(lines) => {
            if let Some(volid) = archive_volid_from_log(lines.iter().map(|l| l.t.as_str()), storage)
            {
                return Ok(BackupOutcome { task, volid });
            }
            tracing::warn!(upid = %upid, "backup log names no archive; looking in the storage listing");
        }
        Err(e) => {
            tracing::warn!(upid = %upid, error = %e, "could not read the backup log; looking in the storage listing");
        }
    }
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Some(request.vmid),
    };
    let items = pve.list_content(&request.storage, filter).await?;
    let started = u64::try_from(upid.starttime()).unwrap_or(0);
    let newest = items
        .into_iter()
        .filter(|i| i.vmid == Some(u64::from(request.vmid.get())))
        .filter(|i| i.ctime.is_some_and(|t| t >= started))
        .max_by_key(|i| i.ctime);
    match newest {
        Some(item) => Ok(BackupOutcome {
            task,
            volid: item.volid,
        }),
        None => Err(PveError::BackupArchiveNotFound {
            op: Op::Vzdump,
            vmid: request.vmid,
            upid,
            storage: storage.to_owned(),
        }),
    }
}

/// Issues a task-starting call and waits for it, issuing it again (with the policy's lock
/// backoff) while the task fails only because the guest is locked (`CT is locked (…)`, or a
/// config file lock timeout) — e.g. a snapshot requested while a backup runs.
pub async fn run_task_waiting_out_locks<P, F, Fut>(
    pve: &P,
    op: Op,
    mut issue: F,
) -> Result<TaskOutcome, PveError>
where
    P: Pve + ?Sized,
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Upid, PveError>> + Send,
{
    let policy = pve.retry_policy();
    let mut delay = policy.lock_backoff.initial;
    let mut attempt = 1u32;
    loop {
        let upid = issue().await?;
        match pve.wait_task(op, &upid).await {
            Err(e) if e.is_lock_contention() && attempt < policy.lock_attempts => {
                tracing::info!(upid = %upid, attempt, "task found the guest locked; trying again");
            }
            other => return other,
        }
        tokio::time::sleep(delay).await;
        delay = policy.lock_backoff.next(delay);
        attempt += 1;
    }
}

/// The first task of `task_type` on `vmid` that started no earlier than a second before
/// `asked_at` (when the call was about to be sent; PVE counts whole seconds): how a call
/// whose answer never arrived is looked up (DESIGN §9).
pub async fn find_task<P: Pve + ?Sized>(
    pve: &P,
    vmid: Vmid,
    task_type: &'static str,
    asked_at: jiff::Timestamp,
) -> Result<Option<Upid>, PveError> {
    let since = u64::try_from(asked_at.as_second().saturating_sub(1)).unwrap_or(0);
    let filter = TaskFilter {
        vmid,
        task_type,
        since,
    };
    let tasks = pve.list_tasks(filter).await?;
    Ok(tasks.into_iter().next().map(|t| t.upid))
}
