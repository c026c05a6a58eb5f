//! The read connections' files: the platform's own, except that a reader keeps its memory map
//! of the database while the file keeps its size.
//!
//! A read transaction that finds the log changed since the connection's last one (any commit
//! of the writer's) makes SQLite's pager drop what it holds of the database: its page cache,
//! and the memory map of the file, which it asks the file to unmap whole (`xUnfetch` of no
//! page). The next page read maps the file again, and every page the reader touches then
//! faults into the new map, although the kernel holds it already: for the dead-man's sweep,
//! which reads every host row, tens of thousands of faults each time; for a long-poll's last
//! read, a map and an unmap of the whole file. The page cache of a reader holds only what
//! the map does not (pages still in the log), so the map is what costs.
//!
//! The map is kept when dropping it changes nothing: the database is mapped shared, so it
//! shows every page as the file holds it now, and while the file has the size it had when the
//! map was made, a new map would be the same one. The hub never shrinks its database (no
//! `VACUUM`, no auto-vacuum), so the size only grows, and a grown file is mapped again at its
//! next read (pages past the map are read as before meanwhile). Everything else is the
//! platform's VFS unchanged.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub(super) const VFS_NAME: &CStr = c"bosun-keep-map";

/// One open file: SQLite's header, then what this VFS keeps, then the platform's file
/// (`szOsFile` covers all three).
#[repr(C)]
struct KeepFile {
    /// SQLite's part: the methods below once the platform's file is open.
    head: ffi::sqlite3_file,
    /// The platform's file, in the same allocation right after this struct.
    real: *mut ffi::sqlite3_file,
    /// A main database file, whose map this keeps.
    main_db: bool,
    /// The file's size when its current map was made; `None` when it has no map.
    mapped_size: Option<i64>,
    /// Whole-file unmaps asked for and not done, and done (tests read them).
    kept: u64,
    dropped: u64,
}

/// The platform's default VFS, which this one wraps.
struct Base(*mut ffi::sqlite3_vfs);

// SAFETY: the platform's VFS object is static inside SQLite and never changes once registered;
// SQLite calls its methods from any thread.
unsafe impl Send for Base {}
// SAFETY: as above: shared, it is only read.
unsafe impl Sync for Base {}

/// This VFS, registered once per process; `None` when SQLite has no default VFS.
struct Registered(Option<Box<ffi::sqlite3_vfs>>);

// SAFETY: the registered object is only read after registration, by SQLite, from any thread.
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

static BASE: OnceLock<Base> = OnceLock::new();
static REGISTERED: OnceLock<Registered> = OnceLock::new();

/// Registers the VFS (once); whether it can be used.
pub(super) fn register() -> bool {
    REGISTERED
        .get_or_init(|| {
            // SAFETY: `sqlite3_vfs_find` initializes SQLite if needed and returns its default
            // VFS, a static object (or null).
            let base = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
            if base.is_null() {
                return Registered(None);
            }
            let base = BASE.get_or_init(|| Base(base)).0;
            // SAFETY: `base` is SQLite's default VFS, valid for the process; the copy keeps its
            // methods (which take the VFS they were called through and read only the fields
            // copied) with this VFS's name, file size and `xOpen`.
            let mut vfs = Box::new(unsafe { *base });
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = VFS_NAME.as_ptr();
            vfs.szOsFile = vfs
                .szOsFile
                .saturating_add(c_int::try_from(size_of::<KeepFile>()).unwrap_or(c_int::MAX));
            vfs.xOpen = Some(open);
            let ptr: *mut ffi::sqlite3_vfs = &mut *vfs;
            // SAFETY: the object lives in `REGISTERED` for the rest of the process, as
            // SQLite requires of a registered VFS.
            let rc = unsafe { ffi::sqlite3_vfs_register(ptr, 0) };
            Registered((rc == ffi::SQLITE_OK).then_some(vfs))
        })
        .0
        .is_some()
}

/// The platform's file inside `file`.
///
/// # Safety
/// `file` is a [`KeepFile`] that [`open`] filled in.
unsafe fn real(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: by the caller's promise.
    unsafe { (*file.cast::<KeepFile>()).real }
}

/// The VFS's `xOpen`: the platform opens the file after this VFS's part of the allocation.
unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Base(base)) = BASE.get() else {
        return ffi::SQLITE_CANTOPEN;
    };
    let keep = file.cast::<KeepFile>();
    // SAFETY: SQLite hands `szOsFile` bytes, aligned for any object, which this VFS sized as
    // a `KeepFile` followed by the platform's file (`KeepFile`'s size is a multiple of 8).
    unsafe {
        let real = keep.add(1).cast::<ffi::sqlite3_file>();
        keep.write(KeepFile {
            head: ffi::sqlite3_file {
                pMethods: std::ptr::null(),
            },
            real,
            main_db: flags & ffi::SQLITE_OPEN_MAIN_DB != 0,
            mapped_size: None,
            kept: 0,
            dropped: 0,
        });
        (*real).pMethods = std::ptr::null();
        let Some(base_open) = (**base).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = base_open(*base, name, real, flags, out_flags);
        // SQLite closes a file whose methods are set, even when its opening failed.
        let methods = (*real).pMethods;
        if !methods.is_null() {
            if (*methods).iVersion < 3 {
                // A platform file without memory maps or shared memory has fewer methods
                // than this VFS forwards (Unix files have them all): refused, not guessed at.
                if let Some(close) = (*methods).xClose {
                    close(real);
                }
                (*real).pMethods = std::ptr::null();
                return ffi::SQLITE_CANTOPEN;
            }
            (*keep).head.pMethods = &raw const METHODS;
        }
        rc
    }
}

/// Forwards a method to the platform's file.
macro_rules! forward {
    ($name:ident, $field:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            // SAFETY: SQLite calls these methods only on a file `open` filled in, whose
            // platform file is open until `close` (its methods are version 3: `open` checked).
            unsafe {
                let real = real(file);
                match (*(*real).pMethods).$field {
                    Some(method) => method(real $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

forward!(close, xClose() -> c_int, ffi::SQLITE_OK);
forward!(read, xRead(buf: *mut c_void, amount: c_int, offset: i64) -> c_int, ffi::SQLITE_IOERR);
forward!(write, xWrite(buf: *const c_void, amount: c_int, offset: i64) -> c_int, ffi::SQLITE_IOERR);
forward!(truncate, xTruncate(size: i64) -> c_int, ffi::SQLITE_IOERR);
forward!(sync, xSync(flags: c_int) -> c_int, ffi::SQLITE_IOERR);
forward!(file_size, xFileSize(size: *mut i64) -> c_int, ffi::SQLITE_IOERR);
forward!(lock, xLock(level: c_int) -> c_int, ffi::SQLITE_IOERR);
forward!(unlock, xUnlock(level: c_int) -> c_int, ffi::SQLITE_IOERR);
forward!(check_reserved, xCheckReservedLock(out: *mut c_int) -> c_int, ffi::SQLITE_IOERR);
forward!(file_control, xFileControl(op: c_int, arg: *mut c_void) -> c_int, ffi::SQLITE_NOTFOUND);
forward!(sector_size, xSectorSize() -> c_int, 4096);
forward!(device_characteristics, xDeviceCharacteristics() -> c_int, 0);
forward!(shm_map, xShmMap(page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int, ffi::SQLITE_IOERR);
forward!(shm_lock, xShmLock(offset: c_int, n: c_int, flags: c_int) -> c_int, ffi::SQLITE_IOERR);
forward!(shm_barrier, xShmBarrier() -> (), ());
forward!(shm_unmap, xShmUnmap(delete: c_int) -> c_int, ffi::SQLITE_OK);
forward!(base_unfetch, xUnfetch(offset: i64, page: *mut c_void) -> c_int, ffi::SQLITE_OK);
forward!(base_fetch, xFetch(offset: i64, amount: c_int, out: *mut *mut c_void) -> c_int, ffi::SQLITE_OK);

/// The file's size as the platform reports it; `None` when it cannot.
///
/// # Safety
/// As for the forwarded methods.
unsafe fn size_now(file: *mut ffi::sqlite3_file) -> Option<i64> {
    let mut size = 0i64;
    // SAFETY: by the caller's promise.
    (unsafe { file_size(file, &raw mut size) } == ffi::SQLITE_OK).then_some(size)
}

/// `xFetch`: notes the file's size when a page read is about to map it (the platform maps the
/// file as large as it is then, up to `mmap_size`).
unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls this only on a file `open` filled in.
    unsafe {
        let keep = file.cast::<KeepFile>();
        if (*keep).main_db && (*keep).mapped_size.is_none() {
            (*keep).mapped_size = size_now(file);
        }
        base_fetch(file, offset, amount, out)
    }
}

/// `xUnfetch`: a page given back goes to the platform; the whole map is let go only when the
/// file's size moved since it was made (or is unknown), else it is kept.
unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    page: *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls this only on a file `open` filled in.
    unsafe {
        let keep = file.cast::<KeepFile>();
        if page.is_null() && (*keep).main_db {
            if let Some(mapped) = (*keep).mapped_size
                && size_now(file) == Some(mapped)
            {
                (*keep).kept += 1;
                return ffi::SQLITE_OK;
            }
            (*keep).mapped_size = None;
            (*keep).dropped += 1;
        }
        base_unfetch(file, offset, page)
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// How often `conn`'s database file kept its map and let it go when its pager asked to drop
/// it (tests); `None` when the connection does not use this VFS.
#[cfg(test)]
pub(super) fn map_drops(conn: &rusqlite::Connection) -> Option<(u64, u64)> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the handle is the open connection's; `SQLITE_FCNTL_FILE_POINTER` writes the
    // main database's file object, which lives while the connection is open.
    unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        );
        if rc != ffi::SQLITE_OK || file.is_null() || (*file).pMethods != &raw const METHODS {
            return None;
        }
        let keep = file.cast::<KeepFile>();
        Some(((*keep).kept, (*keep).dropped))
    }
}
