//! Every single-byte corruption and every truncation of the committed RocksDB SST fixtures:
//! `parse_sst_meta` must return a typed error or the very same metadata (bytes it does not
//! read, data and filter blocks, are the whole-file CRC's job), never a panic, never other
//! metadata.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// docs/sst-format.md §4.3: the 8 value bytes of the global sequence number are the one
/// documented unprotected field; ignore them.
fn normalize(mut m: sst_format::SstMeta) -> sst_format::SstMeta {
    m.properties.external_sst_file_global_seqno = None;
    m.properties
        .raw
        .remove("rocksdb.external_sst_file.global_seqno");
    m
}

#[test]
fn every_byte_of_every_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sst");
    let mut bad = Vec::new();
    for f in [
        "fv2_xxhash32_sstwriter.sst",
        "fv5_crc32c_flush.sst",
        "fv6_xxhash64_flush.sst",
        "fv7_xxh3_flush.sst",
    ] {
        let bytes = std::fs::read(dir.join(f)).unwrap();
        let original = sst_format::parse_sst_meta(&bytes).unwrap();
        for i in 0..bytes.len() {
            for mask in [1u8, 2, 4, 8, 16, 32, 64, 128, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                match catch_unwind(AssertUnwindSafe(|| sst_format::parse_sst_meta(&b))) {
                    Err(_) => bad.push(format!("{f}: byte {i} ^ {mask:#x}: PANIC")),
                    Ok(Ok(m)) if normalize(m.clone()) != normalize(original.clone()) => {
                        bad.push(format!("{f}: byte {i} ^ {mask:#x}: different metadata"))
                    }
                    _ => {}
                }
            }
        }
        for n in 0..bytes.len() {
            match catch_unwind(AssertUnwindSafe(|| sst_format::parse_sst_meta(&bytes[..n]))) {
                Err(_) => bad.push(format!("{f}: cut to {n}: PANIC")),
                Ok(Ok(_)) => bad.push(format!("{f}: cut to {n}: accepted")),
                _ => {}
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
