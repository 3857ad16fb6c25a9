//! Completion and abort notifications (docs/checkpoint-format.md §5; docs/architecture.md §8,
//! invariant 2): aborts delete exactly what the attempt uploaded; late or missing completions cost
//! duplicate uploads, never dangling references; retained-N keeps the newest N and never deletes
//! what they reference; the registry is rebuilt from storage on reopen.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use common::*;
use rockstate::{CheckpointOptions, Error, RestoreFrom};

on_every_storage!(
    abort_deletes_exactly_the_attempts_uploads,
    late_and_missing_completions_never_dangle,
    retained_n_keeps_the_newest_n,
    reopen_rebuilds_the_registry_from_storage,
);

fn abort_deletes_exactly_the_attempts_uploads(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(10);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let at_1 = model.clone();
    let before = fx.objects();

    // Aborted after its upload committed.
    random_writes(&b, &mut model, &mut r, 1000);
    let s2 = b.checkpoint(2).unwrap();
    assert!(s2.files_uploaded > 0);
    assert_ne!(fx.objects().len(), before.len());
    b.notify_checkpoint_aborted(2).unwrap();
    assert_eq!(fx.objects(), before);

    // Aborted while pending: the upload stops and cleans up.
    random_writes(&b, &mut model, &mut r, 1000);
    let pending = b.snapshot(3).unwrap();
    b.notify_checkpoint_aborted(3).unwrap();
    assert!(matches!(
        pending.upload(),
        Err(Error::CheckpointAborted { id: 3 })
    ));
    assert_eq!(fx.objects(), before);

    // Dropping a pending snapshot uploads nothing.
    drop(b.snapshot(4).unwrap());
    assert_eq!(fx.objects(), before);

    // An abort of a completed checkpoint, or an unknown one, changes nothing.
    b.notify_checkpoint_aborted(1).unwrap();
    b.notify_checkpoint_aborted(77).unwrap();
    assert_eq!(fx.objects(), before);
    // Confirming an aborted or unknown checkpoint is an error and changes nothing.
    assert!(matches!(
        b.notify_checkpoint_complete(2),
        Err(Error::UnknownCheckpoint { id: 2 })
    ));
    assert!(matches!(
        b.notify_checkpoint_complete(9),
        Err(Error::UnknownCheckpoint { id: 9 })
    ));
    assert_eq!(b.last_completed_checkpoint(), Some(1));

    // The base is still checkpoint 1: the next checkpoint reuses its files.
    let s5 = b.checkpoint(5).unwrap();
    assert!(s5.files_reused > 0);
    b.notify_checkpoint_complete(5).unwrap();
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    assert_eq!(
        read_all(&fx.restore("r1", RestoreFrom::Checkpoint(5)).unwrap()),
        model
    );
    assert!(matches!(
        fx.restore("r2", RestoreFrom::Checkpoint(1)),
        Err(Error::CheckpointNotFound(_))
    ));
    let _ = at_1;
}

fn late_and_missing_completions_never_dangle(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(11);
    let mut at = BTreeMap::new();

    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let m1 = fx.manifest(1, &id);
    // 2 and 3 are uploaded but never confirmed (missing notifications).
    for cp in [2, 3] {
        random_writes(&b, &mut model, &mut r, 1500);
        b.checkpoint(cp).unwrap();
        at.insert(cp, model.clone());
    }
    let m2 = fx.manifest(2, &id);
    let m3 = fx.manifest(3, &id);
    // 3 reuses only from 1: the SSTs 2 added were uploaded again under new names.
    let from_2_only: Vec<_> = m2
        .shared_files
        .iter()
        .filter(|f| {
            !m1.shared_files
                .iter()
                .any(|g| g.remote_name == f.remote_name)
        })
        .collect();
    assert!(!from_2_only.is_empty());
    for f in &from_2_only {
        if let Some(g) = m3.shared_files.iter().find(|g| g.sst_id == f.sst_id) {
            assert_ne!(g.remote_name, f.remote_name, "3 reused an unconfirmed file");
        }
    }
    for f in &m3.shared_files {
        let reused = m2
            .shared_files
            .iter()
            .any(|g| g.remote_name == f.remote_name);
        assert!(
            !reused
                || m1
                    .shared_files
                    .iter()
                    .any(|g| g.remote_name == f.remote_name)
        );
    }
    assert!(assert_verified(fx.storage.as_ref()).is_empty());

    // A late completion of 3 arrives, then the even later one of 2: ignored.
    b.notify_checkpoint_complete(3).unwrap();
    b.notify_checkpoint_complete(2).unwrap();
    assert_eq!(b.last_completed_checkpoint(), Some(3));
    assert_eq!(fx.committed_ids(&id), vec![3]);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    assert_eq!(
        read_all(&fx.restore("r", RestoreFrom::Latest).unwrap()),
        at[&3]
    );
    // The next checkpoint reuses from 3.
    let s4 = b.checkpoint(4).unwrap();
    assert_eq!(s4.files_reused, m3.shared_files.len());
}

/// Invariant 2 with retained = 3: after every completion the newest three completed
/// checkpoints exist, verify, and restore to their models.
fn retained_n_keeps_the_newest_n(fx: Fixture) {
    let opts = CheckpointOptions {
        retained: 3,
        ..CheckpointOptions::default()
    };
    let b = fx.open("a", opts);
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(12);
    let mut at = BTreeMap::new();
    for cp in 1..=7u64 {
        random_writes(&b, &mut model, &mut r, 1500);
        if cp == 4 {
            b.compact_state("v").unwrap(); // rewrites every file: old ones become garbage
        }
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
        at.insert(cp, model.clone());
        let expect: Vec<u64> = (cp.saturating_sub(2).max(1)..=cp).collect();
        assert_eq!(fx.committed_ids(&id), expect);
        assert_eq!(
            b.retained_checkpoints()
                .iter()
                .map(|(i, _)| *i)
                .collect::<Vec<_>>(),
            expect
        );
        assert!(assert_verified(fx.storage.as_ref()).is_empty(), "cp {cp}");
    }
    for cp in 5..=7u64 {
        let restored = fx
            .restore(&format!("r{cp}"), RestoreFrom::Checkpoint(cp))
            .unwrap();
        assert_eq!(read_all(&restored), at[&cp], "cp {cp}");
    }
}

fn reopen_rebuilds_the_registry_from_storage(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(13);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(2).unwrap();
    b.notify_checkpoint_complete(2).unwrap();
    b.close().unwrap();

    let b = fx.open("a", CheckpointOptions::default());
    assert_eq!(b.backend_id(), id);
    assert_eq!(b.last_completed_checkpoint(), Some(2));
    assert!(matches!(
        b.snapshot(2),
        Err(Error::CheckpointRejected { .. })
    ));
    let s3 = b.checkpoint(3).unwrap();
    assert_eq!(s3.files_reused, fx.manifest(2, &id).shared_files.len());
    b.notify_checkpoint_complete(3).unwrap();
    assert_eq!(fx.committed_ids(&id), vec![3]);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    assert_eq!(
        read_all(&fx.restore("r", RestoreFrom::Latest).unwrap()),
        model
    );
}
