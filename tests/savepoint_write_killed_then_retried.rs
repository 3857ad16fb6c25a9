//! `write_savepoint` killed (`kill -9`) while it writes the file, then retried to the same
//! path (what an operator or engine does when a savepoint attempt died with its process).
//! A killed multi-step write leaves its complete result or garbage that does not stand in the
//! way: nothing under the final name (the file is written under a partial name and linked
//! once complete), and the retry succeeds and removes what the killed write left.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::process::spawn_child;
use rockstate::KeyedBackend;

/// `<work dir>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_SAVEPOINT_WRITE_KILLED_CHILD";

const KEYS: u32 = 40_000;

fn value(k: u32) -> Vec<u8> {
    // Incompressible-ish, so the file is several MiB and takes a while to write.
    (0..120u32)
        .map(|i| (k.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) >> 13) as u8)
        .collect()
}

#[test]
fn a_savepoint_write_killed_midway_can_be_retried_to_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    {
        let src = KeyedBackend::builder(work.join("src")).open().unwrap();
        let v = src.value_state::<u32, (), Vec<u8>>("v").unwrap();
        for k in 0..KEYS {
            v.put(&k, &(), &value(k)).unwrap();
        }
        src.close().unwrap();
    }
    let sp = work.join("sp");
    let stderr = work.join("child.stderr");
    let mut child = spawn_child(
        "write_child",
        (CHILD_ENV, work.display().to_string()),
        "ROCKSTATE_SAVEPOINT_WRITE_KILLED_UNUSED",
        None,
        &stderr,
    );
    // Killed as soon as the partial file exists.
    let partial = || {
        fs::read_dir(work)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".sp.partial-"))
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !partial() {
        assert!(Instant::now() < deadline, "the child never wrote");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended: {}",
            fs::read_to_string(&stderr).unwrap_or_default()
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !work.join("written").exists(),
        "the child finished before the kill; the test did not kill it midway"
    );

    // Nothing under the final name: no restore can take the partial file.
    assert!(!sp.exists(), "a partial savepoint under the final name");
    assert!(partial(), "the killed write left its partial file");

    // The retry, from the reopened source, to the same path.
    let src = KeyedBackend::builder(work.join("src")).open().unwrap();
    src.value_state::<u32, (), Vec<u8>>("v").unwrap();
    let retried = src.write_savepoint(&sp);
    assert!(
        retried.is_ok(),
        "retrying the killed savepoint to the same path failed: {:?}",
        retried.unwrap_err()
    );
    assert!(!partial(), "the retry left the killed write's partial file");
    let target = KeyedBackend::builder(work.join("target")).open().unwrap();
    target.restore_savepoint(&sp).unwrap();
    let v = target.value_state::<u32, (), Vec<u8>>("v").unwrap();
    assert_eq!(v.get(&7, &()).unwrap(), Some(value(7)));
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_savepoint_write_killed_midway_can_be_retried_to_the_same_path"]
fn write_child() {
    let Ok(work) = std::env::var(CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let src = KeyedBackend::builder(work.join("src")).open().unwrap();
    src.value_state::<u32, (), Vec<u8>>("v").unwrap();
    src.write_savepoint(&work.join("sp")).unwrap();
    fs::write(work.join("written"), "done").unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
