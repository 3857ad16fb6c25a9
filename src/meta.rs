//! The backend's own metadata in the default column family (the heap backend keeps the same
//! keys in a metadata table): the key of each record, [`BackendMeta`] (checked on every open),
//! the column-family name of each state, the allocator of list-element sequence numbers
//! whose high-water mark lives there, and the TTL timestamps of list states, whose high-water
//! marks live there too. A leaf below the state handles, the checkpoint and restore code and
//! the backend facade, which all read these keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::store::Table;
use crate::ttl::TimeDomain;

/// Version of the metadata layout in the default column family.
pub const BACKEND_META_VERSION: u32 = 1;
pub(crate) const META_BACKEND: &[u8] = b"backend";
pub(crate) const META_STATE_PREFIX: &str = "state/";
pub(crate) const META_LIST_SEQ: &[u8] = b"list-seq";
/// Key of the event-time watermark the backend had reached when it last persisted it (a
/// checkpoint's sync phase, a close): 8 bytes big-endian.
pub(crate) const META_WATERMARK: &[u8] = b"watermark";
/// Prefix of the key of a TTL list state's timestamp high-water mark (`ttl-floor/<name>`):
/// [`TtlMark`], 8 bytes big-endian and a byte naming its time domain.
pub(crate) const META_TTL_FLOOR_PREFIX: &str = "ttl-floor/";
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
        self.reserve(1)
    }

    /// `count` consecutive numbers, the first returned, persisting a reservation that covers
    /// them first: a savepoint restore numbers each run's list entries from its own range, so
    /// runs restored on several threads keep the file's order.
    pub(crate) fn reserve(&self, count: u64) -> Result<u64> {
        let start = self.next.fetch_add(count, Ordering::Relaxed);
        let end = start
            .checked_add(count)
            .ok_or_else(|| Error::decode("list sequence", "the numbers ran out"))?;
        if end <= self.reserved.load(Ordering::Acquire) {
            return Ok(start);
        }
        let _guard = self.reserving.lock();
        // Another thread may have reserved past `end` while we waited.
        if end > self.reserved.load(Ordering::Acquire) {
            let new = end.saturating_add(SEQ_BLOCK);
            self.meta.put(META_LIST_SEQ, &new.to_be_bytes())?;
            // Durable before any number of the range is used (WAL off: a list's own column
            // family may flush before the metadata's).
            self.meta.flush()?;
            self.reserved.store(new, Ordering::Release);
        }
        Ok(start)
    }
}

/// The key of the timestamp high-water mark of TTL list state `name`.
pub(crate) fn ttl_floor_key(name: &str) -> Vec<u8> {
    format!("{META_TTL_FLOOR_PREFIX}{name}").into_bytes()
}

/// A metadata number (`what`) as stored, 8 bytes big-endian (`None` when absent).
fn decode_u64(stored: Option<&[u8]>, what: &'static str) -> Result<Option<u64>> {
    stored
        .map(|b| {
            <[u8; 8]>::try_from(b)
                .map(u64::from_be_bytes)
                .map_err(|_| Error::decode(what, "not 8 bytes"))
        })
        .transpose()
}

/// Reads the metadata number (`what`) stored under `key` in `meta`: the list-sequence
/// high-water mark, the event-time watermark, a TTL list's timestamp mark.
pub(crate) fn read_u64(meta: &Table, key: &[u8], what: &'static str) -> Result<Option<u64>> {
    meta.get_with(key, |b| decode_u64(Some(b), what))?
        .transpose()
        .map(Option::flatten)
}

/// The event-time watermark stored in `meta` (0 when absent: none was ever persisted).
pub(crate) fn read_watermark(meta: &Table) -> Result<u64> {
    Ok(read_u64(meta, META_WATERMARK, "event-time watermark")?.unwrap_or(0))
}

/// The list-sequence high-water mark stored in `meta` (0 when absent).
pub(crate) fn read_list_seq(meta: &Table) -> Result<u64> {
    Ok(read_u64(meta, META_LIST_SEQ, "list sequence")?.unwrap_or(0))
}

/// A TTL list state's timestamp high-water mark as stored under `ttl-floor/<name>`: every
/// timestamp the state holds is at or below `stamp`, a time of `domain`. Stored as the stamp,
/// 8 bytes big-endian, then one byte: 0 processing time, 1 event time. A mark of 8 bytes alone
/// (written before the domain was recorded, or by a savepoint restore, whose file does not
/// record it) has no domain: the next registration of the state takes it as its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlMark {
    /// The highest timestamp the state may hold.
    pub(crate) stamp: u64,
    /// The time domain of `stamp`, when known.
    pub(crate) domain: Option<TimeDomain>,
}

impl TtlMark {
    /// The stored form.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = self.stamp.to_be_bytes().to_vec();
        match self.domain {
            Some(TimeDomain::ProcessingTime) => out.push(0),
            Some(TimeDomain::EventTime) => out.push(1),
            None => {}
        }
        out
    }

    /// Parses the stored form.
    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        let what = "TTL timestamp mark";
        let (stamp, rest) = b
            .split_first_chunk::<8>()
            .ok_or_else(|| Error::decode(what, "shorter than 8 bytes"))?;
        let domain = match rest {
            [] => None,
            [0] => Some(TimeDomain::ProcessingTime),
            [1] => Some(TimeDomain::EventTime),
            [d] => return Err(Error::decode(what, format!("unknown time domain {d}"))),
            _ => return Err(Error::decode(what, "longer than 9 bytes")),
        };
        Ok(TtlMark {
            stamp: u64::from_be_bytes(*stamp),
            domain,
        })
    }

    /// The mark covering the timestamps of two sources of one state (a rescale): the higher
    /// stamp, in their common domain (a source whose domain is unknown takes the other's);
    /// `None` when their domains differ, since then no time covers both.
    pub(crate) fn joined(self, other: TtlMark) -> Option<TtlMark> {
        let domain = match (self.domain, other.domain) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        Some(TtlMark {
            stamp: self.stamp.max(other.stamp),
            domain,
        })
    }
}

/// Reads the timestamp high-water mark stored under `key` in `meta` (`None` when absent: a
/// state whose timestamps no mark covers).
pub(crate) fn read_ttl_mark(meta: &Table, key: &[u8]) -> Result<Option<TtlMark>> {
    meta.get_with(key, TtlMark::decode)?.transpose()
}

/// Hands out the TTL timestamps of one list state: the clock's time, but never below a
/// timestamp handed out before, so an entry written after another never carries an earlier
/// timestamp, even when the clock steps back or a restore lands on a machine whose clock is
/// behind. A blind list `update` rests on it: its head must expire no earlier than the
/// entries it replaced (docs/decisions/0045-blind-ttl-list-updates.md). The high-water mark is
/// persisted before a timestamp above it is used, so it covers every timestamp the state
/// holds across reopen, restore and rescale (which takes the maximum over its sources). A
/// state has a mark only if one has covered it since it was created (or since a savepoint
/// restore wrote it): a state written before marks existed has none, and updates by reading.
pub(crate) struct StampFloor {
    clock: Arc<dyn Clock>,
    /// The largest timestamp handed out (or restored).
    high: AtomicU64,
    /// The mark persisted under `key`: every timestamp handed out is at or below it.
    persisted: AtomicU64,
    /// Serializes persisting a new mark.
    persisting: Mutex<()>,
    meta: Table,
    key: Vec<u8>,
    /// The time domain of the clock, stored with each mark.
    domain: TimeDomain,
}

impl std::fmt::Debug for StampFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StampFloor")
            .field("high", &self.high.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl StampFloor {
    /// The floor of state `name` taking its times from `clock`, of `domain`, starting at
    /// `stamp`: the mark the caller read from (or wrote to) `meta`, of `domain`.
    pub(crate) fn new(
        meta: Table,
        name: &str,
        clock: Arc<dyn Clock>,
        stamp: u64,
        domain: TimeDomain,
    ) -> Self {
        StampFloor {
            clock,
            high: AtomicU64::new(stamp),
            persisted: AtomicU64::new(stamp),
            persisting: Mutex::new(()),
            meta,
            key: ttl_floor_key(name),
            domain,
        }
    }

    /// The timestamp of a write made now: the clock's time, or the largest timestamp handed
    /// out before when the clock is behind it.
    #[inline]
    pub(crate) fn next(&self) -> Result<u64> {
        let now = self.clock.now_ms();
        let stamp = self.high.fetch_max(now, Ordering::AcqRel).max(now);
        self.cover(stamp)?;
        Ok(stamp)
    }

    /// Persists a mark of at least `stamp` unless one is.
    #[inline]
    fn cover(&self, stamp: u64) -> Result<()> {
        if stamp <= self.persisted.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.persisting.lock();
        // Another thread may have persisted past `stamp` while we waited.
        if stamp > self.persisted.load(Ordering::Acquire) {
            let mark = TtlMark {
                stamp,
                domain: Some(self.domain),
            };
            self.meta.put(&self.key, &mark.encode())?;
            self.persisted.store(stamp, Ordering::Release);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::heap::HeapTable;

    /// A clock another thread may set back.
    #[derive(Debug, Default)]
    struct Settable(AtomicU64);

    impl Clock for Settable {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn stamps_never_go_back_and_the_stored_mark_covers_each_one() {
        let meta = Table::Heap(HeapTable::new(std::path::Path::new("meta")));
        let clock = Arc::new(Settable::default());
        clock.0.store(1_000, Ordering::SeqCst);
        let floor = Arc::new(StampFloor::new(
            meta.clone(),
            "l",
            clock.clone(),
            0,
            TimeDomain::EventTime,
        ));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (floor, meta) = (Arc::clone(&floor), meta.clone());
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..2_000 {
                        let stamp = floor.next().unwrap();
                        assert!(stamp >= last, "{stamp} after {last}");
                        let stored = read_ttl_mark(&meta, &ttl_floor_key("l")).unwrap().unwrap();
                        assert!(stored.stamp >= stamp, "{stored:?} below {stamp}");
                        assert_eq!(stored.domain, Some(TimeDomain::EventTime));
                        last = stamp;
                    }
                })
            })
            .collect();
        // The clock moves forward and back while they stamp.
        for t in [5_000, 2_000, 9_000, 100, 12_000] {
            clock.0.store(t, Ordering::SeqCst);
            std::thread::yield_now();
        }
        for t in threads {
            t.join().unwrap();
        }
        clock.0.store(12_000, Ordering::SeqCst);
        assert_eq!(floor.next().unwrap(), 12_000);
        clock.0.store(3_000, Ordering::SeqCst);
        assert_eq!(floor.next().unwrap(), 12_000);
        // A floor started again from the stored mark goes on from it.
        let stored = read_ttl_mark(&meta, &ttl_floor_key("l")).unwrap().unwrap();
        let again = StampFloor::new(
            meta,
            "l",
            Arc::new(ManualClock::new(0)),
            stored.stamp,
            TimeDomain::EventTime,
        );
        assert_eq!(again.next().unwrap(), 12_000);
    }

    #[test]
    fn a_ttl_mark_round_trips_with_or_without_its_domain_and_refuses_other_lengths() {
        for domain in [
            None,
            Some(TimeDomain::ProcessingTime),
            Some(TimeDomain::EventTime),
        ] {
            let m = TtlMark {
                stamp: 0x0102_0304_0506_0708,
                domain,
            };
            assert_eq!(TtlMark::decode(&m.encode()).unwrap(), m);
        }
        assert_eq!(
            TtlMark::decode(&[0, 0, 0, 0, 0, 0, 0, 9, 1]).unwrap(),
            TtlMark {
                stamp: 9,
                domain: Some(TimeDomain::EventTime)
            }
        );
        for bad in [&[0u8; 7][..], &[0; 10], &[0, 0, 0, 0, 0, 0, 0, 9, 2]] {
            assert!(
                matches!(TtlMark::decode(bad), Err(Error::Decode { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn joined_marks_take_the_higher_stamp_in_their_common_domain() {
        let at = |stamp, domain| TtlMark { stamp, domain };
        let (p, e) = (
            Some(TimeDomain::ProcessingTime),
            Some(TimeDomain::EventTime),
        );
        assert_eq!(at(5, p).joined(at(9, p)), Some(at(9, p)));
        assert_eq!(at(5, None).joined(at(3, e)), Some(at(5, e)));
        assert_eq!(at(5, None).joined(at(3, None)), Some(at(5, None)));
        assert_eq!(at(5, p).joined(at(3, e)), None);
    }

    #[test]
    fn a_mark_that_is_not_eight_bytes_is_a_decode_error() {
        assert_eq!(decode_u64(None, "mark").unwrap(), None);
        assert_eq!(
            decode_u64(Some(&7u64.to_be_bytes()), "mark").unwrap(),
            Some(7)
        );
        assert!(matches!(
            decode_u64(Some(b"short"), "mark"),
            Err(Error::Decode { .. })
        ));
    }
}
