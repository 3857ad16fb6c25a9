//! A coordinated job of two tasks on a `FaultyStorage` over a fresh local storage, for the
//! tests of commits whose job record puts fail: the set-up, a checkpoint every task
//! acknowledges with an empty snapshot, and the outcomes' completions.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{
    task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskEndpoint, Triggered,
};
use rockstate::{CheckpointStorage, FaultyStorage, LocalStorage, ManualClock};

/// The job: its storage (in `_dir`), the coordinator and the two tasks' endpoints.
pub struct FaultyJob {
    pub _dir: tempfile::TempDir,
    pub st: Arc<FaultyStorage>,
    pub c: Coordinator,
    pub eps: Vec<TaskEndpoint>,
}

/// A job named `name` of two tasks (max parallelism 128, a 60 s timeout, on a manual clock at
/// 1 s) whose settings `adjust` changes, on a faulty local storage without fsync.
pub fn faulty_job(name: &str, adjust: impl FnOnce(&mut CoordinatorConfig)) -> FaultyJob {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let st = Arc::new(FaultyStorage::new(local));
    let mut config = CoordinatorConfig::new(name, 2, 128);
    config.timeout = Duration::from_secs(60);
    adjust(&mut config);
    let mut c = Coordinator::new(config, st.clone(), Arc::new(ManualClock::new(1_000))).unwrap();
    let eps = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    FaultyJob {
        _dir: dir,
        st,
        c,
        eps,
    }
}

/// The id of a triggered checkpoint that started.
pub fn started(t: Triggered) -> u64 {
    match t {
        Triggered::Started(id) => id,
        o => panic!("{o:?}"),
    }
}

/// Acknowledges checkpoint `id` from `ep`'s task with an empty snapshot.
pub fn ack(ep: &TaskEndpoint, id: u64) {
    assert!(ep.ack(id, task_checkpoint(ep.task(), None, vec![])));
}

/// Triggers a checkpoint and acknowledges it from every task; its id.
pub fn run_checkpoint(c: &mut Coordinator, eps: &[TaskEndpoint]) -> u64 {
    let id = started(c.trigger().unwrap());
    for ep in eps {
        ack(ep, id);
    }
    id
}

/// Whether `outcomes` report checkpoint `id` completed.
pub fn completed(outcomes: &[Outcome], id: u64) -> bool {
    outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Completed(r) if r.checkpoint_id == id))
}
