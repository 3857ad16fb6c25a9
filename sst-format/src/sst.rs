//! Reading and verifying the tail of an SST: footer, metaindex, properties and index blocks.
//!
//! This module owns the read path that ties the other SST modules together
//! ([`read_sst_meta`] from a file with positioned reads, [`parse_sst_meta`] from memory), the
//! result type [`SstMeta`] and the SST identity [`SstUniqueId`]. The steps follow RocksDB's
//! `ReadFooterFromFile` → `ReadMetaIndexBlockInFile` → `ReadTablePropertiesHelper`
//! (`table/format.cc`, `table/meta_blocks.cc`); see `docs/sst-format.md`.
//!
//! Only the tail is read: the footer, the metaindex block, the properties block and the index
//! block (whose checksum is verified, so that every byte of an fv <= 5 footer — which has no
//! checksum of its own — is protected by some block checksum). Data and filter blocks are never
//! read; a whole-file CRC (kept in the checkpoint manifest) covers those.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::block::{trailer_matches, verify_trailer, walk_entries, NO_COMPRESSION};
use crate::error::{Error, Result};
use crate::footer::{parse_footer_impl, BlockHandle, Footer, FOOTER_LEN};
use crate::properties::{names, TableProperties};

/// Metaindex key of the properties block (`kPropertiesBlockName`).
pub const PROPERTIES_BLOCK_NAME: &str = "rocksdb.properties";

/// Metaindex key of the index block for format_version >= 6 (`kIndexBlockName`).
pub const INDEX_BLOCK_NAME: &str = "rocksdb.index";

/// How many bytes [`read_sst_meta`] reads from the end of the file in its first read. Footer,
/// metaindex and properties block of a RocksDB SST normally fit (about 2 KiB in total); the
/// index block of a small file too. Anything outside is read with one more positioned read.
pub const TAIL_PREFETCH_BYTES: u64 = 16 * 1024;

/// The identity RocksDB derives an SST's unique id from (`GetSstInternalUniqueId` in
/// `table/unique_id.cc`): the creating DB's identity, its session identity and the file number
/// the file was created with. It survives hard links, copies and checkpoints, and two different
/// files never share it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SstUniqueId {
    /// `rocksdb.creating.db.identity` (`SST Writer` for files from `SstFileWriter`).
    pub db_id: String,
    /// `rocksdb.creating.session.identity`.
    pub db_session_id: String,
    /// `rocksdb.original.file.number`.
    pub file_number: u64,
}

impl std::fmt::Display for SstUniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.db_id, self.db_session_id, self.file_number
        )
    }
}

/// Everything read and verified from an SST's tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstMeta {
    /// Size of the file in bytes.
    pub file_size: u64,
    /// The verified footer.
    pub footer: Footer,
    /// All metaindex entries: meta-block name to handle (`rocksdb.properties`, `rocksdb.index`
    /// for fv >= 6, filter, range deletions, ...).
    pub metaindex: BTreeMap<String, BlockHandle>,
    /// Handle of the (top-level) index block, from the footer (fv <= 5) or the metaindex.
    pub index_handle: BlockHandle,
    /// The decoded properties block.
    pub properties: TableProperties,
    /// The SST's unique identity, from the properties.
    pub unique_id: SstUniqueId,
}

/// I/O counters of one [`read_sst_meta_with_stats`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TailReadStats {
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Positioned read calls issued.
    pub reads: u32,
}

/// Reads and verifies the tail of the SST at `path`; see [`parse_sst_meta`] for what is checked.
/// Uses positioned reads of the tail only (one read of up to [`TAIL_PREFETCH_BYTES`], plus one
/// per block outside it); never reads data blocks.
pub fn read_sst_meta(path: &Path) -> Result<SstMeta> {
    read_sst_meta_with_stats(path).map(|(m, _)| m)
}

/// [`read_sst_meta`], also returning how many bytes and read calls it took.
pub fn read_sst_meta_with_stats(path: &Path) -> Result<(SstMeta, TailReadStats)> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut src = FileSource::new(file, size)?;
    let meta = load_meta(&mut src, true)?;
    Ok((meta, src.stats))
}

/// Parses and verifies an SST held in memory (`file_bytes` is the whole file).
///
/// Verifies: the footer ([`crate::parse_footer`]); the metaindex block's checksum, that it is
/// uncompressed and well-formed with sorted keys whose values are block handles; the properties
/// block likewise (with RocksDB's retry that zeroes an ingested file's global sequence number);
/// the index block's checksum; that every handle lies before the footer; that the
/// `rocksdb.format.version` property equals the footer's format_version; and that the
/// properties name the file's unique id.
pub fn parse_sst_meta(file_bytes: &[u8]) -> Result<SstMeta> {
    load_meta(&mut SliceSource(file_bytes), true)
}

/// Like [`parse_sst_meta`] but skips the footer and block checksum comparisons (structure is
/// still checked). For fuzzing the parsers behind the checksums and for forensic inspection of
/// a damaged file; never use it to accept a file.
#[doc(hidden)]
pub fn parse_sst_meta_unverified(file_bytes: &[u8]) -> Result<SstMeta> {
    load_meta(&mut SliceSource(file_bytes), false)
}

/// Random access to the bytes of one file.
trait Source {
    fn size(&self) -> u64;
    /// Returns exactly `len` bytes at `offset`; the range has been bounds-checked.
    fn read(&mut self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>>;
}

struct SliceSource<'a>(&'a [u8]);

impl Source for SliceSource<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&mut self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        let range = usize::try_from(offset)
            .ok()
            .and_then(|o| Some(o..o.checked_add(usize::try_from(len).ok()?)?));
        range
            .and_then(|r| self.0.get(r))
            .map(Cow::Borrowed)
            .ok_or(Error::Truncated {
                what: "SST block",
                needed: offset.saturating_add(len),
                available: self.0.len() as u64,
            })
    }
}

/// A file read with positioned reads; the last [`TAIL_PREFETCH_BYTES`] are read once and
/// served from memory.
struct FileSource {
    file: File,
    size: u64,
    tail_offset: u64,
    tail: Vec<u8>,
    stats: TailReadStats,
}

impl FileSource {
    fn new(file: File, size: u64) -> Result<Self> {
        let mut s = FileSource {
            file,
            size,
            tail_offset: size,
            tail: Vec::new(),
            stats: TailReadStats::default(),
        };
        let len = size.min(TAIL_PREFETCH_BYTES);
        let offset = size - len;
        s.tail = s.pread(offset, len)?;
        s.tail_offset = offset;
        Ok(s)
    }

    fn pread(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        // Callers only ask for ranges inside the file, so `len` fits in memory as long as the
        // file could be mapped; the allocation is bounded by the file's size.
        let len = usize::try_from(len).map_err(|_| Error::corrupt("block larger than memory"))?;
        let mut buf = vec![0u8; len];
        read_exact_at(&self.file, &mut buf, offset)?;
        self.stats.bytes_read += len as u64;
        self.stats.reads += 1;
        Ok(buf)
    }
}

impl Source for FileSource {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&mut self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        let in_tail = offset
            .checked_sub(self.tail_offset)
            .and_then(|s| usize::try_from(s).ok())
            .and_then(|s| Some(s..s.checked_add(usize::try_from(len).ok()?)?))
            .filter(|r| r.end <= self.tail.len());
        match in_tail {
            Some(r) => Ok(Cow::Borrowed(&self.tail[r])),
            None => Ok(Cow::Owned(self.pread(offset, len)?)),
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(mut file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Checks that `h` plus its trailer lies entirely before the footer.
fn check_handle(h: &BlockHandle, footer: &Footer, block: &'static str) -> Result<()> {
    match h.end_with_trailer() {
        Some(end) if end <= footer.footer_offset => Ok(()),
        _ => Err(Error::corrupt(format!(
            "{block} block handle (offset {}, size {}) extends past the footer at {}",
            h.offset, h.size, footer.footer_offset
        ))),
    }
}

/// Reads the block at `h` with its trailer, verifies the checksum and returns it.
fn read_block<'s, S: Source>(
    src: &'s mut S,
    footer: &Footer,
    h: &BlockHandle,
    block: &'static str,
) -> Result<Cow<'s, [u8]>> {
    check_handle(h, footer, block)?;
    // check_handle guarantees offset + size + 5 <= footer_offset < file size.
    src.read(h.offset, h.size + crate::footer::BLOCK_TRAILER_LEN)
}

fn load_meta<S: Source>(src: &mut S, verify: bool) -> Result<SstMeta> {
    let file_size = src.size();
    if file_size < FOOTER_LEN as u64 {
        return Err(Error::Truncated {
            what: "SST footer",
            needed: FOOTER_LEN as u64,
            available: file_size,
        });
    }
    let footer = {
        let tail = src.read(file_size - FOOTER_LEN as u64, FOOTER_LEN as u64)?;
        parse_footer_impl(&tail, file_size, verify)?
    };

    // Metaindex.
    let mh = footer.metaindex_handle;
    let metaindex = {
        let raw = read_block(src, &footer, &mh, "metaindex")?;
        let compression = verify_trailer(&footer, &raw, mh.offset, "metaindex", verify)?;
        if compression != NO_COMPRESSION {
            return Err(Error::corrupt(format!(
                "metaindex block has compression type {compression}, meta blocks are never compressed"
            )));
        }
        let contents = contents_of(&raw);
        let mut map = BTreeMap::new();
        walk_entries(contents, "metaindex", |key, value| {
            let name = String::from_utf8_lossy(key).into_owned();
            let value = contents.get(value).unwrap_or(&[]);
            map.insert(
                name,
                BlockHandle::decode_exact(value, "metaindex block handle")?,
            );
            Ok(())
        })?;
        map
    };

    // Properties.
    let ph = *metaindex
        .get(PROPERTIES_BLOCK_NAME)
        .ok_or_else(|| Error::corrupt("metaindex has no rocksdb.properties entry"))?;
    let properties = {
        let raw = read_block(src, &footer, &ph, "properties")?;
        let checked = verify_trailer(&footer, &raw, ph.offset, "properties", verify);
        let compression = match checked {
            Ok(c) => c,
            Err(e) => retry_with_zero_global_seqno(&footer, &raw, ph.offset).ok_or(e)?,
        };
        if compression != NO_COMPRESSION {
            return Err(Error::corrupt(format!(
                "properties block has compression type {compression}, meta blocks are never compressed"
            )));
        }
        let contents = contents_of(&raw);
        let mut properties = TableProperties::default();
        walk_entries(contents, "properties", |key, value| {
            properties.add(key, contents.get(value).unwrap_or(&[]))
        })?;
        properties
    };

    // Index (checksum only; it may be compressed and is not decoded).
    let index_handle = match footer.index_handle {
        Some(h) => h,
        None => *metaindex
            .get(INDEX_BLOCK_NAME)
            .ok_or_else(|| Error::corrupt("fv >= 6 metaindex has no rocksdb.index entry"))?,
    };
    {
        let raw = read_block(src, &footer, &index_handle, "index")?;
        verify_trailer(&footer, &raw, index_handle.offset, "index", verify)?;
    }

    if properties.raw.contains_key(names::FORMAT_VERSION)
        && properties.format_version != u64::from(footer.format_version)
    {
        return Err(Error::corrupt(format!(
            "property rocksdb.format.version = {} but the footer says {}",
            properties.format_version, footer.format_version
        )));
    }

    let unique_id = unique_id_of(&properties)?;
    Ok(SstMeta {
        file_size,
        footer,
        metaindex,
        index_handle,
        properties,
        unique_id,
    })
}

/// The contents part of a block read with its trailer.
fn contents_of(block_with_trailer: &[u8]) -> &[u8] {
    let n = block_with_trailer
        .len()
        .saturating_sub(crate::footer::BLOCK_TRAILER_LEN as usize);
    &block_with_trailer[..n]
}

/// RocksDB's `ReadTablePropertiesHelper` fallback: an external file ingested with
/// `write_global_seqno = true` has its `rocksdb.external_sst_file.global_seqno` value rewritten
/// in place without updating the checksum, which was computed with the value 0. If the block
/// has that property (8 bytes), zero it in a copy and check again. Returns the compression
/// byte on success.
fn retry_with_zero_global_seqno(footer: &Footer, raw: &[u8], offset: u64) -> Option<u8> {
    let contents = contents_of(raw);
    let mut seqno = None;
    walk_entries(contents, "properties", |key, value| {
        if key == names::EXTERNAL_SST_FILE_GLOBAL_SEQNO.as_bytes() {
            seqno = Some(value);
        }
        Ok(())
    })
    .ok()?;
    let value = seqno?;
    if value.len() != 8 {
        return None;
    }
    let mut copy = raw.to_vec();
    copy.get_mut(value)?.fill(0);
    if trailer_matches(footer, &copy, offset) {
        copy.get(contents.len()).copied()
    } else {
        None
    }
}

fn unique_id_of(p: &TableProperties) -> Result<SstUniqueId> {
    if p.db_id.is_empty() {
        return Err(Error::MissingProperty(names::DB_ID));
    }
    if p.db_session_id.is_empty() {
        return Err(Error::MissingProperty(names::DB_SESSION_ID));
    }
    if p.orig_file_number == 0 {
        return Err(Error::MissingProperty(names::ORIGINAL_FILE_NUMBER));
    }
    Ok(SstUniqueId {
        db_id: p.db_id.clone(),
        db_session_id: p.db_session_id.clone(),
        file_number: p.orig_file_number,
    })
}
