//! An engine that keeps completion elsewhere (no job record in storage, docs/ownership.md §3
//! rules 5-6: `Latest` falls back to the newest manifests, "that engine sweeps") restarts its
//! backend and sweeps orphans with a one-hour minimum age. The sweep keeps the checkpoints the
//! restart restores from: without a job record, ids of an earlier run do not count as
//! finished, so only the minimum age decides.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use rockstate::{CheckpointOptions, RestoreFrom};

#[test]
fn a_sweep_after_a_restart_keeps_the_checkpoints_of_an_engine_without_job_records() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(1).unwrap();
    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(2).unwrap();
    // Before the restart a sweep keeps them (they are young and acknowledged).
    b.sweep_orphans(Duration::from_secs(3600)).unwrap();
    assert_eq!(fx.committed_ids(b.backend_id()), [1, 2]);
    drop(b);

    // The engine restarts: it restores the newest checkpoint (no record: the newest
    // manifests) and sweeps orphans older than an hour.
    let restored = fx.restore("b", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    let swept = restored.sweep_orphans(Duration::from_secs(3600)).unwrap();
    drop(restored);

    // Nothing was an hour old: the checkpoint just restored from must still be there.
    let again = fx.restore("c", RestoreFrom::Latest);
    match again {
        Ok(c) => assert_eq!(read_all(&c), model),
        Err(e) => {
            panic!("the checkpoint restored a moment ago is gone after the sweep ({swept:?}): {e}")
        }
    }
}
