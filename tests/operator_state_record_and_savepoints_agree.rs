//! The same per-instance operator state, stored (a) in a coordinated job's record (tasks ack
//! it, manifests hold none), (b) in manifests (`snapshot_with`), (c) in savepoint headers,
//! reads back identically and redistributes identically at 3→1, 3→3, 3→5; a name held by only
//! some instances and empty lists included.

use std::sync::Arc;
use std::time::Duration;

use rockstate::checkpoint::read_operator_states;
use rockstate::coordinator::{task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered};
use rockstate::operator_state::{redistribute, OperatorState, RedistributionMode};
use rockstate::{KeyGroupRange, KeyedBackend, LocalStorage, ManualClock};

fn old() -> Vec<OperatorState> {
    (0..3u64)
        .map(|i| {
            let mut op = OperatorState::new();
            op.update(
                "offsets",
                RedistributionMode::Split,
                &(0..i * 3).collect::<Vec<_>>(),
            )
            .unwrap();
            if i != 1 {
                op.update("seen", RedistributionMode::Union, &[i]).unwrap();
            }
            op.update::<u8>("empty", RedistributionMode::Split, &[])
                .unwrap();
            op.update("rules", RedistributionMode::Broadcast, &["x"])
                .unwrap();
            op
        })
        .collect()
}

#[test]
fn record_manifests_and_savepoints_agree() {
    let ops = old();
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for in_manifest in [false, true] {
        let storage = Arc::new(
            LocalStorage::new(dir.path().join(format!("cp-{in_manifest}")))
                .unwrap()
                .with_fsync(false),
        );
        let mut config = CoordinatorConfig::new("job", 3, 128);
        config.timeout = Duration::from_secs(60);
        let mut c = Coordinator::new(
            config,
            storage.clone(),
            Arc::new(ManualClock::new(1_000_000)),
        )
        .unwrap();
        let eps: Vec<_> = (0..3).map(|t| c.endpoint(t).unwrap()).collect();
        let backends: Vec<KeyedBackend> = (0..3u32)
            .map(|t| {
                KeyedBackend::builder(dir.path().join(format!("op-{in_manifest}-{t}")))
                    .key_groups(KeyGroupRange::for_operator(128, 3, t).unwrap())
                    .checkpoint_storage(storage.clone())
                    .job_owner(c.owner().clone())
                    .open()
                    .unwrap()
            })
            .collect();
        let id = match c.trigger().unwrap() {
            Triggered::Started(id) => id,
            o => panic!("{o:?}"),
        };
        // Acks in reverse task order.
        for t in (0..3).rev() {
            let (snap, acked) = if in_manifest {
                (backends[t].snapshot_with(id, &ops[t]).unwrap(), Vec::new())
            } else {
                (backends[t].snapshot(id).unwrap(), ops[t].snapshot())
            };
            let stats = snap.upload().unwrap();
            eps[t].ack(
                id,
                task_checkpoint(t as u32, Some((&backends[t], &stats)), acked),
            );
        }
        match c.poll().unwrap().as_slice() {
            [Outcome::Completed(_)] => {}
            o => panic!("{o:?}"),
        }
        results.push(read_operator_states(storage.as_ref(), id).unwrap());
    }
    let paths: Vec<_> = (0..3u32)
        .rev()
        .map(|t| {
            let b = KeyedBackend::heap_builder()
                .key_groups(KeyGroupRange::for_operator(128, 3, t).unwrap())
                .open()
                .unwrap();
            let p = dir.path().join(format!("sp-{t}"));
            b.write_savepoint_with(&p, &ops[t as usize]).unwrap();
            p
        })
        .collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    results.push(rockstate::savepoint::read_operator_states(&refs).unwrap());
    for r in &results {
        assert_eq!(r, &ops);
    }
    for p in [1, 3, 5] {
        let a = redistribute(&results[0], p).unwrap();
        assert_eq!(a, redistribute(&results[1], p).unwrap());
        assert_eq!(a, redistribute(&results[2], p).unwrap());
        let all: Vec<u64> = a
            .iter()
            .flat_map(|s| s.get::<u64>("offsets").unwrap())
            .collect();
        assert_eq!(all, vec![0, 1, 2, 0, 1, 2, 3, 4, 5]);
        for s in &a {
            assert_eq!(s.get::<u64>("seen").unwrap(), vec![0, 2]);
            assert!(s.get_raw("empty").is_empty());
        }
    }
}
