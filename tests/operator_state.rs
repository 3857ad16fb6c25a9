//! Operator state redistribution through checkpoints (RocksDB backends, manifests) and
//! savepoints (heap backends, savepoint headers): under Split no element is lost or duplicated
//! and instances differ by at most one element; Union and Broadcast are exact; broadcast
//! copies that differ, and a missing instance, are typed errors.

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use rockstate::checkpoint::read_operator_states;
use rockstate::operator_state::{redistribute, OperatorState, RedistributionMode};
use rockstate::{Error, KeyGroupRange, KeyedBackend, LocalStorage};

const M: u32 = 128;

/// Per old instance: its Split offsets, its Union elements; every instance also holds the same
/// Broadcast rules.
fn states(parts: &[(Vec<u64>, Vec<u16>)], rules: &[String]) -> Vec<OperatorState> {
    parts
        .iter()
        .map(|(offsets, union)| {
            let mut op = OperatorState::new();
            op.update("offsets", RedistributionMode::Split, offsets)
                .unwrap();
            op.update("seen", RedistributionMode::Union, union).unwrap();
            op.update("rules", RedistributionMode::Broadcast, rules)
                .unwrap();
            op
        })
        .collect()
}

/// Checks the redistribution properties of `new` against the old `parts`.
fn check(parts: &[(Vec<u64>, Vec<u16>)], rules: &[String], new: &[OperatorState], p: usize) {
    assert_eq!(new.len(), p);
    let all_offsets: Vec<u64> = parts.iter().flat_map(|(o, _)| o.clone()).collect();
    let all_union: Vec<u16> = parts.iter().flat_map(|(_, u)| u.clone()).collect();
    let got: Vec<u64> = new
        .iter()
        .flat_map(|s| s.get::<u64>("offsets").unwrap())
        .collect();
    assert_eq!(got, all_offsets, "split: every element once, in order");
    if parts.len() == p {
        // Unchanged parallelism: every instance keeps its own list (a failover moves nothing).
        for (s, (offsets, _)) in new.iter().zip(parts) {
            assert_eq!(
                &s.get::<u64>("offsets").unwrap(),
                offsets,
                "split at p -> p"
            );
        }
    } else {
        let sizes: Vec<usize> = new.iter().map(|s| s.get_raw("offsets").len()).collect();
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(max - min <= 1, "split is balanced: {sizes:?}");
    }
    for s in new {
        assert_eq!(
            s.get::<u16>("seen").unwrap(),
            all_union,
            "union: everything"
        );
        assert_eq!(
            s.get::<String>("rules").unwrap(),
            rules,
            "broadcast: the copy"
        );
    }
}

/// Old instances' (split offsets, union elements), the broadcast rules, the new parallelism.
type Case = (Vec<(Vec<u64>, Vec<u16>)>, Vec<String>, usize);

fn parts_strategy() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u64>(), 0..12),
                proptest::collection::vec(any::<u16>(), 0..4),
            ),
            1..5,
        ),
        proptest::collection::vec("[a-z]{0,6}", 0..3),
        1usize..7,
    )
}

/// Checkpoints one RocksDB backend per old instance (ranges of parallelism `parts.len()`)
/// with its operator state, all into one storage; returns the storage.
fn checkpoint_all(
    dir: &std::path::Path,
    old: &[OperatorState],
    skip: Option<usize>,
) -> Arc<LocalStorage> {
    let storage = Arc::new(LocalStorage::new(dir.join("storage")).unwrap());
    for (i, op) in old.iter().enumerate() {
        let b = KeyedBackend::builder(dir.join(format!("op-{i}")))
            .max_parallelism(M)
            .key_groups(KeyGroupRange::for_operator(M, old.len() as u32, i as u32).unwrap())
            .checkpoint_storage(storage.clone())
            .open()
            .unwrap();
        if skip != Some(i) {
            b.checkpoint_with(7, op).unwrap();
        }
    }
    storage
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]
    #[test]
    fn redistribution_through_checkpoints((parts, rules, p) in parts_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        let old = states(&parts, &rules);
        let storage = checkpoint_all(dir.path(), &old, None);
        let read = read_operator_states(storage.as_ref(), 7).unwrap();
        prop_assert_eq!(&read, &old, "the manifests hold each instance's state, in order");
        check(&parts, &rules, &redistribute(&read, p).unwrap(), p);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn redistribution_through_savepoints((parts, rules, p) in parts_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        let old = states(&parts, &rules);
        // Written in reverse instance order: reading orders them by key-group range.
        let paths: Vec<PathBuf> = old
            .iter()
            .enumerate()
            .rev()
            .map(|(i, op)| {
                let b = KeyedBackend::heap_builder()
                    .max_parallelism(M)
                    .key_groups(KeyGroupRange::for_operator(M, old.len() as u32, i as u32).unwrap())
                    .open()
                    .unwrap();
                let path = dir.path().join(format!("sp-{i}"));
                b.full_snapshot().unwrap().write_savepoint(&path, op).unwrap();
                path
            })
            .collect();
        let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
        let read = rockstate::savepoint::read_operator_states(&refs).unwrap();
        prop_assert_eq!(&read, &old);
        check(&parts, &rules, &redistribute(&read, p).unwrap(), p);
    }
}

#[test]
fn differing_broadcast_copies_are_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = states(&[(vec![1], vec![]), (vec![2], vec![])], &["a".to_string()]);
    old[1]
        .update("rules", RedistributionMode::Broadcast, &["b".to_string()])
        .unwrap();
    let storage = checkpoint_all(dir.path(), &old, None);
    let read = read_operator_states(storage.as_ref(), 7).unwrap();
    assert!(matches!(
        redistribute(&read, 3),
        Err(Error::Decode {
            what: "broadcast operator state",
            ..
        })
    ));
}

#[test]
fn a_missing_instance_is_a_typed_error_not_a_lost_element() {
    let dir = tempfile::tempdir().unwrap();
    let old = states(
        &[(vec![1], vec![]), (vec![2], vec![]), (vec![3], vec![])],
        &[],
    );
    let storage = checkpoint_all(dir.path(), &old, Some(1));
    assert!(matches!(
        read_operator_states(storage.as_ref(), 7),
        Err(Error::InvalidKeyGroups(_))
    ));
    assert!(matches!(
        read_operator_states(storage.as_ref(), 8),
        Err(Error::CheckpointNotFound(_))
    ));
    // Savepoints: the same instance twice.
    let b = KeyedBackend::heap_builder()
        .key_groups(KeyGroupRange::for_operator(M, 2, 0).unwrap())
        .open()
        .unwrap();
    let sp = dir.path().join("sp");
    b.write_savepoint_with(&sp, &old[0]).unwrap();
    assert!(matches!(
        rockstate::savepoint::read_operator_states(&[&sp, &sp]),
        Err(Error::InvalidKeyGroups(_))
    ));
}

fn split_of(elements: &[u32]) -> OperatorState {
    let mut s = OperatorState::new();
    s.update("offsets", RedistributionMode::Split, elements)
        .unwrap();
    s
}

/// Flink (`RoundRobinOperatorStateRepartitioner`) does not repartition Split lists at an
/// unchanged parallelism: after a failover at p → p, instance i gets exactly the list it
/// checkpointed (a source keeps its partitions, a sink its transactions), however unbalanced.
#[test]
fn p_to_p_keeps_every_instances_split_list() {
    // Instance 0 reads partitions 0, 1, 2; instance 1 reads partition 3.
    let old = vec![split_of(&[0, 1, 2]), split_of(&[3])];
    let new = redistribute(&old, 2).unwrap();
    let got: Vec<Vec<u32>> = new.iter().map(|s| s.get("offsets").unwrap()).collect();
    assert_eq!(
        got,
        vec![vec![0, 1, 2], vec![3]],
        "p -> p moved elements between instances"
    );
}
