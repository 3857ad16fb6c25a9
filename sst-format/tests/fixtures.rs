//! The committed SST fixtures of `tests/fixtures/sst/` (written by RocksDB 11.8; see the README
//! there), checked without RocksDB against the values RocksDB itself reported when writing them
//! (`expected.txt`). A change in RocksDB's format, or in this reader, shows up here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sst_format::{parse_sst_meta, read_sst_meta, read_sst_meta_with_stats, Error, SstMeta};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sst")
}

/// `expected.txt`: one line per fixture, tab-separated: file name, then `key=value` fields.
fn expected() -> Vec<(String, BTreeMap<String, String>)> {
    let text = std::fs::read_to_string(dir().join("expected.txt")).expect("expected.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.split('\t');
            let name = parts.next().unwrap().to_string();
            let fields = parts
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("key=value");
                    (k.to_string(), v.to_string())
                })
                .collect();
            (name, fields)
        })
        .collect()
}

fn num(fields: &BTreeMap<String, String>, k: &str) -> u64 {
    fields[k].parse().unwrap_or_else(|_| panic!("{k}"))
}

#[test]
fn valid_fixtures_match_what_rocksdb_reported() {
    let mut seen = 0;
    for (name, f) in expected() {
        if f.contains_key("corrupt") {
            continue;
        }
        seen += 1;
        let path = dir().join(&name);
        let m = read_sst_meta(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let p = &m.properties;
        assert_eq!(m.file_size, num(&f, "size"), "{name}");
        assert_eq!(p.num_entries, num(&f, "entries"), "{name}");
        assert_eq!(p.num_deletions, num(&f, "deletions"), "{name}");
        assert_eq!(p.column_family_name, f["cf"], "{name}");
        match f["cf_id"].as_str() {
            "none" => assert_eq!(p.column_family_id, None, "{name}"),
            id => assert_eq!(p.column_family_id, Some(id.parse().unwrap()), "{name}"),
        }
        assert_eq!(m.unique_id.file_number, num(&f, "file_number"), "{name}");
        assert_eq!(m.unique_id.db_id, f["db_id"], "{name}");
        assert!(!m.unique_id.db_session_id.is_empty(), "{name}");
        assert_eq!(
            u64::from(m.footer.format_version),
            num(&f, "format_version"),
            "{name}"
        );
        assert_eq!(p.format_version, num(&f, "format_version"), "{name}");
        assert_eq!(
            u64::from(m.footer.checksum_type.as_u8()),
            num(&f, "checksum_type"),
            "{name}"
        );
        assert_eq!(p.comparator, "leveldb.BytewiseComparator", "{name}");
        assert_eq!(
            m.footer.index_handle.is_none(),
            m.footer.format_version >= 6
        );
        // The in-memory parser agrees, and a small file is read in one positioned read.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(parse_sst_meta(&bytes).unwrap(), m, "{name}");
        let (_, stats) = read_sst_meta_with_stats(&path).unwrap();
        assert_eq!(stats.reads, 1, "{name}");
        assert_eq!(stats.bytes_read, m.file_size.min(16 * 1024), "{name}");
    }
    assert!(seen >= 4, "fixtures present");
}

#[test]
fn corrupt_fixture_is_rejected_with_a_properties_checksum_mismatch() {
    let (name, f) = expected()
        .into_iter()
        .find(|(_, f)| f.contains_key("corrupt"))
        .expect("a corrupt fixture");
    assert_eq!(f["corrupt"], "properties");
    match read_sst_meta(&dir().join(&name)) {
        Err(Error::ChecksumMismatch { block, offset, .. }) => {
            assert_eq!(block, "properties");
            assert_eq!(offset, num(&f, "properties_offset"));
        }
        other => panic!("{name}: {other:?}"),
    }
}

/// The byte ranges of footer, metaindex and properties block (with trailers).
fn regions(m: &SstMeta) -> Vec<(usize, usize)> {
    let mi = m.footer.metaindex_handle;
    let p = m.metaindex["rocksdb.properties"];
    vec![
        (mi.offset as usize, (mi.offset + mi.size + 5) as usize),
        (p.offset as usize, (p.offset + p.size + 5) as usize),
        (m.footer.footer_offset as usize, m.file_size as usize),
    ]
}

/// The 8 value bytes of `rocksdb.external_sst_file.global_seqno`, if present: the only bytes
/// RocksDB (and this reader) accept changed, because ingestion rewrites them in place.
fn global_seqno_bytes(bytes: &[u8], m: &SstMeta) -> BTreeSet<usize> {
    if m.properties.external_sst_file_global_seqno.is_none() {
        return BTreeSet::new();
    }
    let p = m.metaindex["rocksdb.properties"];
    let block = &bytes[p.offset as usize..(p.offset + p.size) as usize];
    let key = b"global_seqno"; // stored suffix of the prefix-compressed key
    let at = block.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    (0..8).map(|i| p.offset as usize + at + i).collect()
}

/// Changing any byte of the footer, metaindex or properties regions of any valid fixture
/// yields an error — except exactly the global-seqno bytes of the `SstFileWriter` fixture,
/// which yield Ok with that property changed. Footer bytes (unchecksummed for fv <= 5) are set
/// to all 255 other values; block bytes, behind a 32-bit checksum, to the 8 single-bit flips,
/// the complement, 0x00 and 0xff (`synthetic.rs` tries all 255 values everywhere, and the
/// fuzzer the rest).
#[test]
fn every_single_byte_change_is_detected_in_real_fixtures() {
    for (name, f) in expected() {
        if f.contains_key("corrupt") {
            continue;
        }
        let bytes = std::fs::read(dir().join(&name)).unwrap();
        let m = parse_sst_meta(&bytes).unwrap();
        let exempt = global_seqno_bytes(&bytes, &m);
        if m.properties.db_id == "SST Writer" {
            assert_eq!(
                exempt.len(),
                8,
                "{name}: SstFileWriter files carry the global seqno"
            );
        }
        let mut accepted = BTreeSet::new();
        let mut buf = bytes.clone();
        for (start, end) in regions(&m) {
            let is_footer = end == bytes.len();
            for pos in start..end {
                let orig = buf[pos];
                let variants: Vec<u8> = if is_footer {
                    (0..=255u8).filter(|&v| v != orig).collect()
                } else {
                    let mut v: Vec<u8> = (0..8).map(|b| orig ^ (1 << b)).collect();
                    v.extend([!orig, 0x00, 0xff]);
                    v.retain(|&x| x != orig);
                    v.sort_unstable();
                    v.dedup();
                    v
                };
                for v in variants {
                    buf[pos] = v;
                    if let Ok(changed) = parse_sst_meta(&buf) {
                        accepted.insert(pos);
                        let first = *exempt
                            .iter()
                            .next()
                            .unwrap_or_else(|| panic!("{name}: byte {pos} = {v:#04x} accepted"));
                        // Accepted only as a different global seqno, everything else equal.
                        let mut expect = m.clone();
                        let mut raw = [0u8; 8];
                        raw.copy_from_slice(&buf[first..first + 8]);
                        expect.properties.external_sst_file_global_seqno =
                            Some(u64::from_le_bytes(raw));
                        expect.properties.raw.insert(
                            "rocksdb.external_sst_file.global_seqno".into(),
                            raw.to_vec(),
                        );
                        assert_eq!(changed, expect, "{name}: byte {pos} = {v:#04x}");
                    }
                }
                buf[pos] = orig;
            }
        }
        assert_eq!(
            accepted, exempt,
            "{name}: positions where a change was accepted"
        );
    }
}
