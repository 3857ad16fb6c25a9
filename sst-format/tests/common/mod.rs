//! A minimal writer of block-based table *tails* for tests, following RocksDB's
//! `BlockBasedTableBuilder::Finish` (`table/block_based/block_based_table_builder.cc`): opaque
//! "data", an index block, a properties block, the metaindex block and the footer, each block
//! with a correct trailer. It lets tests cover every format_version × checksum type without
//! RocksDB; the real-RocksDB fixtures and `tests/sst_crosscheck.rs` keep it honest.

#![allow(dead_code)]

use sst_format::checksum::{context_modifier, ChecksumType};

pub const MAGIC: u64 = 0x88e2_41b7_85f4_cff7;

pub fn put_varint(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// A block as RocksDB's `BlockBuilder` writes it (keys must be sorted).
pub fn build_block(kvs: &[(Vec<u8>, Vec<u8>)], restart_interval: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut restarts = vec![0u32];
    let mut prev: &[u8] = &[];
    for (i, (k, v)) in kvs.iter().enumerate() {
        let shared = if i % restart_interval == 0 {
            if i > 0 {
                restarts.push(out.len() as u32);
            }
            0
        } else {
            prev.iter()
                .zip(k.iter())
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(&mut out, shared as u64);
        put_varint(&mut out, (k.len() - shared) as u64);
        put_varint(&mut out, v.len() as u64);
        out.extend_from_slice(&k[shared..]);
        out.extend_from_slice(v);
        prev = k;
    }
    for r in &restarts {
        out.extend_from_slice(&r.to_le_bytes());
    }
    out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
    out
}

pub fn handle(offset: u64, size: u64) -> Vec<u8> {
    let mut v = Vec::new();
    put_varint(&mut v, offset);
    put_varint(&mut v, size);
    v
}

/// What to write.
#[derive(Debug, Clone)]
pub struct Spec {
    pub format_version: u32,
    pub checksum: ChecksumType,
    /// fv >= 6 only; must be non-zero there.
    pub base_context_checksum: u32,
    /// Sorted, unique property names with raw values.
    pub properties: Vec<(String, Vec<u8>)>,
    pub data_len: usize,
    pub index_compression: u8,
}

/// Standard properties naming a unique id, with numbers as varints.
pub fn standard_properties(fv: u32, entries: u64, file_number: u64) -> Vec<(String, Vec<u8>)> {
    let num = |v: u64| {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        b
    };
    let mut p = vec![
        ("rocksdb.column.family.id".to_string(), num(1)),
        ("rocksdb.column.family.name".to_string(), b"state".to_vec()),
        (
            "rocksdb.comparator".to_string(),
            b"leveldb.BytewiseComparator".to_vec(),
        ),
        (
            "rocksdb.creating.db.identity".to_string(),
            b"db-1234".to_vec(),
        ),
        (
            "rocksdb.creating.session.identity".to_string(),
            b"SESSION0001".to_vec(),
        ),
        ("rocksdb.data.size".to_string(), num(4096)),
        ("rocksdb.deleted.keys".to_string(), num(entries / 10)),
        ("rocksdb.format.version".to_string(), num(u64::from(fv))),
        ("rocksdb.num.entries".to_string(), num(entries)),
        ("rocksdb.original.file.number".to_string(), num(file_number)),
    ];
    p.sort();
    p
}

pub struct Built {
    pub bytes: Vec<u8>,
    pub index: (u64, u64),
    pub properties: (u64, u64),
    pub metaindex: (u64, u64),
    pub footer_offset: u64,
}

fn append_block(out: &mut Vec<u8>, spec: &Spec, contents: &[u8], compression: u8) -> (u64, u64) {
    let offset = out.len() as u64;
    out.extend_from_slice(contents);
    out.push(compression);
    let covered = &out[offset as usize..];
    let c = spec
        .checksum
        .compute(covered)
        .wrapping_add(context_modifier(spec.base_context_checksum, offset));
    out.extend_from_slice(&c.to_le_bytes());
    (offset, contents.len() as u64)
}

pub fn build(spec: &Spec) -> Built {
    let mut out: Vec<u8> = (0..spec.data_len).map(|i| (i * 31 % 251) as u8).collect();
    let index_contents = build_block(&[(b"zzz".to_vec(), handle(0, spec.data_len as u64))], 1);
    let index = append_block(&mut out, spec, &index_contents, spec.index_compression);
    let kvs: Vec<(Vec<u8>, Vec<u8>)> = spec
        .properties
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
        .collect();
    let props = build_block(&kvs, i32::MAX as usize);
    let properties = append_block(&mut out, spec, &props, 0);
    let mut meta: Vec<(Vec<u8>, Vec<u8>)> = vec![(
        b"rocksdb.properties".to_vec(),
        handle(properties.0, properties.1),
    )];
    if spec.format_version >= 6 {
        meta.push((b"rocksdb.index".to_vec(), handle(index.0, index.1)));
    }
    meta.sort();
    let metaindex = append_block(&mut out, spec, &build_block(&meta, 1), 0);
    let footer_offset = out.len() as u64;
    let mut f = vec![spec.checksum.as_u8()];
    if spec.format_version >= 6 {
        f.extend_from_slice(&[0x3e, 0x00, 0x7a, 0x00]);
        f.extend_from_slice(&[0; 4]);
        f.extend_from_slice(&spec.base_context_checksum.to_le_bytes());
        f.extend_from_slice(&(metaindex.1 as u32).to_le_bytes());
        f.extend_from_slice(&[0; 24]);
    } else {
        f.extend_from_slice(&handle(metaindex.0, metaindex.1));
        f.extend_from_slice(&handle(index.0, index.1));
        f.resize(41, 0);
    }
    f.extend_from_slice(&spec.format_version.to_le_bytes());
    f.extend_from_slice(&MAGIC.to_le_bytes());
    assert_eq!(f.len(), 53);
    if spec.format_version >= 6 {
        let c = spec
            .checksum
            .compute(&f)
            .wrapping_add(context_modifier(spec.base_context_checksum, footer_offset));
        f[5..9].copy_from_slice(&c.to_le_bytes());
    }
    out.extend_from_slice(&f);
    Built {
        bytes: out,
        index,
        properties,
        metaindex,
        footer_offset,
    }
}

pub fn all_checksums() -> [ChecksumType; 5] {
    [
        ChecksumType::NoChecksum,
        ChecksumType::Crc32c,
        ChecksumType::XxHash32,
        ChecksumType::XxHash64,
        ChecksumType::Xxh3,
    ]
}

pub fn spec(fv: u32, checksum: ChecksumType) -> Spec {
    Spec {
        format_version: fv,
        checksum,
        base_context_checksum: if fv >= 6 { 0x1234_5678 } else { 0 },
        properties: standard_properties(fv, 1000, 9),
        data_len: 300,
        index_compression: 0,
    }
}
