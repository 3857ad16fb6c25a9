//! Changelog mode with checkpoints in flight together (an engine that triggers checkpoint
//! `n + 1` before `n` completes): a log checkpoint planned on an older base lists local
//! segments that an earlier checkpoint completing meanwhile covers. Its upload must still
//! find them, and its restore must give exactly its state.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::RestoreFrom;

on_every_storage!(
    a_log_checkpoint_uploads_segments_an_earlier_log_checkpoint_covered,
    a_log_checkpoint_uploads_segments_a_materialization_covered,
);

fn a_log_checkpoint_uploads_segments_an_earlier_log_checkpoint_covered(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let (mut model, mut r) = materialize_then_log(&b, 31, 4000, 0, 0);
    random_writes(&b, &mut model, &mut r, 300);
    let second = b.snapshot(2).unwrap();
    random_writes(&b, &mut model, &mut r, 300);
    // Planned on checkpoint 1: lists checkpoint 2's segment as local, to upload.
    let third = b.snapshot(3).unwrap();
    assert!(!second.upload().unwrap().materialized);
    // Covers checkpoint 2's segment.
    b.notify_checkpoint_complete(2).unwrap();
    let s3 = third.upload().unwrap();
    assert!(!s3.materialized);
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

fn a_log_checkpoint_uploads_segments_a_materialization_covered(fx: Fixture) {
    // Every checkpoint with a log behind it is due to materialize, unless one is in flight.
    let b = fx.open("a", changelog_options(0));
    let (mut model, mut r) = materialize_then_log(&b, 32, 4000, 0, 0);
    random_writes(&b, &mut model, &mut r, 300);
    let second = b.snapshot(2).unwrap();
    random_writes(&b, &mut model, &mut r, 300);
    // A materialization is in flight: a log checkpoint on checkpoint 1, listing the segment
    // cut in checkpoint 2's sync phase.
    let third = b.snapshot(3).unwrap();
    assert!(second.upload().unwrap().materialized);
    // Covers that segment.
    b.notify_checkpoint_complete(2).unwrap();
    let s3 = third.upload().unwrap();
    assert!(!s3.materialized);
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}
