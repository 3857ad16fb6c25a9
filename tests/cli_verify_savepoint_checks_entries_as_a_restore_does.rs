//! `rockstate verify <savepoint file>` checks what a restore checks before it writes anything,
//! not only the file's structure and checksums: a savepoint whose blocks are sound but whose
//! entries a restore refuses (a key stored under a key group it does not hash to, a list entry
//! without a position, a value shorter than its TTL timestamp, a key group's entries out of
//! order) is exit 1 with the problem named; a restore of each is refused too, so the two agree.

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout};
use rockstate::{ErrorKind, KeyedBackend};
use sst_format::{SavepointEntry, SavepointHeader, SavepointWriter, StateKind, StateMeta};

const M: u32 = 128;

/// A savepoint entry: key group, key, suffix, value.
type Entry = (u16, Vec<u8>, Vec<u8>, Vec<u8>);

/// A savepoint of one state (`kind`, `ttl`) holding `entries` (key group, key, suffix, value)
/// in that order.
fn savepoint(path: &std::path::Path, kind: StateKind, ttl: bool, entries: &[Entry]) {
    let header = SavepointHeader {
        max_parallelism: M,
        key_group_start: 0,
        key_group_end: (M - 1) as u16,
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
    for (group, key, suffix, value) in entries {
        w.add(
            *group,
            SavepointEntry {
                state: 0,
                key,
                namespace: b"",
                suffix,
                value,
            },
        )
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap().0).unwrap();
}

#[test]
fn verify_refuses_what_a_restore_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let key = 7u32.to_be_bytes().to_vec();
    let g = rockstate::keygroup::key_group_of(&key, M);
    let other = (g + 1) % M as u16;
    // Two keys of one key group, for the order case.
    let mut same = (0u32..).map(|i| format!("k{i}").into_bytes());
    let a = same.next().unwrap();
    let ga = rockstate::keygroup::key_group_of(&a, M);
    let b = same
        .find(|k| rockstate::keygroup::key_group_of(k, M) == ga)
        .unwrap();
    let (low, high) = if a < b { (a, b) } else { (b, a) };
    let pos = |i: u64| i.to_be_bytes().to_vec();
    let cases: Vec<(&str, StateKind, bool, Vec<Entry>)> = vec![
        (
            "wrong-group",
            StateKind::Value,
            false,
            vec![(other, key.clone(), vec![], b"v".to_vec())],
        ),
        (
            "list-without-position",
            StateKind::List,
            false,
            vec![(g, key.clone(), vec![0; 7], b"e".to_vec())],
        ),
        (
            "ttl-value-too-short",
            StateKind::Value,
            true,
            vec![(g, key.clone(), vec![], b"short".to_vec())],
        ),
        (
            "out-of-order",
            StateKind::List,
            false,
            vec![
                (ga, high.clone(), pos(1), b"x".to_vec()),
                (ga, low.clone(), pos(2), b"y".to_vec()),
            ],
        ),
    ];
    let sound = dir.path().join("sound.rssp");
    savepoint(
        &sound,
        StateKind::Value,
        false,
        &[(g, key.clone(), vec![], b"v".to_vec())],
    );
    let o = rockstate(&["verify", sound.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    for (name, kind, ttl, entries) in cases {
        let path = dir.path().join(format!("{name}.rssp"));
        savepoint(&path, kind, ttl, &entries);
        // Its blocks are sound: only the entries are wrong.
        let file = std::fs::File::open(&path).unwrap();
        sst_format::verify_savepoint(std::io::BufReader::new(file)).unwrap();
        let o = rockstate(&["verify", path.to_str().unwrap()]);
        assert_eq!(code(&o), 1, "{name}: {}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).starts_with("BAD "), "{name}: {}", stdout(&o));
        let restore = KeyedBackend::builder(dir.path().join(format!("dst-{name}")))
            .open()
            .unwrap()
            .restore_savepoint(&path);
        assert_eq!(
            restore.map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::Corruption),
            "{name}: a restore takes what verify refuses"
        );
    }
}
