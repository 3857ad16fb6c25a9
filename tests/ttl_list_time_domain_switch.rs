//! A TTL list whose time domain changes between runs of a job (processing time → event time,
//! or back). A list whose reads never return expired entries takes its timestamps from a mark
//! that never goes back (docs/decisions/0045-blind-ttl-list-updates.md). The mark is a time
//! of the domain it was taken in: carried into the other domain, every write would be stamped
//! with it instead of the new clock, and a list written at event time 1 s with a TTL of an hour
//! would still be read when the watermark is two hours on. A list registering with another
//! domain than its mark's folds its heads and drops the mark, as for a switch of visibility,
//! and from then on updates by reading, stamped by the new domain's clock.

use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::TimeDomain;
use rockstate::{CodecId, KeyedBackend, ManualClock, RawListState, StateDescriptor, TtlConfig};

const HOUR: Duration = Duration::from_secs(3600);
/// Processing time during the first run: epoch milliseconds of late 2023.
const WALL: u64 = 1_700_000_000_000;
/// The watermark when the event-time run writes: one second of event time.
const EVENT: u64 = 1_000;

fn list(b: &KeyedBackend, domain: TimeDomain) -> RawListState {
    b.raw_list_state(
        StateDescriptor::new("l").with_ttl(TtlConfig::new(HOUR).time_domain(domain)),
        CodecId::new("bytes", 1),
    )
    .unwrap()
}

fn open(dir: &std::path::Path) -> KeyedBackend {
    KeyedBackend::builder(dir)
        .clock(Arc::new(ManualClock::new(WALL)))
        .open()
        .unwrap()
}

/// A first run of the job: list `k` gets `old` in `domain` (with the watermark at
/// `watermark`), then the backend closes.
fn first_run(dir: &std::path::Path, domain: TimeDomain, watermark: u64) {
    let b = open(dir);
    b.advance_watermark(watermark);
    let l = list(&b, domain);
    l.update(b"k", b"", [&b"old"[..]]).unwrap();
    l.add(b"k", b"", b"older-run").unwrap();
    b.close().unwrap();
}

/// The closed database at `dir` opened raw, and the stored TTL timestamp mark of state `l`.
fn stored_mark(dir: &std::path::Path) -> (rocksdb::DB, Vec<u8>) {
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, dir).unwrap();
    let db = rocksdb::DB::open_cf(&opts, dir, &cfs).unwrap();
    let mark = db.get(b"ttl-floor/l").unwrap().unwrap();
    (db, mark)
}

/// The TTL timestamps of the stored entries of key `k` of state `l`.
fn stamps(b: &KeyedBackend, k: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group("l", g, |e| {
            if e.key == k {
                out.push(u64::from_be_bytes(e.value[..8].try_into().unwrap()));
            }
            Ok(true)
        })
        .unwrap();
    }
    out
}

#[test]
fn a_list_moved_to_event_time_is_stamped_by_the_watermark_not_its_processing_time_mark() {
    let dir = tempfile::tempdir().unwrap();
    first_run(dir.path(), TimeDomain::ProcessingTime, 0);
    let b = open(dir.path());
    b.advance_watermark(EVENT);
    let l = list(&b, TimeDomain::EventTime);
    l.update(b"k", b"", [&b"new"[..]]).unwrap();
    l.update(b"j", b"", [&b"fresh"[..]]).unwrap();
    assert_eq!(l.get(b"k", b"").unwrap(), vec![b"new".to_vec()]);
    assert_eq!(
        stamps(&b, b"k"),
        vec![EVENT],
        "the update must be stamped by the watermark and leave no entry of the earlier run"
    );
    assert_eq!(stamps(&b, b"j"), vec![EVENT]);
    // Two hours of event time later both lists are expired.
    b.advance_watermark(EVENT + 2 * 3_600_000);
    assert!(l.get(b"k", b"").unwrap().is_empty(), "k outlived its TTL");
    assert!(l.get(b"j", b"").unwrap().is_empty(), "j outlived its TTL");
    b.close().unwrap();
    // Reopened in event time again, the list keeps updating by the watermark.
    let b = open(dir.path());
    b.advance_watermark(EVENT + 2 * 3_600_000);
    let l = list(&b, TimeDomain::EventTime);
    l.update(b"k", b"", [&b"again"[..]]).unwrap();
    assert_eq!(stamps(&b, b"k"), vec![EVENT + 2 * 3_600_000]);
    b.close().unwrap();
}

#[test]
fn a_list_moved_back_to_processing_time_is_stamped_by_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    // Event times far ahead of the processing clock (a replay of future-dated input, or
    // event times in another unit than the clock's).
    first_run(dir.path(), TimeDomain::EventTime, WALL * 2);
    let b = open(dir.path());
    let l = list(&b, TimeDomain::ProcessingTime);
    l.update(b"k", b"", [&b"new"[..]]).unwrap();
    assert_eq!(l.get(b"k", b"").unwrap(), vec![b"new".to_vec()]);
    assert_eq!(stamps(&b, b"k"), vec![WALL]);
    b.close().unwrap();
}

#[test]
fn a_mark_stored_without_its_domain_is_taken_as_the_registering_ones() {
    let dir = tempfile::tempdir().unwrap();
    first_run(dir.path(), TimeDomain::ProcessingTime, 0);
    {
        // The mark as stored before its domain was: 8 bytes alone.
        let (db, stored) = stored_mark(dir.path());
        assert_eq!(stored.len(), 9, "the mark and its domain byte");
        assert_eq!(stored[8], 0, "processing time");
        db.put(b"ttl-floor/l", &stored[..8]).unwrap();
        db.flush().unwrap();
    }
    let b = open(dir.path());
    let l = list(&b, TimeDomain::ProcessingTime);
    l.update(b"k", b"", [&b"new"[..]]).unwrap();
    assert_eq!(l.get(b"k", b"").unwrap(), vec![b"new".to_vec()]);
    b.close().unwrap();
    let (_db, stored) = stored_mark(dir.path());
    assert_eq!(
        stored.len(),
        9,
        "the registration stored the mark with its domain"
    );
    assert_eq!(u64::from_be_bytes(stored[..8].try_into().unwrap()), WALL);
}
