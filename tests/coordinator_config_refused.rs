//! Coordinator configurations that could never complete a checkpoint are refused with a typed
//! `Error::Coordinator`: a source named twice (`sources = [0, 0]`) would be triggered twice per
//! checkpoint (its backend refuses the second `checkpoint(id)`, ids must increase, and the task
//! declines), and a timeout below a millisecond aborts every checkpoint at the first tick.

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

#[test]
fn a_timeout_below_a_millisecond_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    for timeout in [Duration::ZERO, Duration::from_micros(999)] {
        let mut config = CoordinatorConfig::new("short-timeout", 1, 128);
        config.timeout = timeout;
        let refused = Coordinator::new(config, storage.clone(), Arc::new(ManualClock::new(1)));
        assert!(
            matches!(refused, Err(Error::Coordinator(ref m)) if m.contains("below 1 ms")),
            "{timeout:?}: {:?}",
            refused.err()
        );
    }
    let mut config = CoordinatorConfig::new("short-timeout", 1, 128);
    config.timeout = Duration::from_millis(1);
    assert!(Coordinator::new(config, storage, Arc::new(ManualClock::new(1))).is_ok());
}
