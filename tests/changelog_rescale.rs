//! Changelog mode across a rescale (docs/rescale.md): every kind of state (value, list, map,
//! reducing, aggregating; clears included) restored from log checkpoints at another
//! parallelism equals the model, each instance replaying only its key groups' entries, and
//! the rescaled job's checkpoints stay incremental and restorable again.

mod rescale_common;

use rescale_common::*;
use rockstate::RestoreFrom;

on_every_storage!(scale_out_and_in_from_log_checkpoints);

fn scale_out_and_in_from_log_checkpoints(store: Store) {
    let opts = changelog_options();
    let mut model = Model::default();
    let mut r = rand::SeedableRng::seed_from_u64(31);
    let two = open_fresh(store.path(), &store.storage, "two", 2, &opts);
    for b in &two {
        random_ops(b, &mut model, &mut r, 1500);
    }
    let stats = checkpoint_job(&store.storage, &[&two[0], &two[1]], 1);
    assert!(stats.iter().all(|s| s.materialized));
    for round in 2..=3 {
        for b in &two {
            random_ops(b, &mut model, &mut r, 200);
        }
        let stats = checkpoint_job(&store.storage, &[&two[0], &two[1]], round);
        assert!(stats.iter().all(|s| !s.materialized), "round {round}");
    }
    drop(two);

    // 2 → 3: each instance replays the log entries of its own key groups only.
    let three = restore_all(
        store.path(),
        &store.storage,
        "three",
        3,
        &opts,
        RestoreFrom::Latest,
    );
    check_all(&three, &model);
    for b in &three {
        random_ops(b, &mut model, &mut r, 200);
    }
    // The first checkpoint after the rescale materializes; every file of an instance's
    // restored base still live then is referenced, not uploaded again. (RocksDB may have
    // compacted base files away meanwhile, with the replayed and clipping files on top of
    // them in level 0; those are legitimately gone.)
    let bases: Vec<_> = three
        .iter()
        .map(|b| restored_base(&store.storage, b, 3))
        .collect();
    let refs: Vec<&_> = three.iter().collect();
    let stats = checkpoint_job(&store.storage, &refs, 4);
    assert!(stats.iter().all(|s| s.materialized), "{stats:#?}");
    for (b, base) in three.iter().zip(&bases) {
        assert_base_reused(&store.storage, b, 4, base);
    }
    for b in &three {
        random_ops(b, &mut model, &mut r, 200);
    }
    let stats = checkpoint_job(&store.storage, &refs, 5);
    assert!(stats.iter().all(|s| !s.materialized));
    drop(refs);
    drop(three);

    // 3 → 1.
    let one = restore_all(
        store.path(),
        &store.storage,
        "one",
        1,
        &opts,
        RestoreFrom::Latest,
    );
    check_all(&one, &model);
}
