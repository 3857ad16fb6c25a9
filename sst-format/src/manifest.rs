//! The checkpoint manifest codec (docs/manifest-format.md): framing, compression and integrity.
//!
//! This module owns the byte layout of `chk-<id>/_metadata`:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSTM"
//! 4       2     format version, u16 little-endian (MANIFEST_VERSION = 4; 3, 2 and 1 are still
//!               read)
//! 6       4     body length N, u32 little-endian
//! 10      N     body = zstd(postcard(CheckpointManifest))
//! 10+N    4     CRC-32 (IEEE, as computed by crc32fast) of the N body bytes, u32 little-endian
//! ```
//!
//! The decoder checks, in order: magic, version, header length, total length (exactly
//! `14 + N`), CRC, then decompresses (at most [`MAX_MANIFEST_BODY_BYTES`]) and decodes the
//! body, which must be consumed exactly. The body types live in [`crate::meta`]; version 3's
//! body differs only in lacking `Changelog::tables`, version 2's in lacking
//! `CheckpointManifest::changelog` altogether, version 1's also in lacking
//! `SharedFile::key_range`, and each is decoded by its own types here.
//! `docs/manifest-format.md` documents every byte.

use serde::Deserialize;

use crate::coding::fixed32;
use crate::decompress::{decompress_bounded, Output};
use crate::error::{Error, Result};
use crate::meta::{
    Changelog, CheckpointManifest, LogSegmentFile, OperatorListState, PrivateFile, SharedFile,
    StateMeta,
};
use crate::sst::SstUniqueId;

/// First four bytes of every manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"RSTM";

/// The manifest format version this build writes (it reads it, [`MANIFEST_VERSION_3`],
/// [`MANIFEST_VERSION_2`] and [`MANIFEST_VERSION_1`]).
pub const MANIFEST_VERSION: u16 = 4;

/// The third manifest format version, still decoded: its changelog has no sorted tables
/// (`Changelog::tables` is empty).
pub const MANIFEST_VERSION_3: u16 = 3;

/// The second manifest format version, still decoded: it has no changelog
/// (`CheckpointManifest::changelog` is `None`).
pub const MANIFEST_VERSION_2: u16 = 2;

/// The first manifest format version, still decoded: its shared files carry no key range
/// (`SharedFile::key_range` is `None`).
pub const MANIFEST_VERSION_1: u16 = 1;

/// Bytes before the body: magic (4), version (2), body length (4).
pub const MANIFEST_HEADER_LEN: usize = 10;

/// Bytes after the body: the CRC-32.
pub const MANIFEST_TRAILER_LEN: usize = 4;

/// Upper bound on the decompressed (postcard) body, on both encode and decode. A manifest
/// listing a million files is well below 256 MiB; anything larger is refused with
/// [`Error::TooLarge`] instead of exhausting memory.
pub const MAX_MANIFEST_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// zstd level used by [`encode_manifest`]. Decoding does not depend on it.
pub const MANIFEST_ZSTD_LEVEL: i32 = 3;

/// Encodes `manifest` as a complete `_metadata` file (version [`MANIFEST_VERSION`]).
/// Deterministic for a given zstd library version.
pub fn encode_manifest(manifest: &CheckpointManifest) -> Result<Vec<u8>> {
    let raw = postcard::to_stdvec(manifest).map_err(Error::Encode)?;
    if raw.len() as u64 > MAX_MANIFEST_BODY_BYTES {
        return Err(Error::TooLarge {
            what: "manifest body",
            size: raw.len() as u64,
            limit: MAX_MANIFEST_BODY_BYTES,
        });
    }
    let body = zstd::bulk::compress(&raw, MANIFEST_ZSTD_LEVEL).map_err(Error::Decompress)?;
    let body_len = u32::try_from(body.len()).map_err(|_| Error::TooLarge {
        what: "compressed manifest body",
        size: body.len() as u64,
        limit: u64::from(u32::MAX),
    })?;
    let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len() + MANIFEST_TRAILER_LEN);
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    Ok(out)
}

/// Decodes a complete `_metadata` file. Errors: [`Error::Truncated`] (short read),
/// [`Error::BadMagic`], [`Error::UnknownManifestVersion`], [`Error::Corrupt`] (bytes after the
/// CRC), [`Error::ManifestChecksum`], [`Error::Decompress`], [`Error::TooLarge`],
/// [`Error::Decode`].
pub fn decode_manifest(bytes: &[u8]) -> Result<CheckpointManifest> {
    let magic_len = bytes.len().min(MANIFEST_MAGIC.len());
    if bytes[..magic_len] != MANIFEST_MAGIC[..magic_len] {
        return Err(Error::BadMagic {
            what: "manifest",
            expected: MANIFEST_MAGIC.to_vec(),
            found: bytes[..magic_len].to_vec(),
        });
    }
    if bytes.len() < 6 {
        return Err(Error::Truncated {
            what: "manifest header",
            needed: MANIFEST_HEADER_LEN as u64,
            available: bytes.len() as u64,
        });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if ![
        MANIFEST_VERSION,
        MANIFEST_VERSION_3,
        MANIFEST_VERSION_2,
        MANIFEST_VERSION_1,
    ]
    .contains(&version)
    {
        return Err(Error::UnknownManifestVersion(version));
    }
    let body_len = fixed32(bytes, 6).ok_or(Error::Truncated {
        what: "manifest header",
        needed: MANIFEST_HEADER_LEN as u64,
        available: bytes.len() as u64,
    })?;
    let total = MANIFEST_HEADER_LEN as u64 + u64::from(body_len) + MANIFEST_TRAILER_LEN as u64;
    if (bytes.len() as u64) < total {
        return Err(Error::Truncated {
            what: "manifest body",
            needed: total,
            available: bytes.len() as u64,
        });
    }
    if (bytes.len() as u64) > total {
        return Err(Error::corrupt(format!(
            "{} bytes after the manifest CRC (expected {total} bytes in total)",
            bytes.len() as u64 - total
        )));
    }
    // total == bytes.len(), so these ranges are in bounds.
    let body_end = bytes.len() - MANIFEST_TRAILER_LEN;
    let body = &bytes[MANIFEST_HEADER_LEN..body_end];
    let stored = fixed32(bytes, body_end).ok_or_else(|| Error::corrupt("manifest CRC"))?;
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(Error::ManifestChecksum { stored, computed });
    }
    if version == MANIFEST_VERSION_1 {
        let raw = decompress_limited(body, MAX_MANIFEST_BODY_BYTES)?;
        return Ok(take_all::<ManifestV1>(&raw)?.into());
    }
    if version == MANIFEST_VERSION_2 {
        let raw = decompress_limited(body, MAX_MANIFEST_BODY_BYTES)?;
        return Ok(take_all::<ManifestV2>(&raw)?.into());
    }
    if version == MANIFEST_VERSION_3 {
        let raw = decompress_limited(body, MAX_MANIFEST_BODY_BYTES)?;
        return Ok(take_all::<ManifestV3>(&raw)?.into());
    }
    decode_manifest_body(body)
}

/// Decodes a manifest body of the current version (the bytes between the header and the
/// CRC): zstd-decompresses at most [`MAX_MANIFEST_BODY_BYTES`] and postcard-decodes a
/// version-[`MANIFEST_VERSION`] [`CheckpointManifest`] that must use every byte. Exposed for
/// fuzzing and tools; [`decode_manifest`] is the API (and the only reader of version 1).
pub fn decode_manifest_body(body: &[u8]) -> Result<CheckpointManifest> {
    decode_body_limited(body, MAX_MANIFEST_BODY_BYTES)
}

fn decode_body_limited(body: &[u8], limit: u64) -> Result<CheckpointManifest> {
    take_all(&decompress_limited(body, limit)?)
}

/// Postcard-decodes a `T` that must use every byte of `raw`.
fn take_all<'de, T: Deserialize<'de>>(raw: &'de [u8]) -> Result<T> {
    let (value, rest) = postcard::take_from_bytes::<T>(raw).map_err(Error::Decode)?;
    if !rest.is_empty() {
        return Err(Error::Decode(postcard::Error::DeserializeBadEncoding));
    }
    Ok(value)
}

/// The version-3 body: [`CheckpointManifest`] whose changelog has no tables. Field order is
/// the format (docs/manifest-format.md §4).
#[derive(Deserialize)]
struct ManifestV3 {
    checkpoint_id: u64,
    backend_id: String,
    key_group_start: u16,
    key_group_end: u16,
    max_parallelism: u32,
    states: Vec<StateMeta>,
    shared_files: Vec<SharedFile>,
    private_files: Vec<PrivateFile>,
    operator_state: Vec<OperatorListState>,
    created_at_ms: u64,
    changelog: Option<ChangelogV3>,
}

/// A version-3 changelog: segments only.
#[derive(Deserialize)]
struct ChangelogV3 {
    materialization_id: u64,
    materialized_seq: u64,
    segments: Vec<LogSegmentFile>,
}

impl From<ManifestV3> for CheckpointManifest {
    fn from(m: ManifestV3) -> Self {
        CheckpointManifest {
            checkpoint_id: m.checkpoint_id,
            backend_id: m.backend_id,
            key_group_start: m.key_group_start,
            key_group_end: m.key_group_end,
            max_parallelism: m.max_parallelism,
            states: m.states,
            shared_files: m.shared_files,
            private_files: m.private_files,
            operator_state: m.operator_state,
            created_at_ms: m.created_at_ms,
            changelog: m.changelog.map(|c| Changelog {
                materialization_id: c.materialization_id,
                materialized_seq: c.materialized_seq,
                segments: c.segments,
                tables: Vec::new(),
            }),
        }
    }
}

/// The version-2 body: [`CheckpointManifest`] without the changelog. Field order is the
/// format (docs/manifest-format.md §5).
#[derive(Deserialize)]
struct ManifestV2 {
    checkpoint_id: u64,
    backend_id: String,
    key_group_start: u16,
    key_group_end: u16,
    max_parallelism: u32,
    states: Vec<StateMeta>,
    shared_files: Vec<SharedFile>,
    private_files: Vec<PrivateFile>,
    operator_state: Vec<OperatorListState>,
    created_at_ms: u64,
}

impl From<ManifestV2> for CheckpointManifest {
    fn from(m: ManifestV2) -> Self {
        ManifestV3 {
            checkpoint_id: m.checkpoint_id,
            backend_id: m.backend_id,
            key_group_start: m.key_group_start,
            key_group_end: m.key_group_end,
            max_parallelism: m.max_parallelism,
            states: m.states,
            shared_files: m.shared_files,
            private_files: m.private_files,
            operator_state: m.operator_state,
            created_at_ms: m.created_at_ms,
            changelog: None,
        }
        .into()
    }
}

/// The version-1 body: [`CheckpointManifest`] with version-1 shared files. Field order is the
/// format (docs/manifest-format.md §6).
#[derive(Deserialize)]
struct ManifestV1 {
    checkpoint_id: u64,
    backend_id: String,
    key_group_start: u16,
    key_group_end: u16,
    max_parallelism: u32,
    states: Vec<StateMeta>,
    shared_files: Vec<SharedFileV1>,
    private_files: Vec<PrivateFile>,
    operator_state: Vec<OperatorListState>,
    created_at_ms: u64,
}

/// A version-1 shared file: no key range.
#[derive(Deserialize)]
struct SharedFileV1 {
    remote_name: String,
    local_name: String,
    size: u64,
    crc32: u32,
    sst_id: SstUniqueId,
}

impl From<ManifestV1> for CheckpointManifest {
    fn from(m: ManifestV1) -> Self {
        ManifestV2 {
            checkpoint_id: m.checkpoint_id,
            backend_id: m.backend_id,
            key_group_start: m.key_group_start,
            key_group_end: m.key_group_end,
            max_parallelism: m.max_parallelism,
            states: m.states,
            shared_files: m
                .shared_files
                .into_iter()
                .map(|f| SharedFile {
                    remote_name: f.remote_name,
                    local_name: f.local_name,
                    size: f.size,
                    crc32: f.crc32,
                    sst_id: f.sst_id,
                    key_range: None,
                })
                .collect(),
            private_files: m.private_files,
            operator_state: m.operator_state,
            created_at_ms: m.created_at_ms,
        }
        .into()
    }
}

/// zstd-decompresses `body`, refusing more than `limit` bytes.
fn decompress_limited(body: &[u8], limit: u64) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    match decompress_bounded(body, usize::try_from(limit).unwrap_or(usize::MAX), &mut raw)? {
        Output::Within => Ok(raw),
        Output::Over => Err(Error::TooLarge {
            what: "decompressed manifest body",
            size: limit.saturating_add(1),
            limit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompressed_size_is_capped() {
        let raw = vec![0u8; 10_000];
        let body = zstd::bulk::compress(&raw, 1).unwrap();
        match decode_body_limited(&body, 9_999) {
            Err(Error::TooLarge { size, limit, .. }) => {
                assert_eq!((size, limit), (10_000, 9_999));
            }
            other => panic!("{other:?}"),
        }
        // At the limit it decompresses, and then fails as a postcard body (zeros are a
        // valid prefix but leave trailing bytes).
        assert!(matches!(
            decode_body_limited(&body, 10_000),
            Err(Error::Decode(_))
        ));
    }
}
