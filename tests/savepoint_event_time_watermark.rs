//! Event-time TTL across a savepoint: the file records the watermark its backend had reached,
//! and a backend restored from it (or from several, rescaling) starts at the highest of them,
//! so a value read (under `OnReadAndWrite`) or written before the engine's first
//! `advance_watermark` is stamped there, not at 0, and lives its whole TTL in event time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::{TimeDomain, UpdateType};
use rockstate::{
    BackendKind, KeyGroupRange, KeyedBackend, ManualClock, StateDescriptor, TtlConfig,
};

const W: u64 = 1_700_000_000_000;

fn desc() -> StateDescriptor {
    StateDescriptor::new("v").with_ttl(
        TtlConfig::new(Duration::from_secs(10))
            .update_type(UpdateType::OnReadAndWrite)
            .time_domain(TimeDomain::EventTime),
    )
}

fn open(dir: &Path, kind: BackendKind, groups: KeyGroupRange) -> KeyedBackend {
    KeyedBackend::builder(dir)
        .kind(kind)
        .key_groups(groups)
        .clock(Arc::new(ManualClock::new(5_000_000)))
        .open()
        .unwrap()
}

/// Writes the keys of `0..100` that `b` owns (key k holds k) at watermark `watermark`, then
/// writes its savepoint to `file`; returns the keys written.
fn write_savepoint(b: &KeyedBackend, watermark: u64, file: &Path) -> Vec<u32> {
    b.advance_watermark(watermark);
    let v = b.value_state::<u32, (), u32>(desc()).unwrap();
    let keys: Vec<u32> = (0..100u32).filter(|k| v.put(k, &(), k).is_ok()).collect();
    b.write_savepoint(file).unwrap();
    keys
}

/// A record arrives before the first watermark of the new run: it reads `read` and writes
/// key 1000; then the watermark comes back `after` ms past `W`, and both must be alive.
fn touch_then_advance(b: &KeyedBackend, read: u32, after: u64) {
    let v = b.value_state::<u32, (), u32>(desc()).unwrap();
    assert_eq!(v.get(&read, &()).unwrap(), Some(read));
    v.put(&1000, &(), &1000).unwrap();
    b.advance_watermark(W + after);
    assert_eq!(
        v.get(&read, &()).unwrap(),
        Some(read),
        "a value read {after} ms (event time) before with a TTL of 10 s expired"
    );
    assert_eq!(
        v.get(&1000, &()).unwrap(),
        Some(1000),
        "a value written {after} ms (event time) before with a TTL of 10 s expired"
    );
}

#[test]
fn a_backend_restored_from_a_savepoint_starts_at_its_watermark() {
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dir = tempfile::tempdir().unwrap();
        let all = KeyGroupRange::new(0, 127).unwrap();
        let file = dir.path().join("sp");
        let b = open(&dir.path().join("a"), kind, all);
        write_savepoint(&b, W, &file);
        b.close().unwrap();
        let r = open(&dir.path().join("r"), kind, all);
        r.restore_savepoint(&file).unwrap();
        touch_then_advance(&r, 3, 1);
    }
}

#[test]
fn the_watermark_a_savepoint_restored_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, 127).unwrap();
    let file = dir.path().join("sp");
    let b = open(&dir.path().join("a"), BackendKind::RocksDb, all);
    write_savepoint(&b, W, &file);
    b.close().unwrap();
    let r = open(&dir.path().join("r"), BackendKind::RocksDb, all);
    r.restore_savepoint(&file).unwrap();
    r.close().unwrap();
    let r = open(&dir.path().join("r"), BackendKind::RocksDb, all);
    touch_then_advance(&r, 5, 1);
}

#[test]
fn restoring_several_savepoints_takes_the_highest_watermark() {
    // Either instance behind: the file read first must not decide.
    for behind in 0..2u32 {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut keys = Vec::new();
        for index in 0..2u32 {
            let groups = KeyGroupRange::for_operator(128, 2, index).unwrap();
            let b = open(
                &dir.path().join(format!("a{index}")),
                BackendKind::RocksDb,
                groups,
            );
            let file = dir.path().join(format!("sp{index}"));
            let at = if index == behind { W - 5_000 } else { W };
            keys.extend(write_savepoint(&b, at, &file));
            b.close().unwrap();
            files.push(file);
        }
        assert_eq!(keys.len(), 100);
        let r = open(
            &dir.path().join("r"),
            BackendKind::RocksDb,
            KeyGroupRange::new(0, 127).unwrap(),
        );
        let paths: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
        r.restore_savepoints(&paths).unwrap();
        // 8 s after W: stamped at the highest watermark (W), the write has 2 s to go; at
        // the other (W - 5 s) it would have expired 3 s ago.
        touch_then_advance(&r, 7, 8_000);
    }
}
