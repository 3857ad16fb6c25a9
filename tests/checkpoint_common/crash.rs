//! What the crash tests (`checkpoint_crash`, `job_crash`) share: the model a child process
//! logs durably for each checkpoint before it can complete, and the storage every process of
//! a trial opens (local, or the S3 test server). The child processes themselves are
//! [`super::process`]'s.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rockstate::{CheckpointStorage, LocalStorage, ObjectStorage};

use super::Model;

fn model_path(work: &Path, id: u64) -> PathBuf {
    work.join("models").join(format!("{id}"))
}

/// Writes the model of checkpoint `id` durably (temp file, fsync, rename, fsync dir) before
/// the checkpoint can commit.
pub fn write_model(work: &Path, id: u64, model: &Model) {
    let dir = work.join("models");
    fs::create_dir_all(&dir).unwrap();
    let tmp = dir.join(format!("{id}.tmp"));
    let mut f = fs::File::create(&tmp).unwrap();
    for (k, v) in model {
        writeln!(f, "{k} {v}").unwrap();
    }
    f.sync_all().unwrap();
    fs::rename(&tmp, model_path(work, id)).unwrap();
    fs::File::open(&dir).unwrap().sync_all().unwrap();
}

/// The model logged for checkpoint `id`.
pub fn read_model(work: &Path, id: u64) -> Model {
    let text = fs::read_to_string(model_path(work, id))
        .unwrap_or_else(|e| panic!("no model logged for checkpoint {id}: {e}"));
    text.lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

/// The trial's storage: `work/storage`, or the S3 storage `s3` names (`<endpoint> <url>`).
pub fn storage_at(work: &Path, s3: Option<&str>) -> Arc<dyn CheckpointStorage> {
    match s3 {
        None => Arc::new(LocalStorage::new(work.join("storage")).unwrap()),
        Some(spec) => {
            let (endpoint, url) = spec.split_once(' ').unwrap();
            let options = super::s3::options_for(endpoint);
            Arc::new(ObjectStorage::open(url, &options).unwrap())
        }
    }
}

/// The number of trials: env var `name` if set to a number, else `default`.
pub fn trials(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The last of the coordinator's next outcomes (waited for in 50 ms slices): with one
/// checkpoint in flight, its own.
pub fn next_outcome(
    coord: &mut rockstate::coordinator::Coordinator,
) -> rockstate::coordinator::Outcome {
    loop {
        if let Some(o) = coord
            .wait(std::time::Duration::from_millis(50))
            .unwrap()
            .pop()
        {
            return o;
        }
    }
}

/// Hands each task's waiting commands to its backend: completions and aborts.
pub fn deliver_commands(
    endpoints: &[rockstate::coordinator::TaskEndpoint],
    backends: &[rockstate::KeyedBackend],
) {
    use rockstate::coordinator::TaskCommand;
    for (e, b) in endpoints.iter().zip(backends) {
        while let Some(cmd) = e.try_recv() {
            match cmd {
                TaskCommand::Complete { checkpoint_id } => {
                    b.notify_checkpoint_complete(checkpoint_id).unwrap()
                }
                TaskCommand::Abort { checkpoint_id } => {
                    b.notify_checkpoint_aborted(checkpoint_id).unwrap()
                }
                TaskCommand::Trigger { .. } => {}
            }
        }
    }
}
