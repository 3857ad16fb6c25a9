//! The compaction filter: drops entries whose TTL timestamp is expired, or (lists without TTL)
//! the list entries a head made dead, while RocksDB compacts. What a column family needs is
//! looked up when each compaction starts (states register after open).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::RwLock;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

use crate::clock::Clock;
use crate::codec;
use crate::list_entry::{Entry, ListCursor};
use crate::ttl::{self, TtlCounters};

/// What the TTL compaction filter of one column family needs; set when a TTL state registers.
pub(crate) struct TtlFilter {
    pub(crate) ttl_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) refresh_every: u64,
    pub(crate) counters: Arc<TtlCounters>,
}

/// What one column family's compactions drop. A state has at most one of the two: heads are
/// written only by lists without TTL.
pub(crate) enum CfFilter {
    /// Entries whose TTL timestamp is expired.
    Ttl(TtlFilter),
    /// List entries with a smaller sequence number than a head of their list met before them
    /// in the same compaction (`crate::list_entry`). A compaction that does not hold the head
    /// keeps them; a later one that does drops them.
    DeadListEntries {
        /// The backend's maximum parallelism, to split stored keys.
        max_parallelism: u32,
    },
}

/// Column family name → its filter. States register lazily (after open), so each column
/// family gets a factory at open that looks its filter up here at the start of each compaction.
pub(super) type FilterRegistry = Arc<RwLock<HashMap<String, Arc<CfFilter>>>>;

pub(super) struct FilterFactory {
    pub(super) cf: String,
    pub(super) registry: FilterRegistry,
}

impl CompactionFilterFactory for FilterFactory {
    type Filter = StateCompactionFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> StateCompactionFilter {
        StateCompactionFilter {
            spec: self.registry.read().get(&self.cf).cloned(),
            now: 0,
            countdown: 0,
            examined: 0,
            removed: 0,
            lists: ListCursor::new(),
        }
    }

    // The names from when the filter dropped expired entries only: RocksDB records them in
    // each database's OPTIONS file.
    fn name(&self) -> &CStr {
        c"rockstate.ttl.factory"
    }
}

/// One compaction's filter. For TTL it re-reads the clock every `refresh_every` entries (the
/// first entry reads it), and its counts are added to the state's counters when the
/// compaction ends (drop), so the per-entry path touches no shared memory.
pub(super) struct StateCompactionFilter {
    spec: Option<Arc<CfFilter>>,
    now: u64,
    countdown: u64,
    examined: u64,
    removed: u64,
    /// The heads met so far (lists without TTL).
    lists: ListCursor,
}

impl Drop for StateCompactionFilter {
    fn drop(&mut self) {
        if let Some(CfFilter::Ttl(spec)) = self.spec.as_deref() {
            let c = &spec.counters;
            c.compaction_filters.fetch_add(1, Ordering::Relaxed);
            c.examined_by_compaction
                .fetch_add(self.examined, Ordering::Relaxed);
            c.dropped_by_compaction
                .fetch_add(self.removed, Ordering::Relaxed);
        }
    }
}

impl CompactionFilter for StateCompactionFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        match self.spec.as_deref() {
            None => Decision::Keep,
            Some(CfFilter::Ttl(spec)) => {
                if self.countdown == 0 {
                    self.now = spec.clock.now_ms();
                    self.countdown = spec.refresh_every.max(1);
                }
                self.countdown -= 1;
                self.examined += 1;
                if ttl::stored_is_expired(value, spec.ttl_ms, self.now) {
                    self.removed += 1;
                    Decision::Remove
                } else {
                    Decision::Keep
                }
            }
            Some(CfFilter::DeadListEntries { max_parallelism }) => {
                // A key or head that does not parse is kept: the read that meets it reports
                // it, where dropping it here would hide the damage.
                let Ok(k) = codec::split_key(key, *max_parallelism) else {
                    return Decision::Keep;
                };
                match self.lists.next((k.key, k.namespace), k.suffix, value) {
                    Ok(Entry::Dead) => Decision::Remove,
                    _ => Decision::Keep,
                }
            }
        }
    }

    fn name(&self) -> &CStr {
        c"rockstate.ttl"
    }
}
