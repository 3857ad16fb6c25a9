//! Incremental checkpoints and restore (docs/architecture.md §8, invariants 1, 4, 5, 6): only SSTs
//! absent from the last completed checkpoint are uploaded, a checkpoint with no change uploads only
//! the private files, restore yields exactly the state at the checkpoint, the first checkpoint
//! after a restore is incremental, the task can write while the upload runs, and no object is ever
//! overwritten.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::HashSet;

use common::*;
use rockstate::{CheckpointOptions, Error, RestoreFrom};

on_every_storage!(
    uploads_only_ssts_absent_from_last_completed,
    restore_is_exact_and_next_checkpoint_is_incremental,
    writes_while_uploading,
    no_object_is_ever_overwritten,
);

fn shared_names(m: &sst_format::CheckpointManifest) -> HashSet<String> {
    m.shared_files
        .iter()
        .map(|f| f.remote_name.clone())
        .collect()
}

/// Invariant 6: uploads are exactly the SSTs not in the last completed checkpoint plus the
/// private files; a checkpoint without changes uploads only private files.
fn uploads_only_ssts_absent_from_last_completed(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(1);
    let mut watch = OverwriteWatch::default();

    random_writes(&b, &mut model, &mut r, 4000);
    let s1 = b.checkpoint(1).unwrap();
    let m1 = fx.manifest(1, &id);
    assert_eq!(s1.files_reused, 0);
    assert_eq!(
        s1.files_uploaded,
        m1.shared_files.len() + m1.private_files.len()
    );
    assert!(!m1.shared_files.is_empty());
    assert_eq!(
        s1.state_bytes,
        m1.shared_files.iter().map(|f| f.size).sum::<u64>()
            + m1.private_files.iter().map(|f| f.size).sum::<u64>()
    );
    b.notify_checkpoint_complete(1).unwrap();
    watch.observe(fx.storage.as_ref());

    // No change: only private files.
    let s2 = b.checkpoint(2).unwrap();
    let m2 = fx.manifest(2, &id);
    assert_eq!(s2.files_reused, m1.shared_files.len());
    assert_eq!(s2.files_uploaded, m2.private_files.len());
    assert_eq!(shared_names(&m2), shared_names(&m1));
    assert_eq!(
        s2.bytes_uploaded,
        m2.private_files.iter().map(|f| f.size).sum::<u64>()
    );
    b.notify_checkpoint_complete(2).unwrap();
    watch.observe(fx.storage.as_ref());

    // Some writes: the new SSTs and nothing else.
    random_writes(&b, &mut model, &mut r, 500);
    let s3 = b.checkpoint(3).unwrap();
    let m3 = fx.manifest(3, &id);
    let new: Vec<_> = m3
        .shared_files
        .iter()
        .filter(|f| !shared_names(&m2).contains(&f.remote_name))
        .collect();
    assert!(!new.is_empty());
    assert_eq!(s3.files_uploaded, new.len() + m3.private_files.len());
    assert_eq!(s3.files_reused, m3.shared_files.len() - new.len());
    // Every reused file has the identity of a file of the base, and every new one differs.
    for f in &m3.shared_files {
        let in_base = m2
            .shared_files
            .iter()
            .any(|g| g.local_name == f.local_name && g.size == f.size && g.sst_id == f.sst_id);
        assert_eq!(in_base, shared_names(&m2).contains(&f.remote_name), "{f:?}");
    }
    b.notify_checkpoint_complete(3).unwrap();
    watch.observe(fx.storage.as_ref());
    assert!(assert_verified(fx.storage.as_ref()).is_empty());

    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    watch.observe(fx.storage.as_ref());
}

/// Invariant 4 and the no-Flink-full-checkpoint rule: restore yields the state at the
/// checkpoint; the restored backend's first checkpoint reuses every restored SST.
fn restore_is_exact_and_next_checkpoint_is_incremental(fx: Fixture) {
    let a = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(2);
    random_writes(&a, &mut model, &mut r, 3000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    let at_1 = model.clone();
    random_writes(&a, &mut model, &mut r, 3000); // not checkpointed
    let m1 = fx.manifest(1, a.backend_id());

    let b = fx.restore("b", RestoreFrom::Checkpoint(1)).unwrap();
    assert_ne!(b.backend_id(), a.backend_id());
    assert_eq!(b.last_completed_checkpoint(), Some(1));
    assert_eq!(read_all(&b), at_1);
    // Ids must move forward from the restored checkpoint.
    assert!(matches!(
        b.snapshot(1),
        Err(Error::CheckpointRejected { .. })
    ));
    let s = b.checkpoint(2).unwrap();
    assert_eq!(s.files_reused, m1.shared_files.len(), "{s:?}");
    let m2 = fx.manifest(2, b.backend_id());
    // What was uploaded is new: at most the SST holding the restored backend's new id.
    let uploaded_ssts = m2
        .shared_files
        .iter()
        .filter(|f| !shared_names(&m1).contains(&f.remote_name))
        .count();
    assert!(uploaded_ssts <= 1, "{uploaded_ssts}");
    assert_eq!(s.files_uploaded, uploaded_ssts + m2.private_files.len());
    b.notify_checkpoint_complete(2).unwrap();
    // The restored-from checkpoint was subsumed (retained = 1) but its files live on in 2.
    assert_eq!(fx.committed_ids(a.backend_id()), Vec::<u64>::new());
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    let c = fx.restore("c", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&c), at_1);
}

/// The task keeps reading and writing while the upload runs on another thread; the checkpoint
/// holds exactly the state as of the sync phase.
fn writes_while_uploading(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 20_000);
    let at_snapshot = model.clone();
    let pending = b.snapshot(1).unwrap();
    let upload = std::thread::spawn(move || pending.upload());
    let mut rounds = 0;
    while rounds < 3 || !upload.is_finished() {
        random_writes(&b, &mut model, &mut r, 200);
        let s = state(&b);
        for (k, v) in model.iter().take(50) {
            assert_eq!(s.get(k, &()).unwrap(), Some(*v));
        }
        rounds += 1;
    }
    let stats = upload.join().unwrap().unwrap();
    assert_eq!(stats.checkpoint_id, 1);
    b.notify_checkpoint_complete(1).unwrap();
    assert_eq!(read_all(&b), model);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), at_snapshot);
}

/// Invariant 5 over a long mixed history, including restores and retained > 1; plus the
/// create-if-absent contract of the storage itself.
fn no_object_is_ever_overwritten(fx: Fixture) {
    let opts = CheckpointOptions {
        retained: 2,
        ..CheckpointOptions::default()
    };
    let mut watch = OverwriteWatch::default();
    let mut model = Model::new();
    let mut r = rng(4);
    let mut b = fx.open("b0", opts.clone());
    let mut next = 1;
    for round in 0..4 {
        for _ in 0..4 {
            random_writes(&b, &mut model, &mut r, 800);
            b.checkpoint(next).unwrap();
            if r.random_ratio(3, 4) {
                b.notify_checkpoint_complete(next).unwrap();
            } else {
                b.notify_checkpoint_aborted(next).unwrap();
            }
            next += 1;
            watch.observe(fx.storage.as_ref());
        }
        b.compact_state("v").unwrap();
        drop(b);
        b = fx
            .restore(&format!("b{}", round + 1), RestoreFrom::Latest)
            .unwrap();
        model = read_all(&b);
        next = b.last_completed_checkpoint().unwrap() + 1;
        watch.observe(fx.storage.as_ref());
    }
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    let any = fx.storage.list("shared/").unwrap().pop().unwrap().name;
    assert!(matches!(
        fx.storage.put_bytes(&any, b"other"),
        Err(Error::ObjectExists { .. })
    ));
    watch.observe(fx.storage.as_ref());
}

use rand::Rng;
