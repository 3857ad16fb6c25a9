//! A process killed (`kill -9`) after RocksDB flushed a list state's memtable on its own (the
//! memtable was full), its directory then reopened (WAL off: writes still in memtables are
//! lost, the documented price). Whatever survived must stay consistent: the list-sequence
//! high-water mark is "persisted before numbers are handed out" (invariant 11), so an element
//! appended after the reopen comes after every element that survived and replaces none.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;

use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::small_options;
use rockstate::KeyedBackend;

/// `<work dir>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_LIST_ORDER_AFTER_KILL_CHILD";

const KEYS: u32 = 50;

fn element(k: u32, i: u32) -> Vec<u8> {
    let mut v = vec![(k % 251) as u8; 1000];
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

#[test]
fn an_append_after_a_kill_and_reopen_comes_after_the_surviving_elements() {
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

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of an_append_after_a_kill_and_reopen_comes_after_the_surviving_elements"]
fn writer_child() {
    let Ok(work) = std::env::var(CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let b = KeyedBackend::builder(work.join("db"))
        .options(small_options())
        .open()
        .unwrap();
    let l = b.list_state::<u32, (), Vec<u8>>("l").unwrap();
    // About 2 MB into 256 KiB memtables: RocksDB flushes the list's column family by itself.
    for i in 0..40u32 {
        for k in 0..KEYS {
            l.add(&k, &(), &element(k, i)).unwrap();
        }
    }
    // Wait until a flush of the list's column family has landed on disk.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let files = b
            .state_property("l", "rocksdb.live-sst-files-size")
            .unwrap()
            .unwrap_or(0);
        let immutable = b
            .state_property("l", "rocksdb.num-immutable-mem-table")
            .unwrap()
            .unwrap_or(0);
        if files > 0 && immutable == 0 {
            publish_and_wait_to_be_killed(
                &work.join("flushed"),
                &format!("{files} bytes of SST files of the list, no immutable memtable"),
            );
        }
        assert!(std::time::Instant::now() < deadline, "no flush");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
