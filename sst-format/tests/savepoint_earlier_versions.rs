//! Savepoints of earlier versions stay readable: the version 1 files of the fuzz corpus
//! (`fuzz/corpus/savepoint_decode/<name>.rssp`, written before version 2 added list runs and
//! version 3 the event-time watermark) decode to the entries the current version's files of
//! the same seed hold, with watermark 0; version 3 files (before version 4 let a key group
//! continue over several blocks) decode as the current version's; a file labelled with a
//! version whose header it does not have, or an index holding continued key groups under a
//! version before 4, is refused.

use std::io::Cursor;
use std::path::Path;

use sst_format::{Error, SavepointHeader, SavepointReader, SAVEPOINT_VERSION};

fn corpus(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/savepoint_decode")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The header and every entry (state, key, namespace, suffix, value) of a savepoint.
type Decoded = (SavepointHeader, Vec<(u32, Vec<Vec<u8>>)>);

fn decode(bytes: &[u8]) -> sst_format::Result<Decoded> {
    let mut r = SavepointReader::open(Cursor::new(bytes))?;
    let header = r.header().clone();
    let mut entries = Vec::new();
    for e in r.index().to_vec() {
        r.for_each_entry(&e, |x| {
            let parts = [x.key, x.namespace, x.suffix, x.value];
            entries.push((x.state, parts.iter().map(|p| p.to_vec()).collect()));
            Ok(())
        })?;
    }
    Ok((header, entries))
}

const SEEDS: [&str; 4] = ["empty", "one_block", "three_states", "many_blocks"];

#[test]
fn version_three_files_read_as_the_current_versions() {
    for seed in SEEDS {
        let old = corpus(&format!("{seed}_v3.rssp"));
        assert_eq!(u16::from_le_bytes([old[4], old[5]]), 3, "{seed}");
        let new = corpus(&format!("{seed}_v{SAVEPOINT_VERSION}.rssp"));
        assert_eq!(decode(&old).unwrap(), decode(&new).unwrap(), "{seed}");
    }
}

#[test]
fn continued_key_groups_are_refused_below_version_four() {
    let mut bytes = corpus(&format!("continued_v{SAVEPOINT_VERSION}.rssp"));
    let (_, entries) = decode(&bytes).unwrap();
    assert_eq!(entries.len(), 10);
    for version in [1u16, 2, 3] {
        bytes[4..6].copy_from_slice(&version.to_le_bytes());
        assert!(
            matches!(decode(&bytes), Err(Error::Corrupt { .. })),
            "version {version}"
        );
    }
}

#[test]
fn version_one_files_read_as_the_current_versions_with_watermark_zero() {
    for seed in SEEDS {
        let old = corpus(&format!("{seed}.rssp"));
        assert_eq!(u16::from_le_bytes([old[4], old[5]]), 1, "{seed}");
        let (old_header, old_entries) = decode(&old).unwrap_or_else(|e| panic!("{seed}: {e}"));
        let new = corpus(&format!("{seed}_v{SAVEPOINT_VERSION}.rssp"));
        assert_eq!(
            u16::from_le_bytes([new[4], new[5]]),
            SAVEPOINT_VERSION,
            "{seed}"
        );
        let (new_header, new_entries) = decode(&new).unwrap_or_else(|e| panic!("{seed}: {e}"));
        assert_eq!(old_header.event_time_watermark_ms, 0, "{seed}");
        assert_eq!(old_entries, new_entries, "{seed}");
        assert_eq!(
            SavepointHeader {
                event_time_watermark_ms: new_header.event_time_watermark_ms,
                ..old_header
            },
            new_header,
            "{seed}: only the watermark differs"
        );
    }
    // The seeds with operator state were written at a watermark; it reads back.
    let (h, _) = decode(&corpus(&format!("three_states_v{SAVEPOINT_VERSION}.rssp"))).unwrap();
    assert_eq!(h.event_time_watermark_ms, 1_700_000_000_000);
}

#[test]
fn a_file_labelled_with_another_versions_header_is_refused() {
    for seed in SEEDS {
        let mut old = corpus(&format!("{seed}.rssp"));
        old[4..6].copy_from_slice(&3u16.to_le_bytes());
        assert!(
            matches!(decode(&old), Err(Error::Decode(_) | Error::Corrupt { .. })),
            "{seed}: a version 1 file labelled 3 was read"
        );
        let mut new = corpus(&format!("{seed}_v{SAVEPOINT_VERSION}.rssp"));
        for version in [1u16, 2] {
            new[4..6].copy_from_slice(&version.to_le_bytes());
            assert!(
                matches!(decode(&new), Err(Error::Corrupt { .. })),
                "{seed}: a version {SAVEPOINT_VERSION} file labelled {version} was read"
            );
        }
    }
}
