//! Savepoints and restores in a process that cannot start threads (EAGAIN): the work each
//! step runs beside the calling thread runs on the calling thread instead, and the results
//! are the same (`parallel::tests::without_threads` refuses every thread start of the
//! calling thread and counts the refusals, so each test also shows the step tried).

use std::sync::Arc;

use crate::checkpoint::ChangelogOptions;
use crate::parallel::tests::without_threads;
use crate::{CheckpointOptions, CheckpointStorage, KeyedBackend, LocalStorage, RestoreFrom};

const KEYS: u32 = 20_000;

fn fill(b: &KeyedBackend, salt: u64) {
    let v = b.value_state::<u32, u8, u64>("v").unwrap();
    for k in 0..KEYS {
        v.put(&k, &0, &(u64::from(k) * 3 + salt)).unwrap();
    }
}

fn check(b: &KeyedBackend, salt: u64) {
    let v = b.value_state::<u32, u8, u64>("v").unwrap();
    for k in 0..KEYS {
        assert_eq!(v.get(&k, &0).unwrap(), Some(u64::from(k) * 3 + salt), "{k}");
    }
}

#[test]
fn savepoints_are_written_and_restored_without_threads() {
    let dir = tempfile::tempdir().unwrap();
    let src = KeyedBackend::builder(dir.path().join("src"))
        .open()
        .unwrap();
    fill(&src, 1);
    let sp = dir.path().join("sp");
    let (written, refused) = without_threads(|| src.write_savepoint(&sp));
    written.unwrap();
    assert!(refused > 0, "the writer started no encoder thread");
    let dst = KeyedBackend::builder(dir.path().join("dst"))
        .open()
        .unwrap();
    let (restored, refused) = without_threads(|| dst.restore_savepoint(&sp));
    restored.unwrap();
    assert!(refused > 0, "the restore started no thread");
    check(&dst, 1);
}

#[test]
fn checkpoints_are_restored_without_threads() {
    for changelog in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn CheckpointStorage> =
            Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
        let options = CheckpointOptions {
            changelog: ChangelogOptions {
                enabled: changelog,
                materialize_interval_ms: u64::MAX,
                ..ChangelogOptions::default()
            },
            ..CheckpointOptions::default()
        };
        let builder = |name: &str| {
            KeyedBackend::builder(dir.path().join(name))
                .checkpoint_storage(Arc::clone(&storage))
                .checkpoint_options(options.clone())
        };
        let b = builder("a").open().unwrap();
        fill(&b, 1);
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        // Changelog mode: a log checkpoint on top, so the restore replays a log.
        fill(&b, 2);
        b.checkpoint(2).unwrap();
        b.notify_checkpoint_complete(2).unwrap();
        drop(b);
        let (restored, refused) = without_threads(|| builder("r").restore(RestoreFrom::Latest));
        let restored = restored.unwrap();
        assert!(
            refused > 0,
            "changelog {changelog}: the restore started no thread"
        );
        check(&restored, 2);
    }
}
