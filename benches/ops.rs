//! Criterion benches of single state operations, and the list-layout comparison of
//! docs/decisions/0002-list-state-one-entry-per-element.md: layout (B) (rockstate: one entry
//! per element) against layout (A) (one framed value extended by a concatenating merge
//! operator, built here on raw rust-rocksdb with the same options). Run:
//! `cargo bench --bench ops`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rockstate::{CodecId, KeyedBackend, MemoryBudget, MemoryBudgetConfig};

fn budget() -> MemoryBudget {
    MemoryBudget::new(MemoryBudgetConfig::default()).unwrap()
}

fn value_ops(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .memory_budget(budget())
        .open()
        .unwrap();
    let raw = b.raw_value_state("v", CodecId::new("bytes", 1)).unwrap();
    let typed = b.value_state::<u64, (), Vec<u8>>("typed").unwrap();
    let value = vec![7u8; 100];
    for i in 0..100_000u64 {
        raw.put(&i.to_be_bytes(), b"", &value).unwrap();
        typed.put(&i, &(), &value).unwrap();
    }
    let mut g = c.benchmark_group("value");
    let mut i = 0u64;
    g.bench_function("raw_put", |bch| {
        bch.iter(|| {
            i = (i + 7919) % 100_000;
            raw.put(&i.to_be_bytes(), b"", &value).unwrap()
        })
    });
    g.bench_function("raw_get", |bch| {
        bch.iter(|| {
            i = (i + 7919) % 100_000;
            black_box(raw.get(&i.to_be_bytes(), b"").unwrap())
        })
    });
    g.bench_function("typed_put", |bch| {
        bch.iter(|| {
            i = (i + 7919) % 100_000;
            typed.put(&i, &(), &value).unwrap()
        })
    });
    g.bench_function("typed_get", |bch| {
        bch.iter(|| {
            i = (i + 7919) % 100_000;
            black_box(typed.get(&i, &()).unwrap())
        })
    });
    g.finish();
}

fn map_ops(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .memory_budget(budget())
        .open()
        .unwrap();
    let map = b.map_state::<u64, (), u32, u64>("m").unwrap();
    for k in 0..1000u64 {
        for uk in 0..20u32 {
            map.put(&k, &(), &uk, &u64::from(uk)).unwrap();
        }
    }
    let mut g = c.benchmark_group("map");
    let mut k = 0u64;
    g.bench_function("put", |bch| {
        bch.iter(|| {
            k = (k + 7) % 1000;
            map.put(&k, &(), &((k % 20) as u32), &k).unwrap()
        })
    });
    g.bench_function("get", |bch| {
        bch.iter(|| {
            k = (k + 7) % 1000;
            black_box(map.get(&k, &(), &((k % 20) as u32)).unwrap())
        })
    });
    g.bench_function("entries_20", |bch| {
        bch.iter(|| {
            k = (k + 7) % 1000;
            black_box(map.entries(&k, &()).unwrap())
        })
    });
    g.finish();
}

/// Layout (A): `[u32 len][element]…` in one value, appended with an associative merge.
fn concat_merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let mut out = existing.map(<[u8]>::to_vec).unwrap_or_default();
    for op in operands {
        out.extend_from_slice(op);
    }
    Some(out)
}

fn frame(element: &[u8]) -> Vec<u8> {
    let mut f = (element.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(element);
    f
}

fn unframe(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        out.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

fn list_layouts(c: &mut Criterion) {
    const KEYS: u64 = 2000;
    let element = vec![3u8; 50];
    for len in [10usize, 100] {
        let dir = tempfile::tempdir().unwrap();
        let b = KeyedBackend::builder(dir.path().join("b"))
            .memory_budget(budget())
            .open()
            .unwrap();
        let list_b = b.raw_list_state("l", CodecId::new("bytes", 1)).unwrap();
        // Layout (A) needs a merge operator, which rockstate's options do not carry: plain
        // RocksDB options with rockstate's defaults where they matter for these reads (a
        // 10-bit bloom filter, LZ4, a block cache of the budget's size).
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(
            MemoryBudgetConfig::default().total_bytes,
        ));
        opts.set_block_based_table_factory(&table);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_merge_operator_associative("concat", concat_merge);
        let db_a = rocksdb::DB::open(&opts, dir.path().join("a")).unwrap();
        let mut wo = rocksdb::WriteOptions::default();
        wo.disable_wal(true);
        for k in 0..KEYS {
            for _ in 0..len {
                list_b.add(&k.to_be_bytes(), b"", &element).unwrap();
                db_a.merge_opt(k.to_be_bytes(), frame(&element), &wo)
                    .unwrap();
            }
        }
        b.flush().unwrap();
        db_a.flush().unwrap();
        let mut g = c.benchmark_group(format!("list_len_{len}"));
        let mut k = 0u64;
        g.bench_function("B_get", |bch| {
            bch.iter(|| {
                k = (k + 7) % KEYS;
                let v = list_b.get(&k.to_be_bytes(), b"").unwrap();
                assert!(v.len() >= len);
                black_box(v)
            })
        });
        g.bench_function("A_get", |bch| {
            bch.iter(|| {
                k = (k + 7) % KEYS;
                let v = unframe(&db_a.get(k.to_be_bytes()).unwrap().unwrap());
                assert!(v.len() >= len);
                black_box(v)
            })
        });
        g.bench_function("B_add", |bch| {
            bch.iter_batched(
                || {
                    k = (k + 7) % KEYS;
                    k
                },
                |k| list_b.add(&k.to_be_bytes(), b"", &element).unwrap(),
                BatchSize::SmallInput,
            )
        });
        g.bench_function("A_add", |bch| {
            bch.iter_batched(
                || {
                    k = (k + 7) % KEYS;
                    k
                },
                |k| {
                    db_a.merge_opt(k.to_be_bytes(), frame(&element), &wo)
                        .unwrap()
                },
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = value_ops, map_ops, list_layouts
}
criterion_main!(benches);
