//! The backend's own metadata in the default column family (the heap backend keeps the same
//! keys in a metadata table): the key of each record, [`BackendMeta`] (checked on every open),
//! the column-family name of each state, and the allocator of list-element sequence numbers
//! whose high-water mark lives there. A leaf below the state handles, the checkpoint and
//! restore code and the backend facade, which all read these keys.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::keygroup::KeyGroupRange;
use crate::store::Table;

/// Version of the metadata layout in the default column family.
pub const BACKEND_META_VERSION: u32 = 1;
pub(crate) const META_BACKEND: &[u8] = b"backend";
pub(crate) const META_STATE_PREFIX: &str = "state/";
pub(crate) const META_LIST_SEQ: &[u8] = b"list-seq";
pub(crate) const STATE_CF_PREFIX: &str = "state:";
/// Longest accepted state name in bytes.
pub const MAX_STATE_NAME: usize = 255;

/// Backend-level metadata, checked on every open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendMeta {
    /// Layout version ([`BACKEND_META_VERSION`]).
    pub version: u32,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// Groups this database holds.
    pub key_groups: KeyGroupRange,
}

/// Hands out list-element sequence numbers; the high-water mark is persisted before a number
/// is used, so numbers only grow across reopen and restore.
pub(crate) struct SequenceAllocator {
    next: AtomicU64,
    /// Numbers below this are persisted as reserved; read lock-free on every append.
    reserved: AtomicU64,
    /// Serializes persisting a new reservation.
    reserving: Mutex<()>,
    meta: Table,
}

/// Numbers reserved (persisted) at a time.
const SEQ_BLOCK: u64 = 1 << 16;

impl SequenceAllocator {
    /// An allocator whose numbers below `reserved` (read from `meta`) are taken.
    pub(crate) fn new(meta: Table, reserved: u64) -> Self {
        SequenceAllocator {
            next: AtomicU64::new(reserved),
            reserved: AtomicU64::new(reserved),
            reserving: Mutex::new(()),
            meta,
        }
    }

    /// The next number, persisting a new reservation first when the reserved ones run out.
    pub(crate) fn next(&self) -> Result<u64> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n < self.reserved.load(Ordering::Acquire) {
            return Ok(n);
        }
        let _guard = self.reserving.lock();
        // Another thread may have reserved past `n` while we waited.
        if n >= self.reserved.load(Ordering::Acquire) {
            let new = n + SEQ_BLOCK;
            self.meta.put(META_LIST_SEQ, &new.to_be_bytes())?;
            self.reserved.store(new, Ordering::Release);
        }
        Ok(n)
    }
}
