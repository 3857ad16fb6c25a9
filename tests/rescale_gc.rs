//! Garbage collection across rescales (`docs/ownership.md`): 1 → 2 → 1 with `retained = 1`.
//! A rescale is the same job restarting at another parallelism, so the job's one owner keeps
//! the checkpoint the halves restored from until the job completes a newer one: a half that
//! fails before that is restored again from it, and the files both halves reuse live while any
//! kept checkpoint references them. Then 2 → 1, an orphan sweep, and restores at parallelism
//! 1 and 3 compared with the model. Local storage and the S3 test server.

mod rescale_common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rescale_common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, CheckpointStorage, KeyGroupRange, RestoreFrom};

fn shared_of(storage: &dyn CheckpointStorage, id: u64, backend: &str) -> BTreeSet<String> {
    let bytes = storage
        .get_bytes(&layout::metadata_name(id, backend))
        .unwrap();
    sst_format::decode_manifest(&bytes)
        .unwrap()
        .shared_files
        .into_iter()
        .map(|f| f.remote_name)
        .collect()
}

fn exists(storage: &dyn CheckpointStorage, name: &str) -> bool {
    storage.get_bytes(name).is_ok()
}

fn assert_clean(storage: &dyn CheckpointStorage) {
    let report = rockstate::verify_checkpoints(storage).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report.unreferenced_shared.is_empty(),
        "{:?}",
        report.unreferenced_shared
    );
}

on_every_storage!(one_to_two_to_one_with_gc, no_leftovers_after_rescales);

fn one_to_two_to_one_with_gc(store: Store) {
    let (dir, storage) = (&store.dir, store.storage.clone());
    // retained = 1. Each step checks which files the next checkpoint reuses: no compaction
    // may rewrite them first (under load one sometimes did, before the checkpoint's flush
    // listed them).
    let opts = CheckpointOptions::default();
    let options = small_options_without_compaction();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut model = Model::default();

    // p = 1: checkpoints 1 and 2; 1 is subsumed.
    let s = open_fresh_with(dir.path(), &storage, "s", 1, &opts, &options).remove(0);
    let src = s.backend_id().to_string();
    for id in 1..=2 {
        random_ops(&s, &mut model, &mut rng, 2000);
        checkpoint_job(&storage, &[&s], id);
    }
    assert!(!exists(storage.as_ref(), &layout::metadata_name(1, &src)));
    assert!(!exists(storage.as_ref(), &layout::job_record_name(1)));
    let base_files = shared_of(storage.as_ref(), 2, &src);
    drop(s);

    // 1 → 2. A half uploads 3, the other fails first: the job did not complete 3, so
    // checkpoint 2 and all its files stay, and the job restarts from it again.
    let ab = restore_all_with(
        dir.path(),
        &storage,
        "ab",
        2,
        &opts,
        RestoreFrom::Checkpoint(2),
        &options,
    );
    check_all(&ab, &model);
    let uploaded = ab[0].checkpoint(3).unwrap();
    assert!(uploaded.files_reused > 0, "{uploaded:?}");
    drop(ab);
    for f in &base_files {
        assert!(
            exists(storage.as_ref(), f),
            "{f} deleted while the job needs it"
        );
    }
    let ab = restore_all_with(
        dir.path(),
        &storage,
        "ab2",
        2,
        &opts,
        RestoreFrom::Latest,
        &options,
    );
    check_all(&ab, &model);

    // Both halves complete 4 together: checkpoint 2 goes, its files that both halves reuse
    // stay, and the abandoned upload of 3 is garbage of a finished id.
    for x in &ab {
        random_ops(x, &mut model, &mut rng, 500);
    }
    let refs: Vec<_> = ab.iter().collect();
    for st in checkpoint_job(&storage, &refs, 4) {
        assert!(st.files_reused > 0, "{st:?}");
    }
    assert!(!exists(storage.as_ref(), &layout::metadata_name(2, &src)));
    assert!(storage.list("chk-3/").unwrap().is_empty());
    let shared_ab: BTreeSet<String> = shared_of(storage.as_ref(), 4, ab[0].backend_id())
        .intersection(&shared_of(storage.as_ref(), 4, ab[1].backend_id()))
        .cloned()
        .collect();
    assert!(
        !shared_ab.is_empty(),
        "the halves' checkpoints share the restored base files"
    );
    assert_clean(storage.as_ref());
    check_all(&ab, &model);
    let ids: Vec<String> = ab.iter().map(|x| x.backend_id().to_string()).collect();
    for x in &ab {
        random_ops(x, &mut model, &mut rng, 500);
    }
    checkpoint_job(&storage, &refs, 5);
    drop(refs);
    drop(ab);

    // 2 → 1.
    let c = restore_all_with(
        dir.path(),
        &storage,
        "c",
        1,
        &opts,
        RestoreFrom::Handles {
            checkpoint_id: 5,
            backend_ids: ids.clone(),
        },
        &options,
    )
    .remove(0);
    assert_eq!(check(&c, &model), model_pairs(&model));
    random_ops(&c, &mut model, &mut rng, 500);
    let stats = checkpoint_job(&storage, &[&c], 6).remove(0);
    assert!(stats.files_reused > 0, "{stats:?}");
    for id in &ids {
        assert!(!exists(storage.as_ref(), &layout::metadata_name(5, id)));
    }

    // An orphan is swept; nothing referenced is.
    let orphan = layout::new_shared_name(99, 0);
    storage.put_bytes(&orphan, b"orphan").unwrap();
    let swept = owner_of(&storage, 1).sweep(Duration::ZERO).unwrap();
    assert_eq!(swept.shared_deleted, 1, "{swept:?}");
    assert!(!exists(storage.as_ref(), &orphan));
    assert_clean(storage.as_ref());
    drop(c);

    // Restore everything at parallelism 1 and 3 and compare with the model.
    let one = restore_all_with(
        dir.path(),
        &storage,
        "final1",
        1,
        &opts,
        RestoreFrom::Checkpoint(6),
        &options,
    );
    check_all(&one, &model);
    drop(one);
    let three = restore_all_with(
        dir.path(),
        &storage,
        "final3",
        3,
        &opts,
        RestoreFrom::Checkpoint(6),
        &options,
    );
    check_all(&three, &model);
    assert_eq!(
        three[1].key_groups(),
        KeyGroupRange::for_operator(M, 3, 1).unwrap()
    );
}

/// With every checkpoint completing, nothing is left behind: after 1 → 2 → 1 the storage
/// holds exactly the last checkpoint's record, manifest and files.
fn no_leftovers_after_rescales(store: Store) {
    let (dir, storage) = (&store.dir, store.storage.clone());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(8);
    let mut model = Model::default();
    let mut backends = open_fresh(dir.path(), &storage, "s", 1, &opts);
    let mut id = 0;
    for (step, p) in [2u32, 1].into_iter().enumerate() {
        for _ in 0..2 {
            id += 1;
            for x in &backends {
                random_ops(x, &mut model, &mut rng, 800);
            }
            checkpoint_job(&storage, &backends.iter().collect::<Vec<_>>(), id);
        }
        drop(backends);
        backends = restore_all(
            dir.path(),
            &storage,
            &format!("r{step}"),
            p,
            &opts,
            RestoreFrom::Latest,
        );
        check_all(&backends, &model);
    }
    id += 1;
    checkpoint_job(&storage, &[&backends[0]], id);
    assert_clean(storage.as_ref());
    let mut names: Vec<String> = storage
        .list("")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(|n| !layout::is_shared_name(n))
        .filter(|n| !n.starts_with(&layout::checkpoint_dir(id, backends[0].backend_id())))
        .collect();
    names.sort();
    assert_eq!(names, vec![layout::job_record_name(id)]);
    assert!(storage.list(layout::PIN_PREFIX).unwrap().is_empty());
    let _ = Arc::clone(&storage);
}
