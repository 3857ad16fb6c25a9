//! A configuration naming one source twice (`sources = [0, 0]`) would trigger task 0 twice per
//! checkpoint: a real source snapshots twice, its backend refuses the second `checkpoint(id)`
//! (ids must increase) and the task declines, so every checkpoint of the job aborts. The
//! configuration is refused with a typed `Error::Coordinator`.

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{Coordinator, CoordinatorConfig};
use rockstate::{Error, LocalStorage, ManualClock};

#[test]
fn a_source_named_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let mut config = CoordinatorConfig::new("dup-sources", 2, 128);
    config.timeout = Duration::from_secs(60);
    config.sources = vec![0, 0];
    let refused = Coordinator::new(config, storage, Arc::new(ManualClock::new(1_000)));
    assert!(
        matches!(refused, Err(Error::Coordinator(ref m)) if m.contains("source 0")),
        "{:?}",
        refused.err()
    );
}
