//! The helper's only `unsafe`: syscalls rustix does not wrap.
#![allow(unsafe_code)]

use std::io;

/// Closes every descriptor above stderr that the helper inherited.
///
/// Called first thing in `run`, before any descriptor of our own is open.
pub fn close_inherited_fds() -> io::Result<()> {
    // SAFETY: close_range only closes descriptors; it touches no memory. It runs before
    // the helper opens anything, so no live `OwnedFd`/`File` of ours refers to fd >= 3
    // (std keeps no descriptors open of its own), and no other thread exists yet.
    let rc = unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Empties the environment and sets `PATH` to [`crate::exec::FIXED_PATH`].
///
/// Called at the start of `run`, after `main` has read `SUDO_UID`.
#[allow(clippy::disallowed_methods)] // the one place the helper's own environment changes
pub fn reset_environment() {
    for (name, _) in std::env::vars_os() {
        // SAFETY: the helper is single-threaded: `main` calls `run` before anything
        // could start a thread, so no other thread reads the environment concurrently.
        unsafe { std::env::remove_var(name) };
    }
    // SAFETY: as above, no other thread exists.
    unsafe { std::env::set_var("PATH", crate::exec::FIXED_PATH) };
}
