//! A restore's database ingests with RocksDB's automatic compactions off and turns them on
//! when it is done (docs/decisions/0047-ingestions-hold-background-jobs-off.md): a backend
//! restored plainly, from a changelog checkpoint and at another parallelism compacts level 0
//! again once its writes fill it.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{CheckpointOptions, KeyedBackend, RestoreFrom};

/// Level-0 files of every column family of `b`.
fn level0_files(b: &KeyedBackend) -> u64 {
    let m = b.metrics().unwrap().rocksdb;
    m.levels
        .iter()
        .filter(|l| l.level == 0)
        .map(|l| l.sst_files)
        .sum()
}

/// Ten flushed level-0 files of `b`'s value state, then every compaction waited for: level 0
/// (of the value state and the metadata, each compacted from RocksDB's trigger of 4 files on)
/// must hold fewer than the ten flushes made.
fn assert_compacts(b: &KeyedBackend, what: &str) {
    let v = state(b);
    for round in 0..10u64 {
        for k in (0..KEYS).filter(|&k| owns(b, k)) {
            v.put(&k, &(), &(round * 1000 + u64::from(k))).unwrap();
        }
        b.flush().unwrap();
    }
    b.wait_for_compactions().unwrap();
    let l0 = level0_files(b);
    eprintln!("{what}: {l0} level-0 files after compactions");
    assert!(l0 < 8, "{what}: {l0} level-0 files after compactions");
}

fn checkpointed(fx: &Fixture, opts: CheckpointOptions) {
    let a = fx.open("a", opts);
    let v = state(&a);
    for k in 0..KEYS {
        v.put(&k, &(), &1).unwrap();
    }
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    // A second checkpoint: in changelog mode a log checkpoint, whose restore ingests tables.
    for k in 0..KEYS / 2 {
        v.put(&k, &(), &2).unwrap();
    }
    a.checkpoint(2).unwrap();
    a.notify_checkpoint_complete(2).unwrap();
    a.close().unwrap();
}

#[test]
fn a_plain_restore_compacts_again() {
    let fx = Fixture::new();
    checkpointed(&fx, CheckpointOptions::default());
    assert_compacts(&fx.restore("r", RestoreFrom::Latest).unwrap(), "plain");
}

#[test]
fn a_changelog_restore_compacts_again() {
    let fx = Fixture::new();
    let mut opts = changelog_options(100_000);
    opts.changelog.table_bytes = 1;
    checkpointed(&fx, opts.clone());
    let r = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(opts)
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_compacts(&r, "changelog");
}

#[test]
fn a_rescaled_restore_compacts_again() {
    let fx = Fixture::new();
    checkpointed(&fx, CheckpointOptions::default());
    let r = first_half_builder(&fx.path("r"), fx.storage_dyn())
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_compacts(&r, "rescaled");
}
