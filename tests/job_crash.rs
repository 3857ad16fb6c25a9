//! Crash loop of a whole job: a child process (this test binary re-executed) runs a
//! coordinator with `retained: 2` and P ≥ 3 keyed tasks in one process, restores them from
//! the newest job record (at another parallelism every few cycles), then checkpoints in a loop
//! (random writes, compactions, concurrent uploads, completion with the owner's garbage pass,
//! aborts, and sweeps running concurrently with uploads), and is killed with SIGKILL at a
//! random moment. The child reports the phase it is in and every completion it saw; after
//! every kill the parent checks that
//! * `verify` finds nothing wrong,
//! * the newest job record is not older than the last completion the child reported,
//! * restoring that record (at yet another parallelism) gives exactly the model the child
//!   logged for it before triggering it,
//! * storage stays bounded (`docs/ownership.md` §3 rule 5): besides the retained
//!   checkpoints and the attempts newer than the last completion, at most the garbage of one
//!   interrupted pass is left, whatever the number of cycles,
//!
//! and prints the phases the kills hit and the storage per cycle.
//!
//! `ROCKSTATE_JOB_CRASH_TRIALS` / `_S3` override the number of cycles (50 local, 10 on the S3
//! test server).

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::crash::{self, read_model, storage_at, write_model};
use common::process::spawn_child;
use common::*;
use rand::Rng;
use rockstate::catalog::Catalog;
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered,
};
use rockstate::{CheckpointStorage, KeyGroupRange, KeyedBackend, RestoreFrom, SystemClock};

const CHILD_ENV: &str = "ROCKSTATE_JOB_CRASH_CHILD";
const S3_ENV: &str = "ROCKSTATE_JOB_CRASH_S3";
const MAX_PARALLELISM: u32 = 64;
const READY: &str = "JOB-CHILD-READY";
const PHASE: &str = "PHASE ";
const COMPLETED: &str = "COMPLETED ";

fn phase(p: &str) {
    println!("{PHASE}{p}");
    std::io::stdout().flush().unwrap();
}

/// The builder of task `i` of `p` for generation `gen`.
fn task_builder(
    work: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    label: &str,
    p: u32,
    i: u32,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(work.join(label).join(format!("task-{i}")))
        .options(small_options())
        .max_parallelism(MAX_PARALLELISM)
        .key_groups(KeyGroupRange::for_operator(MAX_PARALLELISM, p, i).unwrap())
        .checkpoint_storage(Arc::clone(storage))
}

/// The child: runs the job until killed.
fn child_loop(work: &Path, gen: u64, p: u32, s3: Option<&str>) -> ! {
    let storage = storage_at(work, s3);
    let mut r = rng(1000 + gen);
    let mut config = CoordinatorConfig::new("crash-job", p, MAX_PARALLELISM);
    config.sources = (0..p).collect();
    config.retained = 2;
    let mut coord = Coordinator::new(config, storage.clone(), Arc::new(SystemClock)).unwrap();
    let owner = coord.owner().clone();
    let endpoints: Vec<_> = (0..p).map(|t| coord.endpoint(t).unwrap()).collect();
    println!("{READY}");
    phase("restore");
    let restored = latest_job_checkpoint(storage.as_ref()).unwrap();
    let label = format!("gen-{gen}");
    let backends: Vec<KeyedBackend> = (0..p)
        .map(|i| {
            let b = task_builder(work, &storage, &label, p, i).job_owner(owner.clone());
            match &restored {
                Some(rec) => b
                    .restore(RestoreFrom::Checkpoint(rec.checkpoint_id))
                    .unwrap(),
                None => b.open().unwrap(),
            }
        })
        .collect();
    let mut model = match &restored {
        Some(rec) => read_model(work, rec.checkpoint_id),
        None => Model::new(),
    };
    let got: Model = backends.iter().flat_map(read_all).collect();
    assert_eq!(got, model, "child restore");
    loop {
        phase("process");
        for b in &backends {
            let n = r.random_range(20..400);
            random_writes(b, &mut model, &mut r, n);
        }
        if r.random_ratio(1, 6) {
            backends[r.random_range(0..backends.len())]
                .compact_state("v")
                .unwrap();
        }
        let Triggered::Started(id) = coord.trigger().unwrap() else {
            panic!("a trigger with nothing in flight must start");
        };
        write_model(work, id, &model);
        phase("snapshot");
        let pending: Vec<_> = backends.iter().map(|b| b.snapshot(id).unwrap()).collect();
        phase("upload");
        let sweep = r.random_ratio(1, 4).then(|| {
            let owner = owner.clone();
            // A minimum age shorter than the uploads would also sweep their temporaries (a
            // failed upload, not a wrong checkpoint); finished ids go whatever the age.
            std::thread::spawn(move || owner.sweep(Duration::from_secs(60)).map(|_| ()))
        });
        let uploads: Vec<_> = pending
            .into_iter()
            .map(|s| std::thread::spawn(move || s.upload()))
            .collect();
        let stats: Vec<_> = uploads
            .into_iter()
            .map(|u| u.join().unwrap().unwrap())
            .collect();
        if let Some(s) = sweep {
            phase("sweep");
            s.join().unwrap().unwrap();
        }
        let decline = r.random_ratio(1, 12);
        for (t, (b, st)) in backends.iter().zip(&stats).enumerate() {
            if decline && t == 0 {
                endpoints[t].decline(id, "test decline");
            } else {
                endpoints[t].ack(id, task_checkpoint(t as u32, Some((b, st)), Vec::new()));
            }
        }
        phase("commit");
        if let Outcome::Completed(rec) = common::crash::next_outcome(&mut coord) {
            println!("{COMPLETED}{}", rec.checkpoint_id);
            std::io::stdout().flush().unwrap();
        }
        phase("notify");
        common::crash::deliver_commands(&endpoints, &backends);
    }
}

#[test]
#[ignore = "child process of the job crash test"]
fn job_crash_child() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.rsplitn(3, '|');
        let p: u32 = parts.next().unwrap().parse().unwrap();
        let gen: u64 = parts.next().unwrap().parse().unwrap();
        let work = parts.next().unwrap();
        let s3 = std::env::var(S3_ENV).ok();
        child_loop(Path::new(work), gen, p, s3.as_deref());
    }
}

mod local {
    #[test]
    fn kill_a_job_at_random_moments() {
        super::crash_loop(None, "ROCKSTATE_JOB_CRASH_TRIALS", 50, 1500);
    }
}

mod s3 {
    #[test]
    fn kill_a_job_at_random_moments() {
        let server = super::common::s3::server();
        let spec = format!("{} {}", server.endpoint, server.bucket_url("job-crash"));
        super::crash_loop(Some(&spec), "ROCKSTATE_JOB_CRASH_TRIALS_S3", 10, 4000);
    }
}

fn crash_loop(s3: Option<&str>, trials_env: &str, trials: u64, max_delay_ms: u64) {
    let trials = crash::trials(trials_env, trials);
    let work_dir = tempfile::tempdir().unwrap();
    let work = work_dir.path();
    let mut r = rng(77);
    let mut p: u32 = 3;
    let mut acknowledged = 0u64;
    let mut phases: BTreeMap<String, u32> = BTreeMap::new();
    let mut restores = 0;
    let mut live_max = 0u64;
    for trial in 0..trials {
        if trial % 4 == 3 {
            p = r.random_range(3..=5);
        }
        let stderr_path = work.join(format!("child-{trial}.stderr"));
        let mut child = spawn_child(
            "job_crash_child",
            (CHILD_ENV, format!("{}|{trial}|{p}", work.display())),
            S3_ENV,
            s3,
            &stderr_path,
        );
        let stdout = child.stdout.take().unwrap();
        let last_phase = Arc::new(Mutex::new(String::from("start")));
        let completed = Arc::new(Mutex::new(0u64));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = {
            let (last_phase, completed) = (last_phase.clone(), completed.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                    if line.contains(READY) {
                        let _ = ready_tx.send(());
                    } else if let Some(ph) = line.strip_prefix(PHASE) {
                        *last_phase.lock().unwrap() = ph.to_string();
                    } else if let Some(id) = line.strip_prefix(COMPLETED) {
                        *completed.lock().unwrap() = id.parse().unwrap();
                    }
                }
            })
        };
        assert!(
            ready_rx.recv_timeout(Duration::from_secs(120)).is_ok(),
            "trial {trial}: child not ready: {}",
            fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(r.random_range(0..max_delay_ms)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        assert!(
            status.code().is_none(),
            "trial {trial}: child failed by itself ({status}): {}",
            fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        let phase = last_phase.lock().unwrap().clone();
        *phases.entry(phase.clone()).or_default() += 1;
        acknowledged = acknowledged.max(*completed.lock().unwrap());

        let storage = storage_at(work, s3);
        assert_verified(storage.as_ref());
        let f = Catalog::load(storage.as_ref()).unwrap().footprint(2);
        let newest = latest_job_checkpoint(storage.as_ref())
            .unwrap()
            .map(|r| r.checkpoint_id);
        println!(
            "cycle {trial:>3} p={p} killed in {phase:<8} newest {newest:?} storage {} B: \
             retained {} B, newer attempts {} B, garbage {} B (ids {:?}), pins {}",
            f.total_bytes, f.retained_bytes, f.newer_bytes, f.garbage_bytes, f.garbage_ids, f.pins
        );
        assert!(
            newest.unwrap_or(0) >= acknowledged,
            "trial {trial}: newest record {newest:?} is older than completed {acknowledged}"
        );
        // Bounded: what is neither retained nor newer is one interrupted pass's garbage, and
        // newer attempts are the killed run's (the coordinator cleans earlier runs' at open).
        live_max = live_max.max(f.retained_bytes);
        assert!(
            f.within_bound(live_max) && (live_max == 0 || f.newer_bytes <= 2 * live_max),
            "trial {trial}: storage grows: {f:?}"
        );
        let Some(newest) = newest else {
            continue;
        };
        // Restore the newest record at another parallelism, as a job that owns nothing.
        let q = r.random_range(1..=4);
        let label = format!("verify-{trial}");
        let got: Model = (0..q)
            .map(|i| {
                task_builder(work, &storage, &label, q, i)
                    .job_coordinated()
                    .restore(RestoreFrom::Latest)
                    .unwrap()
            })
            .flat_map(|b| read_all(&b))
            .collect();
        assert_eq!(
            got,
            read_model(work, newest),
            "trial {trial} checkpoint {newest}"
        );
        restores += 1;
        let _ = fs::remove_dir_all(work.join(&label));
        let _ = fs::remove_dir_all(work.join(format!("gen-{trial}")));
    }
    println!("kills by phase: {phases:?}");
    assert!(
        restores * 2 >= trials,
        "only {restores} of {trials} cycles had a completed checkpoint"
    );
}
