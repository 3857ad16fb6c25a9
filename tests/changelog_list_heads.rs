//! Changelog mode and blind list updates (docs/decisions/0034-blind-list-updates.md): a
//! restore replays the log onto a materialization that may still hold entries a head made
//! dead, so a compaction may not drop them unlogged. If it did, a later `clear` (which deletes
//! the entries it finds) would leave them in the restored state, readable once the head is
//! gone. In changelog mode lists update by reading and their compactions keep dead entries,
//! which a read, `update` or `clear` then deletes and logs.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{CheckpointOptions, KeyedBackend, ListState, RestoreFrom};

fn list(b: &KeyedBackend) -> ListState<u32, (), u64> {
    b.list_state::<u32, (), u64>("l").unwrap()
}

fn restore_with(fx: &Fixture, name: &str, opts: CheckpointOptions) -> KeyedBackend {
    KeyedBackend::builder(fx.path(name))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(opts)
        .restore(RestoreFrom::Latest)
        .unwrap()
}

#[test]
fn a_list_cleared_after_a_compaction_stays_cleared_in_a_changelog_restore() {
    let fx = Fixture::new();
    let b = fx.open("a", changelog_options(100_000));
    let l = list(&b);
    l.add(&7, &(), &111).unwrap();
    l.add(&8, &(), &1).unwrap();
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    l.update(&7, &(), &[222]).unwrap();
    l.update(&8, &(), &[2, 3]).unwrap();
    b.compact_state("l").unwrap();
    l.clear(&7, &()).unwrap();
    assert!(!b.checkpoint(2).unwrap().materialized);
    b.notify_checkpoint_complete(2).unwrap();
    let r = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(list(&r).get(&7, &()).unwrap(), Vec::<u64>::new());
    assert_eq!(list(&r).get(&8, &()).unwrap(), vec![2, 3]);
}

#[test]
fn heads_written_before_changelog_mode_keep_their_dead_entries_until_deleted_and_logged() {
    let fx = Fixture::new();
    // Without changelog mode: blind updates write heads over the entries they replace.
    let a = fx.open("a", CheckpointOptions::default());
    let l = list(&a);
    for k in 0..50u32 {
        l.add(&k, &(), &u64::from(k)).unwrap();
        l.update(&k, &(), &[1000 + u64::from(k)]).unwrap();
    }
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    drop(a);
    // With changelog mode: the first checkpoint materializes the heads and their dead entries.
    let b = restore_with(&fx, "b", changelog_options(100_000));
    assert!(b.checkpoint(2).unwrap().materialized);
    b.notify_checkpoint_complete(2).unwrap();
    let l = list(&b);
    b.compact_state("l").unwrap();
    for k in 0..25u32 {
        l.clear(&k, &()).unwrap();
    }
    for k in 25..50u32 {
        l.update(&k, &(), &[]).unwrap();
        l.add(&k, &(), &7).unwrap();
    }
    assert!(!b.checkpoint(3).unwrap().materialized);
    b.notify_checkpoint_complete(3).unwrap();
    let r = restore_with(&fx, "r", changelog_options(100_000));
    let l = list(&r);
    for k in 0..25u32 {
        assert_eq!(l.get(&k, &()).unwrap(), Vec::<u64>::new(), "{k}");
    }
    for k in 25..50u32 {
        assert_eq!(l.get(&k, &()).unwrap(), vec![7], "{k}");
    }
}
