//! A restore killed (`kill -9`) midway: here a rescale of a changelog-mode checkpoint, killed
//! while the materialization's files download, after the log beside them has been sorted
//! into SST files and the rescale's scratch space made. Everything it leaves lies inside its
//! target directory, which carries the restore marker; nothing lies beside it. The next
//! restore into the same target clears it and restores exactly the checkpoint's state.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::process::{spawn_child, wait_for};
use common::*;
use rockstate::{Fault, FaultyStorage, LocalStorage, OpKind, RestoreFrom};

/// `<work dir>|<storage root>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_RESTORE_KILLED_CHILD";

fn entries(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whether a file under `dir` (at any depth) is one of the log's sorted SST files.
fn log_sst_under(dir: &Path) -> bool {
    let Ok(read) = fs::read_dir(dir) else {
        return false;
    };
    read.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if path.is_dir() {
            log_sst_under(&path)
        } else {
            name.starts_with("state-") && name.ends_with(".sst")
        }
    })
}

#[test]
fn a_killed_restore_leaves_its_scratch_inside_its_target() {
    let fx = Fixture::new();
    let b = fx.open("a", changelog_options(100_000));
    assert_eq!(b.max_parallelism(), 128);
    let mut model = Model::new();
    let mut r = rng(5);
    random_writes(&b, &mut model, &mut r, 3000);
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    for cp in 2..=3 {
        random_writes(&b, &mut model, &mut r, 400);
        assert!(!b.checkpoint(cp).unwrap().materialized);
        b.notify_checkpoint_complete(cp).unwrap();
    }
    drop(b);

    let work = fx.dir.path();
    let target = work.join("target");
    let stderr = work.join("child.stderr");
    let before = entries(work);
    let mut child = spawn_child(
        "restore_child",
        (
            CHILD_ENV,
            format!("{}|{}", work.display(), fx.local_root().display()),
        ),
        "ROCKSTATE_RESTORE_KILLED_UNUSED",
        None,
        &stderr,
    );
    // Killed once the log is sorted into SST files (the downloads never finish).
    wait_for(&mut child, &stderr, "prepared the log", || {
        log_sst_under(work)
    });
    child.kill().unwrap();
    child.wait().unwrap();

    let mut expected = before.clone();
    expected.insert("target".into());
    expected.insert("child.stderr".into());
    assert_eq!(entries(work), expected, "only the target is new beside it");
    assert!(target.join(".rockstate-restore-incomplete").exists());

    let restored = first_half_builder(&target, fx.storage_dyn())
        .restore(RestoreFrom::Latest)
        .unwrap();
    let owned = owned_part(&restored, &model);
    assert_eq!(read_all(&restored), owned);
    assert!(!entries(&target)
        .iter()
        .any(|n| n.starts_with(".rockstate-")));
    assert_eq!(entries(work), expected);
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_killed_restore_leaves_its_scratch_inside_its_target"]
fn restore_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (work, root) = spec.split_once('|').unwrap();
    let faulty = FaultyStorage::new(Arc::new(LocalStorage::new(root).unwrap()));
    // Every file download waits longer than the test lives.
    faulty.add_fault(Fault::Latency {
        op: Some(OpKind::GetFile),
        delay: Duration::from_secs(3600),
    });
    let restored = first_half_builder(&Path::new(work).join("target"), Arc::new(faulty))
        .restore(RestoreFrom::Latest);
    panic!("the restore ended: {:?}", restored.map(|_| ()));
}
