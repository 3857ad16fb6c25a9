//! The crate's single error type.
//!
//! This module owns [`Error`] and the [`Result`] alias used by every decoder in the crate. Each
//! variant names one way an input can be rejected, so callers can tell "this file is damaged"
//! ([`Error::ChecksumMismatch`], [`Error::Corrupt`], [`Error::BadMagic`], [`Error::Truncated`])
//! from "this file is fine but newer than we understand" ([`Error::UnsupportedFormatVersion`],
//! [`Error::Unsupported`], [`Error::UnknownManifestVersion`]).

/// Every way decoding an SST tail or a checkpoint manifest can fail.
///
/// No decoder in this crate panics on any input; they all return one of these instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the file failed (open, stat or positioned read).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// The input ends before a fixed-size structure does (a file shorter than an SST footer, a
    /// manifest cut short, a block extending past the end of the supplied bytes).
    #[error("truncated {what}: need {needed} bytes, have {available}")]
    Truncated {
        /// The structure that did not fit.
        what: &'static str,
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes that were available.
        available: u64,
    },

    /// A magic number did not match (SST table magic, manifest magic, fv >= 6 extended footer
    /// magic). Bytes are in file order.
    #[error("bad {what} magic: expected {expected:02x?}, found {found:02x?}")]
    BadMagic {
        /// Which magic number.
        what: &'static str,
        /// The expected bytes, in file order.
        expected: Vec<u8>,
        /// The bytes found, in file order.
        found: Vec<u8>,
    },

    /// A block-based table whose `format_version` this reader does not know (it reads 2..=7,
    /// like RocksDB 11.8). The file may well be valid for a newer RocksDB.
    #[error("unsupported block-based table format_version {0} (supported: 2..=7)")]
    UnsupportedFormatVersion(u32),

    /// A well-formed file using a feature this reader does not implement (a plain or cuckoo
    /// table, a legacy pre-fv2 block-based table, the fv >= 6 "future feature" reserved bytes).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The footer names a checksum type other than 0..=4.
    #[error("unknown checksum type {0}")]
    UnknownChecksumType(u8),

    /// A stored checksum (footer, block trailer) does not match the bytes it covers.
    #[error(
        "checksum mismatch in {block} at offset {offset}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    ChecksumMismatch {
        /// Which block: `"footer"`, `"metaindex"`, `"properties"`, `"index"`.
        block: &'static str,
        /// File offset of the block (or footer).
        offset: u64,
        /// The stored value with the fv >= 6 context modifier removed.
        stored: u32,
        /// The value computed from the bytes.
        computed: u32,
    },

    /// The bytes are internally inconsistent (bad varint, handle out of bounds, unsorted keys,
    /// non-zero padding...). `what` says which rule was broken.
    #[error("corrupt: {what}")]
    Corrupt {
        /// Human-readable description of the broken rule.
        what: String,
    },

    /// The properties block lacks a property this crate needs (the parts of the SST unique id).
    #[error("SST properties lack {0}")]
    MissingProperty(&'static str),

    /// The manifest declares a format version this build cannot decode.
    #[error(
        "unknown manifest version {0} (this build reads {v1}, {v2}, {v3} and {v})",
        v1 = crate::manifest::MANIFEST_VERSION_1,
        v2 = crate::manifest::MANIFEST_VERSION_2,
        v3 = crate::manifest::MANIFEST_VERSION_3,
        v = crate::manifest::MANIFEST_VERSION
    )]
    UnknownManifestVersion(u16),

    /// The manifest body's CRC-32 does not match the stored one.
    #[error("manifest checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ManifestChecksum {
        /// CRC-32 stored after the body.
        stored: u32,
        /// CRC-32 of the body as read.
        computed: u32,
    },

    /// zstd could not decompress (or compress) the manifest body.
    #[error("zstd (de)compression failed: {0}")]
    Decompress(#[source] std::io::Error),

    /// A size limit was exceeded (decompressed manifest body, encoded body length field).
    #[error("{what} is too large: {size} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size (for a decompression, the first size known to exceed the limit).
        size: u64,
        /// The limit.
        limit: u64,
    },

    /// The decompressed manifest body is not a valid postcard encoding of the body type (or
    /// has trailing bytes).
    #[error("manifest body decode failed: {0}")]
    Decode(#[source] postcard::Error),

    /// Serializing a manifest body failed.
    #[error("manifest body encode failed: {0}")]
    Encode(#[source] postcard::Error),

    /// A versioned file other than the manifest (e.g. a job record) declares a format version
    /// this build cannot decode.
    #[error("unknown {what} version {version} (this build reads {supported})")]
    UnknownVersion {
        /// Which file kind.
        what: &'static str,
        /// The version found.
        version: u16,
        /// The version this build reads.
        supported: u16,
    },

    /// The body CRC-32 of a framed file other than the manifest (e.g. a job record) does not
    /// match the stored one.
    #[error("{what} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    RecordChecksum {
        /// Which file kind.
        what: &'static str,
        /// CRC-32 stored after the body.
        stored: u32,
        /// CRC-32 of the body as read.
        computed: u32,
    },
}

impl Error {
    /// Shorthand for [`Error::Corrupt`].
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Error::Corrupt { what: what.into() }
    }
}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
