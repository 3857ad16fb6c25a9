//! Every `CheckpointOptions` and `ChangelogOptions` field at its edges: a backend opened with
//! it either writes, checkpoints twice, savepoints and restores both correctly, or its open
//! fails with `Error::InvalidOption` — never a panic, an abort, a hang or a wrong read. Each
//! case runs in a child process.

mod edge_common;

use std::time::Duration;

use edge_common::*;
use rockstate::{ChangelogOptions, CheckpointOptions, DbOptions};

fn cases() -> Vec<(String, CheckpointOptions)> {
    let d = CheckpointOptions::default;
    let on = || ChangelogOptions {
        enabled: true,
        ..ChangelogOptions::default()
    };
    let mut c: Vec<(String, CheckpointOptions)> = Vec::new();
    macro_rules! case {
        ($field:ident = $($v:expr),+) => {
            $( c.push((format!("{} = {}", stringify!($field), stringify!($v)),
                       CheckpointOptions { $field: $v, ..d() })); )+
        };
    }
    macro_rules! log {
        ($field:ident = $($v:expr),+) => {
            $( c.push((format!("changelog.{} = {}", stringify!($field), stringify!($v)),
                       CheckpointOptions { changelog: ChangelogOptions { $field: $v, ..on() }, ..d() })); )+
        };
    }
    case!(retained = 0, 1, 2, usize::MAX);
    case!(transfer_threads = 0, 1, 256, 257, usize::MAX);
    case!(incremental = false);
    case!(local_recovery = false);
    c.push((
        "changelog.enabled = true".into(),
        CheckpointOptions {
            changelog: on(),
            ..d()
        },
    ));
    log!(materialize_interval_ms = 0, 1, u64::MAX);
    log!(materialize_log_percent = 0, 1, u32::MAX);
    log!(materialize_min_log_bytes = 0, u64::MAX);
    log!(max_log_buffer_bytes = 0, 4095, 4096, usize::MAX);
    log!(compress = false);
    log!(replay_batch_bytes = 0, 1, u64::MAX);
    log!(table_bytes = 0, 1, u64::MAX);
    log!(table_fanout = 0, 1, 2, u32::MAX);
    log!(table_upload_percent = 0, u32::MAX);
    c.push((
        "changelog every checkpoint a log checkpoint, tables of 1 byte, fanout 2".into(),
        CheckpointOptions {
            changelog: ChangelogOptions {
                materialize_interval_ms: u64::MAX,
                materialize_log_percent: u32::MAX,
                materialize_min_log_bytes: u64::MAX,
                table_bytes: 1,
                table_fanout: 2,
                table_upload_percent: u32::MAX,
                replay_batch_bytes: 0,
                ..on()
            },
            ..d()
        },
    ));
    c.push((
        "changelog, incremental = false, local_recovery = false, retained = 3".into(),
        CheckpointOptions {
            incremental: false,
            local_recovery: false,
            retained: 3,
            changelog: on(),
            ..d()
        },
    ));
    c
}

#[test]
fn checkpoint_options_edges_child() {
    let Some(cp) = child_case_of(cases()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    finish(exercise(dir.path(), DbOptions::default(), budget(), cp));
}

#[test]
fn checkpoint_options_at_their_edges_work_or_are_refused() {
    assert_every_case(
        "checkpoint_options_edges_child",
        &cases(),
        Duration::from_secs(120),
    );
}
