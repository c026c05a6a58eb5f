//! The verbs. Each takes its validated arguments and the fixed configuration.

pub(crate) mod archive;
mod break_glass;
mod bulk;
mod disk;
mod golden;
mod guests;
mod mount;
mod pct;
mod smart;
mod stage;
mod update;

#[cfg(test)]
pub(crate) use disk::check_mountable;
#[cfg(test)]
pub(crate) use guests::{Scratch, unsafe_config};
#[cfg(test)]
pub(crate) use mount::{BlkidMatch, parse_blkid_export};
#[cfg(test)]
pub(crate) use pct::reset_guest_identity_argvs;

use bosun_proto::helper::{Output, Request};

use crate::config::Config;
use crate::error::HelperError;

/// Carries out `request`.
pub fn act(request: &Request, config: &Config) -> Result<Output, HelperError> {
    match request {
        Request::MountByUuid(args) => mount::mount_by_uuid(args, config),
        Request::Unmount(args) => mount::unmount(args, config),
        Request::PushBootstrap(args) => pct::push_bootstrap(args, config),
        Request::BuildGolden(args) => golden::build(args, config),
        Request::SmartStatus(args) => smart::status(args, config),
        Request::HashArchive(args) => archive::hash(args, config),
        Request::RestartController(args) => pct::restart_controller(args, config),
        Request::ResetGuestIdentity(args) => pct::reset_guest_identity(args, config),
        Request::RestoreCheck(args) => pct::restore_check(args, config),
        Request::BreakGlassOpen(args) => break_glass::open(args, config),
        Request::BreakGlassClose(_) => break_glass::close(config),
        Request::StageAgentUpdate(args) => update::stage(args, config),
        Request::BulkArchive(args) => bulk::archive(args, config),
        Request::BulkRestore(args) => bulk::restore(args, config),
    }
}
