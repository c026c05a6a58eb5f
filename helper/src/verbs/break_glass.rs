//! `break_glass_open` / `break_glass_close`: the break-glass account's one
//! `authorized_keys` line (DESIGN §12, decision 0020).
//!
//! The file is `<break_glass_root>/authorized_keys` (the root comes from the helper's own
//! configuration; the package's sshd drop-in points the `bosun-breakglass` account's
//! `AuthorizedKeysFile` at it). Opening writes exactly one line, built by
//! [`bosun_proto::break_glass::authorized_keys_line`] from a key that was parsed and
//! re-serialized, with OpenSSH's `expiry-time=` so sshd refuses the key after the deadline
//! even if the agent never comes back to close the door. The deadline is checked against
//! the helper's own clock: in the future and at most 24 hours (plus a little skew) ahead.
//! The line replaces any earlier door (one door at a time); it is written to a new file
//! and renamed over the old one, so sshd never reads half a line. Closing removes the file.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use bosun_proto::break_glass::{BREAK_GLASS_ACCOUNT, MAX_BREAK_GLASS_SECONDS};
use bosun_proto::break_glass::{authorized_keys_line, openssh_expiry};
use bosun_proto::helper::{BreakGlassOpen, Output};

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::fsops;

/// The file's name under the configured root.
const KEYS_FILE: &str = "authorized_keys";
const STAGED: &str = "authorized_keys.new";
/// How far past 24 hours from the helper's clock a deadline may lie (the call's own delay).
const SKEW_SECONDS: u64 = 300;

pub fn open(args: &BreakGlassOpen, config: &Config) -> Result<Output, HelperError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let expires = u64::try_from(args.expires_at.as_second()).unwrap_or(0);
    if expires <= now || expires > now + MAX_BREAK_GLASS_SECONDS + SKEW_SECONDS {
        let expires_at = args.expires_at.to_string();
        return Err(HelperError::BreakGlassExpiry(expires_at, now));
    }
    // 0755: sshd reads the file as the account; like every directory above the file, the root
    // must be root-controlled (sshd's StrictModes asks the same).
    let dir = fsops::ensure_root(&config.break_glass_root, 0o755)?;
    let path = dir.path.join(KEYS_FILE);
    let line = authorized_keys_line(&args.key, args.expires_at, args.job_id);
    // A leftover of a helper killed mid-call is never ours to trust: O_EXCL after removing it.
    let _ = dir.remove(STAGED);
    let mut file = dir.create(STAGED, 0o644, true)?;
    let written = file
        .write_all(line.as_bytes())
        .and_then(|()| file.sync_all());
    written.map_err(io_error("write", &path))?;
    dir.rename(STAGED, KEYS_FILE, false)?;
    Ok(Output::BreakGlassOpened {
        account: BREAK_GLASS_ACCOUNT.to_owned(),
        path: path.display().to_string(),
        fingerprint: args.key.fingerprint().to_owned(),
        expiry_time: openssh_expiry(args.expires_at),
    })
}

pub fn close(config: &Config) -> Result<Output, HelperError> {
    let path = config
        .break_glass_root
        .join(KEYS_FILE)
        .display()
        .to_string();
    let removed = match fsops::open_root(&config.break_glass_root) {
        Err(HelperError::NotFound(..)) => false,
        dir => {
            let dir = dir?;
            let _ = dir.remove(STAGED);
            let removed = dir.remove(KEYS_FILE)?;
            rustix::fs::fsync(&dir.fd).map_err(io_error("fsync", &dir.path))?;
            removed
        }
    };
    Ok(Output::BreakGlassClosed { path, removed })
}
