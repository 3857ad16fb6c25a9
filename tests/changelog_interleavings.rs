//! Random interleavings of changelog-mode checkpoints: snapshots pipelined and uploaded out of
//! order, uploads aborted before and after they finish, completions out of order, the writer
//! failing and restarting from the latest completed checkpoint, over random settings (the
//! materialization threshold, a log buffer small enough to be lost, log tables on and off).
//! After each completion the latest checkpoint restores exactly the model of that checkpoint,
//! whole and in halves, and storage verifies; at the end, after two more completions, no
//! shared object is left unreferenced. Five states of every kind (lists included, which
//! update by reading in changelog mode). `SEED_FROM`, `SEEDS` and `STEPS` widen the run
//! (200 seeds of 120 steps take about seven minutes on two cores).

#[path = "rescale_common/mod.rs"]
mod rescale_common;

use std::collections::VecDeque;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rescale_common::*;
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend,
    LocalStorage, PendingSnapshot, RestoreFrom,
};

fn opts(r: &mut SmallRng) -> CheckpointOptions {
    CheckpointOptions {
        retained: r.random_range(1..3),
        changelog: ChangelogOptions {
            enabled: true,
            materialize_interval_ms: u64::MAX,
            materialize_log_percent: [5u32, 40, 100_000][r.random_range(0..3)],
            materialize_min_log_bytes: 0,
            max_log_buffer_bytes: [8192usize, 64 << 20, 64 << 20][r.random_range(0..3)],
            table_bytes: [0u64, 1, 3000][r.random_range(0..3)],
            table_fanout: 2,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

fn builder(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    o: &CheckpointOptions,
    kg: Option<KeyGroupRange>,
) -> rockstate::BackendBuilder {
    let mut b = KeyedBackend::builder(dir)
        .options(small_options())
        .max_parallelism(M)
        .checkpoint_storage(Arc::clone(storage))
        .checkpoint_options(o.clone());
    if let Some(kg) = kg {
        b = b.key_groups(kg);
    }
    b
}

fn run(seed: u64, steps: usize) {
    let mut r = SmallRng::seed_from_u64(seed);
    let o = opts(&mut r);
    eprintln!("seed {seed}: {:?}", o.changelog);
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let mut gen = 0;
    let mut b = builder(&dir.path().join("w0"), &storage, &o, None)
        .open()
        .unwrap();
    let mut model = Model::default();
    let mut next_id = 1u64;
    let mut pending: VecDeque<(PendingSnapshot, Model)> = VecDeque::new();
    let mut uploaded: Vec<(u64, Model)> = Vec::new();
    let mut completed: Option<(u64, Model)> = None;
    let mut restores = 0;
    for step in 0..steps {
        let n = r.random_range(20..300);
        random_ops(&b, &mut model, &mut r, n);
        match r.random_range(0..10) {
            0..=3 => {
                let p = b.snapshot(next_id).unwrap();
                eprintln!("step {step}: snapshot {next_id}");
                next_id += 1;
                pending.push_back((p, model.clone()));
            }
            4..=5 if !pending.is_empty() => {
                let i = if r.random_ratio(3, 4) {
                    0
                } else {
                    r.random_range(0..pending.len())
                };
                let (p, m) = pending.remove(i).unwrap();
                let id = p.checkpoint_id();
                match p.upload() {
                    Ok(s) => {
                        eprintln!(
                            "step {step}: uploaded {id} materialized={} tables={}",
                            s.materialized, s.log_tables_built
                        );
                        uploaded.push((id, m));
                    }
                    Err(e) => eprintln!("step {step}: upload {id} failed: {e}"),
                }
            }
            6..=7 if !uploaded.is_empty() => {
                let i = if r.random_ratio(3, 4) {
                    uploaded.len() - 1
                } else {
                    r.random_range(0..uploaded.len())
                };
                let (id, m) = uploaded.remove(i);
                let res = b.notify_checkpoint_complete(id);
                eprintln!("step {step}: complete {id}: {res:?}");
                res.unwrap();
                if completed.as_ref().is_none_or(|(c, _)| *c < id) {
                    completed = Some((id, m.clone()));
                    uploaded.retain(|(k, _)| *k > id);
                    // restore and check
                    restores += 1;
                    let rb = builder(
                        &dir.path().join(format!("r{restores}")),
                        &storage,
                        &CheckpointOptions::default(),
                        None,
                    )
                    .restore(RestoreFrom::Latest)
                    .unwrap();
                    eprintln!("step {step}: checking restore of {id}");
                    check(&rb, &m);
                    drop(rb);
                    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
                    assert!(report.problems.is_empty(), "{:?}", report.problems);
                    if r.random_ratio(1, 3) {
                        for i in 0..2u32 {
                            restores += 1;
                            let hb = builder(
                                &dir.path().join(format!("r{restores}")),
                                &storage,
                                &CheckpointOptions::default(),
                                Some(KeyGroupRange::for_operator(M, 2, i).unwrap()),
                            )
                            .restore(RestoreFrom::Latest)
                            .unwrap();
                            check(&hb, &m);
                        }
                    }
                }
            }
            8 if !pending.is_empty() || !uploaded.is_empty() => {
                if !uploaded.is_empty() && r.random_ratio(1, 2) {
                    let (id, _) = uploaded.remove(r.random_range(0..uploaded.len()));
                    eprintln!("step {step}: abort uploaded {id}");
                    b.notify_checkpoint_aborted(id).unwrap();
                } else if let Some((p, _)) = pending.pop_front() {
                    let id = p.checkpoint_id();
                    eprintln!("step {step}: abort pending {id}");
                    b.notify_checkpoint_aborted(id).unwrap();
                    assert!(p.upload().is_err());
                }
            }
            9 if completed.is_some() && r.random_ratio(1, 3) => {
                // The writer fails: restore the latest into a new writer.
                pending.clear();
                uploaded.clear();
                drop(b);
                gen += 1;
                let (id, m) = completed.clone().unwrap();
                eprintln!("step {step}: writer restarts from {id}");
                b = builder(&dir.path().join(format!("w{gen}")), &storage, &o, None)
                    .restore(RestoreFrom::Latest)
                    .unwrap();
                model = m;
                check(&b, &model);
            }
            _ => {}
        }
    }
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    eprintln!("seed {seed}: unreferenced {:?}", report.unreferenced_shared);
    // Settle: everything in flight goes; two final checkpoints complete.
    for (p, _) in pending.drain(..) {
        let id = p.checkpoint_id();
        let _ = b.notify_checkpoint_aborted(id);
        drop(p);
    }
    for (id, _) in uploaded.drain(..) {
        b.notify_checkpoint_aborted(id).unwrap();
    }
    for _ in 0..2 {
        let s = b.checkpoint(next_id).unwrap();
        b.notify_checkpoint_complete(next_id).unwrap();
        eprintln!("final {next_id}: materialized={}", s.materialized);
        next_id += 1;
    }
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report.unreferenced_shared.is_empty(),
        "seed {seed}: garbage left after a completion: {:?}",
        report.unreferenced_shared
    );
    let rb = builder(
        &dir.path().join("final"),
        &storage,
        &CheckpointOptions::default(),
        None,
    )
    .restore(RestoreFrom::Latest)
    .unwrap();
    check(&rb, &model);
}

#[test]
fn random_interleavings_restore_exactly_and_leave_no_garbage() {
    let from: u64 = std::env::var("SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let n: u64 = std::env::var("SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let steps: usize = std::env::var("STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    for seed in from..from + n {
        run(seed, steps);
    }
}
