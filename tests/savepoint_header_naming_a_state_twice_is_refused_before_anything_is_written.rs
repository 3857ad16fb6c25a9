//! A savepoint header listing the same state twice (same name and metadata) is no file any
//! writer makes: entries refer to states by position, so the two positions would both feed
//! one state. Restore verifies "every in-range block before writing anything or registering
//! any state" (docs/savepoint-format.md); such a file must be refused as corrupt before any
//! state is registered, on both backends, and the backend must stay usable for a sound
//! savepoint (no restore marker left behind).

use rockstate::{BackendKind, ErrorKind, KeyedBackend};
use sst_format::{SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta};

const M: u32 = 128;

fn meta() -> StateMeta {
    StateMeta {
        name: "s".into(),
        kind: StateKind::Value,
        codec: "raw".into(),
        codec_version: 1,
        ttl: false,
    }
}

fn file(path: &std::path::Path, states: Vec<StateMeta>, entries: &[(u32, &[u8])]) {
    let header = SavepointHeader {
        max_parallelism: M,
        key_group_start: 0,
        key_group_end: (M - 1) as u16,
        states,
        operator_state: Vec::new(),
        created_at_ms: 0,
        event_time_watermark_ms: 0,
    };
    let key = b"the-key";
    let g = rockstate::keygroup::key_group_of(key, M);
    let mut w = SavepointWriter::new(Vec::new(), &header, 1).unwrap();
    for &(state, value) in entries {
        w.add(
            g,
            SavepointEntry {
                state,
                key,
                namespace: b"",
                suffix: b"",
                value,
            },
        )
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap().0).unwrap();
}

#[test]
fn a_state_listed_twice_is_corrupt_and_registers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let twice = dir.path().join("twice");
    // The same key under both positions of the one state.
    file(
        &twice,
        vec![meta(), meta()],
        &[(0, b"first"), (1, b"second")],
    );
    let sound = dir.path().join("sound");
    file(&sound, vec![meta()], &[(0, b"value")]);
    let mut failures = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let path = dir.path().join(format!("dst-{kind:?}"));
        let dst = KeyedBackend::builder(&path)
            .kind(kind)
            .max_parallelism(M)
            .open()
            .unwrap();
        match dst.restore_savepoint(&twice) {
            Ok(_) => {
                let v = dst
                    .raw_value_state("s", rockstate::CodecId::new("raw", 1))
                    .unwrap()
                    .get(b"the-key", b"")
                    .unwrap()
                    .map(|v| String::from_utf8_lossy(&v).into_owned());
                failures.push(format!("{kind:?}: restored, the key reads {v:?}"));
                continue;
            }
            Err(e) if e.kind() != ErrorKind::Corruption => {
                failures.push(format!("{kind:?}: kind {:?}: {e}", e.kind()))
            }
            Err(_) => {}
        }
        let states = dst.states().unwrap();
        if !states.is_empty() {
            failures.push(format!("{kind:?}: states left registered: {states:?}"));
        }
        if let Err(e) = dst.restore_savepoint(&sound) {
            failures.push(format!("{kind:?}: a sound savepoint then: {e}"));
        }
        drop(dst);
        if kind == BackendKind::RocksDb {
            if let Err(e) = KeyedBackend::builder(&path).max_parallelism(M).open() {
                failures.push(format!("{kind:?}: reopen: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
