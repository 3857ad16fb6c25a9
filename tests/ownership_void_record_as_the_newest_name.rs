//! A void record under the newest job record name: what `JobOwner::resolve` leaves when it
//! abandons a checkpoint in doubt that no newer checkpoint completed (a file its record named
//! was missing). Every reader takes the newest *completed* checkpoint: the latest restore,
//! the job record listings, a new owner's retained set; a restore of the abandoned id is
//! refused, never filled from that id's manifests; storage verifies; a sweep keeps the void
//! record until it is `min_age` old by the time its owner wrote it, then deletes it. And a
//! storage whose only job record is void has no checkpoint to restore: the latest restore is
//! refused, never filled from the abandoned attempt's manifests. A damaged void record at the
//! newest name is a corruption error for the latest restore (it cannot tell a void record
//! from a completed checkpoint's record), never a restore of an older checkpoint, and
//! `verify_checkpoints` names it.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::coordinator::{latest_job_checkpoint, list_job_checkpoints};
use rockstate::{CheckpointOptions, Error, KeyedBackend, ManualClock, RestoreFrom};

#[test]
fn readers_skip_a_void_record_and_a_sweep_ages_it_out() {
    let fx = Fixture::new();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let open = |name: &str| {
        KeyedBackend::builder(fx.path(name))
            .options(small_options())
            .checkpoint_storage(fx.storage_dyn())
            .checkpoint_options(CheckpointOptions {
                retained: 2,
                ..CheckpointOptions::default()
            })
            .checkpoint_clock(clock.clone())
    };
    let a = open("a").open().unwrap();
    let mut model = Model::new();
    let mut r = rng(37);
    for id in 1..=2 {
        random_writes(&a, &mut model, &mut r, 1500);
        a.checkpoint(id).unwrap();
        a.notify_checkpoint_complete(id).unwrap();
    }
    // Checkpoint 3 uploads (its manifests are in storage) but is abandoned: its name is void.
    let mut after = model.clone();
    random_writes(&a, &mut after, &mut r, 1500);
    a.checkpoint(3).unwrap();
    drop(a);
    let void = void_record(3);
    fx.storage.put_bytes("job/chk-3", &void).unwrap();

    assert_eq!(
        list_job_checkpoints(fx.storage.as_ref()).unwrap(),
        vec![1, 2]
    );
    assert_eq!(
        latest_job_checkpoint(fx.storage.as_ref())
            .unwrap()
            .map(|r| r.checkpoint_id),
        Some(2)
    );
    assert!(matches!(
        fx.restore("r3", RestoreFrom::Checkpoint(3)),
        Err(Error::CheckpointNotFound(_))
    ));
    assert_verified(fx.storage.as_ref());

    let b = open("b").restore(RestoreFrom::Latest).unwrap();
    assert!(read_all(&b) == model, "restored other state");
    let owner = b.job_owner().unwrap();
    assert_eq!(owner.retained(), vec![1, 2]);
    // Not old enough: kept, though checkpoint 3's own files go.
    b.sweep_orphans(Duration::from_secs(60)).unwrap();
    assert!(fx.storage.exists("job/chk-3").unwrap());
    assert!(
        !fx.objects().keys().any(|n| n.starts_with("chk-3/")),
        "checkpoint 3's files were kept"
    );

    random_writes(&b, &mut model, &mut r, 1500);
    b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    assert_eq!(owner.retained(), vec![2, 4]);
    clock.advance(Duration::from_secs(61));
    b.sweep_orphans(Duration::from_secs(60)).unwrap();
    assert!(!fx.storage.exists("job/chk-3").unwrap());
    assert_eq!(
        list_job_checkpoints(fx.storage.as_ref()).unwrap(),
        vec![2, 4]
    );
    assert_verified(fx.storage.as_ref());
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert!(read_all(&restored) == model, "restored other state");
}

#[test]
fn a_storage_whose_only_record_is_void_has_no_latest_checkpoint() {
    let fx = Fixture::new();
    let a = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    random_writes(&a, &mut model, &mut rng(41), 1500);
    a.checkpoint(1).unwrap();
    drop(a);
    let void = void_record(1);
    fx.storage.put_bytes("job/chk-1", &void).unwrap();
    assert!(list_job_checkpoints(fx.storage.as_ref())
        .unwrap()
        .is_empty());
    let latest = fx.restore("r", RestoreFrom::Latest);
    assert!(
        matches!(latest, Err(Error::CheckpointNotFound(_))),
        "{:?}",
        latest.map(|b| read_all(&b).len())
    );
}

#[test]
fn a_damaged_void_record_at_the_newest_name_is_a_corruption_error() {
    let fx = Fixture::new();
    let a = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    random_writes(&a, &mut model, &mut rng(43), 1500);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    drop(a);
    let void = void_record(2);
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("cut by one byte", void[..void.len() - 1].to_vec()),
        ("one byte more", [void.as_slice(), &[0]].concat()),
        ("id flipped", {
            let mut d = void.clone();
            d[6] ^= 1;
            d
        }),
        ("crc flipped", {
            let mut d = void.clone();
            d[25] ^= 0x80;
            d
        }),
        ("magic flipped", {
            let mut d = void.clone();
            d[3] ^= 1;
            d
        }),
    ];
    for (i, (what, bytes)) in damages.into_iter().enumerate() {
        let _ = fx.storage.delete("job/chk-2");
        fx.storage.put_bytes("job/chk-2", &bytes).unwrap();
        let latest = fx.restore(&format!("r{i}"), RestoreFrom::Latest);
        assert!(
            matches!(&latest, Err(e) if e.kind() == rockstate::ErrorKind::Corruption),
            "{what}: {:?}",
            latest.map(|b| read_all(&b).len())
        );
        let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
        assert!(
            report.problems.iter().any(|(file, _)| file == "job/chk-2"),
            "{what}: {:?}",
            report.problems
        );
    }
}

/// The void record of checkpoint `id`, voided at 1,000 s (the tests' clock starts there).
fn void_record(id: u64) -> Vec<u8> {
    sst_format::encode_void_record(&sst_format::VoidRecord {
        checkpoint_id: id,
        voided_at_ms: 1_000_000,
    })
}
