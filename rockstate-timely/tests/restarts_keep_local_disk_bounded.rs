//! Local disk across restarts of the timely job: every restart after a kill runs in a new
//! `<job dir>/run-<n>/` whose workers restore fresh RocksDB databases (and their staging
//! there. A long-running job that restarts every few minutes must not grow its local disk by
//! a full copy of its state per restart: the databases of a run that is gone are never used
//! again (the next run restores into its own directory), so they are removed, as the job
//! removes what earlier runs left in checkpoint storage; the local checkpoint copies live in
//! one staging root for the whole job, where the next run's restores use and retire them.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Bytes of the distinct inodes under `dir` (hard links counted once).
fn disk_bytes(dir: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if meta.is_dir() {
            total += disk_bytes(&e.path(), seen);
        } else if seen.insert((meta.dev(), meta.ino())) {
            total += meta.len();
        }
    }
    total
}

#[test]
fn databases_of_runs_that_are_gone_are_removed() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rockstate-timely"))
        .args([
            "freqcap",
            "--impressions=20000",
            "--users=500",
            "--ads=10",
            "--partitions=12",
            "--processes=1",
            "--threads=2",
            "--kills=4",
            "--epoch-records=1000",
            "--kill-delay-ms=150",
            "--kill-seed=5",
            "--no-reference",
        ])
        .arg(format!("--work-dir={}", work.path().display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("verdict: PASS"),
        "{stdout}\n{stderr}"
    );
    let job = work.path().join("job");
    let mut runs: Vec<u32> = std::fs::read_dir(&job)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("run-")?.parse().ok())
        .collect();
    runs.sort_unstable();
    let last = *runs.last().unwrap();
    let mut seen = HashSet::new();
    let mut report = Vec::new();
    let mut stale_bytes = 0;
    for run in runs.iter().filter(|&&r| r != last) {
        let dir = job.join(format!("run-{run}"));
        let dbs: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("worker-") || n == ".rockstate-staging")
            .collect();
        let bytes = disk_bytes(&dir, &mut seen);
        if !dbs.is_empty() {
            stale_bytes += bytes;
            report.push(format!("run-{run}: {dbs:?} {bytes} B"));
        }
    }
    let live = disk_bytes(&job.join(format!("run-{last}")), &mut HashSet::new());
    // The job's staging root holds local copies of the live run's backends and, until the
    // next restore retires them, of the run before: never one backend per restart.
    let staging = job.join(".rockstate-staging");
    let backends: Vec<String> = std::fs::read_dir(&staging)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_dir(e.path())
                .into_iter()
                .flatten()
                .flatten()
                .any(|c| c.file_name().to_string_lossy().starts_with("local-"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        backends.len() <= 4,
        "local copies of {} backends after {} restarts of 2 workers: {backends:?}",
        backends.len(),
        runs.len() - 1
    );
    assert!(
        report.is_empty(),
        "after {} restarts, the databases of {} runs that are gone are still on disk \
         ({stale_bytes} B, against {live} B of the live run):\n{}\n{stderr}",
        runs.len() - 1,
        report.len(),
        report.join("\n")
    );
}
