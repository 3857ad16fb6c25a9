//! The checkpoint coordinator: ids, triggers, acks, the job record as commit point,
//! notifications, subsumption, timeouts through an injected clock (no sleeps), declines, and
//! a threaded job with real backends restored from the job record.

use std::sync::Arc;
use std::time::Duration;

use rockstate::checkpoint::layout;
use rockstate::coordinator::{
    latest_job_checkpoint, list_job_checkpoints, task_checkpoint, AbortReason, Coordinator,
    CoordinatorConfig, Outcome, TaskCommand, TaskEndpoint, TaskReport, Triggered,
};
use rockstate::{
    CheckpointOptions, CheckpointStorage, Error, KeyGroupRange, KeyedBackend, LocalStorage,
    ManualClock, RestoreFrom,
};

fn kg_of(k: u64) -> u16 {
    rockstate::keygroup::key_group_of(&rockstate::codec::encode(&k, "key").unwrap(), 128)
}

fn setup(
    tasks: u32,
) -> (
    tempfile::TempDir,
    Arc<LocalStorage>,
    ManualClock,
    CoordinatorConfig,
) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let mut config = CoordinatorConfig::new("test-job", tasks, 128);
    config.timeout = Duration::from_secs(60);
    (dir, storage, ManualClock::new(1_000_000), config)
}

fn started(t: Triggered) -> u64 {
    match t {
        Triggered::Started(id) => id,
        other => panic!("not started: {other:?}"),
    }
}

fn stateless_ack(ep: &TaskEndpoint, id: u64) {
    assert!(ep.ack(id, task_checkpoint(ep.task(), None, vec![])));
}

fn drain(ep: &TaskEndpoint) -> Vec<TaskCommand> {
    std::iter::from_fn(|| ep.try_recv()).collect()
}

#[test]
fn commit_needs_every_ack_then_writes_the_record_and_notifies_every_task() {
    let (dir, storage, clock, config) = setup(2);
    let mut c = Coordinator::new(config, storage.clone(), Arc::new(clock.clone())).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let backends: Vec<KeyedBackend> = (0..2u32)
        .map(|t| {
            KeyedBackend::builder(dir.path().join(format!("op-{t}")))
                .key_groups(KeyGroupRange::for_operator(128, 2, t).unwrap())
                .checkpoint_storage(storage.clone())
                .job_owner(c.owner().clone())
                .open()
                .unwrap()
        })
        .collect();

    let id = started(c.trigger().unwrap());
    assert_eq!(id, 1);
    // Only the source (task 0) is triggered.
    assert_eq!(
        drain(&eps[0]),
        vec![TaskCommand::Trigger { checkpoint_id: 1 }]
    );
    assert!(drain(&eps[1]).is_empty());

    let stats0 = backends[0].checkpoint(id).unwrap();
    eps[0].ack(
        id,
        task_checkpoint(0, Some((&backends[0], &stats0)), vec![]),
    );
    assert!(
        c.poll().unwrap().is_empty(),
        "one ack of two commits nothing"
    );
    assert!(list_job_checkpoints(storage.as_ref()).unwrap().is_empty());
    assert!(drain(&eps[0]).is_empty());

    clock.advance(Duration::from_millis(250));
    let stats1 = backends[1].checkpoint(id).unwrap();
    eps[1].ack(
        id,
        task_checkpoint(1, Some((&backends[1], &stats1)), vec![]),
    );
    let out = c.poll().unwrap();
    let record = match out.as_slice() {
        [Outcome::Completed(r)] => r.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(record.checkpoint_id, 1);
    assert_eq!(record.triggered_at_ms, 1_000_000);
    assert_eq!(record.completed_at_ms, 1_000_250);
    assert_eq!(record.tasks.len(), 2);
    for (t, b) in record.tasks.iter().zip(&backends) {
        let m = t.manifest.as_deref().unwrap();
        assert_eq!(m, layout::metadata_name(1, b.backend_id()));
        assert!(storage.get_bytes(m).is_ok(), "{m} exists");
        assert_eq!(
            (t.key_group_start, t.key_group_end),
            (b.key_groups().start, b.key_groups().end)
        );
    }
    assert_eq!(
        latest_job_checkpoint(storage.as_ref()).unwrap(),
        Some(record)
    );
    for ep in &eps {
        assert_eq!(drain(ep), vec![TaskCommand::Complete { checkpoint_id: 1 }]);
    }
    assert_eq!(c.completed(), vec![1]);
    assert!(c.pending().is_empty());
}

#[test]
fn timeout_aborts_by_the_clock_and_late_acks_are_ignored() {
    let (_dir, storage, clock, config) = setup(2);
    let mut c = Coordinator::new(config, storage.clone(), Arc::new(clock.clone())).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let id = started(c.trigger().unwrap());
    stateless_ack(&eps[0], id);
    clock.advance(Duration::from_millis(59_999));
    assert!(c.poll().unwrap().is_empty());
    assert_eq!(c.pending(), vec![id]);
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        c.tick().unwrap(),
        vec![Outcome::Aborted {
            checkpoint_id: id,
            reason: AbortReason::Timeout
        }]
    );
    for ep in &eps {
        assert!(drain(ep).contains(&TaskCommand::Abort { checkpoint_id: id }));
    }
    stateless_ack(&eps[1], id);
    assert!(c.poll().unwrap().is_empty(), "a late ack completes nothing");
    assert!(list_job_checkpoints(storage.as_ref()).unwrap().is_empty());
    // The next checkpoint gets a new id and can complete.
    let next = started(c.trigger().unwrap());
    assert_eq!(next, id + 1);
    stateless_ack(&eps[0], next);
    stateless_ack(&eps[1], next);
    assert!(
        matches!(c.poll().unwrap().as_slice(), [Outcome::Completed(r)] if r.checkpoint_id == next)
    );
}

#[test]
fn decline_aborts_and_bad_task_index_is_a_typed_error() {
    let (_dir, storage, clock, config) = setup(2);
    let mut c = Coordinator::new(config, storage, Arc::new(clock)).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    assert!(matches!(c.endpoint(2), Err(Error::Coordinator(_))));
    let id = started(c.trigger().unwrap());
    assert_eq!(c.trigger().unwrap(), Triggered::Busy);
    let bogus = TaskReport::Ack {
        checkpoint_id: id,
        snapshot: task_checkpoint(9, None, vec![]),
    };
    assert!(matches!(c.handle(bogus), Err(Error::Coordinator(_))));
    assert_eq!(c.pending(), vec![id], "a bad report changes nothing");
    eps[1].decline(id, "disk full");
    assert_eq!(
        c.poll().unwrap(),
        vec![Outcome::Aborted {
            checkpoint_id: id,
            reason: AbortReason::Declined {
                task: 1,
                reason: "disk full".into()
            }
        }]
    );
    assert!(drain(&eps[0]).contains(&TaskCommand::Abort { checkpoint_id: id }));
}

#[test]
fn newer_completion_subsumes_older_pending_and_old_records() {
    let (_dir, storage, clock, mut config) = setup(2);
    config.max_concurrent = 2;
    config.retained = 2;
    let mut c = Coordinator::new(config.clone(), storage.clone(), Arc::new(clock.clone())).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let a = started(c.trigger().unwrap());
    let b = started(c.trigger().unwrap());
    stateless_ack(&eps[0], a);
    stateless_ack(&eps[0], b);
    stateless_ack(&eps[1], b);
    let out = c.poll().unwrap();
    assert!(matches!(&out[0], Outcome::Completed(r) if r.checkpoint_id == b));
    assert_eq!(
        out[1],
        Outcome::Aborted {
            checkpoint_id: a,
            reason: AbortReason::Subsumed
        }
    );
    for _ in 0..3 {
        let id = started(c.trigger().unwrap());
        stateless_ack(&eps[0], id);
        stateless_ack(&eps[1], id);
        assert!(matches!(
            c.poll().unwrap().as_slice(),
            [Outcome::Completed(_)]
        ));
    }
    assert_eq!(c.completed(), vec![4, 5]);
    assert_eq!(list_job_checkpoints(storage.as_ref()).unwrap(), vec![4, 5]);

    // A restarted coordinator continues above every id in storage.
    drop(c);
    let mut c2 = Coordinator::new(config, storage, Arc::new(clock)).unwrap();
    let _eps: Vec<TaskEndpoint> = (0..2).map(|t| c2.endpoint(t).unwrap()).collect();
    assert_eq!(c2.completed(), vec![4, 5]);
    assert_eq!(started(c2.trigger().unwrap()), 6);
}

#[test]
fn failed_commit_and_gone_source_abort() {
    let (_dir, storage, clock, config) = setup(1);
    let mut c = Coordinator::new(config, storage.clone(), Arc::new(clock)).unwrap();
    let ep = c.endpoint(0).unwrap();
    let id = started(c.trigger().unwrap());
    // Someone else's object occupies the record's name: objects are never overwritten.
    storage
        .put_bytes(&layout::job_record_name(id), b"not mine")
        .unwrap();
    stateless_ack(&ep, id);
    match c.poll().unwrap().as_slice() {
        [Outcome::Aborted {
            reason: AbortReason::CommitFailed(_),
            ..
        }] => {}
        other => panic!("{other:?}"),
    }
    assert!(drain(&ep).contains(&TaskCommand::Abort { checkpoint_id: id }));
    assert_eq!(
        storage.get_bytes(&layout::job_record_name(id)).unwrap(),
        b"not mine"
    );
    drop(ep);
    match c.trigger().unwrap() {
        Triggered::Failed(Outcome::Aborted {
            reason: AbortReason::TaskGone(0),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(c.pending().is_empty());
}

/// Two tasks acknowledging with the same backend's manifest (an engine wiring one backend to
/// two tasks): the commit refuses the record, which a restore could not use.
#[test]
fn two_tasks_naming_one_manifest_abort() {
    let (dir, storage, clock, config) = setup(2);
    let mut c = Coordinator::new(config, storage.clone(), Arc::new(clock)).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let b = KeyedBackend::builder(dir.path().join("op"))
        .key_groups(KeyGroupRange::for_operator(128, 2, 0).unwrap())
        .checkpoint_storage(storage.clone())
        .job_owner(c.owner().clone())
        .open()
        .unwrap();
    let id = started(c.trigger().unwrap());
    let stats = b.snapshot(id).unwrap().upload().unwrap();
    for ep in &eps {
        assert!(ep.ack(id, task_checkpoint(ep.task(), Some((&b, &stats)), vec![])));
    }
    match c.poll().unwrap().as_slice() {
        [Outcome::Aborted {
            reason: AbortReason::CommitFailed(reason),
            ..
        }] => assert!(reason.contains("two tasks name manifest"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(list_job_checkpoints(storage.as_ref()).unwrap().is_empty());
}

/// A job of three task threads with real backends, every task a source: each writes its own
/// keys, snapshots on trigger, and notifies its backend on completion. The job is then
/// restored from the newest job record alone.
#[test]
fn threaded_job_restores_from_the_job_record() {
    let (dir, storage, clock, mut config) = setup(3);
    config.sources = vec![0, 1, 2];
    let mut c = Coordinator::new(config, storage.clone(), Arc::new(clock)).unwrap();
    let mut handles = Vec::new();
    for t in 0..3u32 {
        let ep = c.endpoint(t).unwrap();
        let path = dir.path().join(format!("op-{t}"));
        let storage = storage.clone();
        let owner = c.owner().clone();
        handles.push(std::thread::spawn(move || {
            let backend = KeyedBackend::builder(&path)
                .key_groups(KeyGroupRange::for_operator(128, 3, t).unwrap())
                .checkpoint_storage(storage)
                .job_owner(owner)
                .open()
                .unwrap();
            let state = backend.value_state::<u64, (), u64>("count").unwrap();
            let mut written = 0u64;
            while let Some(cmd) = ep.recv() {
                match cmd {
                    TaskCommand::Trigger { checkpoint_id } => {
                        // Write keys this task owns, then snapshot.
                        let mut k = 0u64;
                        let mut n = 0;
                        while n < 20 {
                            if backend.key_groups().contains(kg_of(k)) {
                                state.put(&k, &(), &(checkpoint_id * 1000 + k)).unwrap();
                                n += 1;
                            }
                            k += 1;
                        }
                        written = checkpoint_id;
                        let stats = backend.checkpoint(checkpoint_id).unwrap();
                        ep.ack(
                            checkpoint_id,
                            task_checkpoint(t, Some((&backend, &stats)), vec![]),
                        );
                    }
                    TaskCommand::Complete { checkpoint_id } => {
                        backend.notify_checkpoint_complete(checkpoint_id).unwrap();
                    }
                    TaskCommand::Abort { checkpoint_id } => {
                        backend.notify_checkpoint_aborted(checkpoint_id).unwrap();
                    }
                }
            }
            written
        }));
    }
    for round in 1..=3u64 {
        assert_eq!(started(c.trigger().unwrap()), round);
        let mut done = None;
        // Bounded: each wait returns after at most a second; the tasks answer in far less.
        for _ in 0..600 {
            if let Some(o) = c.wait(Duration::from_secs(1)).unwrap().into_iter().next() {
                done = Some(o);
                break;
            }
        }
        assert!(matches!(done, Some(Outcome::Completed(ref r)) if r.checkpoint_id == round));
    }
    drop(c);
    for h in handles {
        assert_eq!(h.join().unwrap(), 3);
    }
    let record = latest_job_checkpoint(storage.as_ref()).unwrap().unwrap();
    assert_eq!(record.checkpoint_id, 3);
    for t in &record.tasks {
        let manifest = t.manifest.as_deref().unwrap();
        let obj = layout::parse_checkpoint_object(manifest).unwrap();
        let restored = KeyedBackend::builder(dir.path().join(format!("restored-{}", t.task)))
            .key_groups(KeyGroupRange::new(t.key_group_start, t.key_group_end).unwrap())
            .checkpoint_storage(storage.clone())
            .checkpoint_options(CheckpointOptions::default())
            .restore(RestoreFrom::Exact {
                checkpoint_id: obj.id,
                backend_id: obj.backend_id.to_string(),
            })
            .unwrap();
        let state = restored.value_state::<u64, (), u64>("count").unwrap();
        let mut seen = 0;
        for k in 0..200u64 {
            let kg = kg_of(k);
            if restored.key_groups().contains(kg) {
                if let Some(v) = state.get(&k, &()).unwrap() {
                    assert_eq!(v, 3000 + k);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 20, "task {}", t.task);
    }
}
