//! `full_snapshot` on the heap backend is one cut also across a state registered while it
//! runs: a writer registers state "s<n>", stores a value in it, then stores n in state "z".
//! A snapshot holding z = n must hold "s1".."s<n>" with their values (at every instant they
//! exist before z says so); one without "s<n>" is not the state at any moment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rockstate::KeyedBackend;

#[test]
fn a_state_written_before_a_later_write_is_in_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let b = Arc::new(KeyedBackend::heap_builder().open().unwrap());
    // Many states, so listing them takes a while.
    for i in 0..200 {
        b.value_state::<u32, (), u64>(format!("a{i:03}").as_str())
            .unwrap()
            .put(&0, &(), &0)
            .unwrap();
    }
    let z = b.value_state::<u32, (), u64>("z").unwrap();
    z.put(&1, &(), &0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (b, z, stop) = (Arc::clone(&b), z.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 3000 {
                n += 1;
                let s = b
                    .value_state::<u32, (), u64>(format!("s{n}").as_str())
                    .unwrap();
                s.put(&1, &(), &n).unwrap();
                z.put(&1, &(), &n).unwrap();
            }
        })
    };
    let mut found = None;
    for round in 0..40 {
        let snap = b.full_snapshot().unwrap();
        let sp = dir.path().join(format!("sp-{round}"));
        snap.write_savepoint(&sp, &Default::default()).unwrap();
        let r = KeyedBackend::heap_builder().open().unwrap();
        r.restore_savepoint(&sp).unwrap();
        std::fs::remove_file(&sp).unwrap();
        let names: Vec<String> = r.states().unwrap().into_iter().map(|m| m.name).collect();
        let rz = r
            .value_state::<u32, (), u64>("z")
            .unwrap()
            .get(&1, &())
            .unwrap()
            .unwrap();
        if rz > 0 && !names.contains(&format!("s{rz}")) {
            found = Some((round, rz));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        found.is_none(),
        "a snapshot holds z = n without state s<n>, written before it: (round, n) = {found:?}"
    );
}
