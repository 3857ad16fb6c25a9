//! Every `DbOptions` field at its edges (0, 1, tiny, huge, MAX, NaN/negative/infinite floats,
//! every enum value): a backend opened with it either works (write, read, flush, compact,
//! checkpoint, savepoint, restore both) or its open fails with `Error::InvalidOption` — never
//! a panic, an abort inside RocksDB, a hang or a wrong read. Each case runs in a child process.

mod edge_common;

use std::time::Duration;

use edge_common::*;
use rockstate::{CheckpointOptions, Compression, DbOptions, ValueCacheAdmission, ValueCacheWrites};

fn cases() -> Vec<(String, DbOptions)> {
    let d = DbOptions::default;
    let mut c: Vec<(String, DbOptions)> = Vec::new();
    macro_rules! case {
        ($field:ident = $($v:expr),+) => {
            $( c.push((format!("{} = {}", stringify!($field), stringify!($v)),
                       DbOptions { $field: $v, ..d() })); )+
        };
    }
    case!(
        block_size = 0,
        1,
        255,
        256,
        64 << 20,
        (64 << 20) + 1,
        usize::MAX
    );
    case!(
        bloom_bits_per_key = 0.0,
        0.1,
        1.0,
        64.0,
        64.5,
        f64::NAN,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE
    );
    case!(write_buffer_size = 0, 1, 64 << 10, 1 << 40, usize::MAX);
    case!(max_write_buffer_number = i32::MIN, -1, 0, 1, 2, i32::MAX);
    case!(
        compression = Compression::None,
        Compression::Lz4,
        Compression::Zstd
    );
    case!(sst_format_version = 0, 1, 2, 3, 4, 5, 6, 7, 8, u32::MAX);
    case!(wal = true);
    case!(max_background_jobs = i32::MIN, 0, 1, 64, 100_000, i32::MAX);
    case!(target_file_size_base = 0, 64 << 10, u64::MAX);
    case!(max_bytes_for_level_base = 0, 1 << 20, u64::MAX);
    case!(
        level0_file_num_compaction_trigger = i32::MIN,
        0,
        1,
        64,
        65,
        i32::MAX
    );
    case!(cache_index_and_filter_blocks = false);
    case!(optimize_filters_for_hits = true);
    case!(
        max_value_bytes = 0,
        1,
        200,
        (u32::MAX as usize) - 1,
        u32::MAX as usize,
        usize::MAX
    );
    case!(
        memtable_bloom_ratio = 0.0,
        -0.0,
        1e-12,
        0.25,
        0.2500001,
        f64::NAN,
        -1.0,
        f64::INFINITY
    );
    case!(memtable_insert_hint = false);
    case!(pin_index_and_filter_blocks = false);
    case!(key_group_files = true);
    case!(write_cache_bytes = 0, 1, 1 << 30, (1 << 30) + 1, usize::MAX);
    case!(key_bounds = false);
    case!(
        value_cache_bytes = 0,
        1,
        2047,
        2048,
        16 << 30,
        (16 << 30) + 1,
        usize::MAX
    );
    case!(
        value_cache_admission = ValueCacheAdmission::EveryRead,
        ValueCacheAdmission::SecondRead
    );
    case!(
        value_cache_writes = ValueCacheWrites::Refresh,
        ValueCacheWrites::Fill
    );
    c.push((
        "wal = true, write_cache_bytes = 1 GiB".into(),
        DbOptions {
            wal: true,
            write_cache_bytes: 1 << 30,
            ..d()
        },
    ));
    c.push((
        "write_buffer_size = 64 KiB, write_cache_bytes = 1 GiB, value_cache_bytes = 16 GiB".into(),
        DbOptions {
            write_buffer_size: 64 << 10,
            write_cache_bytes: 1 << 30,
            value_cache_bytes: 16 << 30,
            ..d()
        },
    ));
    c.push((
        "cache_index_and_filter_blocks = false, pin = true, bloom 0, optimize_filters_for_hits"
            .into(),
        DbOptions {
            cache_index_and_filter_blocks: false,
            bloom_bits_per_key: 0.0,
            optimize_filters_for_hits: true,
            ..d()
        },
    ));
    c
}

#[test]
fn db_options_edges_child() {
    let Some(options) = child_case_of(cases()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    finish(exercise(
        dir.path(),
        options,
        budget(),
        CheckpointOptions::default(),
    ));
}

#[test]
fn db_options_at_their_edges_work_or_are_refused() {
    assert_every_case("db_options_edges_child", &cases(), Duration::from_secs(120));
}
