//! How a rescale brings the other sources' data into the base (docs/rescale.md §2 step 4):
//! their SST files as they are (hard-linked, sequence numbers kept) when they lie inside the
//! part of the target they provide and overlap nothing of the base, else the fallback that
//! rewrites those key groups into new SSTs. Both paths are checked against the model, with
//! writes, deletes and another checkpoint and restore after the merge, and TTL cleanup on
//! linked files; the restore report says which path moved the data.

mod rescale_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::SeedableRng;
use rescale_common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
    RestoreReport,
};
use sst_format::CheckpointManifest;

fn manifest(storage: &Arc<dyn CheckpointStorage>, id: u64, backend: &str) -> CheckpointManifest {
    let bytes = storage
        .get_bytes(&layout::metadata_name(id, backend))
        .unwrap();
    sst_format::decode_manifest(&bytes).unwrap()
}

fn restore_one(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    id: u64,
) -> (KeyedBackend, RestoreReport) {
    restore_one_with(dir, storage, name, id, &small_options())
}

/// Two fresh halves hold only their own key groups, so 2 → 1 links every SST of the other
/// half as it is: nothing is rewritten. Writes after the merge (updates, deletes, list
/// appends on keys that came from the other half) win over the linked entries, so the
/// merged database's sequence numbers are above the linked ones. The first checkpoint
/// references the linked SSTs under the other half's object names (it stays incremental),
/// and restoring it (files under their new local names) gives the model again.
#[test]
fn clean_sources_are_linked_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut model = Model::default();
    let halves = open_fresh(dir.path(), &storage, "h", 2, &opts);
    // Several rounds with flushes in between: several SSTs and levels per half.
    for _ in 0..3 {
        for b in &halves {
            random_ops(b, &mut model, &mut rng, 1500);
            b.flush().unwrap();
        }
    }
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 1);
    let ids: Vec<String> = halves.iter().map(|b| b.backend_id().to_string()).collect();
    drop(halves);

    let (merged, report) = restore_one(dir.path(), &storage, "merged", 1);
    assert!(report.sst_files_linked > 0, "{report:?}");
    assert_eq!(report.sst_files_rewritten, 0, "{report:?}");
    assert_eq!(report.sst_ingestions_refused, 0, "{report:?}");
    assert_eq!(report.entries_rewritten, 0, "{report:?}");
    check_all(std::slice::from_ref(&merged), &model);

    // Later writes on every key, both halves' included, are newer than the linked entries.
    random_ops(&merged, &mut model, &mut rng, 3000);
    check_all(std::slice::from_ref(&merged), &model);

    // The first checkpoint references the linked files by the other half's object names.
    let sources: BTreeMap<_, _> = ids
        .iter()
        .flat_map(|id| manifest(&storage, 1, id).shared_files)
        .map(|f| (f.sst_id.clone(), f))
        .collect();
    let stats = checkpoint_job(&storage, &[&merged], 2).remove(0);
    let m2 = manifest(&storage, 2, merged.backend_id());
    let mut renamed_reused = 0;
    for f in &m2.shared_files {
        if let Some(old) = sources.get(&f.sst_id) {
            assert_eq!(
                f.remote_name, old.remote_name,
                "{} uploaded again",
                f.local_name
            );
            renamed_reused += usize::from(f.local_name != old.local_name);
        }
    }
    assert!(
        renamed_reused > 0,
        "linked SSTs (new local names) are referenced, not uploaded"
    );
    assert!(stats.files_reused >= renamed_reused, "{stats:?}");
    drop(merged);

    let (again, report) = restore_one(dir.path(), &storage, "again", 2);
    assert_eq!(report.sst_files_linked, 0, "a plain restore links nothing");
    check_all(std::slice::from_ref(&again), &model);
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// 2 → 3, middle instance (key groups 43..=85): its base is the upper half, the lower half
/// provides groups 43..=63. The lower half's compacted SSTs inside 43..=63 are linked; its
/// newest L0 file (deletes spread over all its groups) reaches outside and is not, so the
/// fallback rewrites 43..=63 from the lower half's merged view. The deleted keys' older
/// values sit in the linked files: the rewrite's range tombstone must hide them.
#[test]
fn deletes_in_rewritten_groups_hide_linked_entries() {
    use rockstate::{CodecId, DbOptions};
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let options = DbOptions {
        write_buffer_size: 64 << 10,
        target_file_size_base: 64 << 10,
        ..DbOptions::default()
    };
    let codec = CodecId::new("bytes", 1);
    let open = |i: u32| {
        KeyedBackend::builder(dir.path().join(format!("h{i}")))
            .options(options.clone())
            .max_parallelism(M)
            .key_groups(KeyGroupRange::for_operator(M, 2, i).unwrap())
            .checkpoint_storage(Arc::clone(&storage))
            .job_owner(owner_of(&storage, 1))
            .open()
            .unwrap()
    };
    let key = |k: u32| k.to_be_bytes();
    let kg = |k: u32| rockstate::keygroup::key_group_of(&key(k), M);
    // Incompressible values, so the state spans many SSTs.
    let value = |k: u32| {
        let mut v = vec![0u8; 100];
        rand::RngCore::fill_bytes(
            &mut rand::rngs::SmallRng::seed_from_u64(u64::from(k)),
            &mut v,
        );
        v
    };
    let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let halves = [open(0), open(1)];
    for (i, b) in halves.iter().enumerate() {
        let v = b.raw_value_state("v", codec.clone()).unwrap();
        for k in (0..16000u32).filter(|&k| b.key_groups().contains(kg(k))) {
            v.put(&key(k), &[], &value(k)).unwrap();
            model.insert(k, value(k));
        }
        b.flush().unwrap();
        b.wait_for_compactions().unwrap();
        if i == 0 {
            // Deletes over all of the lower half's groups, in one L0 file.
            for k in (0..16000u32).filter(|&k| k % 5 == 0 && b.key_groups().contains(kg(k))) {
                v.clear(&key(k), &[]).unwrap();
                model.remove(&k);
            }
            b.flush().unwrap();
        }
    }
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 1);
    drop(halves);

    let middle = KeyGroupRange::for_operator(M, 3, 1).unwrap();
    let (b, report) = KeyedBackend::builder(dir.path().join("middle"))
        .options(options.clone())
        .max_parallelism(M)
        .key_groups(middle)
        .checkpoint_storage(Arc::clone(&storage))
        .job_owner(owner_of(&storage, 1))
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert!(report.sst_files_linked > 0, "{report:?}");
    assert!(report.sst_files_rewritten > 0, "{report:?}");
    let v = b.raw_value_state("v", codec).unwrap();
    let mut owned = 0;
    for k in (0..16000u32).filter(|&k| middle.contains(kg(k))) {
        assert_eq!(
            v.get(&key(k), &[]).unwrap(),
            model.get(&k).cloned(),
            "key {k}"
        );
        owned += 1;
    }
    assert!(owned > 0);
}

/// TTL on linked SSTs: two fresh halves with a TTL value state, half of each written 700 ms
/// before the rest, merged 2 → 1 (all linked). After the first batch expires, a compaction of
/// the merged state drops exactly the expired entries of both halves (the compaction filter
/// reads the timestamps in the linked files as in any other), and reads keep the live ones.
#[test]
fn ttl_compaction_filter_runs_on_linked_files() {
    use rockstate::{ManualClock, StateDescriptor, TtlConfig};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let clock = ManualClock::new(1_000_000);
    let desc = || StateDescriptor::new("v").with_ttl(TtlConfig::new(Duration::from_millis(1000)));
    let builder = |name: &str, range: KeyGroupRange| {
        KeyedBackend::builder(dir.path().join(name))
            .options(small_options())
            .max_parallelism(M)
            .key_groups(range)
            .clock(Arc::new(clock.clone()))
            .checkpoint_storage(Arc::clone(&storage))
            .job_owner(owner_of(&storage, 1))
    };
    let halves: Vec<KeyedBackend> = (0..2)
        .map(|i| {
            builder(
                &format!("h{i}"),
                KeyGroupRange::for_operator(M, 2, i).unwrap(),
            )
            .open()
            .unwrap()
        })
        .collect();
    let owner = |k: u32| usize::from(!owns(&halves[0], k));
    for (batch, keys) in [(0u32, 0..400u32), (1, 400..700)] {
        if batch == 1 {
            clock.advance(Duration::from_millis(700));
        }
        for k in keys {
            let v = halves[owner(k)]
                .value_state::<u32, (), u32>(desc())
                .unwrap();
            v.put(&k, &(), &k).unwrap();
        }
        for b in &halves {
            b.flush().unwrap();
        }
    }
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 1);
    drop(halves);

    let (merged, report) = builder("merged", KeyGroupRange::all(M).unwrap())
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert!(report.sst_files_linked > 0, "{report:?}");
    assert_eq!(report.sst_files_rewritten, 0, "{report:?}");
    let v = merged.value_state::<u32, (), u32>(desc()).unwrap();
    clock.advance(Duration::from_millis(400)); // the first batch expired, the second not
    merged.compact_state("v").unwrap();
    assert_eq!(merged.ttl_stats("v").unwrap().dropped_by_compaction, 400);
    let mut raw = 0;
    for g in 0..M as u16 {
        merged
            .scan_key_group("v", g, |_| {
                raw += 1;
                Ok(true)
            })
            .unwrap();
    }
    assert_eq!(raw, 300);
    for k in 400..700u32 {
        assert_eq!(v.get(&k, &()).unwrap(), Some(k));
    }
}
