//! The savepoint header (which holds the operator state) is at most 64 MiB
//! (docs/savepoint-format.md). Writing a savepoint whose operator state is larger is the
//! caller's input being too large, like an entry above 1 GiB (`Error::ValueTooLarge`,
//! `ErrorKind::InvalidInput`): it must be refused as invalid input, leaving no file, not
//! reported as damaged stored bytes (`ErrorKind::Corruption`, "never retried into silently
//! wrong state"), which nothing here is. Both backends.

use rockstate::operator_state::{OperatorState, RedistributionMode};
use rockstate::{BackendKind, CodecId, ErrorKind, KeyedBackend};

#[test]
fn an_oversized_operator_state_is_invalid_input_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut ops = OperatorState::new();
    ops.update_raw(
        "offsets",
        RedistributionMode::Union,
        (0..65).map(|i| vec![i as u8; 1 << 20]).collect(),
    )
    .unwrap();
    let mut failures = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let b = KeyedBackend::builder(dir.path().join(format!("b-{kind:?}")))
            .kind(kind)
            .open()
            .unwrap();
        b.raw_value_state("v", CodecId::new("raw", 1))
            .unwrap()
            .put(b"k", b"", b"v")
            .unwrap();
        let out = dir.path().join(format!("out-{kind:?}"));
        std::fs::create_dir(&out).unwrap();
        let sp = out.join("sp");
        match b.write_savepoint_with(&sp, &ops) {
            Ok(s) => failures.push(format!("{kind:?}: written: {s:?}")),
            Err(e) if e.kind() != ErrorKind::InvalidInput => {
                failures.push(format!("{kind:?}: kind {:?}: {e}", e.kind()))
            }
            Err(_) => {}
        }
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        if !left.is_empty() {
            failures.push(format!("{kind:?}: files left: {left:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
