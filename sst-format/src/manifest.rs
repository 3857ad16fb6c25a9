//! The checkpoint manifest codec (docs/manifest-format.md): framing, compression and integrity.
//!
//! This module owns the byte layout of `chk-<id>/_metadata`:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSTM"
//! 4       2     format version, u16 little-endian (MANIFEST_VERSION = 1)
//! 6       4     body length N, u32 little-endian
//! 10      N     body = zstd(postcard(CheckpointManifest))
//! 10+N    4     CRC-32 (IEEE, as computed by crc32fast) of the N body bytes, u32 little-endian
//! ```
//!
//! The decoder checks, in order: magic, version, header length, total length (exactly
//! `14 + N`), CRC, then decompresses (at most [`MAX_MANIFEST_BODY_BYTES`]) and decodes the
//! body, which must be consumed exactly. The body types live in [`crate::meta`].
//! `docs/manifest-format.md` documents every byte.

use std::io::Read;

use crate::coding::fixed32;
use crate::error::{Error, Result};
use crate::meta::CheckpointManifest;

/// First four bytes of every manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"RSTM";

/// The manifest format version this build writes and reads.
pub const MANIFEST_VERSION: u16 = 1;

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
    if version != MANIFEST_VERSION {
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
    decode_manifest_body(body)
}

/// Decodes a manifest body (the bytes between the header and the CRC): zstd-decompresses at
/// most [`MAX_MANIFEST_BODY_BYTES`] and postcard-decodes a version-1 [`CheckpointManifest`]
/// that must use every byte. Exposed for fuzzing and tools; [`decode_manifest`] is the API.
pub fn decode_manifest_body(body: &[u8]) -> Result<CheckpointManifest> {
    decode_body_limited(body, MAX_MANIFEST_BODY_BYTES)
}

fn decode_body_limited(body: &[u8], limit: u64) -> Result<CheckpointManifest> {
    let decoder = zstd::stream::read::Decoder::with_buffer(body).map_err(Error::Decompress)?;
    let mut raw = Vec::new();
    // Read one byte past the limit to tell "exactly at the limit" from "over it".
    decoder
        .take(limit.saturating_add(1))
        .read_to_end(&mut raw)
        .map_err(Error::Decompress)?;
    if raw.len() as u64 > limit {
        return Err(Error::TooLarge {
            what: "decompressed manifest body",
            size: raw.len() as u64,
            limit,
        });
    }
    let (manifest, rest) =
        postcard::take_from_bytes::<CheckpointManifest>(&raw).map_err(Error::Decode)?;
    if !rest.is_empty() {
        return Err(Error::Decode(postcard::Error::DeserializeBadEncoding));
    }
    Ok(manifest)
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
