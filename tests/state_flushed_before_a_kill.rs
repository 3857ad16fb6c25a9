//! A process killed (`kill -9`) after RocksDB flushed a state's memtable on its own (the
//! memtable was full), its directory then reopened (WAL off: writes still in memtables are
//! lost, the documented price). Whatever survived must stay consistent with the metadata that
//! describes it:
//!
//! * a state whose entries survived keeps its metadata (name, kind, codec): the reopened
//!   backend lists it, and registering the same name as another kind is a typed mismatch
//!   (invariant 10), never a reinterpretation of the surviving bytes;
//! * the list-sequence high-water mark is persisted before numbers are handed out
//!   (invariant 11), so an element appended after the reopen comes after every element that
//!   survived and replaces none.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;

use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::small_options;
use rockstate::KeyedBackend;

/// `<work dir>` of the list writer child.
const LIST_CHILD_ENV: &str = "ROCKSTATE_LIST_ORDER_AFTER_KILL_CHILD";
/// `<work dir>` of the value writer child.
const VALUE_CHILD_ENV: &str = "ROCKSTATE_STATE_METADATA_AFTER_KILL_CHILD";

const LIST_KEYS: u32 = 50;
const VALUE_KEYS: u32 = 2000;

fn element(k: u32, i: u32) -> Vec<u8> {
    let mut v = vec![(k % 251) as u8; 1000];
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

#[test]
fn an_append_after_a_kill_and_reopen_comes_after_the_surviving_elements() {
    let (_dir, b) = reopened_after_the_kill("list_writer_child", LIST_CHILD_ENV);
    let l = b.list_state::<u32, (), Vec<u8>>("l").unwrap();
    let before = l.get(&0, &()).unwrap();
    assert!(!before.is_empty(), "nothing of the flushed list survived");
    let last = element(0, 999_999);
    l.add(&0, &(), &last).unwrap();
    let after = l.get(&0, &()).unwrap();
    let position = after.iter().position(|e| *e == last).unwrap();
    assert_eq!(
        after.len(),
        before.len() + 1,
        "one append to a list of {} surviving elements left {} (the appended one at {position}): \
         it overwrote a surviving element",
        before.len(),
        after.len()
    );
    assert_eq!(
        position,
        after.len() - 1,
        "the element appended after the reopen sorts at {position} of {} (before {} surviving \
         elements)",
        after.len(),
        after.len() - 1 - position
    );
}

#[test]
fn a_state_whose_entries_survived_a_kill_keeps_its_metadata() {
    let (_dir, b) = reopened_after_the_kill("value_writer_child", VALUE_CHILD_ENV);
    let listed: Vec<String> = b.states().unwrap().into_iter().map(|m| m.name).collect();
    // The same name as another kind of state, reading the surviving bytes as map entries.
    let as_map = b.map_state::<u32, (), u8, u8>("v");
    let surviving_as_map = as_map.as_ref().ok().map(|m| {
        (0..VALUE_KEYS)
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

/// Runs child test `child` (its work directory in `env`) until a flush of its state landed,
/// kills it, and reopens its database.
fn reopened_after_the_kill(child: &str, env: &str) -> (tempfile::TempDir, KeyedBackend) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flushed = kill_child_once_written(
        child,
        (env, work.display().to_string()),
        &work.join("flushed"),
        &work.join("child.stderr"),
    );
    eprintln!("child: {flushed}");
    let b = open_child(work);
    (dir, b)
}

/// The child's backend in `<work>/db`, with small memtables.
fn open_child(work: &Path) -> KeyedBackend {
    KeyedBackend::builder(work.join("db"))
        .options(small_options())
        .open()
        .unwrap()
}

/// Waits until a flush of `state`'s column family has landed on disk (SST files, no immutable
/// memtable left), then tells the parent and waits to be killed.
fn wait_for_a_flush_then_be_killed(b: &KeyedBackend, state: &str, work: &Path) -> ! {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let files = b
            .state_property(state, "rocksdb.live-sst-files-size")
            .unwrap()
            .unwrap_or(0);
        let immutable = b
            .state_property(state, "rocksdb.num-immutable-mem-table")
            .unwrap()
            .unwrap_or(0);
        if files > 0 && immutable == 0 {
            publish_and_wait_to_be_killed(
                &work.join("flushed"),
                &format!("{files} bytes of SST files of {state}, no immutable memtable"),
            );
        }
        assert!(std::time::Instant::now() < deadline, "no flush");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Entry point of a child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of an_append_after_a_kill_and_reopen_comes_after_the_surviving_elements"]
fn list_writer_child() {
    let Ok(work) = std::env::var(LIST_CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let b = open_child(work);
    let l = b.list_state::<u32, (), Vec<u8>>("l").unwrap();
    // About 2 MB into 256 KiB memtables: RocksDB flushes the list's column family by itself.
    for i in 0..40u32 {
        for k in 0..LIST_KEYS {
            l.add(&k, &(), &element(k, i)).unwrap();
        }
    }
    wait_for_a_flush_then_be_killed(&b, "l", work);
}

/// Entry point of a child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_state_whose_entries_survived_a_kill_keeps_its_metadata"]
fn value_writer_child() {
    let Ok(work) = std::env::var(VALUE_CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let b = open_child(work);
    let v = b.value_state::<u32, (), Vec<u8>>("v").unwrap();
    // About 2 MB into 256 KiB memtables: RocksDB flushes the state's column family by itself.
    for k in 0..VALUE_KEYS {
        v.put(&k, &(), &vec![(k % 251) as u8; 1000]).unwrap();
    }
    wait_for_a_flush_then_be_killed(&b, "v", work);
}
