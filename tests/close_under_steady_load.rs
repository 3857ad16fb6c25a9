//! `KeyedBackend::close` waits for calls in flight on other threads, and every later call
//! answers `Closed`. With sixteen threads calling back to back (eight writing, eight reading),
//! close must still get its turn rather than wait for the callers to stop on their own: calls
//! hold the database's lock shared, and a lock that let new readers past a waiting close
//! would keep it waiting as long as the calls overlap. The callers here stop only when they
//! see `Closed`; a watchdog ends a close that never comes after a minute.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rockstate::{ErrorKind, KeyedBackend};

#[test]
fn close_finishes_while_other_threads_keep_calling() {
    let dir = tempfile::tempdir().unwrap();
    let backend = KeyedBackend::builder(dir.path()).open().unwrap();
    let counts = backend.value_state::<u32, (), u64>("counts").unwrap();
    for k in 0..1000u32 {
        counts.put(&k, &(), &u64::from(k)).unwrap();
    }
    backend.flush().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..16u32)
        .map(|w| {
            let counts = counts.clone();
            let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let k = (i.wrapping_mul(7919) + w) % 1000;
                    i = i.wrapping_add(1);
                    let r = if w % 2 == 0 {
                        counts
                            .put(&k, &(), &u64::from(k))
                            .map(|()| Some(u64::from(k)))
                    } else {
                        counts.get(&k, &())
                    };
                    calls.fetch_add(1, Ordering::Relaxed);
                    match r {
                        Ok(v) => assert_eq!(v, Some(u64::from(k))),
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::Closed, "{e}");
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    // Every caller is going before the close starts.
    while calls.load(Ordering::Relaxed) < 20_000 {
        std::thread::yield_now();
    }
    let (tx, rx) = mpsc::channel();
    let closer = std::thread::spawn(move || {
        let r = backend.close();
        let _ = tx.send(());
        r
    });
    let closed = rx.recv_timeout(Duration::from_secs(60));
    // Let the callers go either way, so the test ends.
    stop.store(true, Ordering::Relaxed);
    closer.join().unwrap().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        closed.is_ok(),
        "close did not finish within a minute while 16 threads kept calling (it finished \
         once they were told to stop)"
    );
}
