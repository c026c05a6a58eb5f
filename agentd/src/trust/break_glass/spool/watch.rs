//! What wakes the spool task: a change in the spool's directory, as inotify reports it (the
//! support shell appending a line, the spool created, replaced or truncated). Without it the
//! task would read the spool every few seconds for the life of the agent, though a door is
//! opened rarely, if ever.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use tokio::io::unix::AsyncFd;

/// An inotify watch on one directory.
#[derive(Debug)]
pub struct SpoolWatch {
    fd: AsyncFd<OwnedFd>,
}

impl SpoolWatch {
    /// Watches `dir` for files created, written, moved in or deleted, and for its own end.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::ONLYDIR
                | WatchFlags::MODIFY
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::DELETE
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF,
        )?;
        Ok(Self { fd: register(fd)? })
    }

    /// Waits for the next change (every event queued meanwhile is taken with it). An error
    /// means the watch is over: the directory was removed or moved away, or inotify failed.
    pub async fn changed(&mut self) -> std::io::Result<()> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
        loop {
            let mut ready = self.fd.readable_mut().await?;
            let mut events = inotify::Reader::new(ready.get_inner_mut(), &mut buf);
            let mut seen = false;
            loop {
                match events.next() {
                    Ok(event) if event.events().contains(ReadFlags::IGNORED) => {
                        return Err(std::io::Error::other("the directory is no longer watched"));
                    }
                    Ok(_) => seen = true,
                    Err(Errno::AGAIN) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            ready.clear_ready();
            if seen {
                return Ok(());
            }
        }
    }
}

/// `fd` in the runtime's reactor. `AsyncFd::new` is deprecated because an arbitrary `AsRawFd`
/// may close or swap its descriptor while it is registered; an `OwnedFd` moved into the
/// `AsyncFd` cannot (it deregisters it before dropping it). Its replacement,
/// `AsyncFd::register`, is `unsafe`, which this crate does not allow.
#[allow(
    deprecated,
    reason = "sound for an OwnedFd the AsyncFd owns; see above"
)]
fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::new(fd)
}
