//! A savepoint restore into a fresh RocksDB backend killed (`kill -9`) midway, while its
//! staged SSTs are being ingested state by state, and then retried by the operator in the
//! same directory: reopen it and call `restore_savepoint` again. Whatever the kill left, the
//! directory must either be refused with a typed error (at the open or at the second restore)
//! or end up holding exactly the savepoint's state — never half of it, never twice.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::process::spawn_child;
use rockstate::KeyedBackend;

/// `<work dir>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_SAVEPOINT_RESTORE_KILLED_MIDWAY_CHILD";

const KEYS: u32 = 200;
/// Value states beside the list state "l" (ingested first: states go in name order).
const VALUE_STATES: u32 = 24;

fn value_name(i: u32) -> String {
    format!("v{i:02}")
}

fn fill(b: &KeyedBackend) {
    let l = b.list_state::<u32, (), u64>("l").unwrap();
    for k in 0..KEYS {
        l.add_all(&k, &(), &[1, 2, 3]).unwrap();
    }
    for i in 0..VALUE_STATES {
        let v = b
            .value_state::<u32, (), u64>(value_name(i).as_str())
            .unwrap();
        for k in 0..KEYS {
            v.put(&k, &(), &(u64::from(k) * 7 + u64::from(i))).unwrap();
        }
    }
}

/// What differs from the savepoint's state in `b` (empty when it is exactly that).
fn differences(b: &KeyedBackend) -> Vec<String> {
    let mut wrong = Vec::new();
    let l = b.list_state::<u32, (), u64>("l").unwrap();
    let bad_lists: Vec<(u32, Vec<u64>)> = (0..KEYS)
        .map(|k| (k, l.get(&k, &()).unwrap()))
        .filter(|(_, got)| got != &vec![1, 2, 3])
        .collect();
    if !bad_lists.is_empty() {
        wrong.push(format!(
            "{} of {KEYS} lists differ from [1, 2, 3], e.g. {:?}",
            bad_lists.len(),
            &bad_lists[..bad_lists.len().min(2)]
        ));
    }
    for i in 0..VALUE_STATES {
        let v = b
            .value_state::<u32, (), u64>(value_name(i).as_str())
            .unwrap();
        let good = (0..KEYS)
            .filter(|k| v.get(k, &()).unwrap() == Some(u64::from(*k) * 7 + u64::from(i)))
            .count();
        if good != KEYS as usize {
            wrong.push(format!("state {}: {good} of {KEYS} values", value_name(i)));
        }
    }
    wrong
}

fn staging_ssts(target: &Path) -> Option<usize> {
    let dir: PathBuf = fs::read_dir(target)
        .ok()?
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".rockstate-savepoint-restore-")
        })?
        .path();
    Some(
        fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
            .count(),
    )
}

#[test]
fn a_savepoint_restore_killed_midway_and_retried_gives_the_savepoint_or_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let src = KeyedBackend::builder(work.join("src")).open().unwrap();
    fill(&src);
    assert!(differences(&src).is_empty());
    src.write_savepoint(&work.join("sp")).unwrap();
    drop(src);

    let target = work.join("target");
    let stderr = work.join("child.stderr");
    let mut child = spawn_child(
        "restore_child",
        (CHILD_ENV, work.display().to_string()),
        "ROCKSTATE_SAVEPOINT_RESTORE_KILLED_MIDWAY_UNUSED",
        None,
        &stderr,
    );
    // Killed once the list's files (2 runs) and the next state's were ingested (moved out of
    // the staging directory; ingestions go one state after another, in name order) and
    // others still wait there.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut most = 0;
    let killed_midway = loop {
        assert!(Instant::now() < deadline, "the child never ingested");
        if let Some(n) = staging_ssts(&target) {
            most = most.max(n);
            if n > 0 && n + 4 <= most {
                child.kill().unwrap();
                break true;
            }
        }
        if work.join("restored").exists() {
            child.kill().unwrap();
            break false;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended: {}",
            fs::read_to_string(&stderr).unwrap_or_default()
        );
    };
    child.wait().unwrap();
    eprintln!("killed midway: {killed_midway} (staged SSTs seen: {most})");

    // The operator retries in the same directory.
    let reopened = match KeyedBackend::builder(&target).open() {
        Err(e) => {
            eprintln!("refused at open: {e}");
            return;
        }
        Ok(b) => b,
    };
    let listed = reopened.states().unwrap().len();
    match reopened.restore_savepoint(&work.join("sp")) {
        Err(e) => eprintln!("second restore refused: {e}"),
        Ok(_) => {
            let wrong = differences(&reopened);
            assert!(
                wrong.is_empty(),
                "reopened with {listed} states listed; the retried restore was accepted \
                 and gave other state than the savepoint's:\n{}",
                wrong.join("\n")
            );
            return;
        }
    }
    // Refused: then what the directory holds must be complete.
    let wrong = differences(&reopened);
    assert!(
        wrong.is_empty(),
        "the reopened directory holds part of the savepoint:\n{}",
        wrong.join("\n")
    );
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_savepoint_restore_killed_midway_and_retried_gives_the_savepoint_or_a_typed_error"]
fn restore_child() {
    let Ok(work) = std::env::var(CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let target = KeyedBackend::builder(work.join("target")).open().unwrap();
    target.restore_savepoint(&work.join("sp")).unwrap();
    fs::write(work.join("restored"), "done").unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
