//! `MemoryBudgetConfig::write_buffer_ratio` is "the share of the total that memtables may use
//! before RocksDB flushes"; `validate` accepts any ratio in (0, 1). A ratio so small that
//! `total_bytes * ratio` truncates to 0 bytes (1e-12 of 64 MiB) is accepted too, and RocksDB's
//! write-buffer manager reads a size of 0 as "no limit": the budget then never makes a
//! backend flush, and memtables grow to `write_buffer_size` per column family — the opposite
//! of the tiny share asked for. Such a ratio must be refused (`Error::InvalidOption`) or bound
//! memtables at least as tightly as a small valid share does.
//!
//! The control (ratio 0.01, a 671 KB share) shows what the budget does: writing 12 MiB into a
//! column family with 64 MiB memtables hands memtables to flushes. With ratio 1e-12 nothing
//! is handed to a flush at all.

use rockstate::{CodecId, DbOptions, Error, KeyedBackend, MemoryBudget, MemoryBudgetConfig};

/// Bytes handed to flushes (immutable memtables plus flushed SSTs) after writing 12 MiB into
/// one backend whose own memtables hold 64 MiB; `None` when the budget is refused.
fn handed_to_flushes(ratio: f64) -> Option<u64> {
    let budget = match MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 64 << 20,
        write_buffer_ratio: ratio,
        ..MemoryBudgetConfig::default()
    }) {
        Ok(b) => b,
        Err(Error::InvalidOption { .. }) => return None,
        Err(e) => panic!("ratio {ratio}: refused with {e:?}, not InvalidOption"),
    };
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .options(DbOptions {
            write_buffer_size: 64 << 20,
            write_cache_bytes: 0,
            value_cache_bytes: 0,
            ..DbOptions::default()
        })
        .memory_budget(budget)
        .open()
        .unwrap();
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    let value = vec![7u8; 1000];
    for i in 0..12_000u64 {
        s.put(&i.to_be_bytes(), b"", &value).unwrap();
    }
    let prop = |name: &str| b.state_property("s", name).unwrap().unwrap_or(0);
    let all = prop("rocksdb.cur-size-all-mem-tables");
    let active = prop("rocksdb.cur-size-active-mem-table");
    let flushed = prop("rocksdb.live-sst-files-size");
    eprintln!("ratio {ratio}: active {active} all {all} flushed {flushed}");
    Some((all - active) + flushed)
}

#[test]
fn a_write_buffer_ratio_too_small_for_one_byte_is_refused_not_unbounded() {
    let control = handed_to_flushes(0.01).expect("ratio 0.01 is valid");
    assert!(
        control > 0,
        "control: a 671 KB memtable share made no flush"
    );
    if let Some(handed) = handed_to_flushes(1e-12) {
        assert!(
            handed > 0,
            "write_buffer_ratio 1e-12 (a share of 0 bytes of 64 MiB) was accepted, and no \
             memtable was handed to a flush after 12 MiB of writes (ratio 0.01: {control} \
             bytes): the budget no longer bounds memtables at all"
        );
    }
}
