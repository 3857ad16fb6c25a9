//! Pure-Rust readers for the on-disk formats rockstate must understand without RocksDB.
//!
//! * **RocksDB SST tails.** [`read_sst_meta`] (a file, positioned reads of the tail only) and
//!   [`parse_sst_meta`] (bytes in memory) decode and verify the footer of a block-based table
//!   (format_version 2..=7; checksum types CRC32C, xxHash32, xxHash64, XXH3 and none; the
//!   fv >= 6 footer checksum and per-block context checksums), the metaindex block, the
//!   properties block and the index block's checksum, and return [`SstMeta`]: the
//!   [`TableProperties`] and the file's [`SstUniqueId`] (DB identity, session identity, file
//!   number). [`parse_footer`] decodes a footer alone. A format_version above 7 is
//!   [`Error::UnsupportedFormatVersion`], not corruption.
//! * **Checkpoint manifests.** [`encode_manifest`] / [`decode_manifest`] implement the
//!   `_metadata` format of docs/manifest-format.md (`"RSTM" | u16 version | u32 length |
//!   zstd(postcard(body)) | crc32`) for the body type [`CheckpointManifest`].
//! * **Job checkpoint records.** [`encode_job_checkpoint`] / [`decode_job_checkpoint`]
//!   implement `job/chk-<id>` (`"RSJC" | u16 version | u32 length | postcard(body) | crc32`),
//!   the coordinator's record of which task snapshots form checkpoint N ([`JobCheckpoint`]);
//!   [`encode_void_record`] / [`decode_void_record`] the void record (`"RSJV" | u16 version |
//!   u64 id | u64 ms | crc32`) an owner puts under an abandoned checkpoint's name so that its
//!   record can never land; [`decode_job_record`] reads either ([`JobRecord`]).
//! * **Changelog segments.** [`LogSegmentBuilder`] / [`decode_log_segment`] implement the log
//!   segments of changelog-mode checkpoints (docs/changelog-format.md: `"RSCL" | u16 version |
//!   header | body | crc32`).
//!
//! Every decoder returns [`Result`] and never panics, whatever the input: all indexing is
//! bounds-checked, arithmetic on untrusted values is checked, and allocations are bounded by the
//! input's length (or, for decompression, by [`MAX_MANIFEST_BODY_BYTES`]). The crate is fuzzed
//! (`fuzz/`) and contains no `unsafe` code.
//!
//! Byte-level documentation: `docs/sst-format.md`, `docs/manifest-format.md` and
//! `docs/changelog-format.md`.
//!
//! ```
//! use sst_format::{decode_manifest, encode_manifest, CheckpointManifest};
//! let m = CheckpointManifest {
//!     checkpoint_id: 7,
//!     backend_id: "op-1/3".into(),
//!     key_group_start: 0,
//!     key_group_end: 41,
//!     max_parallelism: 128,
//!     states: vec![],
//!     shared_files: vec![],
//!     private_files: vec![],
//!     operator_state: vec![],
//!     created_at_ms: 1_700_000_000_000,
//!     changelog: None,
//! };
//! let bytes = encode_manifest(&m).unwrap();
//! assert_eq!(&bytes[..4], b"RSTM");
//! assert_eq!(decode_manifest(&bytes).unwrap(), m);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod block;
pub mod changelog;
pub mod checksum;
mod coding;
mod decompress;
pub mod error;
pub mod footer;
pub mod job;
pub mod manifest;
pub mod meta;
pub mod properties;
pub mod savepoint;
pub mod sst;

pub use changelog::{
    decode_log_segment, LogEntry, LogSegment, LogSegmentBuilder, LOG_SEGMENT_MAGIC,
    LOG_SEGMENT_VERSION,
};
pub use checksum::ChecksumType;
pub use error::{Error, Result};
pub use footer::{parse_footer, BlockHandle, Footer, FOOTER_LEN};
pub use job::{
    decode_job_checkpoint, decode_job_record, decode_void_record, encode_job_checkpoint,
    encode_void_record, JobCheckpoint, JobRecord, TaskCheckpoint, VoidRecord, JOB_RECORD_MAGIC,
    JOB_RECORD_VERSION, VOID_RECORD_LEN, VOID_RECORD_MAGIC, VOID_RECORD_VERSION,
};
pub use manifest::{
    decode_manifest, decode_manifest_body, encode_manifest, MANIFEST_MAGIC, MANIFEST_VERSION,
    MANIFEST_VERSION_1, MANIFEST_VERSION_2, MANIFEST_VERSION_3, MAX_MANIFEST_BODY_BYTES,
};
pub use meta::{
    Changelog, CheckpointManifest, LogSegmentFile, LogTable, LogTableFile, OperatorListState,
    PrivateFile, RedistributionMode, SharedFile, SstKeyRange, StateKind, StateMeta,
};
pub use properties::TableProperties;
pub use savepoint::{
    verify_savepoint, BlockBuilder, BlockCompressor, EncodedBlock, IndexEntry, SavepointEntry,
    SavepointHeader, SavepointReader, SavepointStats, SavepointWriter, BLOCK_TARGET_BYTES,
    SAVEPOINT_MAGIC, SAVEPOINT_MIN_VERSION, SAVEPOINT_VERSION,
};
pub use sst::{
    parse_sst_meta, read_sst_meta, read_sst_meta_with_stats, SstMeta, SstUniqueId, TailReadStats,
};

/// Entry points that skip checksum comparisons, for fuzzing the parsers that sit behind the
/// checksums. Never use them to accept a file.
#[doc(hidden)]
pub mod fuzzing {
    /// [`crate::parse_sst_meta`] without footer/block checksum comparisons.
    pub use crate::sst::parse_sst_meta_unverified;

    /// [`crate::parse_footer`] without the fv >= 6 footer checksum comparison.
    pub fn parse_footer_unverified(tail: &[u8], file_size: u64) -> crate::Result<crate::Footer> {
        crate::footer::parse_footer_impl(tail, file_size, false)
    }
}
