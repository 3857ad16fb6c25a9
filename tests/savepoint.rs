//! Canonical savepoints: round trips at other parallelisms over every state kind (also with
//! TTL and full-snapshot cleanup), and corruption of the file as a typed error that leaves the
//! target backend empty.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rockstate::{
    BackendKind, Error, KeyGroupRange, KeyedBackend, ManualClock, StateDescriptor, TtlConfig,
};

struct Data {
    values: BTreeMap<String, u64>,
    lists: BTreeMap<String, Vec<u32>>,
    maps: BTreeMap<String, BTreeMap<u16, String>>,
}

fn data() -> Data {
    let mut d = Data {
        values: BTreeMap::new(),
        lists: BTreeMap::new(),
        maps: BTreeMap::new(),
    };
    for i in 0..600u32 {
        let k = format!("key-{i}");
        d.values.insert(k.clone(), u64::from(i) * 3);
        if i % 3 == 0 {
            d.lists
                .insert(k.clone(), (0..(i % 7)).map(|x| x * 10 + i).collect());
        }
        if i % 5 == 0 {
            d.maps.insert(
                k,
                (0..(i % 4) as u16)
                    .map(|u| (u, format!("v{u}-{i}")))
                    .collect(),
            );
        }
    }
    d
}

fn fill(b: &KeyedBackend, d: &Data) {
    let v = b.value_state::<String, u8, u64>("values").unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    let m = b.map_state::<String, u8, u16, String>("maps").unwrap();
    for (k, x) in &d.values {
        v.put(k, &1, x).unwrap();
    }
    for (k, xs) in &d.lists {
        l.add_all(k, &2, xs).unwrap();
    }
    for (k, mm) in &d.maps {
        for (uk, uv) in mm {
            m.put(k, &3, uk, uv).unwrap();
        }
    }
}

/// Reads back every key the backend owns and checks it against `d`; returns keys seen.
/// A backend at `dir/src` filled with [`data`], and its savepoint written to `dir/<name>`.
fn filled_source(dir: &Path, name: &str) -> (KeyedBackend, PathBuf) {
    let src = KeyedBackend::builder(dir.join("src")).open().unwrap();
    fill(&src, &data());
    let sp = dir.join(name);
    src.write_savepoint(&sp).unwrap();
    (src, sp)
}

fn check(b: &KeyedBackend, d: &Data) -> usize {
    let v = b.value_state::<String, u8, u64>("values").unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    let m = b.map_state::<String, u8, u16, String>("maps").unwrap();
    let mut seen = 0;
    for (k, x) in &d.values {
        match v.get(k, &1) {
            Err(Error::KeyGroupOutOfRange { .. }) => continue,
            r => assert_eq!(r.unwrap(), Some(*x), "{k}"),
        }
        seen += 1;
        assert_eq!(
            l.get(k, &2).unwrap(),
            d.lists.get(k).cloned().unwrap_or_default(),
            "{k}"
        );
        let expected: Vec<(u16, String)> = d
            .maps
            .get(k)
            .map(|mm| mm.clone().into_iter().collect())
            .unwrap_or_default();
        assert_eq!(m.entries(k, &3).unwrap(), expected, "{k}");
    }
    seen
}

#[test]
fn round_trip_at_other_parallelisms() {
    let dir = tempfile::tempdir().unwrap();
    let d = data();
    let src = KeyedBackend::builder(dir.path().join("src"))
        .open()
        .unwrap();
    fill(&src, &d);
    let sp = dir.path().join("sp-1");
    let stats = src.write_savepoint(&sp).unwrap();
    assert!(stats.entries > 600);
    assert!(
        matches!(src.write_savepoint(&sp), Err(Error::Io { .. })),
        "never overwritten"
    );

    for p in [1u32, 2, 3, 7] {
        let mut total = 0;
        for i in 0..p {
            let range = KeyGroupRange::for_operator(128, p, i).unwrap();
            let b = KeyedBackend::builder(dir.path().join(format!("p{p}-{i}")))
                .key_groups(range)
                .open()
                .unwrap();
            b.restore_savepoint(&sp).unwrap();
            total += check(&b, &d);
            // The restored part can be savepointed again, holding exactly its own entries.
            let part = b
                .write_savepoint(&dir.path().join(format!("sp-p{p}-{i}")))
                .unwrap();
            let restored = KeyedBackend::builder(dir.path().join(format!("again-p{p}-{i}")))
                .key_groups(range)
                .open()
                .unwrap();
            assert_eq!(
                restored
                    .restore_savepoint(&dir.path().join(format!("sp-p{p}-{i}")))
                    .unwrap()
                    .entries,
                part.entries
            );
        }
        assert_eq!(
            total,
            d.values.len(),
            "parallelism {p} covers every key once"
        );
    }
    // Lists keep appending after a restore, in order.
    let b = KeyedBackend::builder(dir.path().join("append"))
        .open()
        .unwrap();
    b.restore_savepoint(&sp).unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    l.add(&"key-3".to_string(), &2, &999).unwrap();
    let mut expected = d.lists["key-3"].clone();
    expected.push(999);
    assert_eq!(l.get(&"key-3".to_string(), &2).unwrap(), expected);
}

#[test]
fn restore_refuses_non_empty_backend_and_other_max_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let (src, sp) = filled_source(dir.path(), "sp");
    assert!(matches!(
        src.restore_savepoint(&sp),
        Err(Error::InvalidOption { .. })
    ));
    let other = KeyedBackend::builder(dir.path().join("other"))
        .max_parallelism(256)
        .open()
        .unwrap();
    assert!(matches!(
        other.restore_savepoint(&sp),
        Err(Error::BackendMismatch { .. })
    ));
}

#[test]
fn corruption_is_a_typed_error_and_leaves_the_backend_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (_src, sp) = filled_source(dir.path(), "sp");
    let bytes = std::fs::read(&sp).unwrap();
    // A spread of single-byte flips across the whole file, plus truncations.
    let step = (bytes.len() / 97).max(1);
    for (n, at) in (0..bytes.len()).step_by(step).enumerate() {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        let path = dir.path().join(format!("bad-{n}"));
        std::fs::write(&path, &b).unwrap();
        let target = KeyedBackend::builder(dir.path().join(format!("t-{n}")))
            .open()
            .unwrap();
        let err = target.restore_savepoint(&path).unwrap_err();
        assert!(
            matches!(err, Error::Format { .. } | Error::Decode { .. }),
            "flip at {at}: {err}"
        );
        assert!(
            target.states().unwrap().is_empty(),
            "flip at {at} left state behind"
        );
    }
    for cut in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        let path = dir.path().join(format!("cut-{cut}"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let target = KeyedBackend::builder(dir.path().join(format!("c-{cut}")))
            .open()
            .unwrap();
        assert!(matches!(
            target.restore_savepoint(&path),
            Err(Error::Format { .. })
        ));
    }
}

#[test]
fn a_corrupt_second_file_leaves_the_backend_empty() {
    // Rescaling 2 → 1 through savepoints: the first half is sound and is read (and, on
    // RocksDB, staged as SSTs) before the second half's corruption shows up.
    let dir = tempfile::tempdir().unwrap();
    let (_src, whole) = filled_source(dir.path(), "whole");
    let mut halves = Vec::new();
    for i in 0..2 {
        let half = KeyedBackend::builder(dir.path().join(format!("half-{i}")))
            .key_groups(KeyGroupRange::for_operator(128, 2, i).unwrap())
            .open()
            .unwrap();
        half.restore_savepoint(&whole).unwrap();
        let sp = dir.path().join(format!("sp-half-{i}"));
        half.write_savepoint(&sp).unwrap();
        halves.push(sp);
    }
    // Both halves together restore fine before the corruption.
    let sound = KeyedBackend::builder(dir.path().join("sound"))
        .open()
        .unwrap();
    let paths: Vec<&std::path::Path> = halves.iter().map(|p| p.as_path()).collect();
    sound.restore_savepoints(&paths).unwrap();
    assert_eq!(check(&sound, &data()), data().values.len());
    let sound_bytes = std::fs::read(&halves[1]).unwrap();
    let corrupt = dir.path().join("sp-half-1-corrupt");
    let corrupt_paths = [halves[0].as_path(), corrupt.as_path()];
    // Flips spread over the blocks (the header and index are small next to them).
    for (n, at) in [0.3, 0.5, 0.7, 0.9].into_iter().enumerate() {
        let mut bytes = sound_bytes.clone();
        let at = (bytes.len() as f64 * at) as usize;
        bytes[at] ^= 0x10;
        std::fs::write(&corrupt, &bytes).unwrap();
        for heap in [false, true] {
            let b = if heap {
                KeyedBackend::heap_builder().open().unwrap()
            } else {
                KeyedBackend::builder(dir.path().join(format!("target-{n}")))
                    .open()
                    .unwrap()
            };
            let err = b.restore_savepoints(&corrupt_paths).unwrap_err();
            assert!(
                matches!(err, Error::Format { .. } | Error::Decode { .. }),
                "heap={heap}, flip at {at}: {err}"
            );
            assert!(b.states().unwrap().is_empty(), "heap={heap}: states left");
            // The staged SSTs are gone, and the backend takes the sound files afterwards.
            let staged = std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| {
                    let name = e.as_ref().unwrap().file_name();
                    name.to_string_lossy().starts_with(".savepoint-restore-")
                })
                .count();
            assert_eq!(staged, 0, "heap={heap}: staging left behind");
            b.restore_savepoints(&paths).unwrap();
            assert_eq!(check(&b, &data()), data().values.len(), "heap={heap}");
        }
    }
}

#[test]
fn full_snapshot_cleanup_drops_expired_entries_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let src = KeyedBackend::builder(dir.path().join("src"))
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    let ttl = TtlConfig::new(Duration::from_secs(10));
    let v = src
        .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(ttl.clone()))
        .unwrap();
    for i in 0..100 {
        v.put(&i, &(), &i).unwrap();
    }
    clock.advance(Duration::from_secs(6));
    for i in 100..150 {
        v.put(&i, &(), &i).unwrap();
    }
    clock.advance(Duration::from_secs(6)); // first 100 expired
    let sp = dir.path().join("sp");
    let stats = src.write_savepoint(&sp).unwrap();
    assert_eq!(stats.entries, 50);
    let dst = KeyedBackend::builder(dir.path().join("dst"))
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    dst.restore_savepoint(&sp).unwrap();
    let v = dst
        .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(ttl))
        .unwrap();
    assert_eq!(v.get(&120, &()).unwrap(), Some(120));
    assert_eq!(v.get(&5, &()).unwrap(), None);
    clock.advance(Duration::from_secs(5)); // timestamps survived the savepoint: now expired too
    assert_eq!(v.get(&120, &()).unwrap(), None);
}

#[test]
fn operator_state_travels_in_the_savepoint_and_redistributes() {
    use rockstate::operator_state::{redistribute, OperatorState, RedistributionMode};
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for i in 0..2u64 {
        let b = KeyedBackend::builder(dir.path().join(format!("op{i}")))
            .key_groups(KeyGroupRange::for_operator(128, 2, i as u32).unwrap())
            .open()
            .unwrap();
        let mut op = OperatorState::new();
        op.update(
            "offsets",
            RedistributionMode::Split,
            &[i * 10, i * 10 + 1, i * 10 + 2],
        )
        .unwrap();
        op.update("rules", RedistributionMode::Broadcast, &["r1".to_string()])
            .unwrap();
        let path = dir.path().join(format!("sp{i}"));
        b.write_savepoint_with(&path, &op).unwrap();
        paths.push(path);
    }
    let old: Vec<OperatorState> = paths
        .iter()
        .map(|p| rockstate::savepoint::read_operator_state(p).unwrap())
        .collect();
    let new = redistribute(&old, 3).unwrap();
    let offsets: Vec<Vec<u64>> = new.iter().map(|s| s.get("offsets").unwrap()).collect();
    assert_eq!(offsets, vec![vec![0, 1], vec![2, 10], vec![11, 12]]);
    assert!(new
        .iter()
        .all(|s| s.get::<String>("rules").unwrap() == vec!["r1".to_string()]));
}

/// A savepoint of many key groups (several per encoder run, runs spread over threads) whose
/// blocks alternate between incompressible (random) and repetitive values restores exactly,
/// from RocksDB into RocksDB at another parallelism and into the heap backend, and the
/// repetitive half is still compressed.
#[test]
fn many_key_groups_with_mixed_compressibility_round_trip() {
    const M: u32 = 2048;
    let dir = tempfile::tempdir().unwrap();
    let src = KeyedBackend::builder(dir.path().join("src"))
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .open()
        .unwrap();
    let codec = rockstate::CodecId::new("bytes", 1);
    let state = src.raw_value_state("mixed", codec.clone()).unwrap();
    let mut expected = BTreeMap::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for k in 0..6000u32 {
        let key = k.to_be_bytes();
        let value: Vec<u8> = if rockstate::keygroup::key_group_of(&key, M).is_multiple_of(2) {
            (0..200)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect()
        } else {
            format!("{k:08}").repeat(25).into_bytes()
        };
        state.put(&key, b"", &value).unwrap();
        expected.insert(key, value);
    }
    src.flush().unwrap();
    let sp = dir.path().join("sp");
    let stats = src.write_savepoint(&sp).unwrap();
    assert_eq!(stats.entries, 6000);
    assert!(
        stats.file_bytes < stats.raw_bytes * 3 / 4,
        "repetitive blocks compressed: {stats:?}"
    );

    let mut seen = 0;
    for i in 0..3 {
        let b = KeyedBackend::builder(dir.path().join(format!("p3-{i}")))
            .max_parallelism(M)
            .key_groups(KeyGroupRange::for_operator(M, 3, i).unwrap())
            .open()
            .unwrap();
        b.restore_savepoint(&sp).unwrap();
        let s = b.raw_value_state("mixed", codec.clone()).unwrap();
        for (key, value) in &expected {
            match s.get(key, b"") {
                Err(Error::KeyGroupOutOfRange { .. }) => continue,
                r => assert_eq!(r.unwrap().as_ref(), Some(value)),
            }
            seen += 1;
        }
    }
    assert_eq!(seen, expected.len());

    let heap = KeyedBackend::heap_builder()
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .open()
        .unwrap();
    heap.restore_savepoint(&sp).unwrap();
    let s = heap.raw_value_state("mixed", codec).unwrap();
    for (key, value) in &expected {
        assert_eq!(s.get(key, b"").unwrap().as_ref(), Some(value));
    }
}

/// A savepoint restore stages its SSTs inside the backend's directory; staging that a killed
/// process left there is removed when the backend next opens (nothing else uses the
/// directory while RocksDB holds its lock), and nothing is ever staged beside it.
#[test]
fn staging_left_by_a_killed_savepoint_restore_goes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (src, sp) = filled_source(dir.path(), "sp");
    let target = dir.path().join("t");
    let b = KeyedBackend::builder(&target).open().unwrap();
    b.restore_savepoint(&sp).unwrap();
    drop(b);
    let beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !beside.iter().any(|n| n.contains("savepoint-restore")),
        "{beside:?}"
    );
    // What a restore killed while writing its SSTs leaves.
    let left = target.join(".rockstate-savepoint-restore-x1y2z3");
    std::fs::create_dir(&left).unwrap();
    std::fs::write(left.join("0-0.sst"), b"partly written").unwrap();
    let b = KeyedBackend::builder(&target).open().unwrap();
    assert!(!left.exists());
    assert_eq!(check(&b, &data()), check(&src, &data()));
}

#[test]
fn a_missing_old_instance_is_refused_on_both_backends() {
    // Rescaling 2 → 1 through savepoints with only one half's file: the other half's key
    // groups would come back empty, so the restore refuses and leaves the backend empty.
    let dir = tempfile::tempdir().unwrap();
    let (_src, whole) = filled_source(dir.path(), "whole");
    let half = KeyedBackend::builder(dir.path().join("half-0"))
        .key_groups(KeyGroupRange::for_operator(128, 2, 0).unwrap())
        .open()
        .unwrap();
    half.restore_savepoint(&whole).unwrap();
    let sp = dir.path().join("sp-half-0");
    half.write_savepoint(&sp).unwrap();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let target = KeyedBackend::builder(dir.path().join(format!("one-{kind:?}")))
            .kind(kind)
            .open()
            .unwrap();
        let err = target.restore_savepoint(&sp).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidKeyGroups(m) if m.contains("64..=127")),
            "{kind:?}: {err}"
        );
        assert!(target.states().unwrap().is_empty(), "{kind:?}");
        // The half's own key groups restore from it.
        let own = KeyedBackend::builder(dir.path().join(format!("own-{kind:?}")))
            .kind(kind)
            .key_groups(KeyGroupRange::for_operator(128, 2, 0).unwrap())
            .open()
            .unwrap();
        own.restore_savepoint(&sp).unwrap();
    }
}
