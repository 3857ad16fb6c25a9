//! Rescaling refuses bad input with typed errors and leaves the target empty: data outside
//! the key groups a manifest claims (plain restore and rescale), merged checkpoints whose
//! state metadata disagree, and manifests that do not cover the requested range. Local
//! storage and the S3 test server.

mod rescale_common;

use std::sync::Arc;

use rescale_common::Store;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointStorage, Error, KeyGroupRange, KeyedBackend, RestoreFrom};

struct Fx {
    dir: tempfile::TempDir,
    storage: Arc<dyn CheckpointStorage>,
}

impl From<Store> for Fx {
    fn from(store: Store) -> Fx {
        Fx {
            dir: store.dir,
            storage: store.storage,
        }
    }
}

on_every_storage!(
    data_outside_the_claimed_range_is_a_typed_error,
    merged_state_metadata_must_agree,
    a_state_only_one_side_has_is_merged_in,
    manifests_must_cover_the_target,
);

impl Fx {
    fn open(&self, name: &str, range: KeyGroupRange) -> KeyedBackend {
        KeyedBackend::builder(self.dir.path().join(name))
            .key_groups(range)
            .checkpoint_storage(Arc::clone(&self.storage))
            .open()
            .unwrap()
    }

    fn restore(
        &self,
        name: &str,
        range: KeyGroupRange,
        from: RestoreFrom,
    ) -> rockstate::Result<KeyedBackend> {
        KeyedBackend::builder(self.dir.path().join(name))
            .key_groups(range)
            .checkpoint_storage(Arc::clone(&self.storage))
            .restore(from)
    }

    fn assert_target_gone(&self, name: &str) {
        assert!(!self.dir.path().join(name).exists(), "{name} left behind");
    }
}

fn range(start: u16, end: u16) -> KeyGroupRange {
    KeyGroupRange::new(start, end).unwrap()
}

/// Writes values for keys 0..n (every key group gets some).
fn fill(b: &KeyedBackend, n: u32) {
    let v = b.value_state::<u32, (), u32>("v").unwrap();
    for k in 0..n {
        match v.put(&k, &(), &k) {
            Ok(()) | Err(Error::KeyGroupOutOfRange { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

fn data_outside_the_claimed_range_is_a_typed_error(store: Store) {
    let fx = Fx::from(store);
    let all = fx.open("all", range(0, 127));
    fill(&all, 2000);
    all.checkpoint(1).unwrap();
    let real = layout::metadata_name(1, all.backend_id());
    // A forged manifest claiming only [0, 63] for a database holding all 128 groups.
    let mut m = sst_format::decode_manifest(&fx.storage.get_bytes(&real).unwrap()).unwrap();
    m.backend_id = "forged".into();
    m.key_group_end = 63;
    fx.storage
        .put_bytes(
            &layout::metadata_name(1, "forged"),
            &sst_format::encode_manifest(&m).unwrap(),
        )
        .unwrap();
    let forged = RestoreFrom::Exact {
        checkpoint_id: 1,
        backend_id: "forged".into(),
    };
    // Plain restore (same range) and rescale (clip to [0, 31]) both refuse.
    for (name, target) in [("plain", range(0, 63)), ("clip", range(0, 31))] {
        match fx.restore(name, target, forged.clone()) {
            Err(Error::DataOutsideKeyGroups {
                checkpoint,
                state,
                key_group,
                claimed_start,
                claimed_end,
            }) => {
                assert_eq!(checkpoint, layout::metadata_name(1, "forged"));
                assert_eq!(state, "v");
                assert!(key_group > 63, "{key_group}");
                assert_eq!((claimed_start, claimed_end), (0, 63));
            }
            other => panic!("{name}: expected DataOutsideKeyGroups, got {other:?}"),
        }
        fx.assert_target_gone(name);
    }
    // Merged as the other handle of a rescale: the forged one plus a real [64, 127] half.
    let high = fx.open("high", range(64, 127));
    fill(&high, 2000);
    high.checkpoint(1).unwrap();
    let from = RestoreFrom::Handles {
        checkpoint_id: 1,
        backend_ids: vec!["forged".into(), high.backend_id().to_string()],
    };
    // Base = most overlap; make the forged one the *other* handle by asking for mostly-high.
    match fx.restore("merge", range(60, 127), from) {
        Err(Error::DataOutsideKeyGroups { checkpoint, .. }) => {
            assert_eq!(checkpoint, layout::metadata_name(1, "forged"))
        }
        other => panic!("expected DataOutsideKeyGroups, got {other:?}"),
    }
    fx.assert_target_gone("merge");
    // The honest checkpoint still restores, clipped.
    let ok = fx
        .restore(
            "ok",
            range(0, 63),
            RestoreFrom::Exact {
                checkpoint_id: 1,
                backend_id: all.backend_id().to_string(),
            },
        )
        .unwrap();
    assert_eq!(check_values(&ok, 2000), owned(&ok, 2000));
}

/// Number of keys in 0..n whose value reads back as the key; panics on a wrong value.
fn check_values(b: &KeyedBackend, n: u32) -> usize {
    let v = b.value_state::<u32, (), u32>("v").unwrap();
    (0..n)
        .filter(|k| b.key_groups().contains(group(*k)))
        .filter(|k| {
            let got = v.get(k, &()).unwrap();
            assert_eq!(got, Some(*k), "key {k}");
            got.is_some()
        })
        .count()
}

fn owned(b: &KeyedBackend, n: u32) -> usize {
    (0..n)
        .filter(|k| b.key_groups().contains(group(*k)))
        .count()
}

fn group(k: u32) -> u16 {
    let bytes = rockstate::codec::encode(&k, "key").unwrap();
    rockstate::keygroup::key_group_of(&bytes, 128)
}

fn merged_state_metadata_must_agree(store: Store) {
    let fx = Fx::from(store);
    let low = fx.open("low", range(0, 63));
    let high = fx.open("high", range(64, 127));
    let v = low.value_state::<u32, (), u32>("v").unwrap();
    let w = high.value_state::<u32, (), String>("v").unwrap();
    for k in 0..500u32 {
        let _ = v.put(&k, &(), &k);
        let _ = w.put(&k, &(), &k.to_string());
    }
    low.checkpoint(1).unwrap();
    high.checkpoint(1).unwrap();
    match fx.restore("one", range(0, 127), RestoreFrom::Checkpoint(1)) {
        Err(Error::MergedStateMismatch { name, .. }) => assert_eq!(name, "v"),
        other => panic!("expected MergedStateMismatch, got {other:?}"),
    }
    fx.assert_target_gone("one");
}

fn a_state_only_one_side_has_is_merged_in(store: Store) {
    let fx = Fx::from(store);
    let low = fx.open("low", range(0, 63));
    let high = fx.open("high", range(64, 127));
    fill(&low, 1000);
    fill(&high, 1000);
    let l = high.list_state::<u32, (), u32>("only-high").unwrap();
    for k in (0..1000u32).filter(|k| high.key_groups().contains(group(*k))) {
        l.add(&k, &(), &(k + 1)).unwrap();
    }
    low.checkpoint(1).unwrap();
    high.checkpoint(1).unwrap();
    let one = fx
        .restore("one", range(0, 127), RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!(check_values(&one, 1000), 1000);
    let l = one.list_state::<u32, (), u32>("only-high").unwrap();
    for k in 0..1000u32 {
        let want: Vec<u32> = if group(k) >= 64 { vec![k + 1] } else { vec![] };
        assert_eq!(l.get(&k, &()).unwrap(), want, "key {k}");
    }
    // New elements append after the restored ones.
    let k = (0..1000u32).find(|k| group(*k) >= 64).unwrap();
    l.add(&k, &(), &0).unwrap();
    assert_eq!(l.get(&k, &()).unwrap(), vec![k + 1, 0]);
}

fn manifests_must_cover_the_target(store: Store) {
    let fx = Fx::from(store);
    let low = fx.open("low", range(0, 63));
    fill(&low, 500);
    low.checkpoint(1).unwrap();
    // Only the low half exists: the whole range cannot be restored.
    assert!(matches!(
        fx.restore("all", range(0, 127), RestoreFrom::Checkpoint(1)),
        Err(Error::CheckpointNotFound(_))
    ));
    assert!(matches!(
        fx.restore("all2", range(0, 127), RestoreFrom::Latest),
        Err(Error::CheckpointNotFound(_))
    ));
    assert!(matches!(
        fx.restore(
            "all3",
            range(0, 127),
            RestoreFrom::Handles {
                checkpoint_id: 1,
                backend_ids: vec![low.backend_id().to_string(), "missing".into()]
            }
        ),
        Err(Error::CheckpointNotFound(_))
    ));
    assert!(matches!(
        fx.restore(
            "all4",
            range(0, 127),
            RestoreFrom::Exact {
                checkpoint_id: 1,
                backend_id: low.backend_id().to_string()
            }
        ),
        Err(Error::RestoreMismatch { .. })
    ));
    // Two backends claiming overlapping groups at one id are ambiguous.
    let other = fx.open("other", range(32, 95));
    fill(&other, 500);
    other.checkpoint(1).unwrap();
    assert!(matches!(
        fx.restore("amb", range(0, 95), RestoreFrom::Checkpoint(1)),
        Err(Error::AmbiguousCheckpoint { .. })
    ));
    // Only manifests overlapping the target count: a sub-range of the low half restores by
    // clipping even though the other two overlap each other.
    let part = fx
        .restore("part", range(10, 20), RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!(check_values(&part, 500), owned(&part, 500));
}
