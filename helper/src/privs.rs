//! Each verb's capability set, and the drop to it.

use caps::{CapSet, Capability, CapsHashSet};

use bosun_proto::helper::VerbName;

use crate::error::HelperError;

/// The capabilities `verb` keeps; every other one leaves the bounding, permitted,
/// effective, inheritable and ambient sets before the verb acts, so programs it runs
/// (as uid 0) cannot regain them either.
#[rustfmt::skip]
pub fn declared(verb: VerbName) -> &'static [Capability] {
    use Capability::*;
    match verb {
        // mount(2) and umount(2); blkid reads root-owned device nodes as their owner.
        VerbName::MountByUuid | VerbName::Unmount => &[CAP_SYS_ADMIN],
        // `pct push` reads the CT's config under its flock, enters the CT's mount and
        // user namespaces (setns, ptrace-mode access to its init's /proc entries) and
        // creates, chmods and chowns the file there as the container's root.
        // `restart_controller` pushes a rollout's controller image and its digest, and runs
        // `pct exec` as the verbs below do.
        VerbName::PushBootstrap | VerbName::RestartController => &[
            CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_SETGID,
            CAP_SETUID, CAP_SYS_ADMIN, CAP_SYS_CHROOT, CAP_SYS_PTRACE,
        ],
        // `pct create/start/exec/push/shutdown/destroy` and `vzdump`: container setup.
        VerbName::BuildGolden => &[
            CAP_AUDIT_WRITE, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
            CAP_FSETID, CAP_IPC_LOCK, CAP_KILL, CAP_MKNOD, CAP_NET_ADMIN,
            CAP_NET_BIND_SERVICE, CAP_NET_RAW, CAP_SETFCAP, CAP_SETGID, CAP_SETPCAP,
            CAP_SETUID, CAP_SYS_ADMIN, CAP_SYS_CHROOT, CAP_SYS_NICE, CAP_SYS_PTRACE,
        ],
        // SG_IO pass-through for ATA/SCSI; admin commands for NVMe.
        VerbName::SmartStatus => &[CAP_SYS_ADMIN, CAP_SYS_RAWIO],
        // Reads a root-only archive in the dump directory.
        VerbName::HashArchive => &[CAP_DAC_READ_SEARCH],
        // `pct exec` reads the CT's config and enters its namespaces (setns, ptrace-mode
        // access to its init's /proc entries) to run a fixed command as the container's root;
        // `pct config` reads the config. `bulk_archive` also writes beneath a root-owned
        // backup root as its owner; `bulk_restore` reads beneath one.
        VerbName::ResetGuestIdentity
        | VerbName::RestoreCheck
        | VerbName::BulkArchive
        | VerbName::BulkRestore => &[
            CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN,
            CAP_SYS_CHROOT, CAP_SYS_PTRACE],
        // Writes or removes one file in a root-owned directory as its owner: no capability.
        VerbName::BreakGlassOpen | VerbName::BreakGlassClose => &[],
        // Reads the inbox in the agent's state directory (0700, the agent's); writes only
        // root-owned slot directories it owns.
        VerbName::StageAgentUpdate => &[CAP_DAC_READ_SEARCH],
    }
}

/// What the process held while the verb ran, read back from `/proc/self/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CapReport {
    /// `CapEff` as hex.
    pub effective_hex: String,
    /// `CapEff` as names, sorted.
    pub effective: Vec<String>,
    /// Declared capabilities this machine's bounding set did not offer.
    pub unavailable: Vec<String>,
    /// `NoNewPrivs` was 1.
    pub no_new_privs: bool,
}

/// Drops to `verb`'s capabilities and sets `no_new_privs`.
pub fn enter(verb: VerbName) -> Result<CapReport, HelperError> {
    let name = verb.as_str();
    let drop_err = |source| HelperError::DropCaps(name, source);
    let permitted = caps::read(None, CapSet::Permitted).map_err(drop_err)?;
    let declared: CapsHashSet = declared(verb).iter().copied().collect();
    let keep: CapsHashSet = declared.intersection(&permitted).copied().collect();
    let names = |caps: &mut dyn Iterator<Item = Capability>| {
        let mut names: Vec<String> = caps.map(|c| c.to_string().to_lowercase()).collect();
        names.sort();
        names
    };
    let unavailable = names(&mut declared.difference(&permitted).copied());

    // The bounding set first: dropping from it needs CAP_SETPCAP, which goes next.
    for cap in caps::read(None, CapSet::Bounding).map_err(drop_err)? {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap).map_err(drop_err)?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(drop_err)?;
    caps::clear(None, CapSet::Inheritable).map_err(drop_err)?;
    caps::set(None, CapSet::Effective, &keep).map_err(drop_err)?;
    caps::set(None, CapSet::Permitted, &keep).map_err(drop_err)?;
    rustix::thread::set_no_new_privs(true).map_err(HelperError::setup("setting no_new_privs"))?;

    let status = std::fs::read_to_string("/proc/self/status");
    let status = status.map_err(HelperError::setup("reading /proc/self/status"))?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| Some(l.strip_prefix(key)?.trim()))
    };
    let field = |key: &str| field(key).unwrap_or_default().to_owned();
    let effective_hex = field("CapEff:");
    let mask = u64::from_str_radix(&effective_hex, 16).unwrap_or(0);
    let effective = names(&mut caps::all().into_iter().filter(|c| mask & c.bitmask() != 0));
    let no_new_privs = field("NoNewPrivs:") == "1";
    Ok(CapReport {
        effective_hex,
        effective,
        unavailable,
        no_new_privs,
    })
}
