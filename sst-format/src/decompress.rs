//! Bounded zstd decompression for every decoder of the crate: a frame's output is refused
//! past a limit, and the buffer it goes into grows only with output the frame really
//! produced, never past that limit. A length a header declares is not trusted to allocate
//! before the frame proves it (a tiny, re-sealed file could otherwise make a reader reserve
//! gigabytes), and a frame that expands beyond its limit stops within one chunk of it.

use std::io::Read;

use crate::error::{Error, Result};

/// Bytes decompressed per step.
const CHUNK: usize = 64 << 10;

/// What [`decompress_bounded`] found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// The frame's whole output, at most the limit, is in the buffer.
    Within,
    /// The frame produces more than the limit; the buffer holds a prefix of at most the limit.
    Over,
}

/// zstd-decompresses `frame` (one frame or several, as `zstd` reads them) into `out`
/// (cleared first), refusing more than `limit` bytes. `out`'s capacity stays within
/// `limit` (or what it had before) and within twice the output plus one chunk.
pub(crate) fn decompress_bounded(frame: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<Output> {
    out.clear();
    let mut decoder = zstd::stream::read::Decoder::with_buffer(frame).map_err(Error::Decompress)?;
    let mut chunk = vec![0u8; CHUNK.min(limit.saturating_add(1)).max(1)];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(Output::Within),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Decompress(e)),
        };
        if n > limit - out.len() {
            return Ok(Output::Over);
        }
        if out.capacity() - out.len() < n {
            let want = out
                .capacity()
                .saturating_mul(2)
                .max(out.len() + n)
                .min(limit);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_within_at_and_over_the_limit() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let frame = zstd::encode_all(&data[..], 3).unwrap();
        for limit in [data.len(), data.len() + 1, 10 * data.len()] {
            let mut out = Vec::new();
            assert_eq!(
                decompress_bounded(&frame, limit, &mut out).unwrap(),
                Output::Within
            );
            assert_eq!(out, data);
            assert!(out.capacity() <= limit.min(2 * data.len() + CHUNK));
        }
        for limit in [0, 1, CHUNK, data.len() - 1] {
            let mut out = Vec::new();
            assert_eq!(
                decompress_bounded(&frame, limit, &mut out).unwrap(),
                Output::Over
            );
            assert!(out.len() <= limit && out.capacity() <= limit.max(1));
            assert_eq!(out[..], data[..out.len()]);
        }
        assert!(matches!(
            decompress_bounded(b"not a zstd frame", 100, &mut Vec::new()),
            Err(Error::Decompress(_))
        ));
    }

    #[test]
    fn a_bomb_grows_the_buffer_only_to_the_limit() {
        let zeros = vec![0u8; 8 << 20];
        let frame = zstd::encode_all(&zeros[..], 19).unwrap();
        assert!(frame.len() < 4096);
        let mut out = Vec::new();
        let limit = (1 << 20) + 123;
        assert_eq!(
            decompress_bounded(&frame, limit, &mut out).unwrap(),
            Output::Over
        );
        assert!(out.capacity() <= limit);
    }
}
