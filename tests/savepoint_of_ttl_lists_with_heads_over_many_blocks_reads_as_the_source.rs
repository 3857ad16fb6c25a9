//! A savepoint holds each list as a read returns it (docs/savepoint-format.md): TTL lists
//! (full-snapshot cleanup on) with blind updates' heads, some heads expired, their replaced
//! entries left out, appends after the heads, in one key group (max parallelism 1) that
//! continues over several 4 MiB blocks. Restored into RocksDB and the heap, every list reads
//! as it read in the source when the savepoint was taken. Time only through `ManualClock`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rockstate::{BackendKind, CodecId, KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

fn open(kind: BackendKind, path: &Path, clock: &ManualClock) -> KeyedBackend {
    KeyedBackend::builder(path)
        .kind(kind)
        .max_parallelism(1)
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap()
}

fn list(b: &KeyedBackend) -> rockstate::RawListState {
    b.raw_list_state(
        StateDescriptor::new("l").with_ttl(TtlConfig::new(Duration::from_secs(10))),
        CodecId::new("raw", 1),
    )
    .unwrap()
}

fn el(k: u32, tag: &str, i: u32) -> Vec<u8> {
    let mut e = format!("{k}-{tag}-{i}-").into_bytes();
    e.resize(1000, b'a' + (i % 26) as u8);
    e
}

const KEYS: u32 = 3000;

fn reads(b: &KeyedBackend) -> Vec<Vec<Vec<u8>>> {
    let l = list(b);
    (0..KEYS)
        .map(|k| l.get(&k.to_be_bytes(), b"").unwrap())
        .collect()
}

#[test]
fn ttl_lists_with_heads_restore_as_they_read() {
    let dir = tempfile::tempdir().unwrap();
    for source_kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let clock = ManualClock::new(1_000_000);
        let src = open(
            source_kind,
            &dir.path().join(format!("src-{source_kind:?}")),
            &clock,
        );
        let l = list(&src);
        let bulk =
            |k: u32, tag: &str, n: u32| -> Vec<Vec<u8>> { (0..n).map(|i| el(k, tag, i)).collect() };
        // t0: every list gets old elements.
        for k in 0..KEYS {
            let v = bulk(k, "old", 10);
            l.add_all(&k.to_be_bytes(), b"", v.iter().map(|e| e.as_slice()))
                .unwrap();
        }
        clock.advance(Duration::from_secs(4));
        // t0+4: every other list is replaced (a head on RocksDB).
        for k in (0..KEYS).step_by(2) {
            let v = bulk(k, "upd", 5);
            l.update(&k.to_be_bytes(), b"", v.iter().map(|e| e.as_slice()))
                .unwrap();
        }
        clock.advance(Duration::from_secs(4));
        // t0+8: every third list gets appends, one by one and in runs.
        for k in (0..KEYS).step_by(3) {
            l.add(&k.to_be_bytes(), b"", &el(k, "add", 0)).unwrap();
            let v = bulk(k, "run", 4);
            l.add_all(&k.to_be_bytes(), b"", v.iter().map(|e| e.as_slice()))
                .unwrap();
        }
        // Every fifth list is replaced again now: its first head is superseded.
        for k in (0..KEYS).step_by(5) {
            let v = bulk(k, "upd2", 3);
            l.update(&k.to_be_bytes(), b"", v.iter().map(|e| e.as_slice()))
                .unwrap();
        }
        // t0+12: the old elements (t0) are expired, the first heads (t0+4) are not.
        clock.advance(Duration::from_secs(4));
        let at_12 = reads(&src);
        let sp12 = dir.path().join(format!("sp12-{source_kind:?}"));
        let s = src.write_savepoint(&sp12).unwrap();
        assert!(s.blocks >= 2, "{s:?}");
        // t0+16: the first heads (t0+4) are expired too, the appends (t0+8) are not.
        clock.advance(Duration::from_secs(4));
        let at_16 = reads(&src);
        let sp16 = dir.path().join(format!("sp16-{source_kind:?}"));
        let s = src.write_savepoint(&sp16).unwrap();
        assert!(s.blocks >= 2, "{s:?}");
        let mut failures = Vec::new();
        for (sp, want, at) in [(&sp12, &at_12, 12u64), (&sp16, &at_16, 16)] {
            for kind in [BackendKind::RocksDb, BackendKind::Heap] {
                // Restored at the time the savepoint was taken.
                let c = ManualClock::new(1_000_000 + at * 1000);
                let b = open(
                    kind,
                    &dir.path().join(format!("{source_kind:?}-{kind:?}-{at}")),
                    &c,
                );
                b.restore_savepoint(sp).unwrap();
                let got = reads(&b);
                for k in 0..KEYS as usize {
                    if got[k] != want[k] {
                        failures.push(format!(
                            "{source_kind:?} -> {kind:?} at +{at}s: key {k}: {} elements, source read {}",
                            got[k].len(),
                            want[k].len()
                        ));
                    }
                }
            }
        }
        let n = failures.len();
        failures.truncate(8);
        assert!(failures.is_empty(), "{n} lists differ: {failures:#?}");
    }
}
