//! RocksDB's C API where rust-rocksdb does not reach: its error messages, and a flush that
//! does not wait for compactions first.
//!
//! RocksDB's flushes (rust-rocksdb's `flush_*`, and the flush inside a RocksDB checkpoint)
//! use `FlushOptions::allow_write_stall = false`: before switching the memtable they wait
//! until one more level-0 file would not slow writes down, that is for compactions to bring
//! level 0 under `level0_slowdown_writes_trigger`. Behind a compaction backlog (state loaded
//! faster than two cores compact it) a checkpoint's sync phase waited for that, 1.8–15 s at
//! 20M keys (decision 0049). [`flush_now`], which every flush of the crate goes through,
//! flushes at once; the next writes meet RocksDB's write controller as any write does.

use std::ffi::{c_char, c_int, CStr};

use rocksdb::{AsColumnFamilyRef, AsRawPtr};

use super::{Handle, Rocks};
use crate::error::{Error, Result};

/// The message RocksDB set in `err` (null: none), freed.
///
/// # Safety
/// `err` is null or a NUL-terminated C string RocksDB allocated with malloc and nobody else
/// frees.
pub(super) unsafe fn take_message(err: *mut c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: a valid C string, freed once here.
    let m = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    unsafe { librocksdb_sys::rocksdb_free(err.cast()) };
    Some(m)
}

/// A RocksDB status message as rockstate's error: its status code, the message's prefix as
/// rust-rocksdb's `Error::kind` reads it (which has no constructor from a message), mapped
/// as [`super::rocks_error`] maps it.
pub(super) fn message_error(message: String) -> Error {
    use rocksdb::ErrorKind as R;
    let code = match message.split(':').next().unwrap_or("") {
        "NotFound" => R::NotFound,
        "Corruption" => R::Corruption,
        "Not implemented" => R::NotSupported,
        "Invalid argument" => R::InvalidArgument,
        "IO error" => R::IOError,
        "Merge in progress" => R::MergeInProgress,
        "Result incomplete" => R::Incomplete,
        "Shutdown in progress" => R::ShutdownInProgress,
        "Operation timed out" => R::TimedOut,
        "Operation aborted" => R::Aborted,
        "Resource busy" => R::Busy,
        "Operation expired" => R::Expired,
        "Operation failed. Try again." => R::TryAgain,
        "Compaction too large" => R::CompactionTooLarge,
        "Column family dropped" => R::ColumnFamilyDropped,
        _ => R::Unknown,
    };
    Error::RocksDb {
        kind: super::error_kind(code),
        detail: message,
    }
}

/// Owned `rocksdb_flushoptions_t`: wait for the flush, allow a write stall.
struct FlushNowOptions(*mut librocksdb_sys::rocksdb_flushoptions_t);

impl Drop for FlushNowOptions {
    fn drop(&mut self) {
        // SAFETY: created by `rocksdb_flushoptions_create`, destroyed once here.
        unsafe { librocksdb_sys::rocksdb_flushoptions_destroy(self.0) }
    }
}

/// Flushes the memtables of `handles`, one column family after another as RocksDB's own
/// flushes do, without waiting for compactions to clear a write stall first; returns once
/// the flushes are done. (Not RocksDB's atomic flush: after a flush failed for want of disk
/// space, its error recovery retried the atomic flush's file and failed for good.)
pub(super) fn flush_now(rocks: &Rocks, handles: &[&Handle]) -> Result<()> {
    // SAFETY: creates a fresh options object; null (allocation failure) is checked below.
    let opts = FlushNowOptions(unsafe { librocksdb_sys::rocksdb_flushoptions_create() });
    if opts.0.is_null() {
        return Err(Error::Internal("cannot create flush options".into()));
    }
    // SAFETY: `opts.0` is a valid, exclusively owned options object (created above).
    unsafe {
        librocksdb_sys::rocksdb_flushoptions_set_wait(opts.0, 1);
        librocksdb_sys::rocksdb_flushoptions_set_allow_write_stall(opts.0, 1);
    }
    let mut cfs: Vec<*mut librocksdb_sys::rocksdb_column_family_handle_t> =
        handles.iter().map(|h| h.inner()).collect();
    let n = c_int::try_from(cfs.len())
        .map_err(|_| Error::Internal("too many column families to flush".into()))?;
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: `rocks` and the handles (borrowed for the call) outlive it; `cfs` holds `n`
    // valid column family handles of `rocks`; `opts.0` is a valid options object; `err` is a
    // valid out-pointer RocksDB sets to a malloc'ed message on failure, taken once below.
    unsafe {
        librocksdb_sys::rocksdb_flush_cfs(
            rocks.as_raw_ptr(),
            opts.0,
            cfs.as_mut_ptr(),
            n,
            &mut err,
        );
    }
    // SAFETY: `err` is null or RocksDB's malloc'ed message, taken once.
    match unsafe { take_message(err) } {
        None => Ok(()),
        Some(m) => Err(message_error(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn status_messages_map_to_the_kinds_rust_rocksdb_errors_map_to() {
        for (message, kind) in [
            ("IO error: No space left on device", ErrorKind::Io),
            ("Corruption: block checksum mismatch", ErrorKind::Corruption),
            (
                "Invalid argument: Column family not found",
                ErrorKind::InvalidInput,
            ),
            ("Shutdown in progress: ", ErrorKind::Transient),
            ("Operation failed. Try again.: x", ErrorKind::Transient),
            ("Column family dropped: ", ErrorKind::Conflict),
            ("Not implemented: x", ErrorKind::Unsupported),
            ("something else", ErrorKind::Io),
        ] {
            assert_eq!(message_error(message.into()).kind(), kind, "{message}");
        }
    }
}
