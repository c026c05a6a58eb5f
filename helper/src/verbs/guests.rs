//! Which guests the verbs that enter one may act on (decision 0048): a container whose root
//! filesystem carries a `bosun.guest-stamp/v1` ([`bosun_proto::helper::stamp`]) that verifies
//! under this host's stamp key, which only root reads.
//!
//! [`admit`] is the first step of every verb that enters a guest, in this order:
//!
//! 1. `pct config <vmid> --current`: no mount point may cover the stamp's directory (a volume
//!    of another guest, with that guest's stamp, mounted over it), and a restore test's scratch
//!    guest is for `restore_check` alone, which takes nothing else ([`Scratch`]);
//! 2. the stamp, read by [`pull`] without running any program of the guest;
//! 3. the stamp verified under the key. A guest without a valid one is refused, unless the
//!    operator listed its vmid in the root-owned adoption file: then it gets a fresh stamp
//!    (keeping the guest id a well-formed old one was bound to) and leaves the list.

use std::path::Path;

use bosun_proto::helper::stamp::{GUEST_STAMP_PATH, GuestStamp, MAX_STAMP_BYTES, StampKey};
use bosun_proto::helper::{SCRATCH_HOSTNAME_PREFIX, Vmid};
use uuid::Uuid;

use crate::config::Config;
use crate::error::HelperError;
use crate::exec::{self, Ran};

use super::stage::{push_file, staging_dir};

/// The directory that holds the stamp (and the bootstrap) inside a guest.
const STAMP_DIR: &str = "/etc/bosun-bootstrap";

/// What a verb wants of a restore test's scratch guest (hostname `restore-test-<vmid>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scratch {
    /// Never enter one: it gets no bootstrap, no restart, no identity reset.
    Refuse,
    /// Only a restore test's scratch guest with all its marks (`restore_check`).
    Require,
}

/// A guest a verb may enter: its valid stamp, the key, its `pct config --current`, its vmid
/// and the helper's configuration, to run programs inside it ([`Admitted::exec`]).
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    pub stamp: GuestStamp,
    pub key: StampKey,
    pub shown: String,
    pub vmid: String,
    pub config: &'a Config,
}

impl Admitted<'_> {
    /// Runs `argv` inside the guest through `pct exec <vmid> --` ([`exec::run`]).
    pub(crate) fn exec(&self, argv: &[&str], secs: u64, ok: &[i32]) -> Result<Ran, HelperError> {
        let argv = [&["exec", self.vmid.as_str(), "--"], argv].concat();
        exec::run(&self.config.programs.pct, &argv, secs, ok)
    }
}

/// [`HelperError::NotOurGuest`] for `vmid`.
pub(crate) fn not_ours(vmid: Vmid, reason: String) -> HelperError {
    HelperError::NotOurGuest(vmid.get(), reason)
}

/// The steps every guest-entering verb takes first (see the module docs).
pub(crate) fn admit(
    config: &Config,
    vmid: Vmid,
    scratch: Scratch,
) -> Result<Admitted<'_>, HelperError> {
    let id = vmid.to_string();
    let args = ["config", id.as_str(), "--current"];
    let shown = exec::run(&config.programs.pct, &args, config.limits.quick, &[0])?;
    let shown = shown.stdout.text();
    unsafe_config(&shown, &id, scratch).map_err(|reason| not_ours(vmid, reason))?;
    let key = load_key(&config.guest_key, true)?;
    let found = pull(config, &id, GUEST_STAMP_PATH, MAX_STAMP_BYTES)?;
    let stamp = match GuestStamp::check(found.as_deref(), &key) {
        Ok(stamp) => stamp,
        Err(e) if !adopt(config, &id, false)? => {
            return Err(not_ours(vmid, e.to_string()));
        }
        Err(_) => {
            let old = found.and_then(|b| GuestStamp::parse(&b).ok());
            let stamp = self::stamp(config, vmid, &key, old.and_then(|s| s.guest_id))?;
            adopt(config, &id, true)?;
            stamp
        }
    };
    let (vmid, shown) = (id, shown);
    Ok(Admitted {
        stamp,
        key,
        shown,
        vmid,
        config,
    })
}

/// `key: value` entries of a `pct config --current` printout, up to any `[section]`.
pub(crate) fn entries(config: &str) -> impl Iterator<Item = (&str, &str)> {
    let current = config.lines().take_while(|l| !l.starts_with('['));
    current.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim(), v.trim())))
}

/// Where the mount point entry `key: value` is mounted in the guest, without a trailing `/`;
/// `None` for any other entry.
pub(crate) fn mount_path<'a>(key: &str, value: &'a str) -> Option<&'a str> {
    let at = value.split(',').find_map(|o| o.strip_prefix("mp="));
    at.filter(|_| indexed(key, "mp"))
        .map(|a| a.trim_end_matches('/'))
}

/// Whether `key` is `<prefix><digits>` (`net0`, `mp3`).
pub(crate) fn indexed(key: &str, prefix: &str) -> bool {
    let n = key.strip_prefix(prefix);
    n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Why guest `vmid`'s configuration rules it out for a verb: a mount point at or above
/// [`STAMP_DIR`]; with [`Scratch::Refuse`] a scratch hostname; with [`Scratch::Require`] a
/// missing scratch mark of a restore test (its hostname `restore-test-<vmid>`, every link
/// down, no mount point at all), so code never runs in a guest that can reach anything.
pub(crate) fn unsafe_config(config: &str, vmid: &str, scratch: Scratch) -> Result<(), String> {
    let mut named = false;
    for (key, value) in entries(config) {
        let at = mount_path(key, value).map(|a| format!("{a}/"));
        let covers = at.is_some_and(|a| format!("{STAMP_DIR}/").starts_with(&a));
        if key == "hostname" {
            named = value.strip_prefix(SCRATCH_HOSTNAME_PREFIX) == Some(vmid);
            if scratch == Scratch::Refuse && value.starts_with(SCRATCH_HOSTNAME_PREFIX) {
                return Err(format!("it is a restore test's scratch guest ({value})"));
            }
        } else if covers {
            return Err(format!("mount point {key} covers {STAMP_DIR}"));
        } else if indexed(key, "mp") && scratch == Scratch::Require {
            return Err(format!("it has mount point {key}"));
        } else if scratch == Scratch::Require
            && indexed(key, "net")
            && !value.split(',').any(|o| o == "link_down=1")
        {
            return Err(format!("{key} has its link up"));
        }
    }
    let hostname = format!("{SCRATCH_HOSTNAME_PREFIX}{vmid}");
    match (scratch, named) {
        (Scratch::Require, false) => Err(format!("its hostname is not {hostname}")),
        _ => Ok(()),
    }
}

/// Whether the operator's adoption file lists `vmid`; `take`: it leaves the list.
fn adopt(config: &Config, vmid: &str, take: bool) -> Result<bool, HelperError> {
    let listed = bosun_rootconf::listed(&config.adopt_file, vmid, take);
    listed.map_err(|e| HelperError::Config(e.into()))
}

/// Writes a fresh stamp under `key`, bound to `guest_id`, into the running guest.
pub(crate) fn stamp(
    config: &Config,
    vmid: Vmid,
    key: &StampKey,
    guest_id: Option<Uuid>,
) -> Result<GuestStamp, HelperError> {
    let stamp = GuestStamp::sign(key, guest_id, Uuid::new_v4().into_bytes());
    let line = stamp.line();
    push_file(config, vmid, "stamp", line.as_bytes(), GUEST_STAMP_PATH)?;
    Ok(stamp)
}

/// At most `max` + 1 bytes of the file `path` in running guest `vmid`, read without running
/// any program of the guest: `pct pull` opens it inside the container's mount namespace and
/// copies it into a FIFO in the root-only staging directory, which the helper drains, so
/// whatever the guest put there (a FIFO, `/dev/zero`) nothing lands on a disk. `None`: the
/// guest has no such file (`pct pull`'s `failed to open`).
pub(crate) fn pull(
    config: &Config,
    vmid: &str,
    path: &str,
    max: usize,
) -> Result<Option<Vec<u8>>, HelperError> {
    let dir = staging_dir(&config.staging_root)?;
    let fifo = dir.path.join(format!("pull-{vmid}-{}", std::process::id()));
    // A leftover of a helper killed mid-call with the same pid: never ours to trust.
    let _ = std::fs::remove_file(&fifo);
    let target = fifo.display().to_string();
    let (args, time) = (["pull", vmid, path, target.as_str()], config.limits.quick);
    match exec::run_into_fifo(&config.programs.pct, &args, &fifo, max + 1, time) {
        Ok((_, kept)) => Ok(Some(kept.bytes)),
        Err(HelperError::ProgramFailed(.., e)) if e.contains("failed to open") => Ok(None),
        Err(e) => Err(e),
    }
}

/// This host's stamp key (a root-only file of 32 bytes); `create`: made when missing (by the
/// first golden build, or the first guest verb of a box whose image predates stamps, so the
/// operator's adoption list can stamp its guests).
pub(crate) fn load_key(path: &Path, create: bool) -> Result<StampKey, HelperError> {
    bosun_rootconf::root_secret(path, create).map_err(|e| HelperError::Config(e.into()))
}
