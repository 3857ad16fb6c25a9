//! Garbage collection across rescaled backends (design.md §10 invariant 2): 1 → 2 → 1 with
//! `retained = 1`. Two backends restored from one checkpoint share its shared files; the
//! first to subsume it must not delete what the other still needs (its claim keeps the
//! manifest, storage references keep the files); the last claimer deletes it. Then 2 → 1,
//! an orphan sweep, and restores at parallelism 1 and 3 compared with the model. Local
//! storage and the S3 test server.

mod rescale_common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rescale_common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, RestoreFrom};

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
    let opts = CheckpointOptions::default(); // retained = 1
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut model = Model::default();

    // p = 1: checkpoints 1 and 2; 1 is subsumed.
    let s = open_fresh(dir.path(), &storage, "s", 1, &opts).remove(0);
    let src = s.backend_id().to_string();
    for id in 1..=2 {
        random_ops(&s, &mut model, &mut rng, 2000);
        s.checkpoint(id).unwrap();
        s.notify_checkpoint_complete(id).unwrap();
    }
    assert!(!exists(storage.as_ref(), &layout::metadata_name(1, &src)));
    let base_files = shared_of(storage.as_ref(), 2, &src);
    drop(s);

    // 1 → 2: both claim checkpoint 2 of the source.
    let ab = restore_all(
        dir.path(),
        &storage,
        "ab",
        2,
        &opts,
        RestoreFrom::Checkpoint(2),
    );
    check_all(&ab, &model);
    let (a, b) = (&ab[0], &ab[1]);
    for x in [a, b] {
        assert!(exists(
            storage.as_ref(),
            &layout::claim_name(2, &src, x.backend_id())
        ));
        assert_eq!(x.retained_checkpoints(), vec![(2, src.clone())]);
    }

    // A completes 3 before B has even uploaded 3. A releases its claim, B's keeps checkpoint
    // 2 and all its files.
    random_ops(a, &mut model, &mut rng, 500);
    let stats = a.checkpoint(3).unwrap();
    assert!(stats.files_reused > 0, "{stats:?}");
    a.notify_checkpoint_complete(3).unwrap();
    assert!(exists(storage.as_ref(), &layout::metadata_name(2, &src)));
    assert!(!exists(
        storage.as_ref(),
        &layout::claim_name(2, &src, a.backend_id())
    ));
    for f in &base_files {
        assert!(exists(storage.as_ref(), f), "{f} deleted while B needs it");
    }
    assert!(rockstate::verify_checkpoints(storage.as_ref())
        .unwrap()
        .problems
        .is_empty());
    // B's part is still restorable from checkpoint 2.
    let again = KeyedBackend::builder(dir.path().join("b-again"))
        .options(small_options())
        .key_groups(b.key_groups())
        .checkpoint_storage(Arc::clone(&storage))
        .restore(RestoreFrom::Exact {
            checkpoint_id: 2,
            backend_id: src.clone(),
        })
        .unwrap();
    assert!(check(&again, &model) > 0);
    // `again` claimed checkpoint 2 too; as a backend that never completes anything, its
    // claim keeps checkpoint 2 alive. Release it like a finished backend would: here by
    // checkpointing and completing once.
    again.checkpoint(3).unwrap();
    again.notify_checkpoint_complete(3).unwrap();
    drop(again);

    // B completes 3: the last claim goes, checkpoint 2's manifest goes; the files A's and B's
    // checkpoints still reference stay.
    random_ops(b, &mut model, &mut rng, 500);
    let stats = b.checkpoint(3).unwrap();
    assert!(stats.files_reused > 0, "{stats:?}");
    b.notify_checkpoint_complete(3).unwrap();
    assert!(!exists(storage.as_ref(), &layout::metadata_name(2, &src)));
    let shared_ab: BTreeSet<String> = shared_of(storage.as_ref(), 3, a.backend_id())
        .intersection(&shared_of(storage.as_ref(), 3, b.backend_id()))
        .cloned()
        .collect();
    assert!(
        !shared_ab.is_empty(),
        "A's and B's checkpoints share the restored base files"
    );
    check_all(&ab, &model);

    // More checkpoints: own ones subsumed, shared files survive while referenced.
    for id in 4..=5 {
        for x in &ab {
            random_ops(x, &mut model, &mut rng, 500);
            x.checkpoint(id).unwrap();
        }
        for x in &ab {
            x.notify_checkpoint_complete(id).unwrap();
        }
    }
    // `again`'s checkpoint 3 stays in storage (its backend is gone); it only keeps its own
    // files alive.
    let ids: Vec<String> = ab.iter().map(|x| x.backend_id().to_string()).collect();
    drop(ab);

    // 2 → 1.
    let c = restore_all(
        dir.path(),
        &storage,
        "c",
        1,
        &opts,
        RestoreFrom::Handles {
            checkpoint_id: 5,
            backend_ids: ids.clone(),
        },
    )
    .remove(0);
    assert_eq!(check(&c, &model), model_pairs(&model));
    random_ops(&c, &mut model, &mut rng, 500);
    let stats = c.checkpoint(6).unwrap();
    assert!(stats.files_reused > 0, "{stats:?}");
    c.notify_checkpoint_complete(6).unwrap();
    for id in &ids {
        assert!(!exists(storage.as_ref(), &layout::metadata_name(5, id)));
        assert!(storage.list(&layout::claim_dir(5, id)).unwrap().is_empty());
    }

    // An orphan is swept; nothing referenced is.
    let orphan = layout::new_shared_name();
    storage.put_bytes(&orphan, b"orphan").unwrap();
    let swept = c.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!(swept.shared_deleted, 1, "{swept:?}");
    assert!(!exists(storage.as_ref(), &orphan));
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    drop(c);

    // Restore everything at parallelism 1 and 3 and compare with the model.
    let one = restore_all(
        dir.path(),
        &storage,
        "final1",
        1,
        &opts,
        RestoreFrom::Checkpoint(6),
    );
    check_all(&one, &model);
    drop(one);
    let three = restore_all(
        dir.path(),
        &storage,
        "final3",
        3,
        &opts,
        RestoreFrom::Checkpoint(6),
    );
    check_all(&three, &model);
    assert_eq!(
        three[1].key_groups(),
        KeyGroupRange::for_operator(M, 3, 1).unwrap()
    );
}

/// With every backend completing its checkpoints, nothing is left behind: after 1 → 2 → 1
/// the storage holds exactly the last checkpoint's files.
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
                x.checkpoint(id).unwrap();
            }
            for x in &backends {
                x.notify_checkpoint_complete(id).unwrap();
            }
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
    backends[0].checkpoint(id).unwrap();
    backends[0].notify_checkpoint_complete(id).unwrap();
    assert_clean(storage.as_ref());
    let manifests: Vec<String> = storage
        .list(layout::CHECKPOINT_PREFIX)
        .unwrap()
        .into_iter()
        .filter(|o| o.name.ends_with(layout::METADATA_FILE))
        .map(|o| o.name)
        .collect();
    assert_eq!(
        manifests,
        vec![layout::metadata_name(id, backends[0].backend_id())]
    );
    assert!(storage.list(layout::CLAIM_PREFIX).unwrap().is_empty());
}
