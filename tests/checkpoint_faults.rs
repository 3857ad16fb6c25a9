//! Storage faults: under every fault `FaultyStorage` injects, on local storage and on the S3
//! test server, a checkpoint either completes or aborts cleanly (storage holds exactly what it
//! held before the attempt, after a sweep at worst); no committed manifest ever references a
//! missing or partial object (docs/architecture.md §8, invariant 1); a retried checkpoint
//! and a sweep leave no leaked objects; restores under read faults fail cleanly and a retry
//! restores the exact state.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointOptions, CheckpointStorage, Error, Fault, FaultyStorage, OpKind, RestoreFrom,
};

/// One scenario: faults added before checkpoint 2, numbered relative to the operations done
/// so far (`k` = 1 is the next operation of that kind).
#[derive(Debug, Clone)]
enum Scenario {
    Fail(OpKind, u64),
    LandThenFail(OpKind, u64),
    Truncate(u64),
    /// A failing put whose cleanup delete fails too: the sweep must remove the leftover.
    FailWithFailingCleanup,
    Latency,
    HideFresh,
}

fn scenarios() -> Vec<Scenario> {
    use Scenario::*;
    vec![
        Fail(OpKind::PutFile, 1),
        Fail(OpKind::PutFile, 3),
        LandThenFail(OpKind::PutFile, 2),
        Truncate(1),
        Fail(OpKind::PutBytes, 1),
        LandThenFail(OpKind::PutBytes, 1),
        FailWithFailingCleanup,
        Latency,
        HideFresh,
    ]
}

fn apply(s: &FaultyStorage, scenario: &Scenario) {
    let at = |op: OpKind, k: u64| s.ops(op) + k;
    match *scenario {
        Scenario::Fail(op, k) => s.add_fault(Fault::FailNth { op, nth: at(op, k) }),
        Scenario::LandThenFail(op, k) => s.add_fault(Fault::LandThenFail { op, nth: at(op, k) }),
        Scenario::Truncate(k) => s.add_fault(Fault::TruncateNth {
            nth: at(OpKind::PutFile, k),
        }),
        Scenario::FailWithFailingCleanup => {
            s.add_fault(Fault::LandThenFail {
                op: OpKind::PutFile,
                nth: at(OpKind::PutFile, 2),
            });
            for k in 1..=3 {
                s.add_fault(Fault::FailNth {
                    op: OpKind::Delete,
                    nth: at(OpKind::Delete, k),
                });
            }
        }
        Scenario::Latency => s.add_fault(Fault::Latency {
            op: None,
            delay: Duration::from_millis(2),
        }),
        Scenario::HideFresh => s.add_fault(Fault::HideFresh { last: 4 }),
    }
}

/// Object names and sizes, for "storage is exactly as before" comparisons.
fn listing(storage: &dyn CheckpointStorage) -> BTreeMap<String, u64> {
    storage
        .list("")
        .unwrap()
        .into_iter()
        .map(|o| (o.name, o.size))
        .collect()
}

fn run_scenario(inner: Arc<dyn CheckpointStorage>, scenario: &Scenario) {
    let faulty = Arc::new(FaultyStorage::new(inner.clone()));
    let fx = Fixture::with_storage(faulty.clone());
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(7);
    random_writes(&b, &mut model, &mut r, 2500);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    random_writes(&b, &mut model, &mut r, 1500);
    let before = listing(inner.as_ref());

    apply(&faulty, scenario);
    let attempt = b.checkpoint(2);
    let injected = faulty.injected();
    // Latency and stale listings cost nothing but time; every other fault hits an upload.
    let must_abort = !matches!(scenario, Scenario::Latency | Scenario::HideFresh);
    assert_eq!(attempt.is_err(), must_abort, "{scenario:?}: {attempt:?}");
    match &attempt {
        Ok(_) => b.notify_checkpoint_complete(2).unwrap(),
        Err(e) => {
            assert!(
                matches!(e, Error::Storage { .. } | Error::CheckpointCorrupt { .. }),
                "{scenario:?}: unexpected error {e}"
            );
            assert!(injected > 0, "{scenario:?}: failed without a fault: {e}");
            assert!(
                inner
                    .get_bytes(&layout::metadata_name(2, b.backend_id()))
                    .is_err(),
                "{scenario:?}: an aborted checkpoint left its manifest"
            );
            // Aborted cleanly: nothing new remains, except what a failed cleanup delete
            // left, which the sweep removes.
            if !matches!(scenario, Scenario::FailWithFailingCleanup) {
                assert_eq!(listing(inner.as_ref()), before, "{scenario:?}");
            }
        }
    }
    // Invariant 1 holds whatever happened, even seen through the faulty listing.
    assert_verified(inner.as_ref());
    if matches!(scenario, Scenario::HideFresh) {
        // A sweep that cannot see checkpoint 2's newest objects must still not delete
        // anything checkpoint 2 references.
        b.sweep_orphans(Duration::ZERO).unwrap();
        assert_verified(inner.as_ref());
        assert_verified(faulty.as_ref());
    }

    // The job retries: the next checkpoint succeeds once the faults are gone.
    faulty.clear_faults();
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(3).unwrap();
    b.notify_checkpoint_complete(3).unwrap();
    // Completing 3 removed whatever an aborted attempt 2 left (a failed cleanup's leftovers
    // included): 2 can never complete now. The sweep finds nothing more.
    if attempt.is_err() {
        let of_2: Vec<String> = listing(inner.as_ref())
            .into_keys()
            .filter(|n| {
                n.starts_with("chk-2/")
                    || layout::parse_shared_name(n).and_then(|s| s.checkpoint_id) == Some(2)
            })
            .collect();
        assert!(of_2.is_empty(), "{scenario:?}: {of_2:?}");
    }
    let swept = b.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!(
        swept.shared_deleted + swept.private_deleted,
        0,
        "{scenario:?}: {swept:?}"
    );
    let unreferenced = assert_verified(inner.as_ref());
    assert!(
        unreferenced.is_empty(),
        "{scenario:?}: leaked {unreferenced:?}"
    );
    // Only checkpoint 3 remains, and every object belongs to it.
    let manifest = fx.manifest(3, b.backend_id());
    let mut expected: Vec<String> = manifest
        .shared_files
        .iter()
        .map(|f| f.remote_name.clone())
        .chain(manifest.private_files.iter().map(|f| f.remote_name.clone()))
        .chain([
            layout::metadata_name(3, b.backend_id()),
            layout::job_record_name(3),
        ])
        .collect();
    expected.sort();
    let names: Vec<String> = listing(inner.as_ref()).into_keys().collect();
    assert_eq!(names, expected, "{scenario:?}");
    let restored = restore_from(inner, &fx.path("r"), RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model, "{scenario:?}");
}

fn every_fault(mut make: impl FnMut() -> Arc<dyn CheckpointStorage>) {
    for scenario in scenarios() {
        run_scenario(make(), &scenario);
    }
}

#[test]
fn local_every_fault_completes_or_aborts_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    every_fault(|| {
        n += 1;
        let s = rockstate::LocalStorage::new(dir.path().join(format!("s{n}"))).unwrap();
        Arc::new(s) as Arc<dyn CheckpointStorage>
    });
}

#[test]
fn s3_every_fault_completes_or_aborts_cleanly() {
    every_fault(|| common::s3::server().storage() as Arc<dyn CheckpointStorage>);
}

/// Read faults during restore: the restore fails with the storage error and leaves the
/// target empty; the retry restores exactly.
fn restore_under_read_faults(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    random_writes(&b, &mut model, &mut rng(3), 2500);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let no_local = CheckpointOptions {
        local_recovery: false,
        ..CheckpointOptions::default()
    };
    // (operation, which one from now, lands before failing)
    for (op, k, lands) in [
        (OpKind::GetFile, 2, false),
        (OpKind::GetFile, 1, true),
        (OpKind::GetBytes, 1, false),
    ] {
        let nth = faulty.ops(op) + k;
        let fault = if lands {
            Fault::LandThenFail { op, nth }
        } else {
            Fault::FailNth { op, nth }
        };
        faulty.add_fault(fault.clone());
        let target = fx.path("r");
        let err = rockstate::KeyedBackend::builder(&target)
            .options(small_options())
            .checkpoint_storage(faulty.clone())
            .checkpoint_options(no_local.clone())
            .restore(RestoreFrom::Latest)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, Error::Storage { .. }), "{fault:?}: {err}");
        assert!(!target.exists(), "{fault:?}: restore left files behind");
        faulty.clear_faults();
    }
    let restored = rockstate::KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(faulty)
        .checkpoint_options(no_local)
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&restored), model);
}

on_every_storage!(restore_under_read_faults);
