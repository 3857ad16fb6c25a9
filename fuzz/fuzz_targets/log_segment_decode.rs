//! Fuzzes the changelog segment decoder: the input as a whole segment, and its bytes after the
//! first as the raw body of an uncompressed segment with a correct header and CRC (the first
//! byte is the entry count), so mutations reach the body decoder past the CRC. Whatever decodes
//! must hand out every entry without error, and re-encoding the entries with the same first
//! sequence number and column families must decode to the same entries (and, for an
//! uncompressed input, give back the input's bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sst_format::{decode_log_segment, LogEntry, LogSegmentBuilder};

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some((&count, body)) = data.split_first() {
        check(&frame(u64::from(count), body));
    }
});

/// An uncompressed segment of `count` entries around `body`, with a correct CRC.
fn frame(count: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"RSCL\x01\x00\x00\x00".to_vec();
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    out
}

fn check(data: &[u8]) {
    let Ok(segment) = decode_log_segment(data) else {
        return;
    };
    let entries: Vec<LogEntry<'_>> = segment
        .entries()
        .map(|e| e.expect("an entry of a decoded segment"))
        .collect();
    assert_eq!(entries.len() as u64, segment.count());
    let mut b = LogSegmentBuilder::new();
    for e in &entries {
        match *e {
            LogEntry::Put { cf, key, value } => b.put(cf, key, value),
            LogEntry::Delete { cf, key } => b.delete(cf, key),
            LogEntry::DeleteRange { cf, start, end } => b.delete_range(cf, start, end),
        }
    }
    let again = b
        .finish(segment.first_seq(), segment.column_families(), false)
        .expect("re-encode");
    if data[6] == 0 {
        assert_eq!(
            again, data,
            "an uncompressed segment re-encodes to its own bytes"
        );
    }
    let decoded = decode_log_segment(&again).expect("decode re-encoded");
    assert_eq!(decoded.first_seq(), segment.first_seq());
    assert_eq!(decoded.column_families(), segment.column_families());
    let again_entries: Vec<LogEntry<'_>> = decoded
        .entries()
        .map(|e| e.expect("an entry of the re-encoded segment"))
        .collect();
    assert_eq!(again_entries, entries);
}
