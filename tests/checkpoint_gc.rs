//! Garbage collection (docs/checkpoint-format.md §5–§6; docs/architecture.md §8, invariants 2 and
//! 3): subsumed checkpoints take their no-longer-referenced shared files with them; the orphan
//! sweep deletes unreferenced shared files and uncommitted checkpoint directories older than the
//! minimum age, and nothing a manifest references.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, RestoreFrom};

on_every_storage!(
    subsumption_deletes_files_no_manifest_references,
    sweep_deletes_orphans_older_than_min_age_only,
    sweep_respects_every_backend_and_refuses_to_guess,
);

fn subsumption_deletes_files_no_manifest_references(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(20);
    for cp in 1..=3 {
        random_writes(&b, &mut model, &mut r, 2000);
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
    }
    b.compact_state("v").unwrap();
    b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    let m4 = fx.manifest(4, &id);
    let stored: HashSet<String> = fx
        .storage
        .list(layout::SHARED_PREFIX)
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    let referenced: HashSet<String> = m4
        .shared_files
        .iter()
        .map(|f| f.remote_name.clone())
        .collect();
    assert_eq!(stored, referenced);
    assert_eq!(fx.committed_ids(&id), vec![4]);
    // Only checkpoint 4's directory is left.
    let dirs: HashSet<String> = fx
        .storage
        .list("chk-")
        .unwrap()
        .iter()
        .filter_map(|o| {
            layout::parse_checkpoint_object(&o.name).map(|p| format!("{}/{}", p.id, p.backend_id))
        })
        .collect();
    assert_eq!(dirs, HashSet::from([format!("4/{id}")]));
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    assert_eq!(
        read_all(&fx.restore("r", RestoreFrom::Latest).unwrap()),
        model
    );
}

/// Invariant 3, and the minimum age.
fn sweep_deletes_orphans_older_than_min_age_only(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(21);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(2).unwrap(); // uploaded, not yet confirmed: must survive sweeps
    let good = fx.objects();

    // Garbage: an unreferenced shared file, an uncommitted directory of a crashed attempt of
    // another backend, and one of this backend.
    let orphan = layout::new_shared_name(50, rockstate::Clock::now_ms(&rockstate::SystemClock));
    fx.storage.put_bytes(&orphan, b"orphan sst").unwrap();
    fx.storage
        .put_bytes("chk-5/deadbeef/CURRENT", b"MANIFEST-000001\n")
        .unwrap();
    let own_leftover = layout::private_name(9, b.backend_id(), "OPTIONS-000007");
    fx.storage.put_bytes(&own_leftover, b"x").unwrap();

    // Too young: nothing goes.
    let young = b.sweep_orphans(Duration::from_secs(3600)).unwrap();
    assert_eq!((young.shared_deleted, young.private_deleted), (0, 0));
    assert_eq!(fx.objects().len(), good.len() + 3);

    let swept = b.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!((swept.shared_deleted, swept.private_deleted), (1, 2));
    assert_eq!(fx.objects(), good);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());

    b.notify_checkpoint_complete(2).unwrap();
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    assert_eq!(
        read_all(&fx.restore("r", RestoreFrom::Latest).unwrap()),
        model
    );
}

/// The sweep never deletes files of any task's checkpoint the job completed, and an
/// undecodable manifest that may still complete stops it before it deletes anything.
fn sweep_respects_every_backend_and_refuses_to_guess(fx: Fixture) {
    let mut model_a = Model::new();
    let mut model_b = Model::new();
    let mut r = rng(22);
    let a = KeyedBackendPair::open(&fx);
    random_writes(&a.0, &mut model_a, &mut r, 2000);
    random_writes(&a.1, &mut model_b, &mut r, 2000);
    a.complete(1);
    let before = fx.objects();
    a.2.sweep(Duration::ZERO).unwrap();
    assert_eq!(fx.objects(), before);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());

    let orphan = layout::new_shared_name(2, 0);
    fx.storage.put_bytes(&orphan, b"orphan").unwrap();
    fx.storage
        .put_bytes("chk-3/bad/_metadata", b"RSTM garbage")
        .unwrap();
    let err = a.2.sweep(Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("chk-3/bad/_metadata"), "{err}");
    assert!(fx.storage.get_bytes(&orphan).is_ok());
}

/// Two operator instances of one job (different key groups) sharing the storage, and the
/// job's owner.
struct KeyedBackendPair(
    rockstate::KeyedBackend,
    rockstate::KeyedBackend,
    std::sync::Arc<rockstate::JobOwner>,
);

impl KeyedBackendPair {
    fn open(fx: &Fixture) -> KeyedBackendPair {
        let owner = std::sync::Arc::new(
            rockstate::JobOwner::open(
                fx.storage_dyn(),
                1,
                std::sync::Arc::new(rockstate::SystemClock),
            )
            .unwrap(),
        );
        let open = |name: &str, index| {
            rockstate::KeyedBackend::builder(fx.path(name))
                .options(small_options())
                .key_groups(rockstate::KeyGroupRange::for_operator(128, 2, index).unwrap())
                .checkpoint_storage(fx.storage_dyn())
                .job_owner(owner.clone())
                .open()
                .unwrap()
        };
        KeyedBackendPair(open("p0", 0), open("p1", 1), owner)
    }

    /// Both take checkpoint `id`; the owner commits it; both are notified.
    fn complete(&self, id: u64) {
        let s0 = self.0.checkpoint(id).unwrap();
        let s1 = self.1.checkpoint(id).unwrap();
        let record = sst_format::JobCheckpoint {
            checkpoint_id: id,
            job_name: "pair".into(),
            max_parallelism: 128,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            tasks: vec![
                rockstate::coordinator::task_checkpoint(0, Some((&self.0, &s0)), Vec::new()),
                rockstate::coordinator::task_checkpoint(1, Some((&self.1, &s1)), Vec::new()),
            ],
        };
        self.2.commit(&record).unwrap();
        self.0.notify_checkpoint_complete(id).unwrap();
        self.1.notify_checkpoint_complete(id).unwrap();
    }
}
