//! Many column families on one budget hold their memtable bloom filters inside it: RocksDB
//! allocates a memtable's filter whole when it creates the memtable (0.02 × 16 MiB ≈ 335 KB
//! by default), written to or not, and charges it to the budget's memtable share, where no
//! flush can empty it. The budget grants filters out of an eighth of its memtable share; the
//! column families past that run without one. Two shapes, nearly no data in either: 32
//! instances with three states each, and one instance with 120 states.

use rockstate::{CacheKind, DbOptions, KeyedBackend, MemoryBudget, MemoryBudgetConfig};

fn budget() -> MemoryBudget {
    MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 64 << 20,
        write_buffer_ratio: 0.5,
        cache: CacheKind::HyperClock,
    })
    .unwrap()
}

/// The memtables of nearly empty states: their filters' eighth of the 32 MiB share, plus
/// the empty memtables' arenas.
const BOUND: usize = 8 << 20;

#[test]
fn thirty_two_idle_instances_keep_their_memtables_within_the_budget() {
    let budget = budget();
    let dir = tempfile::tempdir().unwrap();
    let backends: Vec<KeyedBackend> = (0..32)
        .map(|i| {
            KeyedBackend::builder(dir.path().join(format!("b{i}")))
                .options(DbOptions::default())
                .memory_budget(budget.clone())
                .open()
                .unwrap()
        })
        .collect();
    for b in &backends {
        for name in ["a", "b", "c"] {
            let s = b.value_state::<u32, (), u64>(name).unwrap();
            s.put(&1, &(), &1).unwrap();
            assert_eq!(s.get(&1, &()).unwrap(), Some(1));
        }
        b.flush().unwrap();
    }
    let memtables = budget.memtable_bytes();
    assert!(
        memtables <= BOUND,
        "32 idle instances (96 states, 96 entries) hold {memtables} bytes of memtables"
    );
    for b in backends {
        b.close().unwrap();
    }
}

#[test]
fn one_instance_with_a_hundred_and_twenty_states_stays_within_the_budget() {
    let budget = budget();
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        KeyedBackend::builder(dir.path())
            .options(DbOptions::default())
            .memory_budget(budget.clone())
            .open()
            .unwrap()
    };
    let backend = open();
    for i in 0..120 {
        let s = backend
            .value_state::<u32, (), u64>(format!("s{i}").as_str())
            .unwrap();
        s.put(&i, &(), &u64::from(i)).unwrap();
    }
    let memtables = budget.memtable_bytes();
    assert!(
        memtables <= BOUND,
        "120 states of one entry each hold {memtables} bytes of memtables"
    );
    // Reopened, the existing column families ask again, and the grants of the closed
    // database were given back.
    backend.close().unwrap();
    assert_eq!(budget.memtable_bytes(), 0);
    let backend = open();
    for i in 0..120 {
        let s = backend
            .value_state::<u32, (), u64>(format!("s{i}").as_str())
            .unwrap();
        assert_eq!(s.get(&i, &()).unwrap(), Some(u64::from(i)));
    }
    let memtables = budget.memtable_bytes();
    assert!(
        memtables <= BOUND,
        "reopened, 120 states hold {memtables} bytes of memtables"
    );
    backend.close().unwrap();
}
