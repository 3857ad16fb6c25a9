//! Changelog mode with checkpoints in flight together (an engine that triggers checkpoint
//! `n + 1` before `n` completes): a log checkpoint planned on an older base lists local
//! segments that an earlier checkpoint completing meanwhile covers. Its upload must still
//! find them, and its restore must give exactly its state. Once it completes, it is the base
//! the next log checkpoint rests on, although a newer materialization completed before it.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::RestoreFrom;

on_every_storage!(
    a_log_checkpoint_uploads_segments_an_earlier_log_checkpoint_covered,
    a_log_checkpoint_uploads_segments_a_materialization_covered,
    pipelined_checkpoints_keep_logging_after_the_first_materializations,
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

fn pipelined_checkpoints_keep_logging_after_the_first_materializations(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let mut model = Model::new();
    let mut r = rng(33);
    random_writes(&b, &mut model, &mut r, 4000);
    // Checkpoint k is triggered before k - 1 completes, as an engine pipelining two epochs
    // does: 1 and 2 both materialize (neither has a completed base), 3 rests on 1 and
    // completes after 2. From then on every checkpoint is a log checkpoint.
    let mut kinds = String::new();
    let mut in_flight = None;
    for k in 1..=12u64 {
        random_writes(&b, &mut model, &mut r, 100);
        let next = b.snapshot(k).unwrap();
        if let Some(p) = in_flight.replace(next) {
            let id = p.checkpoint_id();
            kinds.push(if p.upload().unwrap().materialized {
                'M'
            } else {
                'l'
            });
            b.notify_checkpoint_complete(id).unwrap();
        }
    }
    let last = in_flight.take().unwrap();
    let id = last.checkpoint_id();
    kinds.push(if last.upload().unwrap().materialized {
        'M'
    } else {
        'l'
    });
    b.notify_checkpoint_complete(id).unwrap();
    assert_eq!(kinds, "MMllllllllll");
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}
