//! Heap backend, TTL map state with incremental cleanup: a map iteration scans a frozen copy
//! of the state; a point read made from its callback (or by any other thread) runs an
//! incremental cleanup step that removes the expired entries the iteration has yet to reach.
//! The iteration then meets them in its frozen copy: they are gone already and must not be
//! removed or counted again, so `ttl_stats` counts each expired entry once.

use std::sync::Arc;
use std::time::Duration;

use rockstate::{KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

#[test]
fn heap_ttl_stats_count_each_removed_entry_once() {
    let clock = ManualClock::new(0);
    let b = KeyedBackend::heap_builder()
        .clock(Arc::new(clock.clone()))
        .heap_incremental_cleanup(100)
        .open()
        .unwrap();
    let m = b
        .map_state::<u32, (), u8, u32>(
            StateDescriptor::new("m").with_ttl(TtlConfig::new(Duration::from_secs(10))),
        )
        .unwrap();
    for uk in 1..=3u8 {
        m.put(&7, &(), &uk, &u32::from(uk)).unwrap(); // stamped at 0 s
    }
    clock.advance(Duration::from_secs(5));
    m.put(&7, &(), &0, &0).unwrap(); // stamped at 5 s, sorts first
    clock.advance(Duration::from_secs(7)); // 12 s: user keys 1..=3 expired, 0 live
    let mut seen = Vec::new();
    m.raw()
        .for_each(&postcard(7), b"", |uk, _| {
            seen.push(uk.to_vec());
            // The task looks up another key of the same state meanwhile.
            m.get(&8, &(), &0).unwrap();
            Ok(true)
        })
        .unwrap();
    assert_eq!(seen, vec![vec![0u8]], "only the live entry is visited");
    let stats = b.ttl_stats("m").unwrap();
    assert_eq!(
        stats.dropped_on_read + stats.dropped_incrementally,
        3,
        "3 expired entries were removed, counted as {stats:?}"
    );
}

fn postcard(k: u32) -> Vec<u8> {
    postcard_bytes(k)
}

/// `postcard` encoding of a u32 (a varint).
fn postcard_bytes(mut k: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (k & 0x7f) as u8;
        k >>= 7;
        if k == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}
