//! A savepoint entry that is well framed (checksums, block structure) but not what its
//! state's kind stores is a typed error on both backends, found before any state is
//! registered: the backend is left without state, so a sound savepoint can still be restored
//! into it. Covers a list entry whose suffix is no position, a value entry with a suffix and
//! a TTL entry shorter than its timestamp.

use rockstate::{BackendKind, Error, KeyedBackend};
use sst_format::{SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta};

/// A savepoint of one state `kind` (with `ttl`) holding one entry with `suffix` and `value`.
fn savepoint(
    dir: &std::path::Path,
    kind: StateKind,
    ttl: bool,
    suffix: &[u8],
    value: &[u8],
) -> std::path::PathBuf {
    let key = 7u32.to_be_bytes();
    let group = rockstate::keygroup::key_group_of(&key, 128);
    let header = SavepointHeader {
        max_parallelism: 128,
        key_group_start: 0,
        key_group_end: 127,
        states: vec![StateMeta {
            name: "s".into(),
            kind,
            codec: "bytes".into(),
            codec_version: 1,
            ttl,
        }],
        operator_state: Vec::new(),
        created_at_ms: 0,
        event_time_watermark_ms: 0,
    };
    let mut w = SavepointWriter::new(Vec::new(), &header, 3).unwrap();
    w.add(
        group,
        SavepointEntry {
            state: 0,
            key: &key,
            namespace: b"",
            suffix,
            value,
        },
    )
    .unwrap();
    let path = dir.join(format!("{kind:?}-{ttl}-{}-{}", suffix.len(), value.len()));
    std::fs::write(&path, w.finish().unwrap().0).unwrap();
    path
}

#[test]
fn a_malformed_entry_is_refused_before_any_state_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let bad = [
        // A list entry's suffix is an 8-byte position, with the run mark when it holds a run.
        savepoint(dir.path(), StateKind::List, false, &[0u8; 7], b"element"),
        // A value state's entry has no suffix.
        savepoint(dir.path(), StateKind::Value, false, b"x", b"value"),
        // A TTL state's value starts with its 8-byte timestamp.
        savepoint(dir.path(), StateKind::Value, true, b"", b"short"),
    ];
    let sound = savepoint(dir.path(), StateKind::Value, false, b"", b"value");
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        for (i, file) in bad.iter().enumerate() {
            let dst = KeyedBackend::builder(dir.path().join(format!("dst-{kind:?}-{i}")))
                .kind(kind)
                .open()
                .unwrap();
            let err = dst.restore_savepoint(file).unwrap_err();
            assert!(
                matches!(err, Error::Format { .. }),
                "{kind:?} {file:?}: {err}"
            );
            assert!(
                dst.states().unwrap().is_empty(),
                "{kind:?} {file:?}: a failed restore left states registered: {:?}",
                dst.states().unwrap()
            );
            // The backend is as new: a sound savepoint restores into it.
            dst.restore_savepoint(&sound).unwrap();
            assert_eq!(dst.states().unwrap().len(), 1, "{kind:?}");
        }
    }
}
