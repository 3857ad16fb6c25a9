//! The changelog segment codec (docs/changelog-format.md): one uploaded piece of a backend's
//! log of state changes, replayed on top of a materialization at restore.
//!
//! This module owns the byte layout of a segment object (`shared/<id>-<ms>-<16 hex>.log`):
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSCL"
//! 4       2     format version, u16 little-endian (LOG_SEGMENT_VERSION = 1)
//! 6       1     body compression: 0 none, 1 zstd
//! 7       1     reserved, 0
//! 8       8     first sequence number, u64 little-endian
//! 16      8     entry count, u64 little-endian
//! 24      4     raw (decompressed) body length, u32 little-endian
//! 28      4     stored body length N, u32 little-endian
//! 32      N     body (raw, or one zstd frame of it)
//! 32+N    4     CRC-32 (IEEE, crc32fast) of bytes 0 .. 32+N, u32 little-endian
//! ```
//!
//! The raw body is the column-family table (varint count, then each name as varint length and
//! UTF-8 bytes) followed by exactly `entry count` entries, each `op` (1 byte: 1 put, 2 delete,
//! 3 range delete), the column family's index into the table (varint), the key (varint
//! length, bytes) and, for a put its value, for a range delete its exclusive end key (varint
//! length, bytes). The decoder checks the whole segment before handing out an entry, so a
//! damaged segment is refused whole and never half applied.

use crate::coding::{fixed32, fixed64, put_varint64, Cursor};
use crate::decompress::{decompress_bounded, Output};
use crate::error::{Error, Result};

/// First four bytes of every changelog segment.
pub const LOG_SEGMENT_MAGIC: [u8; 4] = *b"RSCL";

/// The segment format version this build writes and reads.
pub const LOG_SEGMENT_VERSION: u16 = 1;

/// Bytes before the body.
pub const LOG_SEGMENT_HEADER_LEN: usize = 32;

/// Bytes after the body: the CRC-32.
pub const LOG_SEGMENT_TRAILER_LEN: usize = 4;

/// Upper bound on a segment's raw body, on both encode and decode (a writer cuts segments far
/// smaller); anything larger is refused with [`Error::TooLarge`].
pub const MAX_LOG_SEGMENT_BODY_BYTES: u64 = 1 << 30;

/// zstd level of compressed segment bodies. Decoding does not depend on it.
pub const LOG_SEGMENT_ZSTD_LEVEL: i32 = 1;

const COMPRESSION_NONE: u8 = 0;
const COMPRESSION_ZSTD: u8 = 1;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_DELETE_RANGE: u8 = 3;

/// One change in a segment, borrowing from the decoded body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEntry<'a> {
    /// `key` now holds `value`.
    Put {
        /// Index of the column family in [`LogSegment::column_families`].
        cf: u32,
        /// The stored key.
        key: &'a [u8],
        /// The stored value.
        value: &'a [u8],
    },
    /// `key` was deleted.
    Delete {
        /// Index of the column family in [`LogSegment::column_families`].
        cf: u32,
        /// The stored key.
        key: &'a [u8],
    },
    /// Every key in `[start, end)` was deleted.
    DeleteRange {
        /// Index of the column family in [`LogSegment::column_families`].
        cf: u32,
        /// First key deleted.
        start: &'a [u8],
        /// First key after the deleted range.
        end: &'a [u8],
    },
}

impl LogEntry<'_> {
    /// The column family's index.
    pub fn cf(&self) -> u32 {
        match *self {
            LogEntry::Put { cf, .. }
            | LogEntry::Delete { cf, .. }
            | LogEntry::DeleteRange { cf, .. } => cf,
        }
    }
}

/// Appends changes and encodes them as one segment. Column families are named by index; the
/// table of names is given when the segment is finished.
#[derive(Debug, Default, Clone)]
pub struct LogSegmentBuilder {
    entries: Vec<u8>,
    count: u64,
    max_cf: Option<u32>,
}

impl LogSegmentBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a put.
    pub fn put(&mut self, cf: u32, key: &[u8], value: &[u8]) {
        self.entry(OP_PUT, cf, key, Some(value));
    }

    /// Records a delete.
    pub fn delete(&mut self, cf: u32, key: &[u8]) {
        self.entry(OP_DELETE, cf, key, None);
    }

    /// Records the deletion of every key in `[start, end)`.
    pub fn delete_range(&mut self, cf: u32, start: &[u8], end: &[u8]) {
        self.entry(OP_DELETE_RANGE, cf, start, Some(end));
    }

    fn entry(&mut self, op: u8, cf: u32, key: &[u8], second: Option<&[u8]>) {
        self.entries.push(op);
        put_varint64(&mut self.entries, u64::from(cf));
        put_varint64(&mut self.entries, key.len() as u64);
        self.entries.extend_from_slice(key);
        if let Some(v) = second {
            put_varint64(&mut self.entries, v.len() as u64);
            self.entries.extend_from_slice(v);
        }
        self.count += 1;
        self.max_cf = Some(self.max_cf.map_or(cf, |m| m.max(cf)));
    }

    /// Entries recorded.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether no entry was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the encoded entries so far.
    pub fn bytes(&self) -> usize {
        self.entries.len()
    }

    /// An upper bound on the length of [`LogSegmentBuilder::finish`]'s output for the same
    /// column families and compression (what a writer can plan with before encoding).
    pub fn encoded_len_bound(&self, column_families: &[String], compress: bool) -> u64 {
        let names: usize = column_families.iter().map(|n| 10 + n.len()).sum();
        let raw = 10 + names + self.entries.len();
        let body = if compress {
            zstd::zstd_safe::compress_bound(raw).max(raw)
        } else {
            raw
        };
        (LOG_SEGMENT_HEADER_LEN + LOG_SEGMENT_TRAILER_LEN) as u64 + body as u64
    }

    /// Encodes the segment: entries numbered from `first_seq`, column family `i` named
    /// `column_families[i]`, the body zstd-compressed when `compress`. Every index used must
    /// name a column family; the body must stay within [`MAX_LOG_SEGMENT_BODY_BYTES`].
    pub fn finish(
        &self,
        first_seq: u64,
        column_families: &[String],
        compress: bool,
    ) -> Result<Vec<u8>> {
        if first_seq.checked_add(self.count).is_none() {
            return Err(Error::corrupt(format!(
                "log sequence numbers overflow: {} entries from {first_seq}",
                self.count
            )));
        }
        for (i, name) in column_families.iter().enumerate() {
            if column_families[..i].contains(name) {
                return Err(Error::corrupt(format!(
                    "column family `{name}` named twice"
                )));
            }
        }
        if let Some(m) = self.max_cf {
            if m as usize >= column_families.len() {
                return Err(Error::corrupt(format!(
                    "log entry names column family {m}, the table has {}",
                    column_families.len()
                )));
            }
        }
        let mut raw = Vec::with_capacity(self.entries.len() + 16 * column_families.len() + 8);
        put_varint64(&mut raw, column_families.len() as u64);
        for name in column_families {
            put_varint64(&mut raw, name.len() as u64);
            raw.extend_from_slice(name.as_bytes());
        }
        raw.extend_from_slice(&self.entries);
        if raw.len() as u64 > MAX_LOG_SEGMENT_BODY_BYTES {
            return Err(Error::TooLarge {
                what: "log segment body",
                size: raw.len() as u64,
                limit: MAX_LOG_SEGMENT_BODY_BYTES,
            });
        }
        let raw_len = raw.len() as u32; // <= 1 GiB, checked above
        let (compression, body) = if compress {
            let c =
                zstd::bulk::compress(&raw, LOG_SEGMENT_ZSTD_LEVEL).map_err(Error::Decompress)?;
            (COMPRESSION_ZSTD, c)
        } else {
            (COMPRESSION_NONE, raw)
        };
        let body_len = u32::try_from(body.len()).map_err(|_| Error::TooLarge {
            what: "stored log segment body",
            size: body.len() as u64,
            limit: u64::from(u32::MAX),
        })?;
        let mut out =
            Vec::with_capacity(LOG_SEGMENT_HEADER_LEN + body.len() + LOG_SEGMENT_TRAILER_LEN);
        out.extend_from_slice(&LOG_SEGMENT_MAGIC);
        out.extend_from_slice(&LOG_SEGMENT_VERSION.to_le_bytes());
        out.push(compression);
        out.push(0);
        out.extend_from_slice(&first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&raw_len.to_le_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
        Ok(out)
    }
}

/// A decoded, fully checked segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSegment {
    first_seq: u64,
    count: u64,
    column_families: Vec<String>,
    raw: Vec<u8>,
    entries_at: usize,
}

impl LogSegment {
    /// Sequence number of the first entry; entry `i` has `first_seq + i`.
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// Number of entries.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The column families the entries name, by index (no name twice).
    pub fn column_families(&self) -> &[String] {
        &self.column_families
    }

    /// The entries, in log order.
    pub fn entries(&self) -> LogEntries<'_> {
        LogEntries {
            cursor: Cursor::new(self.raw.get(self.entries_at..).unwrap_or(&[])),
            left: self.count,
            tables: self.column_families.len(),
        }
    }

    /// The sequence number after the last entry.
    pub fn end_seq(&self) -> u64 {
        self.first_seq.saturating_add(self.count)
    }
}

/// Iterator over a [`LogSegment`]'s entries.
#[derive(Debug, Clone)]
pub struct LogEntries<'a> {
    cursor: Cursor<'a>,
    left: u64,
    tables: usize,
}

impl<'a> Iterator for LogEntries<'a> {
    type Item = Result<LogEntry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let e = read_entry(&mut self.cursor, self.tables);
        if e.is_err() {
            self.left = 0;
        }
        Some(e)
    }
}

fn read_entry<'a>(c: &mut Cursor<'a>, tables: usize) -> Result<LogEntry<'a>> {
    let op = c.take(1, "log entry op")?[0];
    let cf = c.varint32("log entry column family")?;
    if cf as usize >= tables {
        return Err(Error::corrupt(format!(
            "log entry names column family {cf}, the table has {tables}"
        )));
    }
    let key = length_prefixed(c, "log entry key")?;
    match op {
        OP_PUT => Ok(LogEntry::Put {
            cf,
            key,
            value: length_prefixed(c, "log entry value")?,
        }),
        OP_DELETE => Ok(LogEntry::Delete { cf, key }),
        OP_DELETE_RANGE => Ok(LogEntry::DeleteRange {
            cf,
            start: key,
            end: length_prefixed(c, "log entry range end")?,
        }),
        other => Err(Error::corrupt(format!("unknown log entry op {other}"))),
    }
}

fn length_prefixed<'a>(c: &mut Cursor<'a>, what: &'static str) -> Result<&'a [u8]> {
    let len = c.varint64(what)?;
    let len = usize::try_from(len).map_err(|_| Error::corrupt(format!("{what}: length {len}")))?;
    c.take(len, what)
}

/// Decodes and checks a whole segment: magic, version, lengths, CRC, compression, the
/// column-family table (UTF-8 names) and every entry, which must use the body exactly.
/// Errors: [`Error::BadMagic`], [`Error::UnknownVersion`], [`Error::Truncated`],
/// [`Error::Corrupt`], [`Error::RecordChecksum`], [`Error::Decompress`], [`Error::TooLarge`].
pub fn decode_log_segment(bytes: &[u8]) -> Result<LogSegment> {
    let magic_len = bytes.len().min(LOG_SEGMENT_MAGIC.len());
    if bytes[..magic_len] != LOG_SEGMENT_MAGIC[..magic_len] {
        return Err(Error::BadMagic {
            what: "log segment",
            expected: LOG_SEGMENT_MAGIC.to_vec(),
            found: bytes[..magic_len].to_vec(),
        });
    }
    let truncated = |needed: u64| Error::Truncated {
        what: "log segment",
        needed,
        available: bytes.len() as u64,
    };
    if bytes.len() < 6 {
        return Err(truncated(LOG_SEGMENT_HEADER_LEN as u64));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != LOG_SEGMENT_VERSION {
        return Err(Error::UnknownVersion {
            what: "log segment",
            version,
            supported: LOG_SEGMENT_VERSION,
        });
    }
    if bytes.len() < LOG_SEGMENT_HEADER_LEN {
        return Err(truncated(LOG_SEGMENT_HEADER_LEN as u64));
    }
    let compression = bytes[6];
    let reserved = bytes[7];
    let (Some(first_seq), Some(count), Some(raw_len), Some(body_len)) = (
        fixed64(bytes, 8),
        fixed64(bytes, 16),
        fixed32(bytes, 24),
        fixed32(bytes, 28),
    ) else {
        return Err(truncated(LOG_SEGMENT_HEADER_LEN as u64));
    };
    let total =
        LOG_SEGMENT_HEADER_LEN as u64 + u64::from(body_len) + LOG_SEGMENT_TRAILER_LEN as u64;
    if (bytes.len() as u64) < total {
        return Err(truncated(total));
    }
    if (bytes.len() as u64) > total {
        return Err(Error::corrupt(format!(
            "{} bytes after the log segment CRC (expected {total} bytes in total)",
            bytes.len() as u64 - total
        )));
    }
    let body_end = bytes.len() - LOG_SEGMENT_TRAILER_LEN;
    let stored = fixed32(bytes, body_end).ok_or_else(|| Error::corrupt("log segment CRC"))?;
    let computed = crc32fast::hash(&bytes[..body_end]);
    if stored != computed {
        return Err(Error::RecordChecksum {
            what: "log segment",
            stored,
            computed,
        });
    }
    if reserved != 0 {
        return Err(Error::corrupt(format!(
            "log segment reserved byte {reserved}"
        )));
    }
    if first_seq.checked_add(count).is_none() {
        return Err(Error::corrupt(format!(
            "log segment sequence numbers overflow: {count} entries from {first_seq}"
        )));
    }
    if u64::from(raw_len) > MAX_LOG_SEGMENT_BODY_BYTES {
        return Err(Error::TooLarge {
            what: "log segment body",
            size: u64::from(raw_len),
            limit: MAX_LOG_SEGMENT_BODY_BYTES,
        });
    }
    let body = &bytes[LOG_SEGMENT_HEADER_LEN..body_end];
    let raw = match compression {
        COMPRESSION_NONE => body.to_vec(),
        COMPRESSION_ZSTD => {
            // The header's length bounds the output, and allocates nothing before the frame
            // produces it.
            let mut raw = Vec::new();
            match decompress_bounded(body, raw_len as usize, &mut raw)? {
                Output::Within => raw,
                Output::Over => {
                    return Err(Error::corrupt(format!(
                        "log segment body is more than {raw_len} bytes, the header says {raw_len}"
                    )))
                }
            }
        }
        other => {
            return Err(Error::corrupt(format!(
                "unknown log segment compression {other}"
            )))
        }
    };
    if raw.len() as u64 != u64::from(raw_len) {
        return Err(Error::corrupt(format!(
            "log segment body is {} bytes, the header says {raw_len}",
            raw.len()
        )));
    }
    let mut c = Cursor::new(&raw);
    let tables = c.varint64("log segment column family count")?;
    let mut column_families = Vec::new();
    for _ in 0..tables {
        let name = length_prefixed(&mut c, "log segment column family name")?;
        let name = std::str::from_utf8(name)
            .map_err(|_| Error::corrupt("log segment column family name is not UTF-8"))?;
        if column_families.iter().any(|n| n == name) {
            return Err(Error::corrupt(format!(
                "log segment names column family `{name}` twice"
            )));
        }
        column_families.push(name.to_string());
    }
    let entries_at = c.position();
    // Check every entry now, so a damaged segment is refused before any entry is used.
    for _ in 0..count {
        read_entry(&mut c, column_families.len())?;
    }
    if !c.is_empty() {
        return Err(Error::corrupt(format!(
            "{} bytes after the last of {count} log entries",
            c.remaining().len()
        )));
    }
    Ok(LogSegment {
        first_seq,
        count,
        column_families,
        raw,
        entries_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = LogSegmentBuilder::new();
        b.put(1, b"k1", b"v1");
        b.delete(0, b"meta");
        b.delete_range(1, b"a", b"b");
        b.finish(42, &["default".into(), "state:s".into()], false)
            .unwrap()
    }

    #[test]
    fn the_encoded_length_stays_within_its_bound() {
        let names = ["default".to_string(), "state:s".to_string()];
        let mut incompressible = LogSegmentBuilder::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..2000u32 {
            let value: Vec<u8> = (0..100)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            incompressible.put(1, &i.to_be_bytes(), &value);
        }
        let mut empty_names = LogSegmentBuilder::new();
        empty_names.delete(0, b"k");
        for (b, names) in [(&incompressible, &names[..]), (&empty_names, &names[..1])] {
            for compress in [false, true] {
                let len = b.finish(7, names, compress).unwrap().len() as u64;
                let bound = b.encoded_len_bound(names, compress);
                assert!(len <= bound, "{len} > {bound} (compress {compress})");
            }
        }
    }

    #[test]
    fn round_trip_both_compressions() {
        for compress in [false, true] {
            let mut b = LogSegmentBuilder::new();
            b.put(1, b"k1", b"v1");
            b.delete(0, b"meta");
            b.delete_range(1, b"a", b"b");
            let bytes = b
                .finish(42, &["default".into(), "state:s".into()], compress)
                .unwrap();
            let s = decode_log_segment(&bytes).unwrap();
            assert_eq!((s.first_seq, s.count, s.end_seq()), (42, 3, 45));
            let got: Vec<_> = s.entries().collect::<Result<_>>().unwrap();
            assert_eq!(
                got,
                vec![
                    LogEntry::Put {
                        cf: 1,
                        key: b"k1",
                        value: b"v1"
                    },
                    LogEntry::Delete {
                        cf: 0,
                        key: b"meta"
                    },
                    LogEntry::DeleteRange {
                        cf: 1,
                        start: b"a",
                        end: b"b"
                    },
                ]
            );
        }
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode_log_segment(&b).is_err(), "bit {i}");
        }
        for n in 0..bytes.len() {
            assert!(decode_log_segment(&bytes[..n]).is_err(), "cut at {n}");
        }
    }

    #[test]
    fn unknown_table_index_is_refused_on_encode() {
        let mut b = LogSegmentBuilder::new();
        b.put(3, b"k", b"v");
        assert!(matches!(
            b.finish(0, &["default".into()], false),
            Err(Error::Corrupt { .. })
        ));
    }
}
