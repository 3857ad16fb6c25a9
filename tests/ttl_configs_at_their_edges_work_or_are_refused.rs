//! TTL configurations at their edges — TTL of 0, 1 ns, 1 ms, 1 day, u64::MAX ms and
//! `Duration::MAX`, every update type, visibility and time domain, every cleanup switch, a
//! filter refresh of 0/1/u64::MAX entries, periodic compaction of 0, 1 ns, 1 s and
//! `Duration::MAX` — either work as documented (a value written at T is read at T; at
//! T + ttl it is expired unless the TTL is beyond u64 millis or updates are `Disabled`, and
//! returned only under `ReturnExpiredIfNotCleanedUp`; flush, compaction, checkpoint, restore
//! and savepoint work) or the state's registration fails with a typed option error. Never a
//! panic, abort or hang. Each case runs in a child process.

mod edge_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use edge_common::*;
use rockstate::ttl::{Cleanup, TimeDomain, UpdateType, Visibility};
use rockstate::{
    CheckpointOptions, KeyedBackend, LocalStorage, ManualClock, RestoreFrom, StateDescriptor,
    TtlConfig,
};

fn cases() -> Vec<(String, TtlConfig)> {
    let mut c = Vec::new();
    let ttls = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_millis(1),
        Duration::from_secs(86_400),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ];
    for ttl in ttls {
        for u in [
            UpdateType::Disabled,
            UpdateType::OnCreateAndWrite,
            UpdateType::OnReadAndWrite,
        ] {
            for v in [
                Visibility::NeverReturnExpired,
                Visibility::ReturnExpiredIfNotCleanedUp,
            ] {
                for t in [TimeDomain::ProcessingTime, TimeDomain::EventTime] {
                    let config = TtlConfig::new(ttl)
                        .update_type(u)
                        .visibility(v)
                        .time_domain(t);
                    c.push((format!("ttl {ttl:?} {u:?} {v:?} {t:?}"), config));
                }
            }
        }
    }
    let cleanups = [
        (
            "compaction_filter false",
            Cleanup {
                compaction_filter: false,
                ..Cleanup::default()
            },
        ),
        (
            "full_snapshot false",
            Cleanup {
                full_snapshot: false,
                ..Cleanup::default()
            },
        ),
        (
            "refresh_every 0",
            Cleanup {
                refresh_every: 0,
                ..Cleanup::default()
            },
        ),
        (
            "refresh_every 1",
            Cleanup {
                refresh_every: 1,
                ..Cleanup::default()
            },
        ),
        (
            "refresh_every MAX",
            Cleanup {
                refresh_every: u64::MAX,
                ..Cleanup::default()
            },
        ),
        (
            "periodic 0",
            Cleanup {
                periodic_compaction: Duration::ZERO,
                ..Cleanup::default()
            },
        ),
        (
            "periodic 1ns",
            Cleanup {
                periodic_compaction: Duration::from_nanos(1),
                ..Cleanup::default()
            },
        ),
        (
            "periodic 1s",
            Cleanup {
                periodic_compaction: Duration::from_secs(1),
                ..Cleanup::default()
            },
        ),
        (
            "periodic MAX",
            Cleanup {
                periodic_compaction: Duration::MAX,
                ..Cleanup::default()
            },
        ),
    ];
    for (name, cleanup) in cleanups {
        for ttl in [Duration::from_millis(1), Duration::MAX] {
            c.push((
                format!("ttl {ttl:?} cleanup {name}"),
                TtlConfig::new(ttl).cleanup(cleanup.clone()),
            ));
        }
    }
    c
}

fn run(root: &Path, config: TtlConfig) -> Result<(), String> {
    const T0: u64 = 1_000_000;
    let clock = Arc::new(ManualClock::new(T0));
    let storage = Arc::new(LocalStorage::new(root.join("cp")).map_err(|e| format!("{e}"))?);
    let builder = |dir: &str| {
        KeyedBackend::builder(root.join(dir))
            .memory_budget(budget())
            .clock(clock.clone())
            .checkpoint_clock(Arc::new(ManualClock::new(T0)))
            .checkpoint_storage(storage.clone())
            .checkpoint_options(CheckpointOptions::default())
    };
    let b = builder("task").open().map_err(|e| format!("open: {e:?}"))?;
    b.advance_watermark(T0);
    let desc = || StateDescriptor::new("v").with_ttl(config.clone());
    let v = match b.value_state::<u32, (), u32>(desc()) {
        Ok(v) => v,
        Err(e) if is_option_error(&e) => return Ok(()),
        Err(e) => return Err(format!("value_state: {e:?}")),
    };
    let l = b
        .list_state::<u32, (), u32>(StateDescriptor::new("l").with_ttl(config.clone()))
        .map_err(|e| format!("list_state: {e:?}"))?;
    for k in 0..100 {
        v.put(&k, &(), &k).map_err(|e| format!("put: {e:?}"))?;
        l.add(&k, &(), &k).map_err(|e| format!("add: {e:?}"))?;
    }
    for k in 0..100 {
        let got = v.get(&k, &()).map_err(|e| format!("get: {e:?}"))?;
        if got != Some(k) {
            return Err(format!("read at the write time: {got:?}"));
        }
    }
    b.flush().map_err(|e| format!("flush: {e:?}"))?;
    b.checkpoint(1).map_err(|e| format!("checkpoint: {e:?}"))?;
    b.notify_checkpoint_complete(1)
        .map_err(|e| format!("notify: {e:?}"))?;
    b.write_savepoint(&root.join("sp"))
        .map_err(|e| format!("savepoint: {e:?}"))?;
    // Expiry: at T0 + ttl (saturating) the entry has lived its TTL.
    let ttl_ms = config.ttl_ms();
    let expires = config.update_type != UpdateType::Disabled && ttl_ms != u64::MAX;
    let end = T0.saturating_add(ttl_ms);
    clock.set(end);
    b.advance_watermark(end);
    let got = v.get(&1, &()).map_err(|e| format!("get at end: {e:?}"))?;
    let want = if !expires || config.visibility == Visibility::ReturnExpiredIfNotCleanedUp {
        Some(1)
    } else {
        None
    };
    if got != want {
        return Err(format!(
            "read at T0 + ttl ({ttl_ms} ms): {got:?}, want {want:?}"
        ));
    }
    b.compact_state("v")
        .map_err(|e| format!("compact: {e:?}"))?;
    b.compact_state("l")
        .map_err(|e| format!("compact: {e:?}"))?;
    let got = v
        .get(&2, &())
        .map_err(|e| format!("get after compaction: {e:?}"))?;
    if !expires && got != Some(2) {
        return Err(format!("never-expiring entry after compaction: {got:?}"));
    }
    if expires && config.cleanup.compaction_filter && got.is_some() {
        return Err(format!(
            "expired entry survived the compaction filter: {got:?}"
        ));
    }
    b.checkpoint(2)
        .map_err(|e| format!("checkpoint 2: {e:?}"))?;
    b.notify_checkpoint_complete(2)
        .map_err(|e| format!("notify 2: {e:?}"))?;
    b.close().map_err(|e| format!("close: {e:?}"))?;
    drop((v, l));
    let r = builder("restored")
        .restore(RestoreFrom::Latest)
        .map_err(|e| format!("restore: {e:?}"))?;
    let v = r
        .value_state::<u32, (), u32>(desc())
        .map_err(|e| format!("restored value_state: {e:?}"))?;
    let got = v.get(&3, &()).map_err(|e| format!("restored get: {e:?}"))?;
    if !expires && got != Some(3) {
        return Err(format!("never-expiring entry after restore: {got:?}"));
    }
    r.close().map_err(|e| format!("close: {e:?}"))?;
    drop(v);
    let s = builder("sp-restored")
        .open()
        .map_err(|e| format!("open: {e:?}"))?;
    s.restore_savepoint(&root.join("sp"))
        .map_err(|e| format!("restore_savepoint: {e:?}"))?;
    let v = s
        .value_state::<u32, (), u32>(desc())
        .map_err(|e| format!("sp value_state: {e:?}"))?;
    let got = v.get(&4, &()).map_err(|e| format!("sp get: {e:?}"))?;
    if !expires && got != Some(4) {
        return Err(format!(
            "never-expiring entry after savepoint restore: {got:?}"
        ));
    }
    Ok(())
}

#[test]
fn ttl_edges_child() {
    let Some(config) = child_case_of(cases()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    finish(run(dir.path(), config));
}

#[test]
fn ttl_configs_at_their_edges_work_or_are_refused() {
    assert_every_case("ttl_edges_child", &cases(), Duration::from_secs(120));
}
