//! Child-process harness for option-edge tests: every case runs in a fresh process (the test
//! binary re-invoked with `EDGE_CASE=<index>`), so a panic, an abort inside RocksDB's C++ or a
//! hang is reported as that case's outcome instead of killing the whole test binary.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rockstate::{
    CheckpointOptions, CheckpointStorage, DbOptions, Error, KeyedBackend, LocalStorage,
    ManualClock, MemoryBudget, MemoryBudgetConfig, RestoreFrom,
};

pub const ENV: &str = "EDGE_CASE";

/// In the child: the case index to run, if this process is a child.
pub fn child_case() -> Option<usize> {
    std::env::var(ENV).ok().map(|s| s.parse().unwrap())
}

/// Is `e` a typed refusal of a setting?
pub fn is_option_error(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidOption { .. } | Error::InvalidKeyGroups(_) | Error::Coordinator(_)
    )
}

/// In the child: report the outcome on stdout and exit.
pub fn finish(outcome: Result<(), String>) {
    match outcome {
        Ok(()) => println!("EDGE-OUTCOME ok"),
        Err(m) => println!("EDGE-OUTCOME bad {m}"),
    }
}

/// In the parent: runs every case of `names` in a child running test `child_test`; returns
/// the bad outcomes, one line per case.
pub fn run_cases(child_test: &str, names: &[String], timeout: Duration) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut bad = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([child_test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ENV, i.to_string())
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = t_out.join().unwrap();
        let stderr = t_err.join().unwrap();
        let tail = |s: &str| {
            let lines: Vec<&str> = s
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("note:"))
                .collect();
            lines[lines.len().saturating_sub(4)..].join(" | ")
        };
        let outcome = stdout
            .lines()
            .find_map(|l| {
                l.find("EDGE-OUTCOME ")
                    .map(|i| &l[i + "EDGE-OUTCOME ".len()..])
            })
            .map(str::to_string);
        match (status, outcome) {
            (None, _) => bad.push(format!("{name}: HANG (killed after {timeout:?})")),
            (Some(s), Some(o)) if s.success() && o == "ok" => {}
            (Some(_), Some(o)) => bad.push(format!("{name}: {o}")),
            (Some(s), None) => {
                use std::os::unix::process::ExitStatusExt;
                let how = match s.signal() {
                    Some(sig) => format!("ABORT (signal {sig})"),
                    None if stderr.contains("panicked") => "PANIC".to_string(),
                    None => format!("exit {:?}", s.code()),
                };
                bad.push(format!("{name}: {how}: {}", tail(&stderr)));
            }
        }
    }
    bad
}

/// A small budget of its own, so cases do not share the process default.
pub fn budget() -> MemoryBudget {
    MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 64 << 20,
        ..MemoryBudgetConfig::default()
    })
    .unwrap()
}

/// Opens a RocksDB backend in `root/task` with `options`, `budget` and `cp`; writes, reads,
/// flushes, compacts, checkpoints, savepoints, closes, restores the checkpoint and the
/// savepoint, and checks what it reads back. `Ok(())` when it all works or the open is
/// refused with a typed option error; `Err` with what went wrong otherwise.
pub fn exercise(
    root: &Path,
    options: DbOptions,
    budget: MemoryBudget,
    cp: CheckpointOptions,
) -> Result<(), String> {
    let storage = Arc::new(LocalStorage::new(root.join("cp")).map_err(|e| format!("{e}"))?);
    exercise_on(root, storage, options, budget, cp)
}

/// [`exercise`] on checkpoint storage `storage`.
pub fn exercise_on(
    root: &Path,
    storage: Arc<dyn CheckpointStorage>,
    options: DbOptions,
    budget: MemoryBudget,
    cp: CheckpointOptions,
) -> Result<(), String> {
    let clock = Arc::new(ManualClock::new(1_000));
    let builder = |dir: &str| {
        KeyedBackend::builder(root.join(dir))
            .options(options.clone())
            .memory_budget(budget.clone())
            .clock(clock.clone())
            .checkpoint_clock(clock.clone())
            .checkpoint_storage(storage.clone())
            .checkpoint_options(cp.clone())
    };
    let b = match builder("task").open() {
        Ok(b) => b,
        Err(e) if is_option_error(&e) => return Ok(()),
        Err(e) => return Err(format!("open failed, not as an option error: {e:?}")),
    };
    let step = |what: &str, r: rockstate::Result<()>| r.map_err(|e| format!("{what}: {e:?}"));
    let v = b
        .value_state::<u32, (), Vec<u8>>("v")
        .map_err(|e| format!("value_state: {e:?}"))?;
    let l = b
        .list_state::<u32, (), u32>("l")
        .map_err(|e| format!("list_state: {e:?}"))?;
    let m = b
        .map_state::<u32, (), u32, u32>("m")
        .map_err(|e| format!("map_state: {e:?}"))?;
    const N: u32 = 300;
    match v.put(&u32::MAX, &(), &vec![1u8; 100]) {
        // A small `max_value_bytes` refuses the values this exercise writes: typed, fine.
        Err(Error::ValueTooLarge { .. }) => return Ok(()),
        r => step("first put", r)?,
    }
    for k in 0..N {
        step("put", v.put(&k, &(), &vec![k as u8; 100]))?;
        step("add", l.add(&k, &(), &k))?;
        step("map put", m.put(&k, &(), &k, &(k + 1)))?;
    }
    let check = |b: &KeyedBackend, when: &str| -> Result<(), String> {
        let v = b
            .value_state::<u32, (), Vec<u8>>("v")
            .map_err(|e| format!("{when}: value_state: {e:?}"))?;
        let l = b
            .list_state::<u32, (), u32>("l")
            .map_err(|e| format!("{when}: list_state: {e:?}"))?;
        let m = b
            .map_state::<u32, (), u32, u32>("m")
            .map_err(|e| format!("{when}: map_state: {e:?}"))?;
        for k in 0..N {
            let got = v.get(&k, &()).map_err(|e| format!("{when}: get: {e:?}"))?;
            if got != Some(vec![k as u8; 100]) {
                return Err(format!("{when}: value of {k} is {got:?}"));
            }
            let got = l
                .get(&k, &())
                .map_err(|e| format!("{when}: list get: {e:?}"))?;
            if got != vec![k] {
                return Err(format!("{when}: list of {k} is {got:?}"));
            }
            let got = m
                .get(&k, &(), &k)
                .map_err(|e| format!("{when}: map get: {e:?}"))?;
            if got != Some(k + 1) {
                return Err(format!("{when}: map of {k} is {got:?}"));
            }
        }
        Ok(())
    };
    check(&b, "after writes")?;
    step("flush", b.flush())?;
    step("compact", b.compact_state("v"))?;
    check(&b, "after flush")?;
    let stats = b.checkpoint(1).map_err(|e| format!("checkpoint: {e:?}"))?;
    step("notify", b.notify_checkpoint_complete(stats.checkpoint_id))?;
    // A second, incremental checkpoint after more writes.
    step("put 2", v.put(&0, &(), &vec![0u8; 100]))?;
    let stats = b
        .checkpoint(2)
        .map_err(|e| format!("checkpoint 2: {e:?}"))?;
    step(
        "notify 2",
        b.notify_checkpoint_complete(stats.checkpoint_id),
    )?;
    let sp = root.join("savepoint");
    b.write_savepoint(&sp)
        .map_err(|e| format!("write_savepoint: {e:?}"))?;
    step("close", b.close())?;
    drop((v, l, m));
    let r = builder("restored")
        .restore(RestoreFrom::Latest)
        .map_err(|e| format!("restore: {e:?}"))?;
    check(&r, "after restore")?;
    step("close restored", r.close())?;
    let s = builder("from-savepoint")
        .open()
        .map_err(|e| format!("open for savepoint: {e:?}"))?;
    s.restore_savepoint(&sp)
        .map_err(|e| format!("restore_savepoint: {e:?}"))?;
    check(&s, "after savepoint restore")?;
    step("close savepoint", s.close())?;
    Ok(())
}

/// In a child process, the case of `cases` the parent named; `None` in the parent.
pub fn child_case_of<C>(mut cases: Vec<(String, C)>) -> Option<C> {
    child_case().map(|i| cases.swap_remove(i).1)
}

/// In the parent process, runs every case of `cases` in a child process running test
/// `child_test`, and fails naming every case that went wrong; in a child, does nothing.
pub fn assert_every_case<C>(child_test: &str, cases: &[(String, C)], timeout: Duration) {
    if child_case().is_some() {
        return;
    }
    let names: Vec<String> = cases.iter().map(|(n, _)| n.clone()).collect();
    let bad = run_cases(child_test, &names, timeout);
    assert!(
        bad.is_empty(),
        "{} of {} cases went wrong:\n{}",
        bad.len(),
        names.len(),
        bad.join("\n")
    );
}
