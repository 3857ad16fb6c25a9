//! `restore_savepoint` restores only into a backend that holds no state, and says so with a
//! typed error otherwise. The check (`savepoint::restore_savepoints`: `t.states.is_empty()`)
//! runs before the files are even opened and nothing holds it until the states are
//! registered after the whole verification pass, so a second restore into the same backend
//! started meanwhile (a retried call on another thread; `KeyedBackend` is shared by `&self`)
//! passes it too: both ingest, list elements get fresh sequence numbers each time, and every
//! list comes back twice.
//!
//! Deterministic by holding opens (`open_gate`, Linux, root): the first restore is held at its
//! open of the savepoint file, after its check, until the second restore opens it.

#[path = "open_gate/mod.rs"]
mod open_gate;

use std::time::Duration;

use open_gate::OpenGate;
use rockstate::{BackendKind, CodecId, KeyedBackend};

fn run(kind: BackendKind) {
    let tmp = tempfile::tempdir().unwrap();
    let sps = tmp.path().join("sps");
    std::fs::create_dir(&sps).unwrap();
    let sp = sps.join("sp");
    let codec = CodecId::new("raw", 1);
    {
        let src = KeyedBackend::builder(tmp.path().join("src"))
            .open()
            .unwrap();
        let l = src.raw_list_state("l", codec.clone()).unwrap();
        for i in 0..3u8 {
            l.add(b"k", b"", &[i]).unwrap();
        }
        src.write_savepoint(&sp).unwrap();
    }
    let target = KeyedBackend::builder(tmp.path().join("target"))
        .kind(kind)
        .open()
        .unwrap();

    let gate = OpenGate::watch(&sps);
    let wait = Duration::from_secs(120);
    let (r1, r2) = std::thread::scope(|s| {
        let t1 = s.spawn(|| target.restore_savepoint(&sp));
        let first = gate.hold_first("the first restore opens the file", wait, |_| true);
        let t2 = s.spawn(|| target.restore_savepoint(&sp));
        // The second restore either opens the file too (it passed the emptiness check) or
        // is refused before it opens anything.
        let second = gate.next_open(Duration::from_secs(5));
        first.allow();
        drop(second);
        let pass = gate.pass_all();
        let r = (t1.join().unwrap(), t2.join().unwrap());
        drop(pass);
        r
    });

    let l = target.raw_list_state("l", codec).unwrap();
    let list = l.get(b"k", b"").unwrap();
    assert_eq!(
        list,
        vec![vec![0u8], vec![1], vec![2]],
        "{kind:?}: two restores into one empty backend, started together: first {r1:?}, \
         second {r2:?}; the list restored is {list:?}"
    );
    assert!(
        r1.is_ok() != r2.is_ok(),
        "{kind:?}: exactly one restore succeeds, the other is refused: {r1:?} / {r2:?}"
    );
}

#[test]
fn a_second_restore_started_during_a_first_is_refused_on_rocksdb() {
    run(BackendKind::RocksDb);
}

#[test]
fn a_second_restore_started_during_a_first_is_refused_on_the_heap() {
    run(BackendKind::Heap);
}
