//! The frequency-capping job as real OS processes: kill -9 at random moments, full restarts,
//! a rescale chain, and a run on the S3 test server; exactly-once asserted each time by the
//! launcher's verdict (its exit status and `verdict: PASS`).

#[path = "../../tests/checkpoint_common/s3.rs"]
#[allow(dead_code)]
mod s3;

use std::process::Command;

/// A small job (each test sets its epoch length): seconds per run in the debug profile.
const JOB: &[&str] = &[
    "--impressions=20000",
    "--users=500",
    "--ads=10",
    "--partitions=12",
];

/// Runs the launcher with `extra` arguments; asserts it passed (exactly-once output, and
/// storage within the bound after every kill) and printed every `expect`; returns what it
/// printed.
fn launcher(extra: &[&str], expect: &[&str], env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rockstate-timely"));
    cmd.arg("freqcap").args(JOB).args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running rockstate-timely freqcap");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stdout.contains("verdict: PASS")
            && stdout.contains("storage bounded")
            && expect.iter().all(|e| stdout.contains(e)),
        "status {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    eprintln!("{stderr}{stdout}");
    stdout.into_owned()
}

/// 2 processes x 2 workers, fifty epochs, ten runs each killed with SIGKILL at a random moment
/// (during startup and restore, processing, uploads and commits alike; the launcher prints
/// which phase each kill hit), then a run to the end.
#[test]
fn ten_random_kills_two_processes_of_two_workers() {
    launcher(
        &[
            "--processes=2",
            "--threads=2",
            "--kills=10",
            "--epoch-records=400",
            "--kill-delay-ms=150",
            "--no-reference",
        ],
        // The phase each kill hit (restore, processing, upload, completion, idle) is printed.
        &["kills 10,", "kill phases: "],
        &[],
    );
}

/// A kill delay far longer than the job: every kill still falls before its run ends (at the
/// latest once one fewer checkpoint than the run's epochs completed), so the job is killed
/// as often as asked.
#[test]
fn every_kill_falls_before_its_run_ends_however_long_the_delay() {
    launcher(
        &[
            "--processes=1",
            "--threads=2",
            "--kills=2",
            "--epoch-records=1000",
            "--kill-delay-ms=600000",
            "--no-reference",
        ],
        &["kills 2,"],
        &[],
    );
}

/// A process that fails by itself (worker 0's operator fails at epoch 4 and its process
/// ends) makes the launcher restart the job from its last completed checkpoint, as a job
/// manager does, and the output is still exactly once; then a kill on top.
#[test]
fn a_failed_process_restarts_the_job() {
    launcher(
        &[
            "--processes=2",
            "--threads=1",
            "--kills=1",
            "--fail-epoch=4",
            "--epoch-records=1000",
            "--kill-delay-ms=150",
            "--no-reference",
        ],
        &["failure restarts 1,", "kills 1,"],
        &[],
    );
}

/// Restarts at 4 -> 3 -> 5 workers: key-group ranges recomputed, offsets and pending sink
/// transactions redistributed; also compared with a crash-free reference run.
#[test]
fn rescale_chain_four_three_five_workers() {
    launcher(
        &[
            "--processes=2",
            "--threads=2",
            "--kills=2",
            "--rescale=3,5",
            "--epoch-records=1000",
            "--kill-delay-ms=150",
        ],
        &["workers 4 -> 3 -> 5,"],
        &[],
    );
}

/// Changelog mode: checkpoints upload the log since the last one onto a materialization
/// (checkpoints overlap: the next is triggered before the last completes), two kills and a
/// rescale to 3 workers; the runs after the kills restore by replaying log segments (the
/// seed puts each kill after several completions, past the first two checkpoints, which
/// both materialize).
#[test]
fn changelog_mode_kills_and_rescale() {
    let out = launcher(
        &[
            "--processes=2",
            "--threads=2",
            "--kills=2",
            "--rescale=3",
            "--epoch-records=400",
            "--kill-delay-ms=150",
            "--kill-seed=3",
            "--no-reference",
            r#"--changelog={"materialize_log_percent":100000,"materialize_min_log_bytes":0}"#,
        ],
        &["kills 2,", "workers 4 -> 3 -> 3,", "changelog: "],
        &[],
    );
    assert!(
        !out.contains("changelog: 0 of"),
        "no restore replayed a log:\n{out}"
    );
}

/// Checkpoints on the S3 test server (moto), one kill.
#[test]
fn kill_and_restore_on_s3() {
    let server = s3::server();
    let url = server.bucket_url("checkpoints");
    let env = [
        ("AWS_ENDPOINT", server.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
    ];
    launcher(
        &[
            "--processes=2",
            "--threads=2",
            "--kills=1",
            "--epoch-records=2000",
            "--no-reference",
            &format!("--storage={url}"),
        ],
        &["kills 1,"],
        &env,
    );
}
