//! The properties block (`rocksdb.properties`) decoded into [`TableProperties`].
//!
//! This module owns the property names of `table/table_properties.cc` and their value
//! encodings (`PropertyBlockBuilder::AddTableProperty` and `ParsePropertiesBlock` in
//! `table/meta_blocks.cc`): varint64 for numbers, raw bytes for strings, and the two
//! `SstFileWriter` properties of `table/sst_file_writer_collectors.h`, which are fixed-width:
//! `rocksdb.external_sst_file.version` (fixed32) and `rocksdb.external_sst_file.global_seqno`
//! (fixed64). Unknown names (user-collected properties) are
//! kept in [`TableProperties::raw`] like every other property.

use std::collections::BTreeMap;

use crate::coding::decode_varint;
use crate::error::{Error, Result};

/// Property names, exactly as RocksDB 11.8 writes them (`TablePropertiesNames`,
/// `ExternalSstFilePropertyNames`).
pub mod names {
    /// varint64: file number the table was created with.
    pub const ORIGINAL_FILE_NUMBER: &str = "rocksdb.original.file.number";
    /// varint64: total user-key bytes (internal keys minus the 8-byte footer).
    pub const RAW_KEY_SIZE: &str = "rocksdb.raw.key.size";
    /// varint64: total value bytes.
    pub const RAW_VALUE_SIZE: &str = "rocksdb.raw.value.size";
    /// varint64: bytes of data blocks, trailers included.
    pub const DATA_SIZE: &str = "rocksdb.data.size";
    /// varint64: bytes of index block(s), trailers included.
    pub const INDEX_SIZE: &str = "rocksdb.index.size";
    /// varint64: number of index partitions (partitioned index only).
    pub const INDEX_PARTITIONS: &str = "rocksdb.index.partitions";
    /// varint64: size of the top-level index (partitioned index only).
    pub const TOP_LEVEL_INDEX_SIZE: &str = "rocksdb.top-level.index.size";
    /// varint64 (0/1).
    pub const INDEX_KEY_IS_USER_KEY: &str = "rocksdb.index.key.is.user.key";
    /// varint64 (0/1).
    pub const INDEX_VALUE_IS_DELTA_ENCODED: &str = "rocksdb.index.value.is.delta.encoded";
    /// varint64: number of entries (puts, deletes, merges...; not range deletions).
    pub const NUM_ENTRIES: &str = "rocksdb.num.entries";
    /// varint64.
    pub const NUM_FILTER_ENTRIES: &str = "rocksdb.num.filter_entries";
    /// varint64: number of point deletions.
    pub const DELETED_KEYS: &str = "rocksdb.deleted.keys";
    /// varint64: number of merge operands.
    pub const MERGE_OPERANDS: &str = "rocksdb.merge.operands";
    /// varint64: number of range deletions.
    pub const NUM_RANGE_DELETIONS: &str = "rocksdb.num.range-deletions";
    /// varint64.
    pub const NUM_DATA_BLOCKS: &str = "rocksdb.num.data.blocks";
    /// varint64.
    pub const FILTER_SIZE: &str = "rocksdb.filter.size";
    /// varint64: the table's format_version (equals the footer's).
    pub const FORMAT_VERSION: &str = "rocksdb.format.version";
    /// varint64.
    pub const FIXED_KEY_LEN: &str = "rocksdb.fixed.key.length";
    /// varint64: column family id; 2147483647 (`kUnknownColumnFamily`) when unknown.
    pub const COLUMN_FAMILY_ID: &str = "rocksdb.column.family.id";
    /// varint64: seconds since epoch of the oldest data (0 = unknown).
    pub const CREATION_TIME: &str = "rocksdb.creation.time";
    /// varint64.
    pub const OLDEST_KEY_TIME: &str = "rocksdb.oldest.key.time";
    /// varint64.
    pub const NEWEST_KEY_TIME: &str = "rocksdb.newest.key.time";
    /// varint64: seconds since epoch when the file was written (only written when > 0).
    pub const FILE_CREATION_TIME: &str = "rocksdb.file.creation.time";
    /// varint64: offset where the data blocks end and the tail begins.
    pub const TAIL_START_OFFSET: &str = "rocksdb.tail.start.offset";
    /// varint64.
    pub const KEY_LARGEST_SEQNO: &str = "rocksdb.key.largest.seqno";
    /// varint64.
    pub const KEY_SMALLEST_SEQNO: &str = "rocksdb.key.smallest.seqno";
    /// varint64.
    pub const USER_DEFINED_TIMESTAMPS_PERSISTED: &str = "rocksdb.user.defined.timestamps.persisted";
    /// string: column family name.
    pub const COLUMN_FAMILY_NAME: &str = "rocksdb.column.family.name";
    /// string: comparator name, e.g. `leveldb.BytewiseComparator`.
    pub const COMPARATOR: &str = "rocksdb.comparator";
    /// string: merge operator name, `nullptr` when none.
    pub const MERGE_OPERATOR: &str = "rocksdb.merge.operator";
    /// string.
    pub const PREFIX_EXTRACTOR_NAME: &str = "rocksdb.prefix.extractor.name";
    /// string.
    pub const PROPERTY_COLLECTORS: &str = "rocksdb.property.collectors";
    /// string.
    pub const FILTER_POLICY: &str = "rocksdb.filter.policy";
    /// string: compression name (fv 7: compression-manager form, e.g. `BuiltinV2;04;`).
    pub const COMPRESSION: &str = "rocksdb.compression";
    /// string.
    pub const COMPRESSION_OPTIONS: &str = "rocksdb.compression_options";
    /// string: identity of the DB that created the file (`SST Writer` for `SstFileWriter`).
    pub const DB_ID: &str = "rocksdb.creating.db.identity";
    /// string: session identity of the DB (or `SstFileWriter`) that created the file.
    pub const DB_SESSION_ID: &str = "rocksdb.creating.session.identity";
    /// string: host identity.
    pub const DB_HOST_ID: &str = "rocksdb.creating.host.identity";
    /// **fixed32** little-endian: `SstFileWriter` format version (external files only; 2 today).
    pub const EXTERNAL_SST_FILE_VERSION: &str = "rocksdb.external_sst_file.version";
    /// **fixed64** little-endian: global sequence number of an external file; may be
    /// rewritten in place at ingestion without updating the block checksum.
    pub const EXTERNAL_SST_FILE_GLOBAL_SEQNO: &str = "rocksdb.external_sst_file.global_seqno";
}

/// `kUnknownColumnFamily` (`port::kMaxInt32`): the column family id of files written without
/// one, e.g. by `SstFileWriter` without a column family handle.
pub const UNKNOWN_COLUMN_FAMILY_ID: u64 = 0x7fff_ffff;

/// Decoded table properties. Numeric fields absent from the block are 0 (RocksDB's defaults),
/// string fields absent are empty; fields RocksDB treats as optional are `Option`s.
/// [`TableProperties::raw`] holds every property exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableProperties {
    /// `rocksdb.num.entries`.
    pub num_entries: u64,
    /// `rocksdb.deleted.keys`.
    pub num_deletions: u64,
    /// `rocksdb.merge.operands`.
    pub num_merge_operands: u64,
    /// `rocksdb.num.range-deletions`.
    pub num_range_deletions: u64,
    /// `rocksdb.num.data.blocks`.
    pub num_data_blocks: u64,
    /// `rocksdb.num.filter_entries`.
    pub num_filter_entries: u64,
    /// `rocksdb.data.size`.
    pub data_size: u64,
    /// `rocksdb.index.size`.
    pub index_size: u64,
    /// `rocksdb.index.partitions`.
    pub index_partitions: u64,
    /// `rocksdb.top-level.index.size`.
    pub top_level_index_size: u64,
    /// `rocksdb.filter.size`.
    pub filter_size: u64,
    /// `rocksdb.raw.key.size`.
    pub raw_key_size: u64,
    /// `rocksdb.raw.value.size`.
    pub raw_value_size: u64,
    /// `rocksdb.column.family.id`; `None` when absent or `kUnknownColumnFamily`.
    pub column_family_id: Option<u32>,
    /// `rocksdb.column.family.name` (empty when absent).
    pub column_family_name: String,
    /// `rocksdb.comparator`.
    pub comparator: String,
    /// `rocksdb.merge.operator` (`nullptr` when the writer had none).
    pub merge_operator: String,
    /// `rocksdb.prefix.extractor.name`.
    pub prefix_extractor: String,
    /// `rocksdb.property.collectors`.
    pub property_collectors: String,
    /// `rocksdb.filter.policy`.
    pub filter_policy: String,
    /// `rocksdb.compression`.
    pub compression: String,
    /// `rocksdb.compression_options`.
    pub compression_options: String,
    /// `rocksdb.format.version`: the table format_version the writer used.
    pub format_version: u64,
    /// `rocksdb.fixed.key.length`.
    pub fixed_key_len: u64,
    /// `rocksdb.creating.db.identity`.
    pub db_id: String,
    /// `rocksdb.creating.session.identity`.
    pub db_session_id: String,
    /// `rocksdb.creating.host.identity`.
    pub db_host_id: String,
    /// `rocksdb.original.file.number`.
    pub orig_file_number: u64,
    /// `rocksdb.creation.time`.
    pub creation_time: u64,
    /// `rocksdb.oldest.key.time`.
    pub oldest_key_time: u64,
    /// `rocksdb.newest.key.time`.
    pub newest_key_time: u64,
    /// `rocksdb.file.creation.time`.
    pub file_creation_time: u64,
    /// `rocksdb.tail.start.offset`.
    pub tail_start_offset: u64,
    /// `rocksdb.key.smallest.seqno` (absent in older files).
    pub key_smallest_seqno: Option<u64>,
    /// `rocksdb.key.largest.seqno` (absent in older files).
    pub key_largest_seqno: Option<u64>,
    /// `rocksdb.external_sst_file.version` (fixed32; files from `SstFileWriter` only).
    pub external_sst_file_version: Option<u32>,
    /// `rocksdb.external_sst_file.global_seqno` (fixed64; `SstFileWriter` files only).
    pub external_sst_file_global_seqno: Option<u64>,
    /// Every property as stored: name (lossily UTF-8 decoded) to raw value bytes.
    pub raw: BTreeMap<String, Vec<u8>>,
}

impl TableProperties {
    /// Decodes the varint64 property `name` from [`TableProperties::raw`], if present.
    pub fn get_u64(&self, name: &str) -> Result<Option<u64>> {
        self.raw.get(name).map(|v| decode_u64(name, v)).transpose()
    }

    /// Returns the string property `name` from [`TableProperties::raw`], if present and UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.raw.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Adds one property (the caller has checked names are sorted and unique).
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let name = String::from_utf8_lossy(key).into_owned();
        self.set(&name, value)?;
        self.raw.insert(name, value.to_vec());
        Ok(())
    }

    fn set(&mut self, name: &str, v: &[u8]) -> Result<()> {
        use names::*;
        let num = || decode_u64(name, v);
        let text = || String::from_utf8_lossy(v).into_owned();
        match name {
            NUM_ENTRIES => self.num_entries = num()?,
            DELETED_KEYS => self.num_deletions = num()?,
            MERGE_OPERANDS => self.num_merge_operands = num()?,
            NUM_RANGE_DELETIONS => self.num_range_deletions = num()?,
            NUM_DATA_BLOCKS => self.num_data_blocks = num()?,
            NUM_FILTER_ENTRIES => self.num_filter_entries = num()?,
            DATA_SIZE => self.data_size = num()?,
            INDEX_SIZE => self.index_size = num()?,
            INDEX_PARTITIONS => self.index_partitions = num()?,
            TOP_LEVEL_INDEX_SIZE => self.top_level_index_size = num()?,
            FILTER_SIZE => self.filter_size = num()?,
            RAW_KEY_SIZE => self.raw_key_size = num()?,
            RAW_VALUE_SIZE => self.raw_value_size = num()?,
            FORMAT_VERSION => self.format_version = num()?,
            FIXED_KEY_LEN => self.fixed_key_len = num()?,
            ORIGINAL_FILE_NUMBER => self.orig_file_number = num()?,
            CREATION_TIME => self.creation_time = num()?,
            OLDEST_KEY_TIME => self.oldest_key_time = num()?,
            NEWEST_KEY_TIME => self.newest_key_time = num()?,
            FILE_CREATION_TIME => self.file_creation_time = num()?,
            TAIL_START_OFFSET => self.tail_start_offset = num()?,
            KEY_SMALLEST_SEQNO => self.key_smallest_seqno = Some(num()?),
            KEY_LARGEST_SEQNO => self.key_largest_seqno = Some(num()?),
            COLUMN_FAMILY_ID => {
                let id = num()?;
                self.column_family_id = if id == UNKNOWN_COLUMN_FAMILY_ID {
                    None
                } else {
                    Some(u32::try_from(id).map_err(|_| {
                        Error::corrupt(format!("{name}: column family id {id} exceeds u32"))
                    })?)
                };
            }
            EXTERNAL_SST_FILE_VERSION => {
                let b: [u8; 4] = v.try_into().map_err(|_| {
                    Error::corrupt(format!("{name}: expected 4 bytes, found {}", v.len()))
                })?;
                self.external_sst_file_version = Some(u32::from_le_bytes(b));
            }
            EXTERNAL_SST_FILE_GLOBAL_SEQNO => {
                let b: [u8; 8] = v.try_into().map_err(|_| {
                    Error::corrupt(format!("{name}: expected 8 bytes, found {}", v.len()))
                })?;
                self.external_sst_file_global_seqno = Some(u64::from_le_bytes(b));
            }
            COLUMN_FAMILY_NAME => self.column_family_name = text(),
            COMPARATOR => self.comparator = text(),
            MERGE_OPERATOR => self.merge_operator = text(),
            PREFIX_EXTRACTOR_NAME => self.prefix_extractor = text(),
            PROPERTY_COLLECTORS => self.property_collectors = text(),
            FILTER_POLICY => self.filter_policy = text(),
            COMPRESSION => self.compression = text(),
            COMPRESSION_OPTIONS => self.compression_options = text(),
            DB_ID => self.db_id = text(),
            DB_SESSION_ID => self.db_session_id = text(),
            DB_HOST_ID => self.db_host_id = text(),
            _ => {}
        }
        Ok(())
    }
}

/// Decodes a numeric property: exactly one canonical varint64, nothing after it. (RocksDB
/// logs and skips a malformed value; since the block checksum already matched, only a writer
/// bug produces one, and we report it.)
fn decode_u64(name: &str, v: &[u8]) -> Result<u64> {
    match decode_varint(v, 64, "property value") {
        Ok((x, n)) if n == v.len() => Ok(x),
        Ok(_) => Err(Error::corrupt(format!(
            "property {name}: trailing bytes after varint"
        ))),
        Err(e) => Err(Error::corrupt(format!("property {name}: {e}"))),
    }
}
