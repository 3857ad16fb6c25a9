//! The canonical savepoint format (docs/savepoint-format.md): one self-contained, portable file
//! holding a backend's keyed state (and operator state), independent of RocksDB and of
//! parallelism.
//!
//! ```text
//! preamble   "RSSP" | u16 version (LE) | u16 flags = 0
//! header     u32 len (LE) | postcard(SavepointHeader) | u32 crc32(postcard bytes)
//! blocks     per key group that has entries, in ascending key-group order, one or more
//!            consecutive blocks each (several since version 4):
//!            u16 key group (LE) | u32 entry count | u32 raw len | u32 compressed len
//!            | zstd(raw entries) | u32 crc32(everything from the key group to the last zstd byte)
//! index      u32 count | count × (u16 key group | u64 block offset | u32 block len | u32 entries)
//!            | u32 crc32(count and entries)
//! footer     u64 index offset | u32 index len | u32 crc32(the 12 bytes before) | "RSSP"
//! ```
//! All integers little-endian. A raw entry is
//! `varint state | varint len, key | varint len, namespace | varint len, suffix | varint len, value`
//! where `state` indexes `SavepointHeader::states`, `suffix` is the map user key or the list
//! entry's position (followed by `0x01` for a run of elements, version 2), and `value` is stored as the backend stores it (TTL states: with their
//! 8-byte timestamp). See `docs/savepoint-format.md`.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::{Deserialize, Serialize};

use crate::coding::{put_varint64, varint64_len, Cursor};
use crate::decompress::{decompress_bounded, Output};
use crate::error::{Error, Result};
use crate::meta::{OperatorListState, StateMeta};

/// First four bytes (and last four) of every savepoint.
pub const SAVEPOINT_MAGIC: [u8; 4] = *b"RSSP";
/// The version this build writes. Version 2 added list runs (an entry whose suffix is the
/// 8-byte position followed by `0x01`, holding several framed elements); a build that reads
/// only version 1 would take a run for one element, so it must refuse version 2. Version 3
/// added the event-time watermark at the header's end
/// ([`SavepointHeader::event_time_watermark_ms`]). Version 4 lets a key group continue over
/// several consecutive blocks (its index entries repeat the key group), so a writer holds one
/// block of at most about [`BLOCK_TARGET_BYTES`] at a time whatever a key group holds; a build
/// that reads only version 3 would call such an index corrupt, so it must refuse version 4.
pub const SAVEPOINT_VERSION: u16 = 4;
/// The oldest version this build reads (version 1 is version 2 without list runs).
pub const SAVEPOINT_MIN_VERSION: u16 = 1;
/// Length of the fixed footer.
pub const SAVEPOINT_FOOTER_LEN: u64 = 20;
const PREAMBLE_LEN: u64 = 8;
const BLOCK_HEADER_LEN: usize = 14;
const INDEX_ENTRY_LEN: usize = 18;
/// Largest accepted header (postcard bytes).
pub const MAX_HEADER_BYTES: u32 = 64 << 20;
/// Largest accepted uncompressed key-group block.
pub const MAX_BLOCK_BYTES: u32 = 1 << 30;
/// Uncompressed bytes at which [`SavepointWriter::add`] ends a key group's block and continues
/// the key group in a new one (callers building blocks themselves cut them the same way,
/// [`BlockBuilder::raw_len`]). Small enough that writer and reader hold a few such blocks per
/// thread, not a key group; large enough that zstd at level 1 (a 512 KiB window) compresses
/// as well as in one block and the index stays small (18 bytes per block).
pub const BLOCK_TARGET_BYTES: u32 = 4 << 20;
/// The first version whose key groups may continue over several blocks.
const CONTINUED_BLOCKS_VERSION: u16 = 4;

/// Everything in a savepoint besides the keyed entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointHeader {
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// First key group covered (inclusive).
    pub key_group_start: u16,
    /// Last key group covered (inclusive).
    pub key_group_end: u16,
    /// The states; entries refer to them by position.
    pub states: Vec<StateMeta>,
    /// Operator (non-keyed) state.
    pub operator_state: Vec<OperatorListState>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The event-time watermark (milliseconds) the backend had reached: event-time TTL states
    /// expire against it, and a restored backend starts there. 0 when none was set, and for
    /// files of versions 1 and 2, which do not hold it.
    pub event_time_watermark_ms: u64,
}

/// The header of versions 1 and 2: [`SavepointHeader`] without its last field.
#[derive(Deserialize)]
struct HeaderV2 {
    max_parallelism: u32,
    key_group_start: u16,
    key_group_end: u16,
    states: Vec<StateMeta>,
    operator_state: Vec<OperatorListState>,
    created_at_ms: u64,
}

impl From<HeaderV2> for SavepointHeader {
    fn from(h: HeaderV2) -> Self {
        SavepointHeader {
            max_parallelism: h.max_parallelism,
            key_group_start: h.key_group_start,
            key_group_end: h.key_group_end,
            states: h.states,
            operator_state: h.operator_state,
            created_at_ms: h.created_at_ms,
            event_time_watermark_ms: 0,
        }
    }
}

/// Decodes a header of file version `version` (the whole of `body`).
fn decode_header(version: u16, body: &[u8]) -> Result<SavepointHeader> {
    let (header, rest) = if version < 3 {
        let (h, rest): (HeaderV2, _) = postcard::take_from_bytes(body).map_err(Error::Decode)?;
        (SavepointHeader::from(h), rest)
    } else {
        postcard::take_from_bytes(body).map_err(Error::Decode)?
    };
    if !rest.is_empty() || header.key_group_start > header.key_group_end {
        return Err(corrupt("savepoint header"));
    }
    // Entries name their state by position; two positions of one name would restore into
    // one state, the later entries silently winning.
    let mut names: Vec<&str> = header.states.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(corrupt(format!(
            "savepoint header names state {:?} twice",
            w[0]
        )));
    }
    Ok(header)
}

/// One keyed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavepointEntry<'a> {
    /// Position of the entry's state in [`SavepointHeader::states`].
    pub state: u32,
    /// Serialized key.
    pub key: &'a [u8],
    /// Serialized namespace.
    pub namespace: &'a [u8],
    /// Map user key, list element position, or empty.
    pub suffix: &'a [u8],
    /// Stored value.
    pub value: &'a [u8],
}

/// Where one block of a key group lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The key group.
    pub key_group: u16,
    /// File offset of the block.
    pub offset: u64,
    /// Block length including its header and crc.
    pub len: u32,
    /// Entries in the block.
    pub entries: u32,
}

/// Totals of a written savepoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SavepointStats {
    /// Entries written.
    pub entries: u64,
    /// Key-group blocks written.
    pub blocks: u64,
    /// Uncompressed entry bytes.
    pub raw_bytes: u64,
    /// Bytes of the whole file.
    pub file_bytes: u64,
}

fn corrupt(what: impl Into<String>) -> Error {
    Error::Corrupt { what: what.into() }
}

/// The raw bytes `entry` takes in a block.
fn entry_len(entry: &SavepointEntry<'_>) -> u64 {
    let parts = [entry.key, entry.namespace, entry.suffix, entry.value];
    varint64_len(u64::from(entry.state)) as u64
        + parts
            .iter()
            .map(|p| (varint64_len(p.len() as u64) + p.len()) as u64)
            .sum::<u64>()
}

/// The entries of one key group, encoded and compressed into a savepoint block. Independent
/// of any writer, so blocks of different key groups can be built on several threads; hand the
/// results to [`SavepointWriter::write_block`] in ascending key-group order.
pub struct BlockBuilder {
    key_group: u16,
    states: u32,
    entries: u32,
    raw: Vec<u8>,
}

/// A finished savepoint block (framed, compressed, checksummed), ready to be written.
pub struct EncodedBlock {
    key_group: u16,
    entries: u32,
    raw_len: u64,
    bytes: Vec<u8>,
}

impl EncodedBlock {
    /// The key group the block holds.
    pub fn key_group(&self) -> u16 {
        self.key_group
    }
}

impl BlockBuilder {
    /// An empty block of `key_group` for a savepoint whose header lists `states` states.
    pub fn new(key_group: u16, states: u32) -> Self {
        BlockBuilder {
            key_group,
            states,
            entries: 0,
            raw: Vec::new(),
        }
    }

    /// Whether no entry was added.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The uncompressed bytes of the entries added: once at least [`BLOCK_TARGET_BYTES`],
    /// encode the block and continue the key group in a new one.
    pub fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// Whether `entry` should go into a new block of the key group instead of this one: this
    /// one reached [`BLOCK_TARGET_BYTES`], or holds entries and would pass the format's
    /// [`MAX_BLOCK_BYTES`] with it (an entry just under the limit after a few MiB of others).
    pub fn is_full_for(&self, entry: &SavepointEntry<'_>) -> bool {
        self.is_full_for_len(entry_len(entry))
    }

    /// [`BlockBuilder::is_full_for`] an entry of `len` raw bytes.
    fn is_full_for_len(&self, len: u64) -> bool {
        self.raw.len() >= BLOCK_TARGET_BYTES as usize
            || (!self.raw.is_empty()
                && (self.raw.len() as u64).saturating_add(len) > u64::from(MAX_BLOCK_BYTES))
    }

    /// Appends an entry; its state must exist in the header.
    pub fn add(&mut self, entry: SavepointEntry<'_>) -> Result<()> {
        if entry.state >= self.states {
            return Err(corrupt(format!("entry of unknown state {}", entry.state)));
        }
        let raw = &mut self.raw;
        put_varint64(raw, u64::from(entry.state));
        for part in [entry.key, entry.namespace, entry.suffix, entry.value] {
            put_varint64(raw, part.len() as u64);
            raw.extend_from_slice(part);
        }
        if raw.len() > MAX_BLOCK_BYTES as usize {
            return Err(Error::TooLarge {
                what: "savepoint key-group block",
                size: raw.len() as u64,
                limit: u64::from(MAX_BLOCK_BYTES),
            });
        }
        self.entries += 1;
        Ok(())
    }

    /// Empties the builder for the entries of `key_group`, keeping its buffer's capacity (one
    /// builder serves many key groups without reallocating).
    pub fn reset(&mut self, key_group: u16) {
        self.key_group = key_group;
        self.entries = 0;
        self.raw.clear();
    }

    /// Compresses with `zstd_level` and frames the block; `None` when it holds no entry (empty
    /// key groups have no block).
    pub fn finish(self, zstd_level: i32) -> Result<Option<EncodedBlock>> {
        self.encode(&mut BlockCompressor::new(zstd_level)?)
    }

    /// Compresses with `compressor` (whose context is reused from block to block) and frames
    /// the block; `None` when it holds no entry. The builder is left as it was: call
    /// [`BlockBuilder::reset`] before adding the next key group's entries.
    pub fn encode(&self, compressor: &mut BlockCompressor) -> Result<Option<EncodedBlock>> {
        self.encode_into(compressor, Vec::new())
    }

    /// [`BlockBuilder::encode`] into `buffer` (its contents are replaced; pass the buffer of
    /// an [`EncodedBlock`] already written, see [`EncodedBlock::into_buffer`], to save an
    /// allocation and its page faults per block).
    pub fn encode_into(
        &self,
        compressor: &mut BlockCompressor,
        mut block: Vec<u8>,
    ) -> Result<Option<EncodedBlock>> {
        if self.entries == 0 {
            return Ok(None);
        }
        // Compress straight behind the block header, into a buffer sized for the worst case,
        // so the compressed bytes are never copied again.
        let bound = zstd::zstd_safe::compress_bound(self.raw.len());
        block.clear();
        block.resize(BLOCK_HEADER_LEN + bound, 0);
        let compressed = compressor.compress(&self.raw, &mut block[BLOCK_HEADER_LEN..])?;
        block.truncate(BLOCK_HEADER_LEN + compressed);
        block[0..2].copy_from_slice(&self.key_group.to_le_bytes());
        block[2..6].copy_from_slice(&self.entries.to_le_bytes());
        block[6..10].copy_from_slice(&(self.raw.len() as u32).to_le_bytes());
        block[10..14].copy_from_slice(&(compressed as u32).to_le_bytes());
        let crc = crc32fast::hash(&block);
        block.extend_from_slice(&crc.to_le_bytes());
        Ok(Some(EncodedBlock {
            key_group: self.key_group,
            entries: self.entries,
            raw_len: self.raw.len() as u64,
            bytes: block,
        }))
    }
}

impl EncodedBlock {
    /// The block's length in the file (header, compressed entries and crc).
    pub fn stored_len(&self) -> usize {
        self.bytes.len()
    }

    /// The block's buffer, for [`BlockBuilder::encode_into`] once the block is written.
    pub fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }
}

/// A zstd compression context at a fixed level, reused for many blocks (creating one per
/// block costs an allocation and a table reset each time). One per thread.
///
/// It adapts to the data: when a block shrinks by less than [`INCOMPRESSIBLE_RATIO`] (random
/// or already compressed values), the next blocks are compressed with zstd's fast-strategy
/// acceleration ([`INCOMPRESSIBLE_TARGET_LENGTH`], what `zstd --fast=4` does: raw literals
/// instead of Huffman coding, and a match search that skips ahead faster), several times
/// quicker on such data for about the same size; as soon as a block compresses well again,
/// the level's own parameters come back. The output is an ordinary zstd frame either way:
/// readers see no difference.
pub struct BlockCompressor {
    context: zstd::bulk::Compressor<'static>,
    accelerated: bool,
}

/// Compressed/raw size above which a block counts as incompressible (see [`BlockCompressor`]).
pub const INCOMPRESSIBLE_RATIO: f64 = 0.9;
/// zstd `targetLength` (fast-strategy acceleration) used after an incompressible block.
pub const INCOMPRESSIBLE_TARGET_LENGTH: u32 = 4;

impl BlockCompressor {
    /// A context compressing at `zstd_level`.
    pub fn new(zstd_level: i32) -> Result<Self> {
        Ok(BlockCompressor {
            context: zstd::bulk::Compressor::new(zstd_level).map_err(Error::Decompress)?,
            accelerated: false,
        })
    }

    /// Compresses `raw` into `out` (sized by `compress_bound`); returns the compressed length.
    fn compress(&mut self, raw: &[u8], out: &mut [u8]) -> Result<usize> {
        let n = self
            .context
            .compress_to_buffer(raw, out)
            .map_err(Error::Decompress)?;
        let incompressible = n as f64 > raw.len() as f64 * INCOMPRESSIBLE_RATIO;
        if incompressible != self.accelerated {
            // 0 = the level's own target length (Huffman-coded literals on fast strategies).
            let target_length = if incompressible {
                INCOMPRESSIBLE_TARGET_LENGTH
            } else {
                0
            };
            self.context
                .set_parameter(zstd::zstd_safe::CParameter::TargetLength(target_length))
                .map_err(Error::Decompress)?;
            self.accelerated = incompressible;
        }
        Ok(n)
    }
}

/// Streams a savepoint out: header first, then entries in ascending key-group order (through
/// [`SavepointWriter::add`], or as blocks built elsewhere through
/// [`SavepointWriter::write_block`]), then [`SavepointWriter::finish`] writes the index and
/// footer.
pub struct SavepointWriter<W: Write> {
    out: W,
    offset: u64,
    level: i32,
    key_group_start: u16,
    key_group_end: u16,
    states: u32,
    index: Vec<IndexEntry>,
    current: Option<BlockBuilder>,
    stats: SavepointStats,
}

impl<W: Write> SavepointWriter<W> {
    /// Writes the preamble and header; `zstd_level` compresses the key-group blocks.
    pub fn new(mut out: W, header: &SavepointHeader, zstd_level: i32) -> Result<Self> {
        if header.key_group_start > header.key_group_end {
            return Err(corrupt("savepoint key-group range start after end"));
        }
        let body = postcard::to_stdvec(header).map_err(Error::Decode)?;
        let body_len = u32::try_from(body.len())
            .ok()
            .filter(|l| *l <= MAX_HEADER_BYTES)
            .ok_or(Error::TooLarge {
                what: "savepoint header",
                size: body.len() as u64,
                limit: u64::from(MAX_HEADER_BYTES),
            })?;
        let mut pre = Vec::with_capacity(16 + body.len());
        pre.extend_from_slice(&SAVEPOINT_MAGIC);
        pre.extend_from_slice(&SAVEPOINT_VERSION.to_le_bytes());
        pre.extend_from_slice(&0u16.to_le_bytes());
        pre.extend_from_slice(&body_len.to_le_bytes());
        pre.extend_from_slice(&body);
        pre.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.write_all(&pre)?;
        Ok(SavepointWriter {
            out,
            offset: pre.len() as u64,
            level: zstd_level,
            key_group_start: header.key_group_start,
            key_group_end: header.key_group_end,
            states: header.states.len() as u32,
            index: Vec::new(),
            current: None,
            stats: SavepointStats::default(),
        })
    }

    /// The number of states in the header (for [`BlockBuilder::new`]).
    pub fn states(&self) -> u32 {
        self.states
    }

    /// Checks that a block of `key_group` may come next: the key group of the last block
    /// written (a continuation) or a later one, inside the header's range.
    fn check_next(&self, key_group: u16) -> Result<()> {
        if key_group < self.key_group_start || key_group > self.key_group_end {
            return Err(corrupt(format!(
                "entry of key group {key_group} outside the savepoint's range"
            )));
        }
        if self.index.last().is_some_and(|e| e.key_group > key_group) {
            return Err(corrupt("savepoint entries out of key-group order"));
        }
        Ok(())
    }

    /// Adds an entry of `key_group`. Key groups must not decrease and must lie in the header's
    /// range; the state must exist in the header. A key group's block is ended once it holds
    /// [`BLOCK_TARGET_BYTES`] (or the entry would take it past [`MAX_BLOCK_BYTES`]) and the
    /// key group continues in the next one.
    pub fn add(&mut self, key_group: u16, entry: SavepointEntry<'_>) -> Result<()> {
        let current = self
            .current
            .as_ref()
            .map(|b| (b.key_group, b.is_full_for(&entry)));
        match current {
            Some((g, full)) if g == key_group => {
                if full {
                    self.flush_block()?;
                }
            }
            Some((g, _)) if g > key_group => {
                return Err(corrupt("savepoint entries out of key-group order"));
            }
            _ => {
                self.flush_block()?;
                self.check_next(key_group)?;
            }
        }
        let states = self.states;
        self.current
            .get_or_insert_with(|| BlockBuilder::new(key_group, states))
            .add(entry)
    }

    fn flush_block(&mut self) -> Result<()> {
        if let Some(block) = self.current.take() {
            if let Some(encoded) = block.finish(self.level)? {
                self.write_block(encoded)?;
            }
        }
        Ok(())
    }

    /// Writes a block built with [`BlockBuilder`]: key groups ascending (a block of the key
    /// group of the block before continues it: its entries follow that block's), inside the
    /// header's range. Do not mix with [`SavepointWriter::add`] for the same key group.
    pub fn write_block(&mut self, block: EncodedBlock) -> Result<()> {
        self.write_encoded(&block)
    }

    /// [`SavepointWriter::write_block`] without taking the block, so its buffer can be reused
    /// ([`EncodedBlock::into_buffer`]).
    pub fn write_encoded(&mut self, block: &EncodedBlock) -> Result<()> {
        if self.current.is_some() {
            self.flush_block()?;
        }
        self.check_next(block.key_group)?;
        self.out.write_all(&block.bytes)?;
        self.index.push(IndexEntry {
            key_group: block.key_group,
            offset: self.offset,
            len: block.bytes.len() as u32,
            entries: block.entries,
        });
        self.offset += block.bytes.len() as u64;
        self.stats.blocks += 1;
        self.stats.entries += u64::from(block.entries);
        self.stats.raw_bytes += block.raw_len;
        Ok(())
    }

    /// Writes the last block, the index and the footer; returns the writer and totals.
    pub fn finish(mut self) -> Result<(W, SavepointStats)> {
        self.flush_block()?;
        let mut index = Vec::with_capacity(8 + self.index.len() * INDEX_ENTRY_LEN);
        index.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        for e in &self.index {
            index.extend_from_slice(&e.key_group.to_le_bytes());
            index.extend_from_slice(&e.offset.to_le_bytes());
            index.extend_from_slice(&e.len.to_le_bytes());
            index.extend_from_slice(&e.entries.to_le_bytes());
        }
        let crc = crc32fast::hash(&index);
        index.extend_from_slice(&crc.to_le_bytes());
        let mut footer = Vec::with_capacity(SAVEPOINT_FOOTER_LEN as usize);
        footer.extend_from_slice(&self.offset.to_le_bytes());
        footer.extend_from_slice(&(index.len() as u32).to_le_bytes());
        let fcrc = crc32fast::hash(&footer);
        footer.extend_from_slice(&fcrc.to_le_bytes());
        footer.extend_from_slice(&SAVEPOINT_MAGIC);
        self.out.write_all(&index)?;
        self.out.write_all(&footer)?;
        self.out.flush()?;
        self.stats.file_bytes = self.offset + index.len() as u64 + footer.len() as u64;
        Ok((self.out, self.stats))
    }
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn check_crc(block: &'static str, offset: u64, bytes: &[u8], stored: u32) -> Result<()> {
    let computed = crc32fast::hash(bytes);
    if computed != stored {
        return Err(Error::ChecksumMismatch {
            block,
            offset,
            stored,
            computed,
        });
    }
    Ok(())
}

fn read_exact_at<R: Read + Seek>(
    r: &mut R,
    offset: u64,
    len: usize,
    what: &'static str,
    size: u64,
) -> Result<Vec<u8>> {
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(Error::Truncated {
            what,
            needed: offset.saturating_add(len as u64),
            available: size,
        });
    }
    r.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads a savepoint: footer, index and header are read and verified on open; key-group blocks
/// are read and verified one at a time.
pub struct SavepointReader<R: Read + Seek> {
    input: R,
    size: u64,
    header: SavepointHeader,
    index: Vec<IndexEntry>,
    /// The last block read, compressed, and its decompressed entries: reused from block to
    /// block by [`SavepointReader::for_each_entry`], so reading a file allocates (and
    /// page-faults in) two block-sized buffers once instead of per block.
    block: Vec<u8>,
    raw: Vec<u8>,
    /// The zstd context, made on the first block and reused.
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
}

impl<R: Read + Seek> SavepointReader<R> {
    /// Opens and verifies the footer, index and header.
    pub fn open(mut input: R) -> Result<Self> {
        let size = input.seek(SeekFrom::End(0))?;
        let min = PREAMBLE_LEN + 8 + 4 + 4 + SAVEPOINT_FOOTER_LEN;
        if size < min {
            return Err(Error::Truncated {
                what: "savepoint",
                needed: min,
                available: size,
            });
        }
        let pre = read_exact_at(
            &mut input,
            0,
            PREAMBLE_LEN as usize + 4,
            "savepoint preamble",
            size,
        )?;
        if pre[..4] != SAVEPOINT_MAGIC {
            return Err(Error::BadMagic {
                what: "savepoint",
                expected: SAVEPOINT_MAGIC.to_vec(),
                found: pre[..4].to_vec(),
            });
        }
        let version = le_u16(&pre, 4);
        if !(SAVEPOINT_MIN_VERSION..=SAVEPOINT_VERSION).contains(&version) {
            return Err(Error::Unsupported(format!(
                "savepoint version {version} (this build reads {SAVEPOINT_MIN_VERSION} to {SAVEPOINT_VERSION})"
            )));
        }
        if le_u16(&pre, 6) != 0 {
            return Err(Error::Unsupported("savepoint flags".into()));
        }
        let footer_at = size - SAVEPOINT_FOOTER_LEN;
        let footer = read_exact_at(
            &mut input,
            footer_at,
            SAVEPOINT_FOOTER_LEN as usize,
            "savepoint footer",
            size,
        )?;
        if footer[16..20] != SAVEPOINT_MAGIC {
            return Err(Error::BadMagic {
                what: "savepoint footer",
                expected: SAVEPOINT_MAGIC.to_vec(),
                found: footer[16..20].to_vec(),
            });
        }
        check_crc(
            "savepoint footer",
            footer_at,
            &footer[..12],
            le_u32(&footer, 12),
        )?;
        let index_offset = le_u64(&footer, 0);
        let index_len = le_u32(&footer, 8) as u64;
        if index_offset.checked_add(index_len) != Some(footer_at) || index_len < 8 {
            return Err(corrupt("savepoint index does not end at the footer"));
        }

        let header_len = u64::from(le_u32(&pre, 8));
        if header_len > u64::from(MAX_HEADER_BYTES) {
            return Err(Error::TooLarge {
                what: "savepoint header",
                size: header_len,
                limit: u64::from(MAX_HEADER_BYTES),
            });
        }
        let header_end = PREAMBLE_LEN + 4 + header_len + 4;
        if header_end > index_offset {
            return Err(corrupt("savepoint header overlaps the index"));
        }
        let hbytes = read_exact_at(
            &mut input,
            PREAMBLE_LEN + 4,
            header_len as usize + 4,
            "savepoint header",
            size,
        )?;
        let (body, crc) = hbytes.split_at(header_len as usize);
        check_crc("savepoint header", PREAMBLE_LEN, body, le_u32(crc, 0))?;
        let header = decode_header(version, body)?;

        let ibytes = read_exact_at(
            &mut input,
            index_offset,
            index_len as usize,
            "savepoint index",
            size,
        )?;
        let (ibody, icrc) = ibytes.split_at(ibytes.len() - 4);
        check_crc("savepoint index", index_offset, ibody, le_u32(icrc, 0))?;
        let count = le_u32(ibody, 0) as usize;
        if ibody.len() != 4 + count.saturating_mul(INDEX_ENTRY_LEN) {
            return Err(corrupt("savepoint index length does not match its count"));
        }
        let mut index = Vec::with_capacity(count);
        let mut next_free = header_end;
        for i in 0..count {
            let at = 4 + i * INDEX_ENTRY_LEN;
            let e = IndexEntry {
                key_group: le_u16(ibody, at),
                offset: le_u64(ibody, at + 2),
                len: le_u32(ibody, at + 10),
                entries: le_u32(ibody, at + 14),
            };
            let in_range =
                e.key_group >= header.key_group_start && e.key_group <= header.key_group_end;
            // Version 4 continues a key group over consecutive blocks; before, one block each.
            let ordered = index.last().is_none_or(|p: &IndexEntry| {
                p.key_group < e.key_group
                    || (version >= CONTINUED_BLOCKS_VERSION && p.key_group == e.key_group)
            });
            let placed = e.offset == next_free && (e.len as usize) >= BLOCK_HEADER_LEN + 4;
            if !in_range || !ordered || !placed {
                return Err(corrupt(format!(
                    "savepoint index entry {i} (key group {})",
                    e.key_group
                )));
            }
            next_free = e.offset + u64::from(e.len);
            index.push(e);
        }
        if next_free != index_offset {
            return Err(corrupt("savepoint blocks do not end at the index"));
        }
        Ok(SavepointReader {
            input,
            size,
            header,
            index,
            block: Vec::new(),
            raw: Vec::new(),
            decompressor: None,
        })
    }

    /// The header.
    pub fn header(&self) -> &SavepointHeader {
        &self.header
    }

    /// The blocks, in key-group order (a key group's blocks consecutive, in entry order).
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// Reads, verifies and decompresses one block; returns its raw entry bytes.
    pub fn read_block(&mut self, entry: &IndexEntry) -> Result<Vec<u8>> {
        self.load_block(entry)?;
        Ok(std::mem::take(&mut self.raw))
    }

    /// Reads and verifies the block at `entry` into `self.block` and decompresses it into
    /// `self.raw` (both buffers reused).
    fn load_block(&mut self, entry: &IndexEntry) -> Result<()> {
        let len = entry.len as usize;
        if entry
            .offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(Error::Truncated {
                what: "savepoint block",
                needed: entry.offset.saturating_add(len as u64),
                available: self.size,
            });
        }
        self.input.seek(SeekFrom::Start(entry.offset))?;
        self.block.resize(len, 0);
        self.input.read_exact(&mut self.block)?;
        let bytes = &self.block;
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        check_crc("savepoint block", entry.offset, body, le_u32(crc, 0))?;
        let (key_group, entries, raw_len, comp_len) = (
            le_u16(body, 0),
            le_u32(body, 2),
            le_u32(body, 6),
            le_u32(body, 10),
        );
        if key_group != entry.key_group || entries != entry.entries {
            return Err(corrupt("savepoint block header disagrees with the index"));
        }
        if comp_len as usize != body.len() - BLOCK_HEADER_LEN || raw_len > MAX_BLOCK_BYTES {
            return Err(corrupt("savepoint block lengths"));
        }
        // Capacity for exactly `raw_len` bytes (a frame that decompresses to more fails), when
        // the stored frame makes that length plausible; a larger claim allocates only as the
        // frame produces output (`decompress_bounded`), so a small file cannot make the reader
        // reserve up to `MAX_BLOCK_BYTES` at once.
        if u64::from(raw_len) > u64::from(comp_len).saturating_mul(64).max(1 << 20) {
            let within =
                decompress_bounded(&body[BLOCK_HEADER_LEN..], raw_len as usize, &mut self.raw)?;
            if within != Output::Within || self.raw.len() != raw_len as usize {
                return Err(corrupt("savepoint block decompressed to another length"));
            }
            return Ok(());
        }
        self.raw.clear();
        self.raw.reserve_exact(raw_len as usize);
        let decompressor = match &mut self.decompressor {
            Some(d) => d,
            none => none.insert(zstd::bulk::Decompressor::new().map_err(Error::Decompress)?),
        };
        let n = decompressor
            .decompress_to_buffer(&body[BLOCK_HEADER_LEN..], &mut self.raw)
            .map_err(Error::Decompress)?;
        if n != raw_len as usize || self.raw.len() != n {
            return Err(corrupt("savepoint block decompressed to another length"));
        }
        Ok(())
    }

    /// Calls `f` for every entry of the block at `entry`, in stored order.
    pub fn for_each_entry(
        &mut self,
        entry: &IndexEntry,
        mut f: impl FnMut(SavepointEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        self.load_block(entry)?;
        let states = self.header.states.len() as u64;
        let mut cur = Cursor::new(&self.raw);
        let mut seen = 0u32;
        while !cur.is_empty() {
            let state = cur.varint64("savepoint entry state")?;
            if state >= states {
                return Err(corrupt(format!("savepoint entry of unknown state {state}")));
            }
            let mut part = |what| -> Result<&[u8]> {
                let len = cur.varint64(what)?;
                let len = usize::try_from(len).map_err(|_| corrupt(what))?;
                cur.take(len, what)
            };
            let key = part("savepoint entry key")?;
            let namespace = part("savepoint entry namespace")?;
            let suffix = part("savepoint entry suffix")?;
            let value = part("savepoint entry value")?;
            seen += 1;
            f(SavepointEntry {
                state: state as u32,
                key,
                namespace,
                suffix,
                value,
            })?;
        }
        if seen != entry.entries {
            return Err(corrupt("savepoint block entry count"));
        }
        Ok(())
    }
}

/// Reads and verifies a whole savepoint: footer, index, header and every block with every
/// entry. Returns its totals (`file_bytes` is the input's length).
pub fn verify_savepoint<R: Read + Seek>(input: R) -> Result<SavepointStats> {
    let mut reader = SavepointReader::open(input)?;
    let mut stats = SavepointStats {
        file_bytes: reader.size,
        ..SavepointStats::default()
    };
    let index = reader.index.clone();
    for block in &index {
        reader.for_each_entry(block, |e| {
            stats.entries += 1;
            stats.raw_bytes +=
                (e.key.len() + e.namespace.len() + e.suffix.len() + e.value.len()) as u64;
            Ok(())
        })?;
        stats.blocks += 1;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::StateKind;
    use std::io::Cursor;

    fn header() -> SavepointHeader {
        SavepointHeader {
            max_parallelism: 128,
            key_group_start: 0,
            key_group_end: 127,
            states: vec![StateMeta {
                name: "s".into(),
                kind: StateKind::Value,
                codec: "bytes".into(),
                codec_version: 1,
                ttl: false,
            }],
            operator_state: vec![],
            created_at_ms: 7,
            event_time_watermark_ms: 1_700_000_000_000,
        }
    }

    fn sample() -> Vec<u8> {
        let mut w = SavepointWriter::new(Vec::new(), &header(), 3).unwrap();
        for g in [3u16, 3, 9, 127] {
            w.add(
                g,
                SavepointEntry {
                    state: 0,
                    key: &g.to_be_bytes(),
                    namespace: b"",
                    suffix: b"",
                    value: b"value",
                },
            )
            .unwrap();
        }
        w.finish().unwrap().0
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let mut r = SavepointReader::open(Cursor::new(&bytes)).unwrap();
        assert_eq!(r.header(), &header());
        let index = r.index().to_vec();
        assert_eq!(
            index.iter().map(|e| e.key_group).collect::<Vec<_>>(),
            vec![3, 9, 127]
        );
        let mut n = 0;
        for e in &index {
            r.for_each_entry(e, |en| {
                assert_eq!(en.key, &e.key_group.to_be_bytes());
                n += 1;
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(n, 4);
    }

    #[test]
    fn a_file_relabelled_to_another_version_is_refused() {
        let mut bytes = sample();
        assert_eq!(le_u16(&bytes, 4), SAVEPOINT_VERSION);
        for version in [0u16, 1, 2, 3, 4, 5, u16::MAX] {
            bytes[4..6].copy_from_slice(&version.to_le_bytes());
            let opened = SavepointReader::open(Cursor::new(&bytes));
            match version {
                // Version 4 changed the index only: a file without continued key groups
                // reads the same as version 3.
                3 | 4 => assert!(opened.is_ok()),
                // The header of versions 1 and 2 ends before the watermark.
                1 | 2 => assert!(
                    matches!(opened, Err(Error::Corrupt { .. })),
                    "version {version}: {:?}",
                    opened.err()
                ),
                _ => assert!(
                    matches!(opened, Err(Error::Unsupported(_))),
                    "version {version}"
                ),
            }
        }
    }

    #[test]
    fn every_byte_flip_and_truncation_is_detected() {
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            let outcome = SavepointReader::open(Cursor::new(&b)).and_then(|mut r| {
                let index = r.index().to_vec();
                for e in &index {
                    r.for_each_entry(e, |_| Ok(()))?;
                }
                Ok(())
            });
            assert!(outcome.is_err(), "flip at {i} not detected");
        }
        for cut in 0..bytes.len() {
            assert!(SavepointReader::open(Cursor::new(&bytes[..cut])).is_err());
        }
    }

    /// `len` pseudo-random bytes (xorshift), incompressible for zstd.
    fn noise(len: usize, seed: &mut u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                *seed as u8
            })
            .collect()
    }

    /// A block of `key_group` holding one entry per value.
    fn block_of(key_group: u16, values: &[Vec<u8>]) -> BlockBuilder {
        let mut b = BlockBuilder::new(key_group, 1);
        for (i, v) in values.iter().enumerate() {
            b.add(SavepointEntry {
                state: 0,
                key: &(i as u32).to_be_bytes(),
                namespace: b"",
                suffix: b"",
                value: v,
            })
            .unwrap();
        }
        b
    }

    #[test]
    fn compressor_accelerates_after_incompressible_blocks_and_recovers() {
        let mut seed = 7u64;
        let random: Vec<Vec<u8>> = (0..200).map(|_| noise(100, &mut seed)).collect();
        // Text over four letters: Huffman coding alone shrinks it to about a quarter, so it
        // compresses much better with entropy-coded literals than without.
        let text: Vec<Vec<u8>> = (0..200)
            .map(|_| {
                noise(100, &mut seed)
                    .iter()
                    .map(|b| b"acgt"[(b & 3) as usize])
                    .collect()
            })
            .collect();
        let fresh_text = block_of(1, &text)
            .encode(&mut BlockCompressor::new(1).unwrap())
            .unwrap()
            .unwrap();

        let mut c = BlockCompressor::new(1).unwrap();
        let mut w = SavepointWriter::new(Vec::new(), &header(), 1).unwrap();
        let mut builder = block_of(0, &random);
        let first = builder.encode(&mut c).unwrap().unwrap();
        assert!(c.accelerated, "switched after the random block");
        w.write_encoded(&first).unwrap();
        // After an incompressible block the next one is accelerated (bigger), the one after
        // it is back to the level's own parameters (same bytes as a fresh context's).
        let mut sizes = Vec::new();
        let mut buffer = first.into_buffer();
        for g in 1..4u16 {
            builder = block_of(g, &text);
            let block = builder.encode_into(&mut c, buffer).unwrap().unwrap();
            sizes.push(block.bytes.len());
            w.write_encoded(&block).unwrap();
            buffer = block.into_buffer();
        }
        assert!(sizes[0] > fresh_text.bytes.len(), "{sizes:?}");
        assert_eq!(sizes[1], fresh_text.bytes.len());
        assert_eq!(sizes[2], fresh_text.bytes.len());
        builder.reset(9);
        assert!(builder.is_empty() && builder.encode(&mut c).unwrap().is_none());

        // Every block reads back, whichever parameters compressed it.
        let bytes = w.finish().unwrap().0;
        let mut r = SavepointReader::open(Cursor::new(&bytes)).unwrap();
        for e in r.index().to_vec() {
            let want = if e.key_group == 0 { &random } else { &text };
            let mut i = 0;
            r.for_each_entry(&e, |en| {
                assert_eq!(en.value, &want[i][..]);
                i += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(i, want.len());
        }
    }

    /// A savepoint whose key group 5 holds 10 MiB in 1 MiB values (three blocks through
    /// [`SavepointWriter::add`]), then key group 6 holds one small entry.
    fn continued() -> Vec<u8> {
        let mut w = SavepointWriter::new(Vec::new(), &header(), 1).unwrap();
        let mut seed = 3u64;
        for i in 0..10u32 {
            let value = noise(1 << 20, &mut seed);
            let e = SavepointEntry {
                state: 0,
                key: &i.to_be_bytes(),
                namespace: b"",
                suffix: b"",
                value: &value,
            };
            w.add(5, e).unwrap();
        }
        let e = SavepointEntry {
            state: 0,
            key: b"k",
            namespace: b"",
            suffix: b"",
            value: b"v",
        };
        w.add(6, e).unwrap();
        // A continued key group is still a key group: going back is refused.
        assert!(w.add(5, e).is_err());
        w.finish().unwrap().0
    }

    #[test]
    fn a_key_group_continues_over_blocks_of_the_target_size() {
        let bytes = continued();
        let mut r = SavepointReader::open(Cursor::new(&bytes)).unwrap();
        let index = r.index().to_vec();
        // Blocks end at the first entry that takes them to 4 MiB: 4 + 4 + 2 values.
        assert_eq!(
            index
                .iter()
                .map(|e| (e.key_group, e.entries))
                .collect::<Vec<_>>(),
            vec![(5, 4), (5, 4), (5, 2), (6, 1)]
        );
        let mut keys = Vec::new();
        for e in &index {
            r.for_each_entry(e, |en| {
                keys.push(en.key.to_vec());
                Ok(())
            })
            .unwrap();
        }
        let mut want: Vec<Vec<u8>> = (0..10u32).map(|i| i.to_be_bytes().to_vec()).collect();
        want.push(b"k".to_vec());
        assert_eq!(keys, want, "entries in the order written");
        assert_eq!(verify_savepoint(Cursor::new(&bytes)).unwrap().blocks, 4);
    }

    #[test]
    fn an_entry_that_would_pass_the_block_limit_starts_a_new_block() {
        let mut b = BlockBuilder::new(0, 1);
        let small = SavepointEntry {
            state: 0,
            key: b"k",
            namespace: b"",
            suffix: b"",
            value: b"v",
        };
        assert!(
            !b.is_full_for_len(u64::from(MAX_BLOCK_BYTES) + 1),
            "an empty block takes anything (the entry alone is checked by add)"
        );
        b.add(small).unwrap();
        assert_eq!(entry_len(&small), b.raw_len() as u64);
        // Well below the target size, an entry that fits exactly stays, one byte more moves
        // on (lengths only: no 1 GiB buffer).
        let room = u64::from(MAX_BLOCK_BYTES) - b.raw_len() as u64;
        assert!(!b.is_full_for_len(room));
        assert!(b.is_full_for_len(room + 1));
        assert!(!b.is_full_for(&small));
    }

    #[test]
    fn continued_key_groups_are_corrupt_below_version_4() {
        let mut bytes = continued();
        assert_eq!(le_u16(&bytes, 4), 4);
        bytes[4..6].copy_from_slice(&3u16.to_le_bytes());
        assert!(
            matches!(
                SavepointReader::open(Cursor::new(&bytes)),
                Err(Error::Corrupt { .. })
            ),
            "a version 3 index names each key group once"
        );
    }

    #[test]
    fn writer_refuses_bad_order_range_and_state() {
        let mut w = SavepointWriter::new(Vec::new(), &header(), 3).unwrap();
        let e = SavepointEntry {
            state: 0,
            key: b"k",
            namespace: b"",
            suffix: b"",
            value: b"v",
        };
        w.add(5, e).unwrap();
        assert!(w.add(4, e).is_err());
        assert!(w.add(200, e).is_err());
        assert!(w.add(6, SavepointEntry { state: 1, ..e }).is_err());
    }
}
