//! A process killed (`kill -9`) after RocksDB flushed a value state's memtable on its own (the
//! memtable was full), its directory then reopened. The state's entries survived on disk; its
//! persisted metadata (name, kind, codec) must survive with them, so the reopened backend
//! lists the state and registering the same name as another kind is a typed mismatch
//! (invariant 10), never a reinterpretation of the surviving bytes.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;

use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::small_options;
use rockstate::KeyedBackend;

/// `<work dir>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_STATE_METADATA_AFTER_KILL_CHILD";

const KEYS: u32 = 2000;

#[test]
fn a_state_whose_entries_survived_a_kill_keeps_its_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flushed = kill_child_once_written(
        "writer_child",
        (CHILD_ENV, work.display().to_string()),
        &work.join("flushed"),
        &work.join("child.stderr"),
    );
    eprintln!("child: {flushed}");

    let b = KeyedBackend::builder(work.join("db"))
        .options(small_options())
        .open()
        .unwrap();
    let listed: Vec<String> = b.states().unwrap().into_iter().map(|m| m.name).collect();
    // The same name as another kind of state, reading the surviving bytes as map entries.
    let as_map = b.map_state::<u32, (), u8, u8>("v");
    let surviving_as_map = as_map.as_ref().ok().map(|m| {
        (0..KEYS)
            .filter(|k| !m.entries(k, &()).unwrap_or_default().is_empty())
            .count()
    });
    assert!(
        listed == vec!["v".to_string()] && as_map.is_err(),
        "reopened: states listed {listed:?}; registering value state \"v\" as a map state: {}",
        match &as_map {
            Ok(_) => format!(
                "accepted, {} keys read back as maps from the value state's bytes",
                surviving_as_map.unwrap()
            ),
            Err(e) => format!("refused ({e})"),
        }
    );
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_state_whose_entries_survived_a_kill_keeps_its_metadata"]
fn writer_child() {
    let Ok(work) = std::env::var(CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let b = KeyedBackend::builder(work.join("db"))
        .options(small_options())
        .open()
        .unwrap();
    let v = b.value_state::<u32, (), Vec<u8>>("v").unwrap();
    // About 2 MB into 256 KiB memtables: RocksDB flushes the state's column family by itself.
    for k in 0..KEYS {
        v.put(&k, &(), &vec![(k % 251) as u8; 1000]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let files = b
            .state_property("v", "rocksdb.live-sst-files-size")
            .unwrap()
            .unwrap_or(0);
        let immutable = b
            .state_property("v", "rocksdb.num-immutable-mem-table")
            .unwrap()
            .unwrap_or(0);
        if files > 0 && immutable == 0 {
            publish_and_wait_to_be_killed(
                &work.join("flushed"),
                &format!("{files} bytes of SST files of the state, no immutable memtable"),
            );
        }
        assert!(std::time::Instant::now() < deadline, "no flush");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
