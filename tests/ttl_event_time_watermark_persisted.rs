//! Event-time TTL across a reopen, a restore and a rescale: the watermark a backend reached is
//! kept with its state, so a value read (under `OnReadAndWrite`) or written after the restart
//! and before the engine's first `advance_watermark` is stamped with that watermark, not 0,
//! and lives its whole TTL in event time once the watermark moves on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::{TimeDomain, UpdateType};
use rockstate::{
    KeyGroupRange, KeyedBackend, LocalStorage, ManualClock, RestoreFrom, StateDescriptor, TtlConfig,
};

const W: u64 = 1_700_000_000_000;

fn desc() -> StateDescriptor {
    StateDescriptor::new("v").with_ttl(
        TtlConfig::new(Duration::from_secs(10))
            .update_type(UpdateType::OnReadAndWrite)
            .time_domain(TimeDomain::EventTime),
    )
}

fn builder(dir: &Path, storage: &Arc<LocalStorage>) -> rockstate::BackendBuilder {
    KeyedBackend::builder(dir)
        .clock(Arc::new(ManualClock::new(5_000_000)))
        .checkpoint_storage(storage.clone())
}

/// Writes keys 0..100 at watermark `W` (key k holds k).
fn write_at_w(b: &KeyedBackend) {
    b.advance_watermark(W);
    let v = b.value_state::<u32, (), u32>(desc()).unwrap();
    for k in 0..100 {
        v.put(&k, &(), &k).unwrap();
    }
}

/// A record arrives before the first watermark of the new run: it reads `read` and writes
/// `written`; then the watermark comes back one millisecond later, and both must be alive.
fn touch_then_advance(b: &KeyedBackend, read: u32, written: u32) {
    let v = b.value_state::<u32, (), u32>(desc()).unwrap();
    assert_eq!(v.get(&read, &()).unwrap(), Some(read));
    v.put(&written, &(), &1000).unwrap();
    b.advance_watermark(W + 1);
    assert_eq!(
        v.get(&read, &()).unwrap(),
        Some(read),
        "a value read 1 ms (event time) ago with a TTL of 10 s expired"
    );
    assert_eq!(
        v.get(&written, &()).unwrap(),
        Some(1000),
        "a value written 1 ms (event time) ago with a TTL of 10 s expired"
    );
}

#[test]
fn a_reopened_backend_keeps_its_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    let b = builder(&dir.path().join("a"), &storage).open().unwrap();
    write_at_w(&b);
    b.close().unwrap();
    let b = builder(&dir.path().join("a"), &storage).open().unwrap();
    touch_then_advance(&b, 1, 2);
}

#[test]
fn a_restored_backend_starts_at_the_checkpoints_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    let b = builder(&dir.path().join("a"), &storage).open().unwrap();
    write_at_w(&b);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    b.close().unwrap();
    let r = builder(&dir.path().join("r"), &storage)
        .restore(RestoreFrom::Checkpoint(1))
        .unwrap();
    touch_then_advance(&r, 3, 4);
}

#[test]
fn a_rescale_takes_the_highest_watermark_of_its_sources() {
    // Either instance behind: whichever the restore takes as its base, the other's counts.
    for behind in 0..2 {
        rescale_with_one_source_behind(behind);
    }
}

fn rescale_with_one_source_behind(behind: u32) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    // Two instances, one of them behind (it saw W - 5 s only).
    let mut keys = Vec::new();
    for index in 0..2 {
        let b = builder(&dir.path().join(format!("a{index}")), &storage)
            .key_groups(KeyGroupRange::for_operator(128, 2, index).unwrap())
            .open()
            .unwrap();
        b.advance_watermark(if index == behind { W - 5_000 } else { W });
        let v = b.value_state::<u32, (), u32>(desc()).unwrap();
        for k in 0..100u32 {
            if v.put(&k, &(), &k).is_ok() {
                keys.push(k);
            }
        }
        b.checkpoint(1).unwrap();
        b.close().unwrap();
    }
    assert_eq!(keys.len(), 100);
    let r = builder(&dir.path().join("r"), &storage)
        .restore(RestoreFrom::Checkpoint(1))
        .unwrap();
    let v = r.value_state::<u32, (), u32>(desc()).unwrap();
    v.put(&1000, &(), &7).unwrap();
    // 8 s after W: a value written at the restored watermark (W) is alive, 2 s to go.
    r.advance_watermark(W + 8_000);
    assert_eq!(
        v.get(&1000, &()).unwrap(),
        Some(7),
        "written after the rescale at the lower source's watermark"
    );
}
