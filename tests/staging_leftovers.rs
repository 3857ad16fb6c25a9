//! Staging directories of snapshots that can never be uploaded (their process died) are
//! removed when a backend opens on the same staging root: its own, and those of every
//! backend whose staging lock nobody holds. A live backend's staging directory stays.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::CheckpointOptions;

#[test]
fn stale_snapshot_directories_are_removed_and_live_ones_kept() {
    let fx = Fixture::new();
    let live = fx.open("live", CheckpointOptions::default());
    let root = fx.path(".rockstate-staging");
    let live_snap = root.join(live.backend_id()).join("snap-3");
    std::fs::create_dir_all(&live_snap).unwrap();
    let dead_snap = root.join("0123456789abcdef0123456789abcdef").join("snap-9");
    std::fs::create_dir_all(&dead_snap).unwrap();
    std::fs::write(dead_snap.join("000009.sst"), b"pinned by a dead process").unwrap();

    let other = fx.open("other", CheckpointOptions::default());
    assert!(!dead_snap.exists(), "a dead backend's snapshot stays");
    assert!(live_snap.exists(), "a live backend's snapshot was removed");

    // A backend's own leftovers go when it reopens.
    drop(other);
    let own = root.join(live.backend_id()).join("snap-4");
    std::fs::create_dir_all(&own).unwrap();
    let id = live.backend_id().to_string();
    drop(live);
    let reopened = fx.open("live", CheckpointOptions::default());
    assert_eq!(reopened.backend_id(), id);
    assert!(!own.exists() && !live_snap.exists());
}
