//! What the hub hears about a failing target: a [`TargetReason`] from a fixed vocabulary,
//! never Proxmox's or a server's own words. A hostile hub can name any server as a target;
//! if the host echoed "401 Unauthorized" against "Cannot find datastore", it would tell that
//! hub which passwords and datastores are right. The whole text stays in the agent's log.
//!
//! Also the bound on every Proxmox call the watcher makes ([`WatchCallError::TimedOut`]):
//! a storage whose server stops answering can hang a call, and that must make the target
//! `unreachable`, not the watcher stuck.

use std::time::Duration;

use bosun_proto::report::TargetReason;

use bosun_pve::{Op, PveError};

/// A Proxmox call of the storage watcher that failed or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum WatchCallError {
    /// No answer within the watcher's bound (the request may still be running in Proxmox).
    #[error("{op}: no answer within {} ms", after.as_millis())]
    TimedOut {
        /// The operation.
        op: Op,
        /// The bound.
        after: Duration,
    },
    /// Proxmox answered with an error, or could not be asked.
    #[error(transparent)]
    Pve(#[from] PveError),
}

/// Runs one Proxmox call of `op`, giving up after `bound`.
pub async fn bounded<T>(
    op: Op,
    bound: Duration,
    call: impl Future<Output = Result<T, PveError>>,
) -> Result<T, WatchCallError> {
    match tokio::time::timeout(bound, call).await {
        Ok(answer) => answer.map_err(WatchCallError::Pve),
        Err(_) => Err(WatchCallError::TimedOut { op, after: bound }),
    }
}

/// The reason a failed call gives for its target.
pub fn classify(error: &WatchCallError) -> TargetReason {
    match error {
        WatchCallError::TimedOut { .. } => TargetReason::Unreachable,
        WatchCallError::Pve(e) => classify_pve(e),
    }
}

/// The reason a Proxmox error gives for the target the call was about.
pub fn classify_pve(error: &PveError) -> TargetReason {
    match error {
        // The request hung until the client gave up: the storage's server does not answer.
        PveError::OutcomeUnknown { source, .. } if source.is_timeout() => TargetReason::Unreachable,
        // Proxmox itself could not be asked, or refused this agent's token.
        PveError::NotSent { .. }
        | PveError::OutcomeUnknown { .. }
        | PveError::Unauthorized { .. }
        | PveError::Busy { .. } => TargetReason::ProxmoxUnavailable,
        PveError::Api { message, .. } | PveError::Locked { message, .. } => {
            classify_message(message)
        }
        PveError::BadRequest {
            message, errors, ..
        } => errors
            .values()
            .map(|m| classify_message(m))
            .find(|r| *r != TargetReason::Failed)
            .unwrap_or_else(|| classify_message(message)),
        PveError::TaskFailed { exitstatus, .. } => classify_message(exitstatus),
        PveError::TaskWaitTimedOut { .. } => TargetReason::Unreachable,
        PveError::InvalidRequest { .. }
        | PveError::Forbidden { .. }
        | PveError::NotImplemented { .. }
        | PveError::Decode { .. }
        | PveError::AnswerTooLarge { .. }
        | PveError::NoFreeVmid { .. }
        | PveError::BackupArchiveNotFound { .. }
        | PveError::Setup { .. } => TargetReason::Failed,
    }
}

/// What Proxmox's storage plugins (and the programs they run: `mount.nfs`, `smbclient`,
/// the PBS client) say, sorted into the vocabulary. The first table whose words appear wins;
/// the order matters (a PBS fingerprint refusal also reads "error fetching datastores").
const MESSAGES: &[(TargetReason, &[&str])] = &[
    (
        TargetReason::FingerprintMismatch,
        &[
            "fingerprint",
            "certificate verify failed",
            "certificate validation failed",
        ],
    ),
    (
        TargetReason::AuthFailed,
        &[
            "401",
            "unauthorized",
            "authentication failed",
            "permission denied",
            "nt_status_logon_failure",
            "nt_status_access_denied",
            "nt_status_account",
            "nt_status_wrong_password",
            "invalid credentials",
        ],
    ),
    (
        TargetReason::NotFound,
        &[
            "cannot find datastore",
            "no such datastore",
            "does not exist",
            "no such file or directory",
            "nt_status_bad_network_name",
            "access denied by server while mounting",
            "no such namespace",
        ],
    ),
    (
        TargetReason::Unreachable,
        &[
            "is not online",
            "can't connect",
            "no route to host",
            "name or service not known",
            "connection refused",
            "connection timed out",
            "timed out",
            "got timeout",
            "host is down",
            "network is unreachable",
            "input/output error",
            "stale file handle",
        ],
    ),
];

/// The reason PVE's error text gives; [`TargetReason::Failed`] when it says nothing known.
pub fn classify_message(message: &str) -> TargetReason {
    let text = message.to_ascii_lowercase();
    MESSAGES
        .iter()
        .find(|(_, words)| words.iter().any(|w| text.contains(w)))
        .map_or(TargetReason::Failed, |(reason, _)| *reason)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn api(message: &str) -> WatchCallError {
        WatchCallError::Pve(PveError::Api {
            op: Op::CreateStorage,
            vmid: None,
            status: 500,
            message: message.to_owned(),
        })
    }

    #[test]
    fn proxmox_messages_sort_into_the_vocabulary() {
        use TargetReason::*;
        let table = [
            // PBS, as the simulator and PVE's PBS plugin word them.
            (
                "create storage failed: bosun-pbs-1: error fetching datastores - fingerprint 'AA:BB' not verified, abort!",
                FingerprintMismatch,
            ),
            (
                "create storage failed: bosun-pbs-1: error fetching datastores - 401 Unauthorized",
                AuthFailed,
            ),
            (
                "bosun-pbs-1: error fetching datastores - Unauthorized",
                AuthFailed,
            ),
            (
                "bosun-pbs-1: Cannot find datastore 'store9', check permissions and existence!",
                NotFound,
            ),
            (
                "bosun-pbs-1: error fetching datastores - 500 Can't connect to pbs.example:8007 (No route to host)",
                Unreachable,
            ),
            (
                "bosun-pbs-1: error fetching datastores - Can't connect to pbs.example:8007 (Name or service not known)",
                Unreachable,
            ),
            // CIFS and NFS.
            (
                "connection check for storage 'bosun-cifs-1' failed - session setup failed: NT_STATUS_LOGON_FAILURE",
                AuthFailed,
            ),
            (
                "mount error: mount.nfs: access denied by server while mounting nfs.example:/srv/none",
                NotFound,
            ),
            ("storage 'bosun-nfs-1' is not online", Unreachable),
            (
                "unable to read '/mnt/pve/bosun-nfs-1/dump' - Input/output error",
                Unreachable,
            ),
            ("storage 'bosun-nfs-1' does not exist", NotFound),
            // Nothing known.
            ("something else went wrong", Failed),
            ("", Failed),
        ];
        for (message, want) in table {
            assert_eq!(classify(&api(message)), want, "{message}");
        }
    }

    #[test]
    fn timeouts_are_unreachable_and_proxmox_trouble_is_not_the_targets() {
        let timed_out = WatchCallError::TimedOut {
            op: Op::StorageStatus,
            after: Duration::from_secs(5),
        };
        assert_eq!(classify(&timed_out), TargetReason::Unreachable);
        assert!(timed_out.to_string().contains("5000 ms"));
        let unauthorized = WatchCallError::Pve(PveError::Unauthorized {
            op: Op::ListStorage,
        });
        assert_eq!(classify(&unauthorized), TargetReason::ProxmoxUnavailable);
        let forbidden = WatchCallError::Pve(PveError::Forbidden {
            op: Op::CreateStorage,
            vmid: None,
            path: Some("/storage".into()),
            privilege: Some("Datastore.Allocate".into()),
            message: "Permission check failed (/storage, Datastore.Allocate)".into(),
        });
        assert_eq!(classify(&forbidden), TargetReason::Failed);
        let refused = WatchCallError::Pve(PveError::BadRequest {
            op: Op::CreateStorage,
            vmid: None,
            message: "Parameter verification failed.".into(),
            errors: BTreeMap::from([(
                "fingerprint".to_owned(),
                "value does not match the regex pattern".to_owned(),
            )]),
        });
        assert_eq!(classify(&refused), TargetReason::Failed);
    }

    #[tokio::test]
    async fn a_call_that_never_answers_is_cut_at_the_bound() {
        let started = tokio::time::Instant::now();
        let hung = bounded(
            Op::ListStorage,
            Duration::from_millis(50),
            std::future::pending::<Result<(), PveError>>(),
        )
        .await;
        assert!(matches!(hung, Err(WatchCallError::TimedOut { .. })));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        let quick = bounded(Op::ListStorage, Duration::from_secs(3), async {
            Ok::<_, PveError>(7)
        })
        .await;
        assert_eq!(quick.unwrap(), 7);
    }
}
