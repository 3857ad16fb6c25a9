//! A sweep run while another backend's upload is in flight must not delete that upload's
//! files, however old the SSTs are on disk: a local storage hard-links the SST RocksDB wrote
//! (its modification time is when RocksDB wrote it), so the age garbage collection uses is
//! the time the put began, which the shared name carries. An orphan whose put began long ago
//! is still swept.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointStorage, Clock, Fault, FaultyStorage, KeyedBackend, LocalStorage, OpKind, SystemClock,
};

/// Sets the modification time of every file under `dir` one hour back.
fn age_files(dir: &std::path::Path) {
    let old = UNIX_EPOCH + Duration::from_millis(SystemClock.now_ms()) - Duration::from_secs(3600);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_file() {
            let f = std::fs::File::options().write(true).open(e.path()).unwrap();
            f.set_modified(old).unwrap();
        }
    }
}

#[test]
fn sweep_keeps_an_upload_in_flight_and_deletes_an_old_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let faulty = Arc::new(FaultyStorage::new(local.clone()));
    let a = KeyedBackend::builder(dir.path().join("a"))
        .options(small_options())
        .checkpoint_storage(faulty.clone())
        .open()
        .unwrap();
    let b = KeyedBackend::builder(dir.path().join("b"))
        .options(small_options())
        .checkpoint_storage(local.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    random_writes(&a, &mut model, &mut rng(2), 5000);
    a.flush().unwrap();
    // A's SSTs look an hour old on disk (as if written long before this checkpoint).
    age_files(&dir.path().join("a"));
    // An orphan whose put began an hour ago: garbage for any sweep with a shorter min age.
    let orphan = layout::new_shared_name(0, SystemClock.now_ms() - 3_600_000);
    local.put_bytes(&orphan, b"orphan").unwrap();

    // A's manifest put waits, so its files sit in storage unreferenced meanwhile.
    faulty.add_fault(Fault::Latency {
        op: Some(OpKind::PutBytes),
        delay: Duration::from_secs(3),
    });
    let pending = a.snapshot(1).unwrap();
    let upload = std::thread::spawn(move || pending.upload());
    while faulty.ops(OpKind::PutBytes) == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let swept = b.sweep_orphans(Duration::from_secs(2)).unwrap();
    assert_eq!(swept.shared_deleted, 1, "{swept:?}");
    assert!(local.get_bytes(&orphan).is_err());
    upload.join().unwrap().unwrap();
    faulty.clear_faults();
    a.notify_checkpoint_complete(1).unwrap();
    assert_verified(local.as_ref());
}
