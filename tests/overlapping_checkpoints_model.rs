//! Model test of checkpoints in flight together, in changelog mode and without it: random
//! sequences of writes, sync phases (up to three pending), uploads in either order (some made
//! to fail), completions, aborts, sweeps and restarts (the writer dropped with whatever is in
//! flight and restored from the last completed checkpoint, continuing its log, at the same
//! key groups or at the first half of them). Changelog mode runs at materialization
//! thresholds that materialize always, sometimes and never. After every completion the
//! restored state equals the state at that checkpoint's sync phase, and storage verifies
//! (invariant 1). The backend owns its checkpoints, or belongs to a job whose owner commits a
//! job record per completion and keeps one or two.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use rockstate::coordinator::task_checkpoint;
use rockstate::{
    CheckpointOptions, CheckpointStats, Fault, FaultyStorage, JobOwner, KeyGroupRange,
    KeyedBackend, OpKind, PendingSnapshot, RestoreFrom, SystemClock,
};
use sst_format::JobCheckpoint;

#[derive(Debug, Clone)]
enum Step {
    Write(u16),
    Snapshot,
    /// Upload the newest (else the oldest) pending checkpoint, its first file put failing
    /// when `fail`.
    Upload {
        newest: bool,
        fail: bool,
    },
    /// Complete the newest uploaded checkpoint (subsuming the older ones).
    Complete,
    /// Abort the oldest uploaded checkpoint, or (`pending`) the oldest pending one, whose
    /// upload then fails.
    Abort {
        pending: bool,
    },
    /// Drop the writer and everything in flight; restore the last completed checkpoint into
    /// a new directory and go on writing there: the writer's key groups, or (`narrow`) the
    /// first half of them, a rescale that clips.
    Restart {
        narrow: bool,
    },
    /// The owner's sweep with no minimum age: what this process has in flight is protected,
    /// whatever its age.
    Sweep,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u16..400).prop_map(Step::Write),
        3 => Just(Step::Snapshot),
        3 => (any::<bool>(), proptest::bool::weighted(0.15))
            .prop_map(|(newest, fail)| Step::Upload { newest, fail }),
        2 => Just(Step::Complete),
        1 => any::<bool>().prop_map(|pending| Step::Abort { pending }),
        1 => any::<bool>().prop_map(|narrow| Step::Restart { narrow }),
        1 => Just(Step::Sweep),
    ]
}

/// `percent`: changelog mode's materialization threshold, or `None` for SST-incremental
/// checkpoints (the same sequences without changelog mode). `retained`: with `Some(n)` the
/// backend belongs to a job whose owner keeps `n` completed checkpoints and commits each
/// completion as a job record (as the coordinator does); with `None` it owns its checkpoints.
fn run(percent: Option<u32>, retained: Option<usize>, steps: &[Step], seed: u64) {
    let fx = Fixture::new();
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let owner = retained
        .map(|n| Arc::new(JobOwner::open(fx.storage_dyn(), n, Arc::new(SystemClock)).unwrap()));
    let mut range = KeyGroupRange::all(128).unwrap();
    let builder = |dir: &str, range: KeyGroupRange| {
        let b = KeyedBackend::builder(fx.path(dir))
            .key_groups(range)
            .options(small_options())
            .checkpoint_storage(faulty.clone())
            .checkpoint_options(percent.map_or_else(CheckpointOptions::default, changelog_options));
        match &owner {
            Some(o) => b.job_owner(o.clone()),
            None => b,
        }
    };
    let mut b = builder("w0", range).open().unwrap();
    let mut completed_state = None;
    let mut model = Model::new();
    let mut r = rng(seed);
    random_writes(&b, &mut model, &mut r, 2000);
    let mut next_id = 1u64;
    let mut pending: VecDeque<(u64, PendingSnapshot, Model)> = VecDeque::new();
    let mut uploaded: BTreeMap<u64, (Model, CheckpointStats)> = BTreeMap::new();
    let mut last_completed: Option<u64> = None;
    let mut aborted: BTreeSet<u64> = BTreeSet::new();
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Write(n) => random_writes(&b, &mut model, &mut r, usize::from(*n)),
            Step::Snapshot if pending.len() < 3 => {
                pending.push_back((next_id, b.snapshot(next_id).unwrap(), model.clone()));
                next_id += 1;
            }
            Step::Snapshot => {}
            Step::Upload { newest, fail } => {
                let next = if *newest {
                    pending.pop_back()
                } else {
                    pending.pop_front()
                };
                let Some((id, p, at_sync)) = next else {
                    continue;
                };
                if *fail {
                    faulty.add_fault(Fault::FailNth {
                        op: OpKind::PutFile,
                        nth: faulty.ops(OpKind::PutFile) + 1,
                    });
                }
                let result = p.upload();
                faulty.clear_faults();
                match result {
                    Ok(stats) => {
                        assert!(!aborted.contains(&id), "step {i}: aborted {id} uploaded");
                        uploaded.insert(id, (at_sync, stats));
                    }
                    Err(e) => assert!(
                        *fail || aborted.contains(&id) || last_completed.is_some_and(|lc| id < lc),
                        "step {i}: upload of {id} failed: {e}"
                    ),
                }
            }
            Step::Complete => {
                let Some((id, (at_sync, stats))) = uploaded.pop_last() else {
                    continue;
                };
                uploaded.clear();
                if let Some(o) = &owner {
                    o.commit(&JobCheckpoint {
                        checkpoint_id: id,
                        job_name: "model".into(),
                        max_parallelism: b.max_parallelism(),
                        triggered_at_ms: 0,
                        completed_at_ms: 0,
                        tasks: vec![task_checkpoint(0, Some((&b, &stats)), Vec::new())],
                    })
                    .unwrap();
                }
                b.notify_checkpoint_complete(id).unwrap();
                last_completed = Some(id);
                completed_state = Some(at_sync.clone());
                let restored = KeyedBackend::builder(fx.path(&format!("r{id}")))
                    .key_groups(range)
                    .options(small_options())
                    .checkpoint_storage(fx.storage_dyn())
                    .restore(RestoreFrom::Latest)
                    .unwrap();
                assert_eq!(read_all(&restored), at_sync, "step {i}: checkpoint {id}");
                drop(restored);
                assert_verified(fx.storage.as_ref());
            }
            Step::Abort { pending: false } => {
                if let Some((id, _)) = uploaded.pop_first() {
                    b.notify_checkpoint_aborted(id).unwrap();
                }
            }
            Step::Abort { pending: true } => {
                if let Some((id, _, _)) = pending.iter().find(|(id, ..)| !aborted.contains(id)) {
                    b.notify_checkpoint_aborted(*id).unwrap();
                    aborted.insert(*id);
                }
            }
            Step::Sweep => {
                b.sweep_orphans(std::time::Duration::ZERO).unwrap();
            }
            Step::Restart { narrow } => {
                let Some(state) = &completed_state else {
                    continue;
                };
                pending.clear();
                uploaded.clear();
                drop(b);
                if *narrow && range.len() > 1 {
                    let half = range.start + (range.len() / 2) as u16;
                    range = KeyGroupRange::new(range.start, half - 1).unwrap();
                }
                b = builder(&format!("w{i}"), range)
                    .restore(RestoreFrom::Latest)
                    .unwrap();
                model = owned_part(&b, state);
                assert_eq!(read_all(&b), model, "step {i}: restart into {range:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn checkpoints_in_flight_restore_exactly(
        percent in prop_oneof![Just(None), Just(Some(0u32)), Just(Some(20)), Just(Some(100_000))],
        retained in prop_oneof![Just(None), Just(Some(1usize)), Just(Some(2))],
        steps in proptest::collection::vec(step(), 1..48),
        seed in any::<u64>(),
    ) {
        run(percent, retained, &steps, seed);
    }
}
