//! A damaged job record (`docs/ownership.md` §4): once it is subsumed, what it named no longer
//! matters, so garbage passes delete it by its name and go on; while it is retained, they
//! refuse, since the files it keeps alive are unknown.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, Error, JobOwner, RestoreFrom, SystemClock};

fn retained(n: usize) -> CheckpointOptions {
    CheckpointOptions {
        retained: n,
        ..CheckpointOptions::default()
    }
}

#[test]
fn a_damaged_record_once_subsumed_is_deleted_and_garbage_collection_goes_on() {
    let fx = Fixture::new();
    let b = fx.open("a", retained(2));
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(11);
    for cp in 1..=2u64 {
        random_writes(&b, &mut model, &mut r, 2000);
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
    }
    // Record 1 is retained (with 2) when its bytes go bad.
    fx.damage_object(&layout::job_record_name(1), |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
    });
    for cp in 3..=6u64 {
        random_writes(&b, &mut model, &mut r, 2000);
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
    }
    // Only the two retained checkpoints are left, each whole, and nothing else.
    assert_eq!(fx.committed_ids(&id), vec![5, 6]);
    let mut records: Vec<String> = fx
        .storage
        .list("job/")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    records.sort();
    assert_eq!(
        records,
        vec![layout::job_record_name(5), layout::job_record_name(6)]
    );
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
    let owner = JobOwner::open(fx.storage_dyn(), 2, std::sync::Arc::new(SystemClock)).unwrap();
    assert_eq!(owner.retained(), vec![5, 6]);
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

#[test]
fn a_damaged_retained_record_stops_garbage_collection_with_a_typed_error() {
    let fx = Fixture::new();
    let b = fx.open("a", retained(2));
    let mut model = Model::new();
    let mut r = rng(12);
    for cp in 1..=2u64 {
        random_writes(&b, &mut model, &mut r, 2000);
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
    }
    fx.damage_object(&layout::job_record_name(2), |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
    });
    let owner = JobOwner::open(fx.storage_dyn(), 2, std::sync::Arc::new(SystemClock));
    assert!(
        matches!(owner, Err(Error::CheckpointCorrupt { ref file, .. }) if *file == layout::job_record_name(2)),
        "{owner:?}"
    );
    // The backend's own passes refuse too: what record 2 keeps alive is unknown.
    let swept = b.sweep_orphans(std::time::Duration::ZERO);
    assert!(
        matches!(swept, Err(Error::CheckpointCorrupt { ref file, .. }) if *file == layout::job_record_name(2)),
        "{swept:?}"
    );
}
