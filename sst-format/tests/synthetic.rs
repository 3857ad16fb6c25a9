//! The SST reader on synthetic tables (see `common/mod.rs`): every format_version and
//! checksum type, every typed error, and exhaustive single-byte changes.

mod common;

use common::{all_checksums, build, put_varint, spec, standard_properties, MAGIC};
use proptest::prelude::*;
use sst_format::checksum::ChecksumType;
use sst_format::{parse_footer, parse_sst_meta, Error};

#[test]
fn every_format_version_and_checksum_type_parses() {
    for fv in 2..=7 {
        for cs in all_checksums() {
            let mut s = spec(fv, cs);
            s.index_compression = 7; // the index block may be compressed; we only checksum it
            let b = build(&s);
            let m = parse_sst_meta(&b.bytes).unwrap_or_else(|e| panic!("fv {fv} {cs}: {e}"));
            assert_eq!(m.footer.format_version, fv);
            assert_eq!(m.footer.checksum_type, cs);
            assert_eq!(m.footer.footer_offset, b.footer_offset);
            assert_eq!(
                (
                    m.footer.metaindex_handle.offset,
                    m.footer.metaindex_handle.size
                ),
                b.metaindex
            );
            assert_eq!((m.index_handle.offset, m.index_handle.size), b.index);
            assert_eq!(m.footer.index_handle.is_none(), fv >= 6);
            assert_eq!(m.footer.base_context_checksum, s.base_context_checksum);
            assert_eq!(m.properties.num_entries, 1000);
            assert_eq!(m.properties.num_deletions, 100);
            assert_eq!(m.properties.column_family_id, Some(1));
            assert_eq!(m.properties.column_family_name, "state");
            assert_eq!(m.properties.format_version, u64::from(fv));
            assert_eq!(m.unique_id.db_id, "db-1234");
            assert_eq!(m.unique_id.db_session_id, "SESSION0001");
            assert_eq!(m.unique_id.file_number, 9);
            assert_eq!(m.properties.raw.len(), s.properties.len());
            // The footer alone, from a tail or the whole file.
            let f = parse_footer(&b.bytes[b.bytes.len() - 53..], b.bytes.len() as u64).unwrap();
            assert_eq!(f, m.footer);
            assert_eq!(
                parse_footer(&b.bytes, b.bytes.len() as u64).unwrap(),
                m.footer
            );
        }
    }
}

fn set_footer_u32(bytes: &mut [u8], at: usize, v: u32) {
    let n = bytes.len();
    bytes[n - 53 + at..n - 53 + at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn format_versions_outside_2_to_7_are_unsupported_not_corrupt() {
    for fv in [0u32, 1, 8, 9, 100, u32::MAX] {
        let mut b = build(&spec(7, ChecksumType::Xxh3)).bytes;
        set_footer_u32(&mut b, 41, fv);
        match parse_sst_meta(&b) {
            Err(Error::UnsupportedFormatVersion(v)) => assert_eq!(v, fv),
            other => panic!("fv {fv}: {other:?}"),
        }
    }
}

#[test]
fn magic_numbers() {
    let good = build(&spec(5, ChecksumType::Crc32c)).bytes;
    let n = good.len();
    let with_magic = |m: u64| {
        let mut b = good.clone();
        b[n - 8..].copy_from_slice(&m.to_le_bytes());
        parse_sst_meta(&b)
    };
    assert!(matches!(
        with_magic(0x1234),
        Err(Error::BadMagic { what: "table", .. })
    ));
    // Legacy block-based (fv 0), plain and cuckoo tables are recognised but unsupported.
    for m in [
        0xdb47_7524_8b80_fb57u64,
        0x8242_2296_63bf_9564,
        0x4f34_18eb_7a8f_13b8,
        0x9267_89d0_c5f1_7873,
    ] {
        assert!(
            matches!(with_magic(m), Err(Error::Unsupported(_))),
            "{m:#x}"
        );
    }
    assert_eq!(&good[n - 8..], &MAGIC.to_le_bytes());
    // fv >= 6 extended magic.
    let mut b = build(&spec(6, ChecksumType::Xxh3)).bytes;
    let n = b.len();
    b[n - 53 + 2] = 0x01;
    assert!(matches!(
        parse_sst_meta(&b),
        Err(Error::BadMagic {
            what: "extended footer",
            ..
        })
    ));
}

#[test]
fn unknown_checksum_type() {
    for fv in [5, 7] {
        let mut b = build(&spec(fv, ChecksumType::Crc32c)).bytes;
        let n = b.len();
        b[n - 53] = 5;
        assert!(matches!(
            parse_sst_meta(&b),
            Err(Error::UnknownChecksumType(5))
        ));
    }
}

#[test]
fn checksum_mismatches_name_the_block() {
    for fv in [4, 6, 7] {
        for cs in [
            ChecksumType::Crc32c,
            ChecksumType::XxHash32,
            ChecksumType::XxHash64,
            ChecksumType::Xxh3,
        ] {
            let b = build(&spec(fv, cs));
            let cases: Vec<(usize, &str)> = vec![
                (b.index.0 as usize + 1, "index"),
                (b.properties.0 as usize + 3, "properties"),
                (b.metaindex.0 as usize + 3, "metaindex"),
            ];
            for (pos, block) in cases {
                let mut bytes = b.bytes.clone();
                bytes[pos] ^= 0x20;
                match parse_sst_meta(&bytes) {
                    Err(Error::ChecksumMismatch {
                        block: got, offset, ..
                    }) => {
                        assert_eq!(got, block, "fv {fv} {cs}");
                        assert!(offset <= pos as u64);
                    }
                    other => panic!("fv {fv} {cs} {block}: {other:?}"),
                }
            }
            if fv >= 6 {
                let mut bytes = b.bytes.clone();
                let n = bytes.len();
                bytes[n - 53 + 20] ^= 1; // reserved, unchecked by RocksDB, but under the checksum
                assert!(matches!(
                    parse_sst_meta(&bytes),
                    Err(Error::ChecksumMismatch {
                        block: "footer",
                        ..
                    })
                ));
            }
        }
    }
}

#[test]
fn fv6_reserved_future_feature_bytes_are_unsupported() {
    // Build a footer whose last 8 part-2 bytes are non-zero but whose checksum is right.
    let s = spec(7, ChecksumType::Xxh3);
    let b = build(&s);
    let mut bytes = b.bytes.clone();
    let n = bytes.len();
    bytes[n - 53 + 33] = 1;
    let mut f: Vec<u8> = bytes[n - 53..].to_vec();
    f[5..9].fill(0);
    let c = s
        .checksum
        .compute(&f)
        .wrapping_add(sst_format::checksum::context_modifier(
            s.base_context_checksum,
            b.footer_offset,
        ));
    bytes[n - 53 + 5..n - 53 + 9].copy_from_slice(&c.to_le_bytes());
    assert!(matches!(parse_sst_meta(&bytes), Err(Error::Unsupported(_))));
}

#[test]
fn short_inputs_are_truncated() {
    for len in [0usize, 1, 52] {
        assert!(matches!(
            parse_sst_meta(&vec![0u8; len]),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            parse_footer(&vec![0u8; len], len as u64),
            Err(Error::Truncated { .. })
        ));
    }
    // A tail longer than the file it claims to end is rejected, not indexed out of bounds.
    assert!(parse_footer(&[0u8; 60], 59).is_err());
}

#[test]
fn missing_unique_id_parts_are_typed() {
    for missing in [
        "rocksdb.creating.db.identity",
        "rocksdb.creating.session.identity",
        "rocksdb.original.file.number",
    ] {
        let mut s = spec(7, ChecksumType::Xxh3);
        s.properties.retain(|(k, _)| k != missing);
        match parse_sst_meta(&build(&s).bytes) {
            Err(Error::MissingProperty(name)) => assert_eq!(name, missing),
            other => panic!("{missing}: {other:?}"),
        }
    }
}

#[test]
fn format_version_property_must_match_footer() {
    let mut s = spec(5, ChecksumType::Crc32c);
    for (k, v) in s.properties.iter_mut() {
        if k == "rocksdb.format.version" {
            *v = vec![4];
        }
    }
    assert!(matches!(
        parse_sst_meta(&build(&s).bytes),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn ingested_global_seqno_rewrite_is_accepted_like_rocksdb() {
    for fv in [5, 7] {
        let mut s = spec(fv, ChecksumType::Crc32c);
        s.properties
            .push(("rocksdb.external_sst_file.global_seqno".into(), vec![0; 8]));
        s.properties.push((
            "rocksdb.external_sst_file.version".into(),
            2u32.to_le_bytes().to_vec(),
        ));
        s.properties.sort();
        let b = build(&s);
        let m = parse_sst_meta(&b.bytes).unwrap();
        assert_eq!(m.properties.external_sst_file_global_seqno, Some(0));
        assert_eq!(m.properties.external_sst_file_version, Some(2));
        // Simulate RocksDB's in-place rewrite at ingestion (checksum left as written).
        let pos = find_value(&b.bytes, b.properties, b"global_seqno");
        let mut bytes = b.bytes.clone();
        bytes[pos..pos + 8].copy_from_slice(&4242u64.to_le_bytes());
        let m = parse_sst_meta(&bytes).unwrap();
        assert_eq!(m.properties.external_sst_file_global_seqno, Some(4242));
        // Any other change is still caught.
        bytes[pos - 1] ^= 1;
        assert!(parse_sst_meta(&bytes).is_err());
    }
}

/// Offset just after `key_suffix` in the properties block (where its value starts).
fn find_value(bytes: &[u8], props: (u64, u64), key_suffix: &[u8]) -> usize {
    let (o, n) = (props.0 as usize, props.1 as usize);
    o + bytes[o..o + n]
        .windows(key_suffix.len())
        .position(|w| w == key_suffix)
        .unwrap()
        + key_suffix.len()
}

/// Asserts every change of every byte in footer, metaindex and properties (each with its
/// trailer) is rejected. `all_values`: try all 255 other values, else single-bit flips.
fn assert_changes_detected(bytes: &[u8], b: &common::Built, all_values: bool, label: &str) {
    let regions = [
        (
            b.properties.0 as usize,
            (b.properties.0 + b.properties.1 + 5) as usize,
        ),
        (
            b.metaindex.0 as usize,
            (b.metaindex.0 + b.metaindex.1 + 5) as usize,
        ),
        (b.footer_offset as usize, bytes.len()),
    ];
    let mut buf = bytes.to_vec();
    for (start, end) in regions {
        for pos in start..end {
            let orig = buf[pos];
            let variants: Vec<u8> = if all_values {
                (0..=255u8).filter(|&v| v != orig).collect()
            } else {
                (0..8).map(|i| orig ^ (1 << i)).collect()
            };
            for v in variants {
                buf[pos] = v;
                assert!(
                    parse_sst_meta(&buf).is_err(),
                    "{label}: byte {pos} (region {start}..{end}) = {v:#04x} accepted"
                );
            }
            buf[pos] = orig;
        }
    }
}

#[test]
fn every_single_byte_change_is_detected_for_every_version_and_checksum() {
    for fv in 2..=7 {
        for cs in all_checksums() {
            if cs == ChecksumType::NoChecksum {
                continue; // nothing to detect with
            }
            let b = build(&spec(fv, cs));
            let all = matches!(
                (fv, cs),
                (5, ChecksumType::Crc32c) | (7, ChecksumType::Xxh3)
            );
            assert_changes_detected(&b.bytes, &b, all, &format!("fv {fv} {cs}"));
        }
    }
}

#[test]
fn no_checksum_tables_still_require_zero_stored_checksums() {
    // RocksDB computes 0 for kNoChecksum and still compares, so a non-zero stored value fails.
    for fv in [5, 7] {
        let b = build(&spec(fv, ChecksumType::NoChecksum));
        let mut bytes = b.bytes.clone();
        let trailer = (b.properties.0 + b.properties.1 + 1) as usize;
        bytes[trailer] ^= 1;
        assert!(matches!(
            parse_sst_meta(&bytes),
            Err(Error::ChecksumMismatch {
                block: "properties",
                ..
            })
        ));
    }
}

fn arb_props() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    prop::collection::btree_map(
        "[a-z.]{1,30}",
        prop::collection::vec(any::<u8>(), 0..40),
        0..30,
    )
    .prop_map(|m| m.into_iter().collect())
}

proptest! {
    /// Random user-collected properties round-trip through the raw map, next to the standard
    /// ones.
    #[test]
    fn prop_properties_roundtrip(extra in arb_props(), fv in 2u32..=7, cs in 1u8..=4, entries in any::<u64>()) {
        let cs = ChecksumType::from_u8(cs).unwrap();
        let mut s = spec(fv, cs);
        let mut props = standard_properties(fv, entries, 77);
        for (k, v) in extra {
            let k = format!("user.{k}");
            props.push((k, v));
        }
        props.sort();
        props.dedup_by(|a, b| a.0 == b.0);
        s.properties = props.clone();
        let m = parse_sst_meta(&build(&s).bytes).unwrap();
        prop_assert_eq!(m.properties.num_entries, entries);
        prop_assert_eq!(m.unique_id.file_number, 77);
        let raw: Vec<(String, Vec<u8>)> = m.properties.raw.into_iter().collect();
        prop_assert_eq!(raw, props);
    }

    /// Random edits anywhere never panic (the fuzz targets do this at scale).
    #[test]
    fn prop_random_edits_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), fv in 2u32..=7, truncate in any::<prop::sample::Index>()) {
        let b = build(&spec(fv, ChecksumType::Xxh3));
        let mut bytes = b.bytes.clone();
        for (i, v) in edits {
            let n = bytes.len();
            bytes[i.index(n)] = v;
        }
        let _ = parse_sst_meta(&bytes);
        let _ = sst_format::fuzzing::parse_sst_meta_unverified(&bytes);
        let cut = truncate.index(bytes.len());
        let _ = parse_sst_meta(&bytes[cut..]);
        let _ = sst_format::fuzzing::parse_sst_meta_unverified(&bytes[cut..]);
        let _ = put_varint;
    }
}

/// Writes synthetic seeds into the fuzz corpora (`fuzz/corpus/sst_file`, `sst_footer`). Run with
/// `ROCKSTATE_REGENERATE_SST_SEEDS=1 cargo test -p sst-format --test synthetic -- --ignored`.
#[test]
#[ignore = "rewrites committed seed files; set ROCKSTATE_REGENERATE_SST_SEEDS=1"]
fn regenerate_synthetic_seeds() {
    if std::env::var_os("ROCKSTATE_REGENERATE_SST_SEEDS").is_none() {
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus");
    for fv in 2..=7u32 {
        for cs in all_checksums() {
            if cs == ChecksumType::NoChecksum && fv != 5 && fv != 7 {
                continue;
            }
            let mut s = spec(fv, cs);
            s.data_len = 16;
            let b = build(&s);
            let name = format!("synthetic_fv{fv}_{cs}");
            std::fs::write(format!("{root}/sst_file/{name}.sst"), &b.bytes).unwrap();
            let n = b.bytes.len();
            std::fs::write(
                format!("{root}/sst_footer/{name}.footer"),
                &b.bytes[n - 53..],
            )
            .unwrap();
            // Size-prefixed form: 8-byte LE file size, then a tail.
            let mut sized = (n as u64).to_le_bytes().to_vec();
            sized.extend_from_slice(&b.bytes[n - 60..]);
            std::fs::write(format!("{root}/sst_footer/{name}.sized"), &sized).unwrap();
        }
    }
}
