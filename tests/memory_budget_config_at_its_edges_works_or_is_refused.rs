//! Every `MemoryBudgetConfig` field at its edges, each cache kind: `MemoryBudget::new` either
//! refuses it with `Error::InvalidOption` or gives a budget on which a backend writes,
//! checkpoints, savepoints and restores correctly — never a panic, an abort, a hang.
//! Each case runs in a child process.

mod edge_common;

use std::time::Duration;

use edge_common::*;
use rockstate::{CacheKind, CheckpointOptions, DbOptions, MemoryBudget, MemoryBudgetConfig};

fn cases() -> Vec<(String, MemoryBudgetConfig)> {
    let mut c = Vec::new();
    for cache in [CacheKind::Lru, CacheKind::HyperClock] {
        let d = || MemoryBudgetConfig {
            cache,
            ..MemoryBudgetConfig::default()
        };
        for total in [
            0usize,
            1,
            (8 << 20) - 1,
            8 << 20,
            1 << 40,
            usize::MAX / 2,
            usize::MAX,
        ] {
            c.push((
                format!("{cache:?} total_bytes = {total}"),
                MemoryBudgetConfig {
                    total_bytes: total,
                    ..d()
                },
            ));
        }
        for ratio in [
            0.0,
            -0.0,
            1e-300,
            1e-12,
            0.5,
            0.9999999,
            1.0,
            2.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            c.push((
                format!("{cache:?} write_buffer_ratio = {ratio}"),
                MemoryBudgetConfig {
                    write_buffer_ratio: ratio,
                    ..d()
                },
            ));
        }
    }
    c
}

#[test]
fn memory_budget_edges_child() {
    let Some(config) = child_case_of(cases()) else {
        return;
    };
    let budget = match MemoryBudget::new(config) {
        Ok(b) => b,
        Err(e) if is_option_error(&e) => return finish(Ok(())),
        Err(e) => return finish(Err(format!("MemoryBudget::new: {e:?}"))),
    };
    let dir = tempfile::tempdir().unwrap();
    finish(exercise(
        dir.path(),
        DbOptions::default(),
        budget,
        CheckpointOptions::default(),
    ));
}

#[test]
fn memory_budget_config_at_its_edges_works_or_is_refused() {
    assert_every_case(
        "memory_budget_edges_child",
        &cases(),
        Duration::from_secs(120),
    );
}
