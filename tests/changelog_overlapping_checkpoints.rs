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
    // Checkpoint 3 is planned on checkpoint 1 and lists checkpoint 2's segment as local.
    second_completes_while_the_third_uploads(&fx, 100_000, 31, false);
}

fn a_log_checkpoint_uploads_segments_a_materialization_covered(fx: Fixture) {
    // Every checkpoint with a log behind it is due to materialize, unless one is in flight:
    // checkpoint 2 materializes, and 3 is a log checkpoint on checkpoint 1 listing the
    // segment cut in 2's sync phase.
    second_completes_while_the_third_uploads(&fx, 0, 32, true);
}

/// Materializes checkpoint 1, then takes the sync phases of 2 and 3 (writes before each),
/// uploads and completes 2 (a materialization or not, as `second_materializes` says), which
/// covers 2's segment, and only then uploads 3: a log checkpoint that restores exactly.
fn second_completes_while_the_third_uploads(
    fx: &Fixture,
    percent: u32,
    seed: u64,
    second_materializes: bool,
) {
    let b = fx.open("a", changelog_options(percent));
    let (mut model, mut r) = materialize_then_log(&b, seed, 4000, 0, 0);
    random_writes(&b, &mut model, &mut r, 300);
    let second = b.snapshot(2).unwrap();
    random_writes(&b, &mut model, &mut r, 300);
    let third = b.snapshot(3).unwrap();
    assert_eq!(second.upload().unwrap().materialized, second_materializes);
    b.notify_checkpoint_complete(2).unwrap();
    assert!(!third.upload().unwrap().materialized);
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

fn pipelined_checkpoints_keep_logging_after_the_first_materializations(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let backend = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(33);
    random_writes(&b, &mut model, &mut r, 4000);
    // Checkpoint k is triggered before k - 1 completes, as an engine pipelining two epochs
    // does: 1 and 2 both materialize (neither has a completed base), 3 is planned on 1 and
    // uploaded after 2 completed, so it rests on 2. From then on every checkpoint is a log
    // checkpoint on materialization 2: one chain, not one per materialization.
    let mut kinds = String::new();
    let mut rests_on = Vec::new();
    let mut finish = |p: rockstate::PendingSnapshot| {
        let id = p.checkpoint_id();
        kinds.push(if p.upload().unwrap().materialized {
            'M'
        } else {
            'l'
        });
        b.notify_checkpoint_complete(id).unwrap();
        let m = fx.manifest(id, &backend);
        rests_on.push(m.changelog.unwrap().materialization_id);
    };
    let mut in_flight = None;
    for k in 1..=12u64 {
        random_writes(&b, &mut model, &mut r, 100);
        if let Some(p) = in_flight.replace(b.snapshot(k).unwrap()) {
            finish(p);
        }
    }
    finish(in_flight.take().unwrap());
    assert_eq!(kinds, "MMllllllllll");
    assert_eq!(rests_on, [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}
