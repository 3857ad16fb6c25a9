//! What the crash tests (`checkpoint_crash`, `job_crash`) share: the model a child process
//! logs durably for each checkpoint before it can complete, and the storage every process of
//! a trial opens (local, or the S3 test server).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Starts this test binary again as a child running only the ignored test `test`, with
/// environment `env` (`s3_env` set to `s3` when given), stdout piped and stderr in `stderr`.
pub fn spawn_child(
    test: &str,
    env: (&str, String),
    s3_env: &str,
    s3: Option<&str>,
    stderr: &Path,
) -> std::process::Child {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    if let Some(spec) = s3 {
        command.env(s3_env, spec);
    }
    command
        .args([
            "--exact",
            test,
            "--nocapture",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

/// Runs the ignored test `test` of this binary as a child with `env` until it writes `file`,
/// then kills it (`kill -9`) and returns what `file` holds; its stderr goes to `stderr`.
pub fn kill_child_once_written(
    test: &str,
    env: (&str, String),
    file: &Path,
    stderr: &Path,
) -> String {
    let mut child = spawn_child(test, env, "ROCKSTATE_KILL_CHILD_UNUSED", None, stderr);
    wait_for(
        &mut child,
        stderr,
        &format!("wrote {}", file.display()),
        || file.exists(),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    fs::read_to_string(file).unwrap()
}

/// The child's side of [`kill_child_once_written`]: writes `contents` to `file` atomically
/// (through a temporary name), then waits to be killed, holding whatever is open (a backend
/// never closed).
pub fn publish_and_wait_to_be_killed(file: &Path, contents: &str) -> ! {
    let tmp = file.with_extension("tmp");
    fs::write(&tmp, contents).unwrap();
    fs::rename(&tmp, file).unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Waits until `done()` holds while `child` keeps running; panics with the child's `stderr`
/// (and `what` it never did) if it ends first or two minutes pass.
pub fn wait_for(
    child: &mut std::process::Child,
    stderr: &Path,
    what: &str,
    done: impl Fn() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "the child never {what}: {}",
            fs::read_to_string(stderr).unwrap_or_default()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended: {}",
            fs::read_to_string(stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
