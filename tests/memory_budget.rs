//! One memory budget bounds the memtables of every backend that shares it: four backends with
//! 64 MiB memtables each, on a 16 MiB budget (8 MiB for memtables), write 64 MiB in total. Without
//! the shared write-buffer manager nothing would flush (each memtable stays below 64 MiB) and
//! memtables would hold all 64 MiB; with it every backend flushes as soon as the shared budget is
//! exceeded. The bound is soft: writers are not stalled (a stall deadlocks a task that drives
//! several backends from one thread), so memtables waiting for their flush can overshoot the
//! budget by the flush backlog; the test allows 4× the budget, half of the unbounded case.

use rockstate::{CodecId, DbOptions, KeyedBackend, MemoryBudget, MemoryBudgetConfig};

#[test]
fn backends_sharing_a_budget_stay_within_it() {
    let budget = MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 16 << 20,
        write_buffer_ratio: 0.5,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        write_buffer_size: 64 << 20,
        ..DbOptions::default()
    };
    let backends: Vec<KeyedBackend> = (0..4)
        .map(|i| {
            KeyedBackend::builder(dir.path().join(format!("b{i}")))
                .options(options.clone())
                .memory_budget(budget.clone())
                .open()
                .unwrap()
        })
        .collect();
    let states: Vec<_> = backends
        .iter()
        .map(|b| b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap())
        .collect();
    // Incompressible values, so SST bytes reflect what was written.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let values: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            (0..1000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect();
    let mut peak_memtables = 0usize;
    for i in 0..16_000u64 {
        for s in &states {
            s.put(&i.to_be_bytes(), b"", &values[(i % 64) as usize]).unwrap();
        }
        if i % 500 == 0 {
            peak_memtables = peak_memtables.max(budget.memtable_bytes());
        }
    }
    let memtable_limit = 8 << 20;
    assert!(
        peak_memtables <= memtable_limit * 4,
        "memtables peaked at {peak_memtables} bytes, budget {memtable_limit}"
    );
    let flushed: u64 = backends
        .iter()
        .map(|b| b.state_property("s", "rocksdb.live-sst-files-size").unwrap().unwrap_or(0))
        .sum();
    // 64 MiB written, at most ~12 MiB still in memtables: most must have been flushed.
    assert!(flushed > 24 << 20, "only {flushed} bytes flushed: the budget did not force flushes");
}
