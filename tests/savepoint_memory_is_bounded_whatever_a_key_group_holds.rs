//! Writing and restoring a savepoint holds a few blocks in memory, not a key group: a key
//! group continues over blocks of about `sst_format::BLOCK_TARGET_BYTES` (format version 4).
//! Before, the writer built every key group of a run whole (and a reader read a key group's
//! block whole), so a savepoint of a state with few key groups (Flink's default max
//! parallelism is 128) held a share of the whole state in memory: gigabytes for state beyond
//! memory.
//!
//! One key group (max parallelism 1) holding 256 MiB: the peak resident memory (`VmHWM`, reset
//! through `/proc/self/clear_refs` before each step) grows by far less than the key group
//! while the savepoint is written and while it is restored. A list of 16,384 elements spans
//! several blocks, and restores in order.

use rockstate::{CodecId, KeyedBackend};

const ENTRIES: u32 = 256 * 1024;
const VALUE_BYTES: usize = 1024;
const LIST_ELEMENTS: u32 = 16 * 1024;
/// Far below the key group's 256 MiB of values, far above a few 4 MiB blocks.
const GROWTH_LIMIT: u64 = 160 << 20;

/// A value that zstd and RocksDB shrink to about half: bytes over 16 symbols.
fn value(i: u32) -> Vec<u8> {
    let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..VALUE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x & 15) as u8
        })
        .collect()
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// Runs `step` and returns how far the peak resident memory rose above the resident memory
/// before it.
fn peak_growth<T>(step: impl FnOnce() -> T) -> (T, u64) {
    // "5" resets the peak to the current resident size (Linux 4.0 and later).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let out = step();
    let peak = status_kib("VmHWM:");
    (out, peak.saturating_sub(before) << 10)
}

#[test]
fn savepoint_write_and_restore_hold_blocks_not_the_key_group() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path().join("db"))
        .max_parallelism(1)
        .open()
        .unwrap();
    let codec = CodecId::new("raw", 1);
    let v = b.raw_value_state("v", codec.clone()).unwrap();
    for i in 0..ENTRIES {
        v.put(&i.to_be_bytes(), b"", &value(i)).unwrap();
    }
    let l = b.raw_list_state("l", codec.clone()).unwrap();
    for i in 0..LIST_ELEMENTS {
        l.add(b"list", b"", &value(i)).unwrap();
    }
    b.flush().unwrap();

    let sp = dir.path().join("sp");
    let (stats, growth) = peak_growth(|| b.write_savepoint(&sp).unwrap());
    assert_eq!(
        stats.entries,
        u64::from(ENTRIES) + u64::from(LIST_ELEMENTS),
        "{stats:?}"
    );
    assert!(
        stats.blocks > 64,
        "{stats:?}: the key group over many blocks"
    );
    assert!(
        growth < GROWTH_LIMIT,
        "writing a savepoint of one {} MiB key group raised peak memory by {} MiB",
        stats.raw_bytes >> 20,
        growth >> 20
    );
    drop((v, l));
    b.close().unwrap();
    drop(b);

    let b2 = KeyedBackend::builder(dir.path().join("db2"))
        .max_parallelism(1)
        .open()
        .unwrap();
    let ((), growth) = peak_growth(|| {
        b2.restore_savepoint(&sp).unwrap();
    });
    assert!(
        growth < GROWTH_LIMIT,
        "restoring it raised peak memory by {} MiB",
        growth >> 20
    );
    let v2 = b2.raw_value_state("v", codec.clone()).unwrap();
    for i in (0..ENTRIES).step_by(997) {
        assert_eq!(
            v2.get(&i.to_be_bytes(), b"").unwrap(),
            Some(value(i)),
            "{i}"
        );
    }
    let l2 = b2.raw_list_state("l", codec).unwrap();
    let list = l2.get(b"list", b"").unwrap();
    assert_eq!(list.len(), LIST_ELEMENTS as usize);
    for (i, e) in list.iter().enumerate() {
        assert_eq!(e, &value(i as u32), "list element {i} in order");
    }
}
