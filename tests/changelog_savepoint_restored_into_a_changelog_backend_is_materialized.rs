#[path = "checkpoint_common/mod.rs"]
mod common;
use common::*;
use rockstate::{
    KeyedBackend, ListState, ManualClock, MapState, RestoreFrom, StateDescriptor, TtlConfig,
};
use std::sync::Arc;
use std::time::Duration;

fn list(b: &KeyedBackend) -> ListState<u32, (), u64> {
    b.list_state::<u32, (), u64>(
        StateDescriptor::new("l").with_ttl(TtlConfig::new(Duration::from_secs(10))),
    )
    .unwrap()
}
fn map(b: &KeyedBackend) -> MapState<u32, (), u32, u64> {
    b.map_state::<u32, (), u32, u64>(
        StateDescriptor::new("m").with_ttl(TtlConfig::new(Duration::from_secs(10))),
    )
    .unwrap()
}

#[test]
fn savepoint_into_changelog_backend_with_a_completed_checkpoint() {
    let fx = Fixture::new();
    let clock = ManualClock::new(1_000_000);
    let a = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    for k in 0..50u32 {
        list(&a).add(&k, &(), &(k as u64)).unwrap();
        map(&a).put(&k, &(), &1, &(k as u64)).unwrap();
    }
    let sp = fx.path("sp");
    a.write_savepoint(&sp).unwrap();
    drop(a);
    let b = KeyedBackend::builder(fx.path("b"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(changelog_options(100_000))
        .open()
        .unwrap();
    let s1 = b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    b.restore_savepoint(&sp).unwrap();
    for k in 0..10u32 {
        list(&b).add(&k, &(), &1000).unwrap();
    }
    let s2 = b.checkpoint(2).unwrap();
    b.notify_checkpoint_complete(2).unwrap();
    for k in 10..20u32 {
        map(&b).put(&k, &(), &2, &2000).unwrap();
    }
    let s3 = b.checkpoint(3).unwrap();
    b.notify_checkpoint_complete(3).unwrap();
    eprintln!(
        "{} {} {}",
        s1.materialized, s2.materialized, s3.materialized
    );
    drop(b);
    let r = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(changelog_options(100_000))
        .restore(RestoreFrom::Latest)
        .unwrap();
    for k in 0..50u32 {
        let mut want = vec![k as u64];
        if k < 10 {
            want.push(1000);
        }
        assert_eq!(list(&r).get(&k, &()).unwrap(), want, "list {k}");
        let mut wm = vec![(1u32, k as u64)];
        if (10..20).contains(&k) {
            wm.push((2, 2000));
        }
        assert_eq!(map(&r).entries(&k, &()).unwrap(), wm, "map {k}");
    }
}
