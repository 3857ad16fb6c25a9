//! Model-based rescaling: the scale sequence 1 → 3 → 2 → 4 → 1 over all five state kinds with
//! namespaces and seeded random state, through incremental checkpoints in local storage and
//! on the S3 test server, compared with a model after every step; the first checkpoint after
//! each rescale reuses the restored base's files.

mod rescale_common;

use std::sync::Arc;

use rand::SeedableRng;
use rescale_common::*;
use rockstate::{CheckpointOptions, DbOptions, KeyGroupRange, KeyedBackend, RestoreFrom};
use sst_format::CheckpointManifest;

on_every_storage!(scale_sequence_1_3_2_4_1_seed_1, clip_with_compaction);

fn run(store: Store, seed: u64) {
    let (dir, storage) = (&store.dir, store.storage.clone());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut model = Model::default();
    let mut backends = open_fresh(dir.path(), &storage, "p1", 1, &opts);
    let mut id = 0;
    let mut bases: Vec<Option<CheckpointManifest>> = vec![None];
    let mut total_reused = 0;
    for (step, p) in [3u32, 2, 4, 1].into_iter().enumerate() {
        for b in &backends {
            random_ops(b, &mut model, &mut rng, 1500);
        }
        id += 1;
        let refs: Vec<&KeyedBackend> = backends.iter().collect();
        for st in checkpoint_job(&storage, &refs, id) {
            total_reused += st.files_reused;
        }
        for (b, base) in backends.iter().zip(&bases) {
            if let Some(base) = base {
                assert_base_reused(&storage, b, id, base);
            }
        }
        check_all(&backends, &model);
        let backend_ids: Vec<String> = backends
            .iter()
            .map(|b| b.backend_id().to_string())
            .collect();
        drop(backends);
        // Alternate the two ways an engine names the checkpoint.
        let from = if step % 2 == 0 {
            RestoreFrom::Checkpoint(id)
        } else {
            RestoreFrom::Handles {
                checkpoint_id: id,
                backend_ids,
            }
        };
        backends = restore_all(
            dir.path(),
            &storage,
            &format!("s{step}-p{p}"),
            p,
            &opts,
            from,
        );
        bases = backends
            .iter()
            .map(|b| Some(restored_base(&storage, b, id)))
            .collect();
        check_all(&backends, &model);
    }
    // Keep going on the final single instance: appends and updates after four rescales.
    random_ops(&backends[0], &mut model, &mut rng, 1000);
    check_all(&backends, &model);
    let stats = checkpoint_job(&storage, &[&backends[0]], id + 1);
    total_reused += stats[0].files_reused;
    if let Some(base) = &bases[0] {
        assert_base_reused(&storage, &backends[0], id + 1, base);
    }
    assert!(
        total_reused > 0,
        "restored files were reused after rescales"
    );
    drop(backends);
    let last = restore_all(dir.path(), &storage, "final", 1, &opts, RestoreFrom::Latest);
    check_all(&last, &model);
    // The rescaled state also round-trips through a canonical savepoint at parallelism 3.
    let sp = dir.path().join("savepoint");
    last[0].write_savepoint(&sp).unwrap();
    let three: Vec<KeyedBackend> = (0..3)
        .map(|i| {
            let b = KeyedBackend::builder(dir.path().join(format!("sp-{i}")))
                .options(small_options())
                .key_groups(rockstate::KeyGroupRange::for_operator(M, 3, i).unwrap())
                .open()
                .unwrap();
            b.restore_savepoint(&sp).unwrap();
            b
        })
        .collect();
    check_all(&three, &model);
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn scale_sequence_1_3_2_4_1_seed_1(store: Store) {
    run(store, 1);
}

/// A second seed, on local storage only (the S3 server is slow; one seed covers it).
#[test]
fn scale_sequence_1_3_2_4_1_seed_2() {
    run(Store::local(), 2);
}

/// Live SST bytes of the value state.
fn live_bytes(b: &KeyedBackend) -> u64 {
    b.state_property("value", "rocksdb.live-sst-files-size")
        .unwrap()
        .unwrap()
}

/// One checkpoint covering the target, clipped with compaction of the clipped ranges: the
/// data is right and the clipped groups' entries are gone from the files. Without key-group
/// files every SST spans all groups, so only the compaction takes them out (the value state's
/// live SST bytes shrink compared with a clip without compaction); with them (the default)
/// compacted files hold one group each and the clip drops the given-away groups' files
/// without any compaction (a half holds well under the whole state's bytes).
fn clip_with_compaction(store: Store) {
    let (dir, storage) = (&store.dir, store.storage.clone());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
    let mut model = Model::default();
    let src = open_fresh(dir.path(), &storage, "src", 1, &opts);
    random_ops(&src[0], &mut model, &mut rng, 3000);
    checkpoint_job(&storage, &[&src[0]], 1);
    drop(src);
    let open = |name: &str, range: KeyGroupRange, options: DbOptions, compact: bool| {
        let b = KeyedBackend::builder(dir.path().join(name))
            .options(options)
            .key_groups(range)
            .checkpoint_storage(Arc::clone(&storage))
            .compact_clipped(compact)
            .restore(RestoreFrom::Latest)
            .unwrap();
        b.value_state::<u32, u8, u64>("value").unwrap();
        b.wait_for_compactions().unwrap();
        let bytes = live_bytes(&b);
        (b, bytes)
    };
    let half = |i| KeyGroupRange::for_operator(M, 2, i).unwrap();
    let uncut = DbOptions {
        key_group_files: false,
        ..small_options()
    };
    let cut_files = DbOptions {
        key_group_files: true,
        ..small_options()
    };
    let (plain, plain_bytes) = open("plain", half(0), uncut.clone(), false);
    check(&plain, &model);
    drop(plain);
    let mut parts = Vec::new();
    for i in 0..2 {
        let (b, bytes) = open(&format!("c{i}"), half(i), uncut.clone(), true);
        if i == 0 {
            assert!(
                bytes < plain_bytes,
                "clipped groups compacted away: {bytes} vs {plain_bytes} bytes"
            );
        }
        parts.push(b);
    }
    check_all(&parts, &model);
    drop(parts);

    // The whole state, compacted into files of one group each, checkpointed again; a half
    // restored from that checkpoint drops the other half's files.
    let (whole, _) = open(
        "whole",
        KeyGroupRange::all(M).unwrap(),
        cut_files.clone(),
        false,
    );
    whole.compact_state("value").unwrap();
    let whole_bytes = live_bytes(&whole);
    whole.checkpoint(2).unwrap();
    whole.notify_checkpoint_complete(2).unwrap();
    check(&whole, &model);
    drop(whole);
    let (cut, cut_bytes) = open("cut", half(0), cut_files, false);
    assert!(
        cut_bytes * 4 < whole_bytes * 3,
        "the other half's files dropped: {cut_bytes} vs {whole_bytes} bytes"
    );
    check(&cut, &model);
}
