//! The heap backend's incremental TTL cleanup removes only what it examined as expired:
//! another thread's read runs a cleanup step over the whole state, and a fresh value a
//! writer stores in between must not be deleted by it (the step examined and removes under
//! the table's lock).

use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::Visibility;
use rockstate::{KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

#[test]
fn heap_incremental_cleanup_does_not_delete_a_concurrent_fresh_write() {
    const N: u32 = 50_000; // stored keys, all expired when the race starts
    const REWRITTEN: u32 = 5_000; // keys thread B rewrites
    let dir = tempfile::tempdir().unwrap();
    let desc = StateDescriptor::new("v").with_ttl(
        TtlConfig::new(Duration::from_secs(10)).visibility(Visibility::NeverReturnExpired),
    );
    // The old entries, stamped at t = 0, brought in by a savepoint (a restore runs no
    // cleanup steps, so filling is cheap).
    let sp = dir.path().join("old");
    {
        let src = KeyedBackend::heap_builder()
            .clock(Arc::new(ManualClock::new(0)))
            .open()
            .unwrap();
        let v = src.value_state::<u32, (), u32>(desc.clone()).unwrap();
        for i in 0..N {
            v.raw().put(&i.to_be_bytes(), b"", b"old").unwrap();
        }
        src.write_savepoint(&sp).unwrap();
    }
    let mut lost = Vec::new();
    for _round in 0..10 {
        let clock = ManualClock::new(11_000); // every old entry expired
        let b = KeyedBackend::heap_builder()
            .clock(Arc::new(clock.clone()))
            .heap_incremental_cleanup(1_000)
            .open()
            .unwrap();
        b.restore_savepoint(&sp).unwrap();
        let v = b.value_state::<u32, (), u32>(desc.clone()).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Thread A: reads a key of its own over and over; each read runs a cleanup step.
        let cleaner = {
            let v = v.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    v.raw().get(b"mine", b"").unwrap();
                }
            })
        };
        // Thread B (this one): rewrites its own keys with fresh, live values.
        for i in 0..REWRITTEN {
            v.raw().put(&i.to_be_bytes(), b"", b"new").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        cleaner.join().unwrap();
        lost = (0..REWRITTEN)
            .filter(|i| v.raw().get(&i.to_be_bytes(), b"").unwrap().is_none())
            .collect();
        if !lost.is_empty() {
            break;
        }
    }
    assert!(
        lost.is_empty(),
        "{} fresh (live) writes were deleted by another thread's incremental cleanup, e.g. key {:?}",
        lost.len(),
        lost.first()
    );
}
