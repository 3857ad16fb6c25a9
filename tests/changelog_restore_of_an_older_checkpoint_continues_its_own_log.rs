//! Changelog mode: a job restored (same parallelism) from an older retained checkpoint than
//! the newest one continues the older checkpoint's log. Its next log checkpoint must hold
//! exactly the restored state plus what it wrote since, never the newer checkpoint's
//! changes it discarded.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{CheckpointOptions, KeyedBackend, RestoreFrom};

fn opts() -> CheckpointOptions {
    CheckpointOptions {
        retained: 3,
        ..changelog_options(100_000)
    }
}

#[test]
fn restore_of_an_older_checkpoint_then_a_log_checkpoint_restores_exactly() {
    let fx = Fixture::new();
    let a = fx.open("a", opts());
    let v = state(&a);
    for k in 0..20u32 {
        v.put(&k, &(), &1).unwrap();
    }
    assert!(a.checkpoint(1).unwrap().materialized);
    a.notify_checkpoint_complete(1).unwrap();
    for k in 0..5u32 {
        v.put(&k, &(), &2).unwrap();
    }
    assert!(!a.checkpoint(2).unwrap().materialized);
    a.notify_checkpoint_complete(2).unwrap();
    // Checkpoint 3: five more changes, discarded by the restore of checkpoint 2.
    for k in 5..10u32 {
        v.put(&k, &(), &3).unwrap();
    }
    assert!(!a.checkpoint(3).unwrap().materialized);
    a.notify_checkpoint_complete(3).unwrap();
    drop(a);

    let b = KeyedBackend::builder(fx.path("b"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(opts())
        .restore(RestoreFrom::Checkpoint(2))
        .unwrap();
    let v = state(&b);
    // The same number of changes as checkpoint 3 made, of other keys.
    for k in 10..15u32 {
        v.put(&k, &(), &4).unwrap();
    }
    let s = b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    eprintln!("checkpoint 4 materialized: {}", s.materialized);
    drop(b);

    let r = fx.restore("r", RestoreFrom::Latest).unwrap();
    let got = read_all(&r);
    let want: Model = (0..20u32)
        .map(|k| {
            (
                k,
                match k {
                    0..5 => 2,
                    10..15 => 4,
                    _ => 1,
                },
            )
        })
        .collect();
    assert_eq!(got, want);
}
