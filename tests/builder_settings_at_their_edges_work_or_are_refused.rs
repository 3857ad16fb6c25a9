//! `BackendBuilder` settings at their edges — max parallelism 0/1/2/128/129/32768/32769/
//! u32::MAX, key-group ranges of one group at either end, inverted, past the max parallelism,
//! heap and RocksDB, key-group file cuts — either work (write keys of the owned groups, read
//! them, refuse others as `KeyGroupOutOfRange`, checkpoint and restore as is and split in two,
//! savepoint round trip) or the open fails with a typed option error (`InvalidKeyGroups`,
//! `InvalidOption`). Never a panic, abort or hang. Each case runs in a child process.

mod edge_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use edge_common::*;
use rockstate::keygroup::key_group_of;
use rockstate::{
    BackendKind, DbOptions, Error, KeyGroupRange, KeyedBackend, LocalStorage, ManualClock,
    RestoreFrom,
};

#[derive(Clone, Debug)]
struct Case {
    max_p: u32,
    range: Option<KeyGroupRange>,
    kind: BackendKind,
    key_group_files: bool,
}

fn cases() -> Vec<(String, Case)> {
    let mut c = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        for max_p in [0u32, 1, 2, 128, 129, 256, 257, 32768, 32769, u32::MAX] {
            let mut ranges: Vec<Option<KeyGroupRange>> = vec![None];
            if max_p >= 1 {
                let last = (max_p.min(65536) - 1) as u16;
                ranges.push(Some(KeyGroupRange { start: 0, end: 0 }));
                ranges.push(Some(KeyGroupRange {
                    start: last,
                    end: last,
                }));
                ranges.push(Some(KeyGroupRange {
                    start: 0,
                    end: last.saturating_add(1),
                }));
            }
            ranges.push(Some(KeyGroupRange { start: 5, end: 2 }));
            ranges.push(Some(KeyGroupRange {
                start: 0,
                end: u16::MAX,
            }));
            for range in ranges {
                for kgf in [false, true] {
                    if kgf && kind == BackendKind::Heap {
                        continue;
                    }
                    c.push((
                        format!("{kind:?} max_parallelism {max_p} range {range:?} key_group_files {kgf}"),
                        Case { max_p, range, kind, key_group_files: kgf },
                    ));
                }
            }
        }
    }
    c
}

fn keys_in(range: KeyGroupRange, max_p: u32, n: usize) -> (Vec<u64>, Option<u64>) {
    let mut inside = Vec::new();
    let mut outside = None;
    for k in 0u64.. {
        let g = key_group_of(&postcard::to_stdvec(&k).unwrap(), max_p);
        if range.contains(g) {
            inside.push(k);
        } else if outside.is_none() {
            outside = Some(k);
        }
        if inside.len() >= n && (outside.is_some() || range.len() == max_p) || k > 50_000_000 {
            break;
        }
    }
    (inside, outside)
}

fn run(root: &Path, case: Case) -> Result<(), String> {
    let clock = Arc::new(ManualClock::new(1_000));
    let storage = Arc::new(LocalStorage::new(root.join("cp")).map_err(|e| format!("{e}"))?);
    let options = DbOptions {
        key_group_files: case.key_group_files,
        ..DbOptions::default()
    };
    let builder = |dir: &str, range: Option<KeyGroupRange>| {
        let b = match case.kind {
            BackendKind::Heap => KeyedBackend::heap_builder(),
            BackendKind::RocksDb => {
                KeyedBackend::builder(root.join(dir)).checkpoint_storage(storage.clone())
            }
        };
        let b = b
            .max_parallelism(case.max_p)
            .options(options.clone())
            .memory_budget(budget())
            .clock(clock.clone())
            .checkpoint_clock(clock.clone());
        match range {
            Some(r) => b.key_groups(r),
            None => b,
        }
    };
    let b = match builder("task", case.range).open() {
        Ok(b) => b,
        Err(e) if is_option_error(&e) => return Ok(()),
        Err(e) => return Err(format!("open: not an option error: {e:?}")),
    };
    let range = b.key_groups();
    if let Some(r) = case.range {
        if r != range {
            return Err(format!("opened with range {range:?}, asked {r:?}"));
        }
    }
    let (keys, outside) = keys_in(range, case.max_p, 50);
    let v = b
        .value_state::<u64, (), u64>("v")
        .map_err(|e| format!("{e:?}"))?;
    let l = b
        .list_state::<u64, (), u64>("l")
        .map_err(|e| format!("{e:?}"))?;
    for k in &keys {
        v.put(k, &(), &(k * 3))
            .map_err(|e| format!("put {k}: {e:?}"))?;
        l.add(k, &(), k).map_err(|e| format!("add {k}: {e:?}"))?;
    }
    if let Some(o) = outside {
        match v.put(&o, &(), &1) {
            Err(Error::KeyGroupOutOfRange { .. }) => {}
            other => return Err(format!("put of a key outside the range: {other:?}")),
        }
    }
    let check = |b: &KeyedBackend, when: &str, only: Option<KeyGroupRange>| -> Result<(), String> {
        let v = b
            .value_state::<u64, (), u64>("v")
            .map_err(|e| format!("{when}: {e:?}"))?;
        let l = b
            .list_state::<u64, (), u64>("l")
            .map_err(|e| format!("{when}: {e:?}"))?;
        for k in &keys {
            let g = key_group_of(&postcard::to_stdvec(k).unwrap(), case.max_p);
            if only.is_some_and(|r| !r.contains(g)) {
                continue;
            }
            let got = v
                .get(k, &())
                .map_err(|e| format!("{when}: get {k}: {e:?}"))?;
            if got != Some(k * 3) {
                return Err(format!("{when}: value of {k} (group {g}) is {got:?}"));
            }
            let got = l
                .get(k, &())
                .map_err(|e| format!("{when}: list {k}: {e:?}"))?;
            if got != vec![*k] {
                return Err(format!("{when}: list of {k} (group {g}) is {got:?}"));
            }
        }
        Ok(())
    };
    check(&b, "written", None)?;
    let sp = root.join("sp");
    b.write_savepoint(&sp)
        .map_err(|e| format!("write_savepoint: {e:?}"))?;
    if case.kind == BackendKind::RocksDb {
        b.flush().map_err(|e| format!("flush: {e:?}"))?;
        b.compact_state("v")
            .map_err(|e| format!("compact: {e:?}"))?;
        check(&b, "compacted", None)?;
        b.checkpoint(1).map_err(|e| format!("checkpoint: {e:?}"))?;
        b.notify_checkpoint_complete(1)
            .map_err(|e| format!("notify: {e:?}"))?;
        b.close().map_err(|e| format!("close: {e:?}"))?;
        drop((v, l));
        let r = builder("same", Some(range))
            .restore(RestoreFrom::Latest)
            .map_err(|e| format!("restore: {e:?}"))?;
        check(&r, "restored", None)?;
        r.close().map_err(|e| format!("close: {e:?}"))?;
        if range.len() >= 2 {
            let mid = range.start + ((range.len() / 2) as u16) - 1;
            for (i, half) in [
                KeyGroupRange {
                    start: range.start,
                    end: mid,
                },
                KeyGroupRange {
                    start: mid + 1,
                    end: range.end,
                },
            ]
            .into_iter()
            .enumerate()
            {
                let r = builder(&format!("half-{i}"), Some(half))
                    .restore(RestoreFrom::Latest)
                    .map_err(|e| format!("restore half {half:?}: {e:?}"))?;
                check(&r, &format!("restored half {half:?}"), Some(half))?;
                r.close().map_err(|e| format!("close: {e:?}"))?;
            }
        }
    }
    let s = builder("from-sp", Some(range))
        .open()
        .map_err(|e| format!("open: {e:?}"))?;
    s.restore_savepoint(&sp)
        .map_err(|e| format!("restore_savepoint: {e:?}"))?;
    check(&s, "from savepoint", None)?;
    Ok(())
}

#[test]
fn builder_edges_child() {
    let Some(case) = child_case_of(cases()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    finish(run(dir.path(), case));
}

#[test]
fn builder_settings_at_their_edges_work_or_are_refused() {
    assert_every_case("builder_edges_child", &cases(), Duration::from_secs(120));
}
