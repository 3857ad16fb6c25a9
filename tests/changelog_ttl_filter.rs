//! Changelog mode and the TTL compaction filter: a compaction's drop of an expired entry is
//! not logged, and a `clear` of a map finds nothing to delete then; a restore of a log
//! checkpoint (materialization + replay) must not bring the cleared entry back where expired
//! entries may be returned (`ReturnExpiredIfNotCleanedUp`): the clear logs its row whole.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::ttl::{UpdateType, Visibility};
use rockstate::{KeyedBackend, ManualClock, MapState, RestoreFrom, StateDescriptor, TtlConfig};

fn desc() -> StateDescriptor {
    StateDescriptor::new("m").with_ttl(
        TtlConfig::new(Duration::from_millis(1000))
            .update_type(UpdateType::OnCreateAndWrite)
            .visibility(Visibility::ReturnExpiredIfNotCleanedUp),
    )
}

fn map(b: &KeyedBackend) -> MapState<u32, (), u32, u64> {
    b.map_state::<u32, (), u32, u64>(desc()).unwrap()
}

#[test]
fn a_map_cleared_after_the_ttl_filter_dropped_its_entry_stays_cleared_in_a_changelog_restore() {
    let fx = Fixture::new();
    let clock = ManualClock::new(1_000_000);
    let b = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(changelog_options(100_000))
        .open()
        .unwrap();
    let m = map(&b);
    m.put(&7, &(), &1, &111).unwrap();
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    // Expired; the compaction filter drops it (not logged).
    clock.advance(Duration::from_secs(5));
    b.compact_state("m").unwrap();
    // The user clears the map: nothing found, nothing deleted, nothing logged.
    m.clear(&7, &()).unwrap();
    assert_eq!(m.get(&7, &(), &1).unwrap(), None);
    assert!(m.entries(&7, &()).unwrap().is_empty());
    assert!(!b.checkpoint(2).unwrap().materialized);
    b.notify_checkpoint_complete(2).unwrap();
    drop(b);
    let r = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(fx.storage_dyn())
        .restore(RestoreFrom::Latest)
        .unwrap();
    let m = map(&r);
    assert_eq!(
        m.entries(&7, &()).unwrap(),
        Vec::<(u32, u64)>::new(),
        "the cleared map is back after a restore of the log checkpoint"
    );
    assert_eq!(m.get(&7, &(), &1).unwrap(), None);
}
