//! The compaction filter: drops entries whose TTL timestamp is expired, and the list entries a
//! head made dead, while RocksDB compacts. What a column family needs is
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

/// What the TTL part of one column family's compaction filter needs; set when a TTL state
/// registers.
pub(crate) struct TtlFilter {
    pub(crate) ttl_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) refresh_every: u64,
    pub(crate) counters: Arc<TtlCounters>,
}

/// What one column family's compactions drop: entries whose TTL timestamp is expired, list
/// entries a head made dead, or both (a list with TTL).
#[derive(Default)]
pub(crate) struct CfFilter {
    /// Drop entries whose TTL timestamp is expired.
    pub(crate) ttl: Option<TtlFilter>,
    /// Drop list entries with a smaller sequence number than a head of their list met before
    /// them in the same compaction (`crate::list_entry`); the backend's maximum parallelism,
    /// to split stored keys. A compaction that does not hold the head keeps them; a later one
    /// that does drops them. Heads are classified before their expiry is judged, so an
    /// expired head the same compaction drops still drops the entries it replaced.
    pub(crate) dead_list_entries: Option<u32>,
    /// Values start with a TTL timestamp (the state has TTL, whether or not `ttl` filters).
    pub(crate) stamped: bool,
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
    /// The heads met so far (lists).
    lists: ListCursor,
}

impl Drop for StateCompactionFilter {
    fn drop(&mut self) {
        if let Some(spec) = self.spec.as_deref().and_then(|s| s.ttl.as_ref()) {
            let c = &spec.counters;
            c.compaction_filters.fetch_add(1, Ordering::Relaxed);
            c.examined_by_compaction
                .fetch_add(self.examined, Ordering::Relaxed);
            c.dropped_by_compaction
                .fetch_add(self.removed, Ordering::Relaxed);
        }
    }
}

/// Whether `key` is a list entry a head `lists` met before it made dead. A key or head that
/// does not parse is not: the read that meets it reports it, where dropping it here would
/// hide the damage.
fn is_dead(lists: &mut ListCursor, max_parallelism: u32, key: &[u8], payload: &[u8]) -> bool {
    let Ok(k) = codec::split_key(key, max_parallelism) else {
        return false;
    };
    matches!(
        lists.next((k.key, k.namespace), k.suffix, payload),
        Ok(Entry::Dead)
    )
}

impl CompactionFilter for StateCompactionFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        let Some(spec) = self.spec.as_deref() else {
            return Decision::Keep;
        };
        if let Some(max_parallelism) = spec.dead_list_entries {
            // Under TTL the list entry's payload follows its timestamp; a value too short to
            // hold one is kept for the read to report.
            let payload = if spec.stamped {
                ttl::split(value).map(|(_, p)| p)
            } else {
                Some(value)
            };
            if payload.is_some_and(|p| is_dead(&mut self.lists, max_parallelism, key, p)) {
                return Decision::Remove;
            }
        }
        let Some(ttl) = &spec.ttl else {
            return Decision::Keep;
        };
        if self.countdown == 0 {
            self.now = ttl.clock.now_ms();
            self.countdown = ttl.refresh_every.max(1);
        }
        self.countdown -= 1;
        self.examined += 1;
        if ttl::stored_is_expired(value, ttl.ttl_ms, self.now) {
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
