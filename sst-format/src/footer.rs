//! The 53-byte footer of a RocksDB block-based table and the [`BlockHandle`]s it points with.
//!
//! This module owns the footer layout of `table/format.cc` (`FooterBuilder::Build`,
//! `Footer::DecodeFrom`) for format_version 2..=7: magic and version checks, the fv <= 5
//! handle-based part 2 and the fv >= 6 part 2 with its extended magic, footer checksum,
//! base context checksum and metaindex size. See `docs/sst-format.md` for the byte map.

use crate::checksum::{context_modifier, ChecksumType};
use crate::coding::{fixed32, fixed64, Cursor};
use crate::error::{Error, Result};

/// Length of every footer with format_version >= 1 (`Footer::kNewVersionsEncodedLength`).
pub const FOOTER_LEN: usize = 53;

/// Length of the trailer after every block: 1 compression-type byte + 4 checksum bytes
/// (`BlockBasedTable::kBlockTrailerSize`).
pub const BLOCK_TRAILER_LEN: u64 = 5;

/// `kBlockBasedTableMagicNumber`, stored little-endian in the last 8 bytes of the file.
pub const BLOCK_BASED_TABLE_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;

/// Oldest block-based format_version this reader (like RocksDB 11.8) reads.
pub const MIN_FORMAT_VERSION: u32 = 2;

/// Newest block-based format_version this reader (like RocksDB 11.8) reads.
pub const MAX_FORMAT_VERSION: u32 = 7;

/// First format_version whose footer carries a checksum and whose blocks use context checksums.
pub const FIRST_CONTEXT_CHECKSUM_VERSION: u32 = 6;

/// Magic of block-based tables with format_version 0 (LevelDB-style 48-byte footer).
const LEGACY_BLOCK_BASED_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const PLAIN_TABLE_MAGIC: u64 = 0x8242_2296_63bf_9564;
const LEGACY_PLAIN_TABLE_MAGIC: u64 = 0x4f34_18eb_7a8f_13b8;
const CUCKOO_TABLE_MAGIC: u64 = 0x9267_89d0_c5f1_7873;

/// `kExtendedMagic` at footer bytes 1..5 when format_version >= 6.
const EXTENDED_MAGIC: [u8; 4] = [0x3e, 0x00, 0x7a, 0x00];

/// Position of the fv >= 6 footer checksum inside the footer.
const FOOTER_CHECKSUM_POS: usize = 5;

/// Location of a block: `offset` in the file and `size` of its contents, **excluding** the
/// 5-byte trailer (RocksDB's `BlockHandle`, encoded as two varint64s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BlockHandle {
    /// File offset of the first content byte.
    pub offset: u64,
    /// Content size in bytes, without the trailer.
    pub size: u64,
}

impl BlockHandle {
    /// Offset one past the block's trailer, or `None` on overflow.
    pub fn end_with_trailer(&self) -> Option<u64> {
        self.offset
            .checked_add(self.size)?
            .checked_add(BLOCK_TRAILER_LEN)
    }

    /// Decodes a handle (`varint64 offset, varint64 size`) from the front of `cur`.
    pub(crate) fn decode(cur: &mut Cursor<'_>, what: &'static str) -> Result<Self> {
        let offset = cur.varint64(what)?;
        let size = cur.varint64(what)?;
        Ok(BlockHandle { offset, size })
    }

    /// Decodes a handle that must occupy all of `bytes`.
    pub(crate) fn decode_exact(bytes: &[u8], what: &'static str) -> Result<Self> {
        let mut cur = Cursor::new(bytes);
        let h = Self::decode(&mut cur, what)?;
        if !cur.is_empty() {
            return Err(Error::corrupt(format!(
                "{what}: trailing bytes after block handle"
            )));
        }
        Ok(h)
    }
}

/// A decoded and verified footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Footer {
    /// File offset of the footer (`file_size - 53`); also the context for its checksum.
    pub footer_offset: u64,
    /// Checksum algorithm of the footer (fv >= 6) and every block.
    pub checksum_type: ChecksumType,
    /// The table's format_version, 2..=7.
    pub format_version: u32,
    /// Where the metaindex block is. For fv >= 6 it is derived: the block ends right before the
    /// footer (`offset = footer_offset - 5 - size`).
    pub metaindex_handle: BlockHandle,
    /// The index block handle stored in fv <= 5 footers. `None` for fv >= 6, whose index
    /// handle is the metaindex entry `rocksdb.index`.
    pub index_handle: Option<BlockHandle>,
    /// The fv >= 6 per-file random `base_context_checksum` (never 0 there); 0 for fv <= 5,
    /// which disables the context modifier.
    pub base_context_checksum: u32,
}

impl Footer {
    /// Whether blocks of this table carry context checksums (format_version >= 6).
    pub fn uses_context_checksum(&self) -> bool {
        self.format_version >= FIRST_CONTEXT_CHECKSUM_VERSION
    }
}

/// Decodes and verifies the footer found in the last 53 bytes of `tail`, where `tail` is the
/// end of a file of `file_size` bytes (`tail` may be the whole file or just its last bytes).
///
/// Checks, in RocksDB's order: table magic; format_version in 2..=7 (else
/// [`Error::UnsupportedFormatVersion`]); checksum type 0..=4; for fv >= 6 the extended magic,
/// a non-zero base context checksum, the footer checksum (with context) and the 8 reserved
/// bytes that must be zero; for fv <= 5 two strictly-decoded handles followed by zero padding.
pub fn parse_footer(tail: &[u8], file_size: u64) -> Result<Footer> {
    parse_footer_impl(tail, file_size, true)
}

pub(crate) fn parse_footer_impl(tail: &[u8], file_size: u64, verify: bool) -> Result<Footer> {
    if file_size < FOOTER_LEN as u64 || tail.len() < FOOTER_LEN {
        return Err(Error::Truncated {
            what: "SST footer",
            needed: FOOTER_LEN as u64,
            available: file_size.min(tail.len() as u64),
        });
    }
    if tail.len() as u64 > file_size {
        return Err(Error::corrupt(format!(
            "tail of {} bytes is longer than the file ({file_size} bytes)",
            tail.len()
        )));
    }
    // tail.len() >= FOOTER_LEN, checked above.
    let footer = &tail[tail.len() - FOOTER_LEN..];
    let footer_offset = file_size - FOOTER_LEN as u64;

    let magic = fixed64(footer, 45).ok_or_else(|| Error::corrupt("footer magic"))?;
    match magic {
        BLOCK_BASED_TABLE_MAGIC => {}
        LEGACY_BLOCK_BASED_MAGIC => {
            return Err(Error::Unsupported(
                "legacy block-based table (format_version 0), not readable by RocksDB >= 11".into(),
            ))
        }
        PLAIN_TABLE_MAGIC | LEGACY_PLAIN_TABLE_MAGIC => {
            return Err(Error::Unsupported("plain table format".into()))
        }
        CUCKOO_TABLE_MAGIC => return Err(Error::Unsupported("cuckoo table format".into())),
        _ => {
            return Err(Error::BadMagic {
                what: "table",
                expected: BLOCK_BASED_TABLE_MAGIC.to_le_bytes().to_vec(),
                found: magic.to_le_bytes().to_vec(),
            })
        }
    }

    let format_version = fixed32(footer, 41).ok_or_else(|| Error::corrupt("footer version"))?;
    if !(MIN_FORMAT_VERSION..=MAX_FORMAT_VERSION).contains(&format_version) {
        return Err(Error::UnsupportedFormatVersion(format_version));
    }
    let checksum_type = ChecksumType::from_u8(footer[0])?;

    if format_version >= FIRST_CONTEXT_CHECKSUM_VERSION {
        let ext = &footer[1..5];
        if ext != EXTENDED_MAGIC {
            return Err(Error::BadMagic {
                what: "extended footer",
                expected: EXTENDED_MAGIC.to_vec(),
                found: ext.to_vec(),
            });
        }
        let stored = fixed32(footer, FOOTER_CHECKSUM_POS)
            .ok_or_else(|| Error::corrupt("footer checksum"))?;
        let base_context_checksum =
            fixed32(footer, 9).ok_or_else(|| Error::corrupt("footer base context checksum"))?;
        if base_context_checksum == 0 {
            return Err(Error::corrupt(
                "invalid base context checksum 0 in fv >= 6 footer",
            ));
        }
        let mut copy = [0u8; FOOTER_LEN];
        copy.copy_from_slice(footer);
        copy[FOOTER_CHECKSUM_POS..FOOTER_CHECKSUM_POS + 4].fill(0);
        let computed = checksum_type.compute(&copy);
        let modifier = context_modifier(base_context_checksum, footer_offset);
        if verify && computed.wrapping_add(modifier) != stored {
            return Err(Error::ChecksumMismatch {
                block: "footer",
                offset: footer_offset,
                stored: stored.wrapping_sub(modifier),
                computed,
            });
        }
        let metaindex_size =
            fixed32(footer, 13).ok_or_else(|| Error::corrupt("footer metaindex size"))?;
        let metaindex_end = footer_offset
            .checked_sub(BLOCK_TRAILER_LEN)
            .ok_or_else(|| Error::corrupt("file too short for a metaindex block"))?;
        let metaindex_offset = metaindex_end
            .checked_sub(u64::from(metaindex_size))
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "metaindex size {metaindex_size} exceeds the {metaindex_end} bytes before the footer"
                ))
            })?;
        // Bytes 17..33 are reserved and unchecked (but covered by the footer checksum);
        // bytes 33..41 must be zero unless a future feature is in use.
        let reserved = fixed64(footer, 33).ok_or_else(|| Error::corrupt("footer reserved"))?;
        if reserved != 0 {
            return Err(Error::Unsupported(
                "fv >= 6 footer uses a future feature (reserved bytes 33..41 non-zero)".into(),
            ));
        }
        Ok(Footer {
            footer_offset,
            checksum_type,
            format_version,
            metaindex_handle: BlockHandle {
                offset: metaindex_offset,
                size: u64::from(metaindex_size),
            },
            index_handle: None,
            base_context_checksum,
        })
    } else {
        let part2 = &footer[1..41];
        let mut cur = Cursor::new(part2);
        let metaindex_handle = BlockHandle::decode(&mut cur, "footer metaindex handle")?;
        let index_handle = BlockHandle::decode(&mut cur, "footer index handle")?;
        // RocksDB ignores this padding, but every RocksDB (and LevelDB) writer zeroes it; we
        // insist, because nothing else protects an fv <= 5 footer.
        if cur.remaining().iter().any(|&b| b != 0) {
            return Err(Error::corrupt(format!(
                "non-zero footer padding at footer bytes {}..41",
                1 + cur.position()
            )));
        }
        Ok(Footer {
            footer_offset,
            checksum_type,
            format_version,
            metaindex_handle,
            index_handle: Some(index_handle),
            base_context_checksum: 0,
        })
    }
}
