//! Child processes of the crash tests: this test binary started again to run one ignored
//! test, waited for until it has done something, and killed (`kill -9`).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

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
