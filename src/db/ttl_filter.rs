//! The TTL compaction filter: drops entries whose timestamp is expired while RocksDB compacts,
//! looked up per column family when each compaction starts (states register after open).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::RwLock;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

use crate::clock::Clock;
use crate::ttl::{self, TtlCounters};

/// What the TTL compaction filter of one column family needs; set when a TTL state registers.
pub(crate) struct TtlFilter {
    pub(crate) ttl_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) refresh_every: u64,
    pub(crate) counters: Arc<TtlCounters>,
}

/// Column family name → its TTL filter. States register lazily (after open), so each column
/// family gets a factory at open that looks its filter up here at the start of each compaction.
pub(super) type FilterRegistry = Arc<RwLock<HashMap<String, Arc<TtlFilter>>>>;

pub(super) struct TtlFilterFactory {
    pub(super) cf: String,
    pub(super) registry: FilterRegistry,
}

impl CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlCompactionFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> TtlCompactionFilter {
        TtlCompactionFilter {
            spec: self.registry.read().get(&self.cf).cloned(),
            now: 0,
            countdown: 0,
            examined: 0,
            removed: 0,
        }
    }

    fn name(&self) -> &CStr {
        c"rockstate.ttl.factory"
    }
}

/// Drops entries whose TTL timestamp is expired; re-reads the clock every `refresh_every`
/// entries (the first entry reads it). Its counts are added to the state's counters when the
/// compaction ends (drop), so the per-entry path touches no shared memory.
pub(super) struct TtlCompactionFilter {
    spec: Option<Arc<TtlFilter>>,
    now: u64,
    countdown: u64,
    examined: u64,
    removed: u64,
}

impl Drop for TtlCompactionFilter {
    fn drop(&mut self) {
        if let Some(spec) = &self.spec {
            let c = &spec.counters;
            c.compaction_filters.fetch_add(1, Ordering::Relaxed);
            c.examined_by_compaction
                .fetch_add(self.examined, Ordering::Relaxed);
            c.dropped_by_compaction
                .fetch_add(self.removed, Ordering::Relaxed);
        }
    }
}

impl CompactionFilter for TtlCompactionFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> Decision {
        let Some(spec) = &self.spec else {
            return Decision::Keep;
        };
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

    fn name(&self) -> &CStr {
        c"rockstate.ttl"
    }
}
