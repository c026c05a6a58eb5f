//! NFS and CIFS servers that hang. A hanging server still answers the connection checks
//! Proxmox makes when it activates a storage (`showmount`, `rpcinfo`, `smbclient`), but I/O on
//! its mount does not complete, as when the server's disks or daemons stall. What a storage on
//! it does depends on its mount options (`options`), as the kernel's NFS and CIFS clients
//! decide:
//!
//! - a **hard** mount (NFS's default) retries for ever: `GET …/storage/{id}/status` (a
//!   `statvfs`), the node's storage list, a content listing (a `readdir`) and a vzdump writing
//!   to it block until the server answers again; the vzdump task keeps running and the guest
//!   keeps its `backup` lock;
//! - a **soft** mount fails each request with EIO after the mount's timeout (NFS over TCP:
//!   `timeo` deciseconds, growing linearly over `retrans` retransmissions; CIFS: three
//!   `echo_interval`s), scaled by `time_scale`: the storage is then `active: 0`, a content
//!   listing fails and a vzdump writing to it fails with an I/O error in its task log.
//!
//! PBS storages are no mounts; a PBS server is reachable or not (`remotes.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::state::{NodeState, Shared, StorageKind};

/// NFS over TCP: `timeo` is 60 s unless set.
const NFS_TIMEO_DECI: u64 = 600;
/// NFS: two retransmissions unless `retrans` says otherwise.
const NFS_RETRANS: u64 = 2;
/// NFS: the timeout grows by `timeo` after each retransmission, up to 600 s.
const NFS_MAX_TIMEO: Duration = Duration::from_secs(600);
/// CIFS: an echo every 60 s unless `echo_interval` says otherwise.
const CIFS_ECHO_INTERVAL: u64 = 60;
/// How often a hard mount looks whether its server answers again.
const HARD_RETRY: Duration = Duration::from_millis(10);

/// How I/O on a mount of a hanging server ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mount {
    /// It waits until the server answers again.
    Hard,
    /// It fails with EIO after this long (real time, before `time_scale`).
    Soft(Duration),
}

/// The mount of a storage of `kind` with mount options `options`.
pub(crate) fn mount_of(kind: &StorageKind, options: Option<&str>) -> Mount {
    let opts: Vec<(&str, Option<&str>)> = options
        .unwrap_or_default()
        .split(',')
        .filter(|o| !o.is_empty())
        .map(|o| match o.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (o, None),
        })
        .collect();
    // The last of `soft`/`softerr`/`hard` wins, as in mount(8).
    let soft = opts.iter().rev().find_map(|(k, _)| match *k {
        "soft" | "softerr" => Some(true),
        "hard" => Some(false),
        _ => None,
    });
    let number = |key: &str| -> Option<u64> {
        opts.iter()
            .rev()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_deref()?.parse().ok())
    };
    match kind {
        StorageKind::Nfs { .. } if soft == Some(true) => {
            let timeo = Duration::from_millis(number("timeo").unwrap_or(NFS_TIMEO_DECI) * 100);
            let tries = number("retrans").unwrap_or(NFS_RETRANS).saturating_add(1);
            let total = (1..=tries.min(1000))
                .map(|i| timeo.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX)))
                .map(|t| t.min(NFS_MAX_TIMEO))
                .fold(Duration::ZERO, Duration::saturating_add);
            Mount::Soft(total)
        }
        // mount.cifs mounts soft unless told `hard`.
        StorageKind::Cifs { .. } if soft != Some(false) => {
            let echo = number("echo_interval").unwrap_or(CIFS_ECHO_INTERVAL);
            Mount::Soft(Duration::from_secs(echo.saturating_mul(3)))
        }
        _ => Mount::Hard,
    }
}

/// How I/O on storage `sid` ends now: `None` if its server answers (or it is no NFS or CIFS
/// storage).
pub(crate) fn hung(st: &NodeState, sid: &str) -> Option<Mount> {
    let storage = st.storages.get(sid)?;
    let server = match &storage.kind {
        StorageKind::Nfs { server, .. } | StorageKind::Cifs { server, .. } => server,
        _ => return None,
    };
    if !st.remotes.is_hanging(server) {
        return None;
    }
    Some(mount_of(
        &storage.kind,
        storage.options.get("options").map(String::as_str),
    ))
}

/// Does I/O on storage `sid`: at once if its server answers; a hard mount waits until it
/// does (or the simulator stops); a soft mount gives EIO after its timeout. `Err` is the text
/// of the failed I/O.
pub(crate) async fn io(shared: &Shared, sid: &str) -> Result<(), String> {
    loop {
        let mount = hung(&shared.state.lock(), sid);
        match mount {
            None => return Ok(()),
            Some(Mount::Hard) => {
                tokio::select! {
                    () = tokio::time::sleep(HARD_RETRY) => {}
                    () = shared.cancel.cancelled() => return Err("received interrupt".to_owned()),
                }
            }
            Some(Mount::Soft(timeout)) => {
                if !shared.sleep(timeout).await {
                    return Err("received interrupt".to_owned());
                }
                // The last retransmission got its answer if the server is back by now.
                return match hung(&shared.state.lock(), sid) {
                    None => Ok(()),
                    Some(_) => Err("Input/output error".to_owned()),
                };
            }
        }
    }
}

/// I/O on each of `sids` at once (what the node's storage list does); gives the storages
/// whose I/O failed.
pub(crate) async fn io_each(shared: &Shared, sids: Vec<String>) -> BTreeSet<String> {
    let each = sids.into_iter().map(|sid| async move {
        let failed = io(shared, &sid).await.is_err();
        (sid, failed)
    });
    futures::future::join_all(each)
        .await
        .into_iter()
        .filter_map(|(sid, failed)| failed.then_some(sid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nfs() -> StorageKind {
        StorageKind::Nfs {
            server: "nas".into(),
            export: "/srv".into(),
            path: "/mnt/pve/x".into(),
        }
    }

    fn cifs() -> StorageKind {
        StorageKind::Cifs {
            server: "nas".into(),
            share: "b".into(),
            path: "/mnt/pve/y".into(),
        }
    }

    #[test]
    fn mount_options_decide_hard_or_soft_and_the_timeout() {
        let s = Duration::from_secs;
        assert_eq!(mount_of(&nfs(), None), Mount::Hard);
        assert_eq!(mount_of(&nfs(), Some("vers=4.2")), Mount::Hard);
        assert_eq!(mount_of(&nfs(), Some("soft,hard")), Mount::Hard);
        // 3 s, 6 s, 9 s.
        assert_eq!(
            mount_of(&nfs(), Some("soft,timeo=30,retrans=2")),
            Mount::Soft(s(18))
        );
        // Defaults: 60 s, 120 s, 180 s.
        assert_eq!(mount_of(&nfs(), Some("soft")), Mount::Soft(s(360)));
        assert_eq!(mount_of(&cifs(), None), Mount::Soft(s(180)));
        assert_eq!(
            mount_of(&cifs(), Some("soft,echo_interval=5")),
            Mount::Soft(s(15))
        );
        assert_eq!(mount_of(&cifs(), Some("hard")), Mount::Hard);
    }
}
