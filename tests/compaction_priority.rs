//! `rockstate::lower_compaction_priority`: RocksDB's compaction threads run at nice 19 once
//! they have taken a job, flush threads keep normal priority. The call is process-wide (one
//! compaction pool per process), which is why this scenario has a test binary of its own. Read
//! from `/proc`, so Linux only.
#![cfg(target_os = "linux")]

use rockstate::KeyedBackend;

/// The nice value in a `/proc/.../stat` line (field 19; fields are counted after the
/// parenthesised thread name, which may itself hold spaces).
fn nice_of(stat: &str) -> i64 {
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(16).unwrap().parse().unwrap()
}

/// `(thread name, nice)` of every thread of this process.
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = entry.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended while we looked
        };
        out.push((comm.trim().to_string(), nice_of(&stat)));
    }
    out
}

#[test]
fn compaction_threads_run_at_the_lowest_priority_and_flush_threads_do_not() {
    rockstate::lower_compaction_priority().unwrap();
    // Flush threads keep the priority the test runs at (`nice cargo test` raises every
    // thread's); compaction threads go to nice 19, an absolute value.
    let ours = nice_of(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    assert!(ours < 19, "run the test below nice 19");
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    let s = b.value_state::<u64, (), Vec<u8>>("v").unwrap();
    for round in 0..3u64 {
        for k in 0..500u64 {
            s.put(&(k * 3 + round), &(), &vec![1u8; 64]).unwrap();
        }
        b.flush().unwrap(); // a flush job on the HIGH pool
    }
    b.compact_state("v").unwrap(); // a compaction job on the LOW pool

    let all = threads();
    let low: Vec<i64> = all
        .iter()
        .filter(|(name, _)| name == "rocksdb:low")
        .map(|(_, nice)| *nice)
        .collect();
    let high: Vec<i64> = all
        .iter()
        .filter(|(name, _)| name == "rocksdb:high")
        .map(|(_, nice)| *nice)
        .collect();
    // RocksDB names its pool threads on glibc only; this project builds on Debian.
    assert!(!low.is_empty() && !high.is_empty(), "{all:?}");
    // The thread that ran the compaction lowered itself before the job; any other pool thread
    // does so before its first job.
    assert!(low.contains(&19), "{all:?}");
    assert!(high.iter().all(|&nice| nice == ours), "{all:?}");
    // The calling thread keeps its priority.
    let after = nice_of(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    assert_eq!(after, ours);
}
