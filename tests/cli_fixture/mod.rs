//! The operator-command tests' `Fixture` (a storage with two retained checkpoints of one backend,
//! job records 1 and 2, a savepoint next to it) and helpers to run the built binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use rockstate::coordinator::{task_checkpoint, Coordinator, CoordinatorConfig, Outcome};
use rockstate::{KeyedBackend, LocalStorage, ManualClock};

pub fn rockstate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rockstate"))
        .args(args)
        .output()
        .expect("run rockstate")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

/// A storage with two retained checkpoints of one backend (the second reusing SSTs of the
/// first), a job record for the second, and a savepoint file next to it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub storage: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let storage_dir = dir.path().join("cp");
        let storage = Arc::new(LocalStorage::new(&storage_dir).unwrap().with_fsync(false));
        let mut config = CoordinatorConfig::new("cli-test", 1, 128);
        config.retained = 2;
        let mut c =
            Coordinator::new(config, storage.clone(), Arc::new(ManualClock::new(5))).unwrap();
        let ep = c.endpoint(0).unwrap();
        let backend = KeyedBackend::builder(dir.path().join("op"))
            .checkpoint_storage(storage.clone())
            .job_owner(c.owner().clone())
            .open()
            .unwrap();
        let counts = backend.value_state::<u64, (), u64>("count").unwrap();
        let checkpoint = |c: &mut Coordinator| {
            let id = match c.trigger().unwrap() {
                rockstate::coordinator::Triggered::Started(id) => id,
                other => panic!("{other:?}"),
            };
            let s = backend.checkpoint(id).unwrap();
            ep.ack(id, task_checkpoint(0, Some((&backend, &s)), vec![]));
            assert!(matches!(
                c.poll().unwrap().as_slice(),
                [Outcome::Completed(_)]
            ));
            backend.notify_checkpoint_complete(id).unwrap();
            (id, s)
        };
        for k in 0..300u64 {
            counts.put(&k, &(), &k).unwrap();
        }
        let (first, s1) = checkpoint(&mut c);
        assert!(s1.files_uploaded > 0);
        for k in 0..10u64 {
            counts.put(&k, &(), &(k + 1)).unwrap();
        }
        let (id, _) = checkpoint(&mut c);
        assert_eq!((first, id), (1, 2));
        backend
            .write_savepoint(&dir.path().join("sp.rssp"))
            .unwrap();
        Fixture {
            dir,
            storage: storage_dir,
        }
    }

    pub fn arg(&self) -> &str {
        self.storage.to_str().unwrap()
    }

    /// Object names under `prefix`, relative to the storage root.
    pub fn objects(&self, prefix: &str) -> Vec<String> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                if rel.starts_with(".tmp") {
                    continue;
                }
                if p.is_dir() {
                    walk(root, &p, out);
                } else {
                    out.push(rel);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.storage, &self.storage, &mut out);
        out.retain(|n| n.starts_with(prefix));
        out.sort();
        out
    }
}
