//! List runs (docs/decisions/0033-list-runs.md): `add_all` and `update` store the elements of
//! one call as one entry (cut at 64 KiB), `add` one element per entry; reads see one list in
//! insertion order whatever the mix, on RocksDB and the heap; a run expires as a whole; runs
//! survive savepoints (version 2 and later) and version-1 savepoints (single elements) still restore;
//! a savepoint list entry with a malformed suffix is a typed error.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rockstate::{
    BackendKind, CodecId, Error, KeyedBackend, ManualClock, RawListState, StateDescriptor,
    TtlConfig,
};

const KINDS: [BackendKind; 2] = [BackendKind::RocksDb, BackendKind::Heap];

fn open(dir: &Path, kind: BackendKind, clock: &ManualClock) -> KeyedBackend {
    KeyedBackend::builder(dir)
        .kind(kind)
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap()
}

fn list(b: &KeyedBackend, ttl: bool) -> RawListState {
    let mut d = StateDescriptor::new("l");
    if ttl {
        d = d.with_ttl(TtlConfig::new(Duration::from_secs(10)));
    }
    b.raw_list_state(d, CodecId::new("bytes", 1)).unwrap()
}

/// The suffix length of every stored entry of state `l` (8: one element, 9: a run, 0: a
/// head).
fn entry_suffixes(b: &KeyedBackend) -> Vec<usize> {
    let mut out = Vec::new();
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group("l", g, |e| {
            out.push(e.suffix.len());
            if e.suffix.len() == 9 {
                assert_eq!(e.suffix[8], 0x01);
            }
            Ok(true)
        })
        .unwrap();
    }
    out
}

fn elements(n: usize, len: usize, tag: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut e = vec![tag; len];
            e[..4].copy_from_slice(&(i as u32).to_be_bytes());
            e
        })
        .collect()
}

#[test]
fn calls_store_one_entry_each_and_read_back_in_order() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let b = open(dir.path(), kind, &ManualClock::new(0));
        let l = list(&b, false);
        let k = b"key";
        l.add(k, b"", b"first").unwrap();
        let three = elements(3, 8, 1);
        l.add_all(k, b"", three.iter().map(Vec::as_slice)).unwrap();
        // One element through add_all is stored as add stores it.
        l.add_all(k, b"", [&b"single"[..]]).unwrap();
        l.add(k, b"", b"last").unwrap();
        let mut want = vec![b"first".to_vec()];
        want.extend(three.iter().cloned());
        want.push(b"single".to_vec());
        want.push(b"last".to_vec());
        assert_eq!(l.get(k, b"").unwrap(), want, "{kind:?}");
        assert_eq!(entry_suffixes(&b), vec![8, 9, 8, 8], "{kind:?}");

        // Empty elements survive framing; an update replaces every entry by one run (on
        // RocksDB the list's head, under an empty suffix, once the read has deleted the
        // entries it replaced: tests/list_heads.rs).
        l.update(k, b"", [&b""[..], b"x", b""]).unwrap();
        assert_eq!(
            l.get(k, b"").unwrap(),
            vec![b"".to_vec(), b"x".to_vec(), b"".to_vec()],
            "{kind:?}"
        );
        let run = match kind {
            BackendKind::RocksDb => 0,
            _ => 9,
        };
        assert_eq!(entry_suffixes(&b), vec![run], "{kind:?}");

        // A visit that stops inside a run stops there.
        let mut seen = Vec::new();
        l.for_each(k, b"", |e| {
            seen.push(e.to_vec());
            Ok(seen.len() < 2)
        })
        .unwrap();
        assert_eq!(seen, vec![b"".to_vec(), b"x".to_vec()]);

        l.update(k, b"", std::iter::empty()).unwrap();
        assert!(l.get(k, b"").unwrap().is_empty());
        assert!(entry_suffixes(&b).is_empty(), "{kind:?}");
    }
}

#[test]
fn long_writes_are_cut_into_runs_and_large_elements_stand_alone() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let b = open(dir.path(), kind, &ManualClock::new(0));
        let l = list(&b, false);
        // 200 elements of 1 KiB: about 201 KiB framed, so four runs of at most 64 KiB.
        let mut all = elements(200, 1024, 2);
        // An element larger than a run goes alone, between runs.
        all.insert(100, vec![9u8; 100 << 10]);
        l.add_all(b"k", b"ns", all.iter().map(Vec::as_slice))
            .unwrap();
        assert_eq!(l.get(b"k", b"ns").unwrap(), all, "{kind:?}");
        let suffixes = entry_suffixes(&b);
        assert_eq!(suffixes.iter().filter(|&&s| s == 8).count(), 1, "{kind:?}");
        assert!(
            (4..=6).contains(&suffixes.iter().filter(|&&s| s == 9).count()),
            "{kind:?}: {suffixes:?}"
        );
        let mut sizes = Vec::new();
        for g in 0..b.max_parallelism() as u16 {
            b.scan_key_group("l", g, |e| {
                sizes.push(e.value.len());
                Ok(true)
            })
            .unwrap();
        }
        assert!(
            sizes.iter().all(|&s| s <= 64 << 10 || s == 100 << 10),
            "{kind:?}: {sizes:?}"
        );
    }
}

#[test]
fn a_run_expires_as_a_whole_and_compaction_drops_it() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000);
        let b = open(dir.path(), kind, &clock);
        let l = list(&b, true);
        l.add_all(b"k", b"", [&b"a"[..], b"b"]).unwrap();
        clock.advance(Duration::from_millis(6_000));
        l.add(b"k", b"", b"c").unwrap();
        assert_eq!(
            l.get(b"k", b"").unwrap(),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        // Past the run's expiry, before the single element's.
        clock.advance(Duration::from_millis(5_000));
        assert_eq!(l.get(b"k", b"").unwrap(), vec![b"c".to_vec()], "{kind:?}");
        // The read removed the expired run; the element written later stays.
        assert_eq!(entry_suffixes(&b), vec![8], "{kind:?}");
        clock.advance(Duration::from_millis(10_000));
        l.add_all(b"j", b"", [&b"x"[..], b"y"]).unwrap();
        clock.advance(Duration::from_millis(20_000));
        if kind == BackendKind::RocksDb {
            // The compaction filter drops the expired run without a read.
            b.flush().unwrap();
            b.compact_state("l").unwrap();
            assert!(entry_suffixes(&b).is_empty(), "{:?}", entry_suffixes(&b));
        }
        assert!(l.get(b"j", b"").unwrap().is_empty());
    }
}

#[test]
fn runs_survive_a_savepoint_and_version_one_savepoints_restore() {
    for kind in KINDS {
        runs_survive_a_savepoint_written_by(kind);
    }
}

/// A savepoint written by a `source` backend restores its runs into both backends, and a
/// version-1 file restores its single elements.
fn runs_survive_a_savepoint_written_by(source: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let src = open(&dir.path().join("src"), source, &clock);
    let l = list(&src, false);
    let mut want = Vec::new();
    for k in 0..50u32 {
        let key = k.to_be_bytes();
        let run = elements(5, 12, k as u8);
        l.add(&key, b"", b"one").unwrap();
        l.add_all(&key, b"", run.iter().map(Vec::as_slice)).unwrap();
        let mut list = vec![b"one".to_vec()];
        list.extend(run);
        want.push((key, list));
    }
    let runs = entry_suffixes(&src).iter().filter(|&&s| s == 9).count();
    assert_eq!(runs, 50);
    let sp = dir.path().join("sp");
    src.write_savepoint(&sp).unwrap();
    let bytes = std::fs::read(&sp).unwrap();
    assert_eq!(
        u16::from_le_bytes([bytes[4], bytes[5]]),
        sst_format::SAVEPOINT_VERSION
    );
    for kind in KINDS {
        let dst = open(&dir.path().join(format!("dst-{kind:?}")), kind, &clock);
        dst.restore_savepoint(&sp).unwrap();
        let l = list(&dst, false);
        for (key, list) in &want {
            assert_eq!(&l.get(key, b"").unwrap(), list, "{kind:?}");
        }
        assert_eq!(
            entry_suffixes(&dst).iter().filter(|&&s| s == 9).count(),
            runs,
            "{kind:?}"
        );
    }

    // A version-1 file (the same entries in version 1's layout: it holds no runs here)
    // restores its single elements as they are.
    let single = open(&dir.path().join("single"), BackendKind::RocksDb, &clock);
    let l1 = list(&single, false);
    for k in 0..20u32 {
        l1.add(&k.to_be_bytes(), b"", b"a").unwrap();
        l1.add(&k.to_be_bytes(), b"", b"b").unwrap();
    }
    let sp1 = dir.path().join("sp1");
    single.write_savepoint(&sp1).unwrap();
    let v1 = as_version_1(&std::fs::read(&sp1).unwrap());
    std::fs::write(&sp1, &v1).unwrap();
    let dst = open(&dir.path().join("dst-v1"), BackendKind::RocksDb, &clock);
    dst.restore_savepoint(&sp1).unwrap();
    let l = list(&dst, false);
    for k in 0..20u32 {
        assert_eq!(
            l.get(&k.to_be_bytes(), b"").unwrap(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
    }
}

/// A savepoint of the current version written at watermark 0, rewritten in version 1's
/// layout (docs/savepoint-format.md): its header without the last field (the watermark's
/// one-byte varint 0), every later offset one byte earlier, the checksums recomputed.
fn as_version_1(bytes: &[u8]) -> Vec<u8> {
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let h = u32_at(bytes, 8) as usize;
    assert_eq!(bytes[12 + h - 1], 0, "written at watermark 0");
    let mut out = bytes[..12].to_vec();
    out[4..6].copy_from_slice(&1u16.to_le_bytes());
    out[8..12].copy_from_slice(&(h as u32 - 1).to_le_bytes());
    let header = &bytes[12..12 + h - 1];
    out.extend_from_slice(header);
    out.extend_from_slice(&crc32fast::hash(header).to_le_bytes());
    let footer_at = bytes.len() - 20;
    let index_at = u64::from_le_bytes(bytes[footer_at..footer_at + 8].try_into().unwrap()) as usize;
    out.extend_from_slice(&bytes[12 + h + 4..index_at]);
    let mut index = bytes[index_at..footer_at - 4].to_vec();
    for e in 0..u32_at(&index, 0) as usize {
        let at = 4 + e * 18 + 2;
        let offset = u64::from_le_bytes(index[at..at + 8].try_into().unwrap()) - 1;
        index[at..at + 8].copy_from_slice(&offset.to_le_bytes());
    }
    let crc = crc32fast::hash(&index);
    out.extend_from_slice(&index);
    out.extend_from_slice(&crc.to_le_bytes());
    let mut footer = bytes[footer_at..].to_vec();
    footer[..8].copy_from_slice(&(index_at as u64 - 1).to_le_bytes());
    let crc = crc32fast::hash(&footer[..12]);
    footer[12..16].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&footer);
    out
}

#[test]
fn a_savepoint_list_entry_with_a_malformed_suffix_is_a_typed_error() {
    use sst_format::{SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let key = 7u32.to_be_bytes();
    let group = rockstate::keygroup::key_group_of(&key, 128);
    for suffix in [&[0u8; 7][..], &[0u8; 10], &[0, 0, 0, 0, 0, 0, 0, 0, 2]] {
        let header = SavepointHeader {
            max_parallelism: 128,
            key_group_start: 0,
            key_group_end: 127,
            states: vec![StateMeta {
                name: "l".into(),
                kind: StateKind::List,
                codec: "bytes".into(),
                codec_version: 1,
                ttl: false,
            }],
            operator_state: Vec::new(),
            created_at_ms: 0,
            event_time_watermark_ms: 0,
        };
        let mut w = SavepointWriter::new(Vec::new(), &header, 3).unwrap();
        w.add(
            group,
            SavepointEntry {
                state: 0,
                key: &key,
                namespace: b"",
                suffix,
                value: b"element",
            },
        )
        .unwrap();
        let path = dir.path().join(format!("bad-{}", suffix.len()));
        std::fs::write(&path, w.finish().unwrap().0).unwrap();
        let dst = open(
            &dir.path()
                .join(format!("dst-{}-{}", suffix.len(), suffix[suffix.len() - 1])),
            BackendKind::RocksDb,
            &clock,
        );
        let err = dst.restore_savepoint(&path).unwrap_err();
        assert!(matches!(err, Error::Format { .. }), "{suffix:?}: {err}");
        assert!(dst.states().unwrap().is_empty(), "{suffix:?}");
    }
}
