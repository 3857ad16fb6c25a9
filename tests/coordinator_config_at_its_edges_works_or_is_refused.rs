//! `CoordinatorConfig` at its edges — tasks 0/1/u32::MAX, retained and max_concurrent
//! 0/1/usize::MAX, timeouts of 0/1 ms/`Duration::MAX`, sources empty/out of range/twice,
//! max parallelism 0/1/32768/32769/u32::MAX, odd job names — either is refused by
//! `Coordinator::new` with a typed error, or completes a checkpoint of one task's backend
//! whose job record a restore then uses. Never a panic, an abort or a hang. Each case runs in
//! a child process.

mod edge_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use edge_common::*;
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered,
};
use rockstate::{KeyedBackend, LocalStorage, ManualClock, RestoreFrom};

fn cases() -> Vec<(String, CoordinatorConfig)> {
    let d = || CoordinatorConfig::new("edge", 1, 128);
    let mut c: Vec<(String, CoordinatorConfig)> = Vec::new();
    macro_rules! case {
        ($field:ident = $($v:expr),+) => {
            $( c.push((format!("{} = {}", stringify!($field), stringify!($v)),
                       CoordinatorConfig { $field: $v, ..d() })); )+
        };
    }
    case!(tasks = 0, 1, 1 << 31, u32::MAX);
    case!(retained = 0, 1, usize::MAX);
    case!(max_concurrent = 0, 1, usize::MAX);
    case!(
        timeout = Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(u64::MAX),
        Duration::MAX
    );
    case!(
        sources = vec![],
        vec![0],
        vec![1],
        vec![0, 0],
        vec![u32::MAX]
    );
    case!(max_parallelism = 0, 1, 128, 32768, 32769, u32::MAX);
    case!(
        job_name = String::new(),
        "a/b\0c\n".to_string(),
        "x".repeat(1 << 20),
        "y".repeat(65 << 20)
    );
    c
}

fn run(root: &Path, config: CoordinatorConfig) -> Result<(), String> {
    let storage = Arc::new(LocalStorage::new(root.join("cp")).map_err(|e| format!("{e}"))?);
    let clock = ManualClock::new(1_000_000);
    let mut c = match Coordinator::new(config.clone(), storage.clone(), Arc::new(clock.clone())) {
        Ok(c) => c,
        Err(e) if is_option_error(&e) => return Ok(()),
        Err(e) => return Err(format!("Coordinator::new: not a typed refusal: {e:?}")),
    };
    if config.tasks != 1 {
        return Ok(()); // accepted; the checkpoint below drives one task
    }
    let ep = c.endpoint(0).map_err(|e| format!("endpoint: {e:?}"))?;
    let b = KeyedBackend::builder(root.join("op"))
        .checkpoint_storage(storage.clone())
        .job_owner(c.owner().clone())
        .memory_budget(budget())
        .open()
        .map_err(|e| format!("open: {e:?}"))?;
    let v = b
        .value_state::<u32, (), u32>("v")
        .map_err(|e| format!("{e:?}"))?;
    v.put(&1, &(), &2).map_err(|e| format!("{e:?}"))?;
    let id = match c.trigger().map_err(|e| format!("trigger: {e:?}"))? {
        Triggered::Started(id) => id,
        other => return Err(format!("trigger: {other:?}")),
    };
    let stats = b.checkpoint(id).map_err(|e| format!("checkpoint: {e:?}"))?;
    ep.ack(id, task_checkpoint(0, Some((&b, &stats)), vec![]));
    clock.advance(Duration::from_millis(5));
    let mut outcomes = c.poll().map_err(|e| format!("poll: {e:?}"))?;
    outcomes.extend(c.tick().map_err(|e| format!("tick: {e:?}"))?);
    if !outcomes.iter().any(|o| matches!(o, Outcome::Completed(_))) {
        return Err(format!("checkpoint did not complete: {outcomes:?}"));
    }
    let record = latest_job_checkpoint(storage.as_ref()).map_err(|e| format!("record: {e:?}"))?;
    match &record {
        Some(r)
            if r.max_parallelism != 0
                && rockstate::keygroup::validate_max_parallelism(r.max_parallelism).is_err() =>
        {
            return Err(format!(
                "committed a job record of max parallelism {}, which no job can have",
                r.max_parallelism
            ))
        }
        Some(_) => {}
        None => return Err("no job record".into()),
    }
    b.close().map_err(|e| format!("close: {e:?}"))?;
    drop(v);
    let r = KeyedBackend::builder(root.join("restored"))
        .checkpoint_storage(storage.clone())
        .memory_budget(budget())
        .restore(RestoreFrom::Latest)
        .map_err(|e| format!("restore: {e:?}"))?;
    let v = r
        .value_state::<u32, (), u32>("v")
        .map_err(|e| format!("{e:?}"))?;
    match v.get(&1, &()) {
        Ok(Some(2)) => Ok(()),
        other => Err(format!("restored read {other:?}")),
    }
}

#[test]
fn coordinator_edges_child() {
    let Some(config) = child_case_of(cases()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    finish(run(dir.path(), config));
}

#[test]
fn coordinator_config_at_its_edges_works_or_is_refused() {
    assert_every_case("coordinator_edges_child", &cases(), Duration::from_secs(60));
}
