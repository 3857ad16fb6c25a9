//! Savepoint decoding on generated files, and the generator of the `savepoint_decode` fuzz seeds
//! (`ROCKSTATE_REGENERATE_SAVEPOINT_SEEDS=1 cargo test -p sst-format --test savepoint_seeds --
//! --ignored`). Seeds are named after the version that wrote them (`<name>_v<version>.rssp`);
//! the unsuffixed ones are version 1 files, kept as the earliest version's fixtures.

use std::io::Cursor;

use sst_format::{
    verify_savepoint, BlockBuilder, BlockCompressor, OperatorListState, RedistributionMode,
    SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta,
};

fn savepoint(states: usize, groups: &[u16], per_group: usize, ops: bool) -> Vec<u8> {
    let header = SavepointHeader {
        max_parallelism: 128,
        key_group_start: 0,
        key_group_end: 127,
        states: (0..states)
            .map(|i| StateMeta {
                name: format!("s{i}"),
                kind: [StateKind::Value, StateKind::List, StateKind::Map][i % 3],
                codec: "bytes".into(),
                codec_version: 1,
                ttl: i % 2 == 1,
            })
            .collect(),
        operator_state: if ops {
            vec![OperatorListState {
                name: "offsets".into(),
                mode: RedistributionMode::Split,
                elements: vec![vec![1, 2], vec![3]],
            }]
        } else {
            vec![]
        },
        created_at_ms: 1,
        event_time_watermark_ms: if ops { 1_700_000_000_000 } else { 0 },
    };
    let mut w = SavepointWriter::new(Vec::new(), &header, 1).unwrap();
    for &g in groups {
        for i in 0..per_group {
            let key = [g as u8, i as u8];
            w.add(
                g,
                SavepointEntry {
                    state: (i % states.max(1)) as u32,
                    key: &key,
                    namespace: b"ns",
                    suffix: &(i as u64).to_be_bytes(),
                    value: b"value-bytes",
                },
            )
            .unwrap();
        }
    }
    w.finish().unwrap().0
}

/// Two states; key group 5 continues over three blocks of three entries each (version 4),
/// cut small by hand as a writer cuts at `BLOCK_TARGET_BYTES`, then key group 9 in one block.
fn continued() -> Vec<u8> {
    let header = SavepointHeader {
        max_parallelism: 128,
        key_group_start: 0,
        key_group_end: 127,
        states: (0..2)
            .map(|i| StateMeta {
                name: format!("s{i}"),
                kind: [StateKind::Value, StateKind::List][i],
                codec: "bytes".into(),
                codec_version: 1,
                ttl: false,
            })
            .collect(),
        operator_state: vec![],
        created_at_ms: 1,
        event_time_watermark_ms: 0,
    };
    let mut w = SavepointWriter::new(Vec::new(), &header, 1).unwrap();
    let mut b = BlockBuilder::new(5, 2);
    let mut compressor = BlockCompressor::new(1).unwrap();
    // Entries of key group 5 in order (state, then key), split into blocks of three.
    for (n, i) in (0..9u8).enumerate() {
        let state = u32::from(i >= 5);
        b.add(SavepointEntry {
            state,
            key: &[5, i],
            namespace: b"ns",
            suffix: if state == 1 {
                &[0, 0, 0, 0, 0, 0, 0, 1]
            } else {
                b""
            },
            value: b"value-bytes",
        })
        .unwrap();
        if n % 3 == 2 {
            w.write_block(b.encode(&mut compressor).unwrap().unwrap())
                .unwrap();
            b.reset(5);
        }
    }
    b.reset(9);
    b.add(SavepointEntry {
        state: 0,
        key: &[9],
        namespace: b"ns",
        suffix: b"",
        value: b"v",
    })
    .unwrap();
    w.write_block(b.encode(&mut compressor).unwrap().unwrap())
        .unwrap();
    w.finish().unwrap().0
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", savepoint(1, &[], 0, false)),
        ("continued", continued()),
        ("one_block", savepoint(1, &[5], 3, false)),
        ("three_states", savepoint(3, &[0, 7, 127], 4, true)),
        (
            "many_blocks",
            savepoint(2, &(0..40).collect::<Vec<_>>(), 2, true),
        ),
    ]
}

#[test]
fn generated_savepoints_verify() {
    for (name, bytes) in seeds() {
        let stats = verify_savepoint(Cursor::new(&bytes)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(stats.file_bytes, bytes.len() as u64);
    }
    let s = verify_savepoint(Cursor::new(savepoint(3, &[0, 7, 127], 4, true))).unwrap();
    assert_eq!((s.entries, s.blocks), (12, 3));
    let s = verify_savepoint(Cursor::new(continued())).unwrap();
    assert_eq!((s.entries, s.blocks), (10, 4));
}

#[test]
#[ignore = "writes the fuzz seed corpus; run explicitly"]
fn regenerate_seeds() {
    if std::env::var_os("ROCKSTATE_REGENERATE_SAVEPOINT_SEEDS").is_none() {
        return;
    }
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/savepoint_decode");
    std::fs::create_dir_all(&dir).unwrap();
    let v = sst_format::SAVEPOINT_VERSION;
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(format!("{name}_v{v}.rssp")), &bytes).unwrap();
        let mut cut = bytes.clone();
        cut.truncate(bytes.len() / 2);
        std::fs::write(dir.join(format!("{name}_v{v}_truncated.rssp")), &cut).unwrap();
    }
}
