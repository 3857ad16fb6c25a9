//! `ObjectStorageOptions` at their edges (on an in-memory `object_store`, `memory://`): each
//! either makes `ObjectStorage::open` fail with `Error::InvalidOption`, or the storage takes a
//! backend's checkpoints (single puts and multipart uploads) and a restore from them —
//! never a panic, an abort or a hang. Each case runs in a child process.

mod edge_common;

use std::sync::Arc;
use std::time::Duration;

use edge_common::*;
use rockstate::{CheckpointOptions, DbOptions, ObjectStorage, ObjectStorageOptions};

fn cases() -> Vec<(String, ObjectStorageOptions)> {
    // Multipart for every file, so part settings are exercised.
    let d = || ObjectStorageOptions {
        multipart_threshold: 0,
        ..ObjectStorageOptions::default()
    };
    let mut c: Vec<(String, ObjectStorageOptions)> = Vec::new();
    macro_rules! case {
        ($field:ident = $($v:expr),+) => {
            $( c.push((format!("{} = {}", stringify!($field), stringify!($v)),
                       ObjectStorageOptions { $field: $v, ..d() })); )+
        };
    }
    case!(multipart_threshold = 0, 1, u64::MAX);
    case!(
        part_size = 0,
        1,
        4096,
        5 << 20,
        1 << 40,
        isize::MAX as usize,
        usize::MAX
    );
    case!(part_concurrency = 0, 1, 64, 65, usize::MAX);
    case!(retries = 0, 20, 21, u32::MAX);
    case!(initial_backoff = Duration::ZERO, Duration::MAX);
    case!(request_retries = 0, usize::MAX);
    case!(runtime_threads = 0, 1, 64, 65, usize::MAX);
    c
}

#[test]
fn object_storage_edges_child() {
    let Some(options) = child_case_of(cases()) else {
        return;
    };
    let storage = match ObjectStorage::open("memory://edge", &options) {
        Ok(s) => s,
        Err(e) if is_option_error(&e) => return finish(Ok(())),
        Err(e) => return finish(Err(format!("open: not a typed refusal: {e:?}"))),
    };
    let dir = tempfile::tempdir().unwrap();
    finish(exercise_on(
        dir.path(),
        Arc::new(storage),
        DbOptions::default(),
        budget(),
        CheckpointOptions::default(),
    ));
}

#[test]
fn object_storage_options_at_their_edges_work_or_are_refused() {
    assert_every_case(
        "object_storage_edges_child",
        &cases(),
        Duration::from_secs(120),
    );
}
