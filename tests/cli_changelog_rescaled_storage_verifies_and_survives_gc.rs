//! `rockstate verify` and `gc --apply` on the storage of a rescaled job in changelog mode
//! with log tables: run 1 at parallelism 2 (materialization, log checkpoints, tables), run 2
//! restored at parallelism 3 from run 1's last record, more checkpoints. verify must pass,
//! `gc --apply --min-age 0s` must delete nothing the records need (verify passes after it and
//! a restore at parallelism 1 reads the job's state exactly), and a flipped byte in a log
//! segment, a truncated log table and a missing materialized SST must each be named by verify.

mod cli_fixture;

use std::collections::BTreeMap;
use std::sync::Arc;

use cli_fixture::{code, rockstate, stderr, stdout};
use rockstate::coordinator::{task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered};
use rockstate::{
    ChangelogOptions, CheckpointOptions, KeyGroupRange, KeyedBackend, LocalStorage, ManualClock,
    RestoreFrom,
};

const MAXP: u32 = 128;

fn opts() -> CheckpointOptions {
    CheckpointOptions {
        changelog: ChangelogOptions {
            enabled: true,
            materialize_interval_ms: u64::MAX,
            materialize_log_percent: 1_000_000,
            materialize_min_log_bytes: u64::MAX,
            table_bytes: 512,
            table_fanout: 2,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

fn ranges(n: u16) -> Vec<KeyGroupRange> {
    let per = MAXP as u16 / n;
    (0..n)
        .map(|i| {
            let end = if i + 1 == n {
                MAXP as u16 - 1
            } else {
                (i + 1) * per - 1
            };
            KeyGroupRange::new(i * per, end).unwrap()
        })
        .collect()
}

fn owns(b: &KeyedBackend, k: u64) -> bool {
    let kg = rockstate::keygroup::key_group_of(&rockstate::codec::encode(&k, "key").unwrap(), MAXP);
    b.key_groups().contains(kg)
}

struct Run {
    c: Coordinator,
    eps: Vec<rockstate::coordinator::TaskEndpoint>,
    backends: Vec<KeyedBackend>,
}

impl Run {
    fn checkpoint(&mut self) {
        let id = match self.c.trigger().unwrap() {
            Triggered::Started(id) => id,
            other => panic!("{other:?}"),
        };
        for (i, b) in self.backends.iter().enumerate() {
            let s = b.checkpoint(id).unwrap();
            let ep = &self.eps[i];
            ep.ack(id, task_checkpoint(i as u32, Some((b, &s)), vec![]));
        }
        assert!(matches!(
            self.c.poll().unwrap().as_slice(),
            [Outcome::Completed(_)]
        ));
        for b in &self.backends {
            b.notify_checkpoint_complete(id).unwrap();
        }
    }

    fn write(&self, model: &mut BTreeMap<u64, u64>, round: u64) {
        for b in &self.backends {
            let s = b.value_state::<u64, (), u64>("v").unwrap();
            for k in 0..400u64 {
                if owns(b, k) && !(k + round).is_multiple_of(3) {
                    let v = round * 10_000 + k;
                    s.put(&k, &(), &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
    }
}

#[test]
fn rescaled_changelog_storage_verifies_survives_gc_and_names_each_damage() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cp");
    let storage = Arc::new(LocalStorage::new(&root).unwrap().with_fsync(false));
    // The tool's gc ages objects by the wall clock.
    let now = rockstate::Clock::now_ms(&rockstate::SystemClock);
    let clock = Arc::new(ManualClock::new(now - 3_600_000));
    let mut model = BTreeMap::new();

    let open_run = |tasks: u16, restore: bool, tag: &str| {
        let mut config = CoordinatorConfig::new("cli-changelog", u32::from(tasks), MAXP);
        config.retained = 2;
        let mut c = Coordinator::new(config, storage.clone(), clock.clone()).unwrap();
        let eps = (0..u32::from(tasks))
            .map(|i| c.endpoint(i).unwrap())
            .collect();
        let backends = ranges(tasks)
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let b = KeyedBackend::builder(dir.path().join(format!("{tag}-{i}")))
                    .max_parallelism(MAXP)
                    .key_groups(r)
                    .checkpoint_storage(storage.clone())
                    .job_owner(c.owner().clone())
                    .checkpoint_options(opts());
                if restore {
                    b.restore(RestoreFrom::Latest).unwrap()
                } else {
                    b.open().unwrap()
                }
            })
            .collect();
        Run { c, eps, backends }
    };

    let mut run = open_run(2, false, "a");
    for round in 0..6 {
        run.write(&mut model, round);
        run.checkpoint();
    }
    drop(run);
    let mut run = open_run(3, true, "b");
    for round in 6..10 {
        run.write(&mut model, round);
        run.checkpoint();
    }
    drop(run);

    let arg = root.to_str().unwrap();
    let o = rockstate(&["verify", arg]);
    assert_eq!(code(&o), 0, "healthy storage: {}{}", stdout(&o), stderr(&o));
    let o = rockstate(&["inspect", "--json", arg]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let inspect: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = rockstate(&["gc", "--apply", "--min-age", "0s", arg]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let gc_out = stdout(&o);
    let o = rockstate(&["verify", arg]);
    assert_eq!(
        code(&o),
        0,
        "after gc:\n{gc_out}\nverify: {}{}",
        stdout(&o),
        stderr(&o)
    );

    // Restore the whole job at parallelism 1 and compare with the model.
    let b = KeyedBackend::builder(dir.path().join("check"))
        .max_parallelism(MAXP)
        .checkpoint_storage(storage.clone())
        .checkpoint_options(opts())
        .restore(RestoreFrom::Latest)
        .unwrap();
    let s = b.value_state::<u64, (), u64>("v").unwrap();
    for k in 0..400u64 {
        assert_eq!(s.get(&k, &()).unwrap(), model.get(&k).copied(), "key {k}");
    }
    drop(b);

    // Damage: one per kind of shared object of the newest checkpoint's manifests.
    let cat = rockstate::catalog::Catalog::load(storage.as_ref()).unwrap();
    let newest = cat
        .checkpoints
        .iter()
        .map(|c| c.manifest.checkpoint_id)
        .max()
        .unwrap();
    let mut segment = None;
    let mut table = None;
    let mut sst = None;
    for c in cat
        .checkpoints
        .iter()
        .filter(|c| c.manifest.checkpoint_id == newest)
    {
        let m = &c.manifest;
        if let Some(l) = &m.changelog {
            segment = segment.or(l.segments.last().map(|s| s.remote_name.clone()));
            table = table.or(l
                .tables
                .last()
                .and_then(|t| t.files.first())
                .map(|f| f.remote_name.clone()));
        }
        sst = sst.or(m.shared_files.first().map(|f| f.remote_name.clone()));
    }
    let (segment, table, sst) = (
        segment.unwrap_or_else(|| panic!("no segment in {inspect}")),
        table.unwrap_or_else(|| panic!("no log table in {inspect}")),
        sst.unwrap(),
    );
    let p = root.join(&segment);
    let mut bytes = std::fs::read(&p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&p, &bytes).unwrap();
    let p = root.join(&table);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 100]).unwrap();
    std::fs::remove_file(root.join(&sst)).unwrap();
    let o = rockstate(&["verify", "--json", arg]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bad: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap())
        .collect();
    for name in [&segment, &table, &sst] {
        assert!(bad.contains(&name.as_str()), "{name} not named: {v}");
    }
}
