//! A savepoint block declares its uncompressed length R (≤ 1 GiB, docs/savepoint-format.md).
//! The reader must not trust R to allocate before the zstd frame proves it (the changelog
//! decoder does exactly that: "the header's length is not trusted to allocate before the
//! frame proves it"): a 150-byte file must not make the reader allocate a gigabyte.

#[path = "common/largest_allocation.rs"]
mod largest_allocation;

#[global_allocator]
static A: largest_allocation::Largest = largest_allocation::Largest;

#[test]
fn a_tiny_block_declaring_a_gigabyte_is_refused_without_allocating_it() {
    let header = sst_format::SavepointHeader {
        max_parallelism: 128,
        key_group_start: 0,
        key_group_end: 127,
        states: vec![sst_format::StateMeta {
            name: "s".into(),
            kind: sst_format::StateKind::Value,
            codec: "c".into(),
            codec_version: 1,
            ttl: false,
        }],
        operator_state: vec![],
        created_at_ms: 1,
        event_time_watermark_ms: 0,
    };
    let mut w = sst_format::SavepointWriter::new(Vec::new(), &header, 1).unwrap();
    w.add(
        3,
        sst_format::SavepointEntry {
            state: 0,
            key: b"k",
            namespace: b"",
            suffix: b"",
            value: b"v",
        },
    )
    .unwrap();
    let mut bytes = w.finish().unwrap().0;
    let r = sst_format::SavepointReader::open(std::io::Cursor::new(&bytes)).unwrap();
    let e = r.index()[0];
    drop(r);
    // Declare R = 1 GiB - 1 in the block header and re-seal the block's CRC.
    let at = e.offset as usize;
    let len = e.len as usize;
    bytes[at + 6..at + 10].copy_from_slice(&((1u32 << 30) - 1).to_le_bytes());
    let crc = crc32fast::hash(&bytes[at..at + len - 4]);
    bytes[at + len - 4..at + len].copy_from_slice(&crc.to_le_bytes());
    assert!(bytes.len() < 200, "{}", bytes.len());

    let mut r = sst_format::SavepointReader::open(std::io::Cursor::new(&bytes)).unwrap();
    largest_allocation::reset();
    let got = r.for_each_entry(&e, |_| Ok(()));
    let largest = largest_allocation::largest();
    assert!(got.is_err(), "{got:?}");
    assert!(
        largest < 64 << 20,
        "reading a {}-byte savepoint allocated {largest} bytes at once",
        bytes.len()
    );
}
