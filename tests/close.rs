//! `KeyedBackend::close` closes: RocksDB and its directory lock are released at once, so the
//! same path opens again while the old backend's clones and state handles are still alive;
//! those then answer every call with an error of kind `Closed`; everything written before
//! the close (cached writes too) is in the reopened backend.

use rockstate::{BackendKind, DbOptions, ErrorKind, KeyedBackend, Result};

/// A call through a closed backend's handle, asserted to fail as `Closed`.
fn closed<T>(what: &str, r: Result<T>) {
    match r {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "{what}: {e}"),
        Ok(_) => panic!("{what}: a call on a closed backend succeeded"),
    }
}

#[test]
fn reopening_right_after_close_works_while_old_handles_live_and_they_answer_closed() {
    for write_cache_bytes in [0, 1 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let options = DbOptions {
            write_cache_bytes,
            ..DbOptions::default()
        };
        let open = || {
            KeyedBackend::builder(dir.path())
                .options(options.clone())
                .open()
                .unwrap()
        };
        let backend = open();
        let clone = backend.clone();
        let counts = backend.value_state::<u32, (), u64>("counts").unwrap();
        let lists = backend.list_state::<u32, (), String>("lists").unwrap();
        for k in 0..1000u32 {
            counts.put(&k, &(), &(u64::from(k) * 3)).unwrap();
        }
        lists.add(&7, &(), &"a".to_string()).unwrap();
        // The last writes may still sit in the write cache: close must write them out.
        counts.put(&5, &(), &555).unwrap();
        backend.close().unwrap();

        // Old handles and clones are alive and answer Closed, for reads, writes and scans.
        let case = format!("write cache {write_cache_bytes}");
        closed(&case, counts.get(&1, &()));
        closed(&case, counts.put(&1, &(), &1));
        closed(&case, lists.get(&7, &()));
        closed(&case, lists.add(&7, &(), &"b".to_string()));
        closed(&case, clone.flush());
        closed(&case, clone.value_state::<u32, (), u64>("other"));
        closed(&case, clone.metrics());
        closed(&case, clone.scan_key_group("counts", 0, |_| Ok(true)));
        // Closing again does nothing more.
        clone.clone().close().unwrap();

        // The path opens again at once (no LOCK error) with everything written before.
        let reopened = open();
        let counts2 = reopened.value_state::<u32, (), u64>("counts").unwrap();
        for k in (0..1000u32).filter(|&k| k != 5) {
            assert_eq!(
                counts2.get(&k, &()).unwrap(),
                Some(u64::from(k) * 3),
                "{case}"
            );
        }
        assert_eq!(counts2.get(&5, &()).unwrap(), Some(555), "{case}");
        let lists2 = reopened.list_state::<u32, (), String>("lists").unwrap();
        assert_eq!(lists2.get(&7, &()).unwrap(), vec!["a".to_string()]);
        // The old handles stay closed: they never reach the new database.
        closed(&case, counts.get(&1, &()));
        drop((counts, lists, clone));
        assert_eq!(counts2.get(&1, &()).unwrap(), Some(3));
        reopened.close().unwrap();
    }
}

#[test]
fn a_closed_heap_backend_answers_closed_through_every_handle() {
    let dir = tempfile::tempdir().unwrap();
    let backend = KeyedBackend::builder(dir.path())
        .kind(BackendKind::Heap)
        .open()
        .unwrap();
    let clone = backend.clone();
    let counts = backend.value_state::<u32, (), u64>("counts").unwrap();
    counts.put(&1, &(), &1).unwrap();
    backend.close().unwrap();
    closed("heap get", counts.get(&1, &()));
    closed("heap put", counts.put(&1, &(), &2));
    closed("heap state", clone.value_state::<u32, (), u64>("other"));
}

#[test]
fn close_waits_for_calls_in_flight_on_other_threads() {
    let dir = tempfile::tempdir().unwrap();
    let backend = KeyedBackend::builder(dir.path()).open().unwrap();
    let counts = backend.value_state::<u32, (), u64>("counts").unwrap();
    for k in 0..2000u32 {
        counts.put(&k, &(), &u64::from(k)).unwrap();
    }
    backend.flush().unwrap();
    // Readers and writers run until they see the close; each call either completes against
    // the open database or answers Closed, never anything else.
    let started = std::sync::Arc::new(std::sync::Barrier::new(4));
    let workers: Vec<_> = (0..3u32)
        .map(|w| {
            let counts = counts.clone();
            let started = std::sync::Arc::clone(&started);
            std::thread::spawn(move || {
                for i in 0u32.. {
                    if i == 1 {
                        started.wait();
                    }
                    let k = (i * 7 + w) % 2000;
                    let r = if w == 0 {
                        counts
                            .put(&k, &(), &u64::from(k))
                            .map(|()| Some(u64::from(k)))
                    } else {
                        counts.get(&k, &())
                    };
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
    // Close once every worker has completed a call and is issuing more.
    started.wait();
    backend.close().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    let reopened = KeyedBackend::builder(dir.path()).open().unwrap();
    let counts = reopened.value_state::<u32, (), u64>("counts").unwrap();
    for k in 0..2000u32 {
        assert_eq!(counts.get(&k, &()).unwrap(), Some(u64::from(k)));
    }
}
