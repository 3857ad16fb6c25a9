//! A version 4 savepoint whose key group continues over two blocks that disagree on the
//! entries' order (the second block repeats a stored key of the first, or goes back to a list
//! the first block had left) breaks the format's rule "entries of one key group (across its
//! blocks) are ordered by state, then by stored key" (docs/savepoint-format.md). Every block
//! passes its checksums, so only the restore can tell. It must be refused as damaged input
//! (`ErrorKind::Corruption`, like every other malformed entry), before any state is
//! registered, on both backends alike: the same file must not restore on one backend and fail
//! on the other, nor fail as the caller's mistake (`InvalidInput`) from RocksDB's SST writer.

use rockstate::{BackendKind, ErrorKind, KeyedBackend};
use sst_format::{
    BlockBuilder, SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta,
};

const M: u32 = 128;

fn header(kind: StateKind) -> SavepointHeader {
    SavepointHeader {
        max_parallelism: M,
        key_group_start: 0,
        key_group_end: (M - 1) as u16,
        states: vec![StateMeta {
            name: "s".into(),
            kind,
            codec: "raw".into(),
            codec_version: 1,
            ttl: false,
        }],
        operator_state: Vec::new(),
        created_at_ms: 0,
        event_time_watermark_ms: 0,
    }
}

/// Two keys of one key group, and that group.
fn two_keys() -> (u16, Vec<u8>, Vec<u8>) {
    let mut same = (0u32..).map(|i| format!("k{i}").into_bytes());
    let a = same.next().unwrap();
    let g = rockstate::keygroup::key_group_of(&a, M);
    let b = same
        .find(|k| rockstate::keygroup::key_group_of(k, M) == g)
        .unwrap();
    (g, a, b)
}

/// One entry: key, suffix, value.
type Entry = (Vec<u8>, Vec<u8>, Vec<u8>);

/// A savepoint of one state of `kind` whose key group `g` holds `blocks`, one block each
/// (entries: key, suffix, value).
fn file(path: &std::path::Path, kind: StateKind, g: u16, blocks: &[Vec<Entry>]) {
    let mut w = SavepointWriter::new(Vec::new(), &header(kind), 1).unwrap();
    for entries in blocks {
        let mut b = BlockBuilder::new(g, 1);
        for (key, suffix, value) in entries {
            b.add(SavepointEntry {
                state: 0,
                key,
                namespace: b"",
                suffix,
                value,
            })
            .unwrap();
        }
        w.write_block(b.finish(1).unwrap().unwrap()).unwrap();
    }
    std::fs::write(path, w.finish().unwrap().0).unwrap();
}

fn pos(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

#[test]
fn a_continued_key_group_that_goes_back_is_corrupt_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let (g, a, b) = two_keys();
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    let files = [
        // A value key repeated in the continuation block.
        (
            "value-repeated",
            StateKind::Value,
            vec![
                vec![(lo.clone(), vec![], b"first".to_vec())],
                vec![(lo.clone(), vec![], b"second".to_vec())],
            ],
        ),
        // A list left for the next one, then continued in the next block.
        (
            "list-goes-back",
            StateKind::List,
            vec![
                vec![
                    (lo.clone(), pos(1), b"lo-1".to_vec()),
                    (hi.clone(), pos(2), b"hi-1".to_vec()),
                ],
                vec![(lo.clone(), pos(3), b"lo-2".to_vec())],
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (name, kind, blocks) in &files {
        let path = dir.path().join(name);
        file(&path, *kind, g, blocks);
        // The file is sound block by block.
        sst_format::verify_savepoint(std::fs::File::open(&path).unwrap()).unwrap();
        for backend in [BackendKind::RocksDb, BackendKind::Heap] {
            let dst = KeyedBackend::builder(dir.path().join(format!("{name}-{backend:?}")))
                .kind(backend)
                .max_parallelism(M)
                .open()
                .unwrap();
            match dst.restore_savepoint(&path) {
                Ok(_) => {
                    failures.push(format!("{name} on {backend:?}: restored"));
                    continue;
                }
                Err(e) if e.kind() != ErrorKind::Corruption => {
                    failures.push(format!("{name} on {backend:?}: kind {:?}: {e}", e.kind()))
                }
                Err(_) => {}
            }
            if !dst.states().unwrap().is_empty() {
                failures.push(format!("{name} on {backend:?}: states left registered"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
