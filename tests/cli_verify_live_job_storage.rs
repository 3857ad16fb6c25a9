//! `rockstate verify` (and `gc`'s dry run) on the storage of a job that is running: the job's
//! checkpoint owner deletes subsumed checkpoints (records first, then manifests, then their
//! files) while the command reads. A record, manifest or file that was listed and is gone by
//! the time it is read belongs to a checkpoint collected meanwhile, not to a damaged one:
//! neither command reports damage on the healthy storage (verify passes once the job stops,
//! too).

mod cli_fixture;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_fixture::{code, rockstate, stderr, stdout};

#[test]
fn verify_and_gc_of_a_running_jobs_storage_report_no_false_damage() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_rockstate"))
        .args([
            "demo",
            "--impressions",
            "60000",
            "--users",
            "500",
            "--ads",
            "5",
            "--checkpoint-every",
            "500",
            "--crash-at",
            "59000",
            "--storage",
            storage.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let job = loop {
        if let Some(e) = std::fs::read_dir(storage.join("jobs"))
            .ok()
            .and_then(|mut d| d.next())
        {
            break e.unwrap().path();
        }
        assert!(
            Instant::now() < deadline,
            "the demo never created its namespace"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let job = job.to_str().unwrap().to_string();
    let mut false_alarms = Vec::new();
    let mut runs = 0;
    while demo.try_wait().unwrap().is_none() && Instant::now() < deadline {
        for args in [vec!["verify", &job], vec!["gc", &job]] {
            let o = rockstate(&args);
            runs += 1;
            if code(&o) != 0 {
                false_alarms.push(format!(
                    "{} -> exit {}: {}{}",
                    args[0],
                    code(&o),
                    stdout(&o).lines().next().unwrap_or_default(),
                    stderr(&o)
                ));
            }
        }
    }
    let _ = demo.kill();
    let _ = demo.wait();
    let o = rockstate(&["verify", &job]);
    assert_eq!(code(&o), 0, "the storage is healthy: {}", stdout(&o));
    assert!(
        false_alarms.is_empty(),
        "{} of {runs} commands on the live job's healthy storage reported damage:\n{}",
        false_alarms.len(),
        false_alarms.join("\n")
    );
}
