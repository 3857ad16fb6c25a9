//! State time-to-live (docs/architecture.md §8, invariant 8;
//! docs/decisions/0005-ttl-timestamp-and-filter-registry.md): per-state configuration, the
//! injected clock, the 8-byte timestamp every TTL value carries, and the expiry rule shared by
//! reads, the compaction filter and savepoint cleanup.
//!
//! Stored TTL value: `[last-access timestamp, u64 ms, big-endian][payload]`. An entry is
//! expired iff `ts + ttl <= now` (saturating), with `now` from the state's time domain:
//! processing time (an injected [`crate::Clock`]) or event time (a watermark the engine advances —
//! something Flink's TTL lacks).
//!
//! Flink SQL's idle state retention is [`TtlConfig::idle_state_retention`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Length of the timestamp prefix of a TTL value.
pub const TS_LEN: usize = 8;

/// When an entry's timestamp is refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateType {
    /// TTL disabled: entries never expire (Flink's `UpdateType.Disabled`).
    Disabled,
    /// Refreshed on every write (the default).
    OnCreateAndWrite,
    /// Refreshed on every read and write. The refresh is written before the read hands the
    /// value over, so a write the reader makes to the key comes after it; a write of the same
    /// key from another thread between the read and its refresh is overwritten by the
    /// refresh (a key belongs to one operator instance, read and written by one thread).
    OnReadAndWrite,
}

/// Whether a read may return an expired entry that cleanup has not removed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Visibility {
    /// Expired entries are never returned (the default).
    NeverReturnExpired,
    /// Expired entries are returned until cleanup removes them.
    ReturnExpiredIfNotCleanedUp,
}

/// Which clock decides expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeDomain {
    /// The backend's processing-time clock (the default).
    ProcessingTime,
    /// The event-time watermark the engine advances with `KeyedBackend::advance_watermark`.
    /// A checkpoint's sync phase and a close keep it in the backend's metadata (`watermark`),
    /// so a reopened, restored or rescaled backend starts where its state was (a rescale: the
    /// highest of its sources). A savepoint records it too: a backend restored from
    /// savepoints starts at the highest of their watermarks (a version 1 or 2 file counts 0).
    EventTime,
}

/// How expired entries are removed besides on read (reads always remove what they find expired
/// under `NeverReturnExpired`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanup {
    /// Drop expired entries during RocksDB compaction (default on).
    pub compaction_filter: bool,
    /// The compaction filter re-reads the clock every this many entries (default 1000).
    pub refresh_every: u64,
    /// Every SST is compacted (and so filtered) at least this often; zero turns it off
    /// (default 30 days). RocksDB counts whole seconds: a fraction rounds up.
    pub periodic_compaction: Duration,
    /// Drop expired entries while writing a full snapshot / savepoint (default on).
    pub full_snapshot: bool,
}

impl Default for Cleanup {
    fn default() -> Self {
        Cleanup {
            compaction_filter: true,
            refresh_every: 1000,
            periodic_compaction: Duration::from_secs(30 * 24 * 3600),
            full_snapshot: true,
        }
    }
}

/// Time-to-live of one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtlConfig {
    /// How long an entry lives after its timestamp.
    pub ttl: Duration,
    /// When the timestamp is refreshed.
    pub update_type: UpdateType,
    /// Whether expired entries may be read.
    pub visibility: Visibility,
    /// Which clock decides expiry.
    pub time_domain: TimeDomain,
    /// Background cleanup.
    pub cleanup: Cleanup,
}

impl TtlConfig {
    /// Whether entries can expire at all: not with [`UpdateType::Disabled`], which reads
    /// treat as never expired. The compaction filter, incremental cleanup and the savepoint
    /// writer drop expired entries only of states for which this holds.
    pub(crate) fn expires(&self) -> bool {
        self.update_type != UpdateType::Disabled
    }

    /// `ttl` with Flink's defaults: refreshed on write, expired never returned, processing time,
    /// compaction-filter cleanup.
    pub fn new(ttl: Duration) -> Self {
        TtlConfig {
            ttl,
            update_type: UpdateType::OnCreateAndWrite,
            visibility: Visibility::NeverReturnExpired,
            time_domain: TimeDomain::ProcessingTime,
            cleanup: Cleanup::default(),
        }
    }

    /// Flink SQL's idle state retention (`table.exec.state.ttl`): state untouched for
    /// `retention` is dropped. Reads count as touches, so state that is only read stays alive.
    pub fn idle_state_retention(retention: Duration) -> Self {
        TtlConfig {
            update_type: UpdateType::OnReadAndWrite,
            ..TtlConfig::new(retention)
        }
    }

    /// Sets the update type.
    pub fn update_type(mut self, u: UpdateType) -> Self {
        self.update_type = u;
        self
    }

    /// Sets the visibility.
    pub fn visibility(mut self, v: Visibility) -> Self {
        self.visibility = v;
        self
    }

    /// Sets the time domain.
    pub fn time_domain(mut self, t: TimeDomain) -> Self {
        self.time_domain = t;
        self
    }

    /// Sets the cleanup strategies.
    pub fn cleanup(mut self, c: Cleanup) -> Self {
        self.cleanup = c;
        self
    }

    /// The TTL in milliseconds, at least 1 (`u64::MAX` for a TTL beyond it: never expires).
    pub fn ttl_ms(&self) -> u64 {
        crate::clock::millis(self.ttl).max(1)
    }
}

/// `ts + ttl <= now`. A TTL of `u64::MAX` ([`TtlConfig::ttl_ms`] of a TTL beyond it) never
/// expires, and an end past `u64::MAX` is never reached, also once the clock or an event-time
/// watermark reads `u64::MAX` (the final watermark of a bounded input).
#[inline]
pub fn is_expired(ts: u64, ttl_ms: u64, now: u64) -> bool {
    ttl_ms != u64::MAX && ts.checked_add(ttl_ms).is_some_and(|end| end <= now)
}

/// Splits a stored TTL value into its timestamp and payload; `None` if shorter than the prefix.
#[inline]
pub fn split(stored: &[u8]) -> Option<(u64, &[u8])> {
    let (ts, payload) = stored.split_first_chunk::<TS_LEN>()?;
    Some((u64::from_be_bytes(*ts), payload))
}

/// [`split`], with a value too short to carry a timestamp a `Decode` error (for reads, which
/// report such a value as corrupt).
#[inline]
pub(crate) fn split_stored(stored: &[u8]) -> crate::Result<(u64, &[u8])> {
    split(stored)
        .ok_or_else(|| crate::Error::decode("TTL value", "shorter than its 8-byte timestamp"))
}

/// Whether a stored TTL value is expired. Values too short to carry a timestamp are kept:
/// dropping bytes we cannot interpret would lose data silently; reads report them as corrupt.
#[inline]
pub fn stored_is_expired(stored: &[u8], ttl_ms: u64, now: u64) -> bool {
    split(stored).is_some_and(|(ts, _)| is_expired(ts, ttl_ms, now))
}

/// Counts of what TTL cleanup did for one state.
#[derive(Debug, Default)]
pub(crate) struct TtlCounters {
    /// Entries the compaction filter dropped.
    pub(crate) dropped_by_compaction: AtomicU64,
    /// Entries the compaction filter examined.
    pub(crate) examined_by_compaction: AtomicU64,
    /// Compaction filters run (one per compaction, or sub-compaction, of the state).
    pub(crate) compaction_filters: AtomicU64,
    /// Expired entries removed when a read found them.
    pub(crate) dropped_on_read: AtomicU64,
    /// Expired entries removed by the heap backend's incremental cleanup.
    pub(crate) dropped_incrementally: AtomicU64,
}

/// What TTL cleanup did for one state (`KeyedBackend::ttl_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TtlStats {
    /// Entries the compaction filter dropped.
    pub dropped_by_compaction: u64,
    /// Entries the compaction filter examined.
    pub examined_by_compaction: u64,
    /// Compaction filters run.
    pub compaction_filters: u64,
    /// Expired entries removed when a read found them.
    pub dropped_on_read: u64,
    /// Expired entries removed by the heap backend's incremental cleanup.
    pub dropped_incrementally: u64,
}

impl TtlCounters {
    /// Current values.
    pub fn snapshot(&self) -> TtlStats {
        TtlStats {
            dropped_by_compaction: self.dropped_by_compaction.load(Ordering::Relaxed),
            examined_by_compaction: self.examined_by_compaction.load(Ordering::Relaxed),
            compaction_filters: self.compaction_filters.load(Ordering::Relaxed),
            dropped_on_read: self.dropped_on_read.load(Ordering::Relaxed),
            dropped_incrementally: self.dropped_incrementally.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_inclusive_and_an_end_past_u64_max_is_never_reached() {
        assert!(!is_expired(100, 10, 109));
        assert!(is_expired(100, 10, 110));
        assert!(!is_expired(u64::MAX - 1, 10, u64::MAX - 1));
        assert!(!is_expired(u64::MAX, 10, u64::MAX));
        assert!(is_expired(u64::MAX - 10, 10, u64::MAX));
        assert!(!is_expired(0, u64::MAX, u64::MAX));
        assert!(!is_expired(1_000, u64::MAX, u64::MAX));
    }

    #[test]
    fn split_and_short_values() {
        let mut v = 42u64.to_be_bytes().to_vec();
        v.extend_from_slice(b"payload");
        assert_eq!(split(&v), Some((42, &b"payload"[..])));
        assert_eq!(split(&v[..7]), None);
        assert!(!stored_is_expired(&v[..7], 1, u64::MAX));
        assert!(stored_is_expired(&v, 1, 43));
    }
}
