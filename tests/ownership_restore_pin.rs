//! A restore protects what it reads before it reads it. Backend `a` keeps checkpointing
//! (a live or zombie source) while `b` restores a's checkpoint 1:
//! * b's pin is in storage before b reads anything, so a's completion of checkpoint 2 keeps
//!   checkpoint 1 while b downloads it; b restores exactly checkpoint 1's state and its later
//!   checkpoints verify;
//! * when b's pin reaches storage only after a's completion deleted checkpoint 1, b's restore
//!   fails with a typed error instead of restoring from files that are being deleted.
//!
//! In no order does a completed checkpoint name a missing file.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::{
    CheckpointStorage, Error, Fault, FaultyStorage, KeyedBackend, LocalStorage, OpKind, RestoreFrom,
};

struct Setup {
    dir: tempfile::TempDir,
    local: Arc<dyn CheckpointStorage>,
    a: KeyedBackend,
    model_1: Model,
    model: Model,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let a = KeyedBackend::builder(dir.path().join("a"))
        .options(small_options())
        .checkpoint_storage(local.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    random_writes(&a, &mut model, &mut rng(4), 5000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    Setup {
        dir,
        local,
        a,
        model_1: model.clone(),
        model,
    }
}

/// a rewrites every key, compacts (so checkpoint 2 shares no SST with 1) and completes 2.
fn a_moves_on(s: &mut Setup) {
    random_writes(&s.a, &mut s.model, &mut rng(5), 8000);
    s.a.compact_state("v").unwrap();
    s.a.checkpoint(2).unwrap();
    s.a.notify_checkpoint_complete(2).unwrap();
}

fn restore_b(s: &Setup, delay: Fault) -> std::thread::JoinHandle<rockstate::Result<KeyedBackend>> {
    let faulty = Arc::new(FaultyStorage::new(s.local.clone()));
    faulty.add_fault(delay);
    let path = s.dir.path().join("b");
    let source = s.a.backend_id().to_string();
    std::thread::spawn(move || {
        KeyedBackend::builder(path)
            .options(small_options())
            .checkpoint_storage(faulty)
            .restore(RestoreFrom::Exact {
                checkpoint_id: 1,
                backend_id: source,
            })
    })
}

#[test]
fn a_pinned_checkpoint_survives_its_sources_completion_while_it_is_restored() {
    let mut s = setup();
    // b pins at once, then downloads slowly; a completes 2 meanwhile.
    let b = restore_b(
        &s,
        Fault::Latency {
            op: Some(OpKind::GetFile),
            delay: Duration::from_millis(200),
        },
    );
    while s.local.list("pins/").unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    a_moves_on(&mut s);
    let b = b.join().unwrap().unwrap();
    assert_eq!(read_all(&b), s.model_1);
    let mut model_b = s.model_1.clone();
    random_writes(&b, &mut model_b, &mut rng(6), 500);
    match b
        .checkpoint(3)
        .and_then(|_| b.notify_checkpoint_complete(3))
    {
        // Two owners share this storage (a is a zombie source): either may refuse.
        Ok(()) | Err(Error::StorageConflict(_)) | Err(Error::CheckpointRejected { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    assert_verified(s.local.as_ref());
}

#[test]
fn a_pin_that_lands_after_the_deletion_fails_the_restore_cleanly() {
    let mut s = setup();
    // b's pin (its first put) lands only after a completed 2 and deleted 1.
    let b = restore_b(
        &s,
        Fault::Latency {
            op: Some(OpKind::PutBytes),
            delay: Duration::from_secs(2),
        },
    );
    a_moves_on(&mut s);
    match b.join().unwrap() {
        Err(Error::CheckpointNotFound(_)) | Err(Error::CheckpointCorrupt { .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(b) => {
            // The pin won the race after all: the restore must be exact.
            assert_eq!(read_all(&b), s.model_1);
        }
    }
    assert_verified(s.local.as_ref());
}

/// The owner's side on its own: a pin keeps its checkpoint's record, manifest and files
/// through newer completions; once the pin is gone the next pass deletes them.
#[test]
fn a_pin_keeps_its_checkpoint_through_completions() {
    let mut s = setup();
    let pin = rockstate::checkpoint::layout::new_pin_name(
        1,
        rockstate::Clock::now_ms(&rockstate::SystemClock),
    );
    s.local.put_bytes(&pin, b"").unwrap();
    a_moves_on(&mut s);
    let record_1 = rockstate::checkpoint::layout::job_record_name(1);
    assert!(
        s.local.get_bytes(&record_1).is_ok(),
        "pinned record deleted"
    );
    let pinned = restore_from(
        s.local.clone(),
        &s.dir.path().join("p"),
        RestoreFrom::Checkpoint(1),
    )
    .unwrap();
    assert_eq!(read_all(&pinned), s.model_1);
    drop(pinned);
    s.local.delete(&pin).unwrap();
    s.a.job_owner().unwrap().collect_garbage().unwrap();
    assert!(s.local.get_bytes(&record_1).is_err());
    assert!(s.local.list("chk-1/").unwrap().is_empty());
    assert_verified(s.local.as_ref());
    assert!(
        assert_verified(s.local.as_ref()).is_empty(),
        "files of 1 left behind"
    );
}
