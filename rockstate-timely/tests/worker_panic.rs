//! A panic on one worker thread ends its process, as an operator's error does
//! (`operator::fatal`): the process's other workers would otherwise wait forever for the
//! panicked worker's progress, and the job's other processes for its connections, instead of
//! failing so that the job restarts from its last completed checkpoint.

use std::process::Command;

use rockstate::operator_state::OperatorState;
use rockstate::KeyedBackend;
use rockstate_timely::operator::{checkpointed, worker_range, EpochLogic, Settings, FATAL_EXIT};
use timely::dataflow::operators::vec::Input;
use timely::dataflow::InputHandle;

/// Set in the child process: the directory its job runs in, and where the panic happens.
const CHILD: &str = "ROCKSTATE_TIMELY_PANIC_CHILD";

/// Panics on worker 1 in `apply` of epoch 2, or in `completed` of epoch 1.
struct Boom {
    worker: usize,
    in_completed: bool,
}

impl EpochLogic<u64> for Boom {
    fn apply(
        &mut self,
        _b: &KeyedBackend,
        epoch: u64,
        _r: Vec<u64>,
    ) -> rockstate_timely::Result<()> {
        if self.worker == 1 && epoch == 2 && !self.in_completed {
            panic!("a bug in the job's logic");
        }
        Ok(())
    }
    fn snapshot(&mut self, _epoch: u64) -> rockstate_timely::Result<OperatorState> {
        Ok(OperatorState::new())
    }
    fn completed(&mut self, epoch: u64) -> rockstate_timely::Result<()> {
        if self.worker == 1 && epoch == 1 && self.in_completed {
            panic!("a bug in the job's sink");
        }
        Ok(())
    }
}

/// Runs the child with `where_` and returns its exit code and output.
fn run_child(where_: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "panicking_job_child", "--ignored", "--nocapture"])
        .env(CHILD, format!("{}|{where_}", dir.path().display()))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn a_panic_in_apply_ends_the_process() {
    let (code, out) = run_child("apply");
    assert_eq!(code, Some(FATAL_EXIT), "{out}");
    assert!(out.contains("a bug in the job's logic"), "{out}");
}

#[test]
fn a_panic_in_completed_ends_the_process() {
    let (code, out) = run_child("completed");
    assert_eq!(code, Some(FATAL_EXIT), "{out}");
    assert!(out.contains("a bug in the job's sink"), "{out}");
}

#[test]
#[ignore = "child process of the worker panic tests"]
fn panicking_job_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (dir, where_) = spec.rsplit_once('|').unwrap();
    let root = std::path::PathBuf::from(dir);
    let in_completed = where_ == "completed";
    let ended = timely::execute(timely::Config::process(2), move |worker| {
        let (i, peers) = (worker.index(), worker.peers());
        let backend = KeyedBackend::builder(root.join(format!("w{i}")))
            .max_parallelism(128)
            .key_groups(worker_range(128, peers, i).unwrap())
            .open()
            .unwrap();
        let settings = Settings {
            backend,
            first_epoch: 1,
            last_epoch: 5,
            checkpoints: false,
            owner: None,
            job_name: "panic".into(),
            pipelined: 1,
            on_commit: None,
            activity: None,
        };
        let mut input = InputHandle::new();
        worker.dataflow::<u64, _, _>(|scope| {
            let records = scope.input_from(&mut input);
            checkpointed(
                records,
                |r: &u64| (*r % 128) as u16,
                settings,
                Boom {
                    worker: i,
                    in_completed,
                },
            );
        });
        for e in 1..=5u64 {
            input.advance_to(e);
            input.send(e);
            worker.step();
        }
    })
    .map(|guards| guards.join());
    // Only reached if the panic did not end the process.
    println!(
        "the job ended without the process: {:?}",
        ended.map(|r| r.len())
    );
}
