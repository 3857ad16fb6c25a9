//! `full_snapshot` on the heap backend holds "exactly the state at the call"
//! (docs/heap-backend.md, `KeyedBackend::full_snapshot`), also while another thread writes:
//! never a later write to one state without an earlier write (same thread, program order) to
//! another, a state that never existed at any instant.
//!
//! A writer thread stores counter `n` first in state "a", then in state "z" (so at every
//! instant a >= z). States "m000".."m099" sort between them and widen the window between the
//! freezing of "a" and of "z". A snapshot holding z > a is not the state at any moment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rockstate::KeyedBackend;

#[test]
fn heap_full_snapshot_is_a_consistent_cut_across_states_while_another_thread_writes() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::heap_builder().open().unwrap();
    let a = b.value_state::<u32, (), u64>("a").unwrap();
    let z = b.value_state::<u32, (), u64>("z").unwrap();
    for i in 0..100 {
        let m = b
            .value_state::<u32, (), u64>(format!("m{i:03}").as_str())
            .unwrap();
        m.put(&0, &(), &0).unwrap();
    }
    a.put(&1, &(), &0).unwrap();
    z.put(&1, &(), &0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, z, stop) = (a.clone(), z.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                a.put(&1, &(), &n).unwrap();
                z.put(&1, &(), &n).unwrap();
            }
        })
    };
    let mut found = None;
    for round in 0..200 {
        let snap = b.full_snapshot().unwrap();
        let sp = dir.path().join(format!("sp-{round}"));
        snap.write_savepoint(&sp, &Default::default()).unwrap();
        let r = KeyedBackend::heap_builder().open().unwrap();
        r.restore_savepoint(&sp).unwrap();
        let ra = r
            .value_state::<u32, (), u64>("a")
            .unwrap()
            .get(&1, &())
            .unwrap();
        let rz = r
            .value_state::<u32, (), u64>("z")
            .unwrap()
            .get(&1, &())
            .unwrap();
        std::fs::remove_file(&sp).unwrap();
        if rz > ra {
            found = Some((round, ra, rz));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        found.is_none(),
        "full_snapshot holds a state that never existed: (round, a, z) = {found:?}; the \
         writer always stores n in \"a\" before \"z\", so at every instant a >= z"
    );
}
