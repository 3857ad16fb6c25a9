//! Byte layouts of keys and values in RocksDB (docs/architecture.md §8, invariant 7), and the
//! typed value codec (docs/decisions/0001-postcard-codec.md).
//!
//! Key: `[key group, 1 or 2 bytes BE][varint len][key][varint len][namespace][suffix]`, where the
//! suffix is the user key of a map entry, the 8-byte big-endian sequence of a list element, or
//! empty. The length prefixes make `[kg][key][ns]` an unambiguous prefix of all of a key's
//! entries in one namespace.
//!
//! Typed state uses [postcard](https://docs.rs/postcard) 1.x: its wire format is specified and
//! frozen for 1.x, it is deterministic for a given type (use `BTreeMap`, not `HashMap`, inside
//! state types), compact (varints), and fast. Map iteration is in the byte order of the encoded
//! user key; postcard's varints do not preserve numeric order, so engines that need numeric
//! order use the raw API with big-endian keys.

use serde::{de::DeserializeOwned, Serialize};

use crate::error::{Error, Result};
use crate::keygroup;

/// Appends `v` as an unsigned LEB128 varint.
pub fn write_varint(out: &mut impl Extend<u8>, mut v: u64) {
    while v >= 0x80 {
        out.extend([(v as u8) | 0x80]);
        v >>= 7;
    }
    out.extend([v as u8]);
}

/// Reads an unsigned LEB128 varint; returns the value and the bytes it took.
pub fn read_varint(bytes: &[u8]) -> Result<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        let part = u64::from(b & 0x7f);
        if i == 9 && *b > 1 {
            return Err(Error::decode("varint", "overflows u64"));
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err(Error::decode("varint", "truncated"))
}

/// Appends `[kg][len][key][len][ns]`.
pub fn write_key_prefix(
    out: &mut impl Extend<u8>,
    key_group: u16,
    max_parallelism: u32,
    key: &[u8],
    ns: &[u8],
) {
    keygroup::write_prefix(out, key_group, max_parallelism);
    write_varint(out, key.len() as u64);
    out.extend(key.iter().copied());
    write_varint(out, ns.len() as u64);
    out.extend(ns.iter().copied());
}

/// A stored key split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredKey<'a> {
    /// The key group from the prefix.
    pub key_group: u16,
    /// The serialized key.
    pub key: &'a [u8],
    /// The serialized namespace.
    pub namespace: &'a [u8],
    /// Map user key, list sequence, or empty.
    pub suffix: &'a [u8],
}

fn take_len_prefixed<'a>(bytes: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8])> {
    let (len, n) = read_varint(bytes)?;
    let rest = &bytes[n..];
    let len = usize::try_from(len).map_err(|_| Error::decode(what, "length overflows"))?;
    if len > rest.len() {
        return Err(Error::decode(what, "length beyond end of key"));
    }
    Ok(rest.split_at(len))
}

/// Splits a stored key; any malformation is a typed error.
pub fn split_key(bytes: &[u8], max_parallelism: u32) -> Result<StoredKey<'_>> {
    let key_group = keygroup::read_prefix(bytes, max_parallelism)?;
    let rest = &bytes[keygroup::prefix_len(max_parallelism)..];
    let (key, rest) = take_len_prefixed(rest, "key")?;
    let (namespace, suffix) = take_len_prefixed(rest, "namespace")?;
    Ok(StoredKey {
        key_group,
        key,
        namespace,
        suffix,
    })
}

/// The smallest byte string greater than every string starting with `prefix`, or `None` when
/// `prefix` is all `0xff` (then the scan runs to the end).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Serializes a typed value with postcard, appending to `out`.
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
    what: &'static str,
) -> Result<()> {
    let buf = std::mem::take(out);
    *out = postcard::to_extend(value, buf).map_err(|e| Error::Encode {
        what,
        detail: e.to_string(),
    })?;
    Ok(())
}

/// Serializes a typed value with postcard.
pub fn encode<T: Serialize + ?Sized>(value: &T, what: &'static str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(value, &mut out, what)?;
    Ok(out)
}

/// Deserializes a typed value; trailing bytes are an error (they mean a type mismatch).
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T> {
    let (value, rest) = postcard::take_from_bytes(bytes).map_err(|e| Error::decode(what, e))?;
    if !rest.is_empty() {
        return Err(Error::decode(
            what,
            format!("{} trailing bytes", rest.len()),
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_errors() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            write_varint(&mut b, v);
            assert_eq!(read_varint(&b).unwrap(), (v, b.len()));
        }
        assert!(read_varint(&[]).is_err());
        assert!(read_varint(&[0x80]).is_err());
        assert!(read_varint(&[0xff; 10]).is_err());
        assert!(
            read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).is_err()
        );
    }

    #[test]
    fn key_split_round_trip() {
        for m in [128u32, 4096] {
            let mut b = Vec::new();
            write_key_prefix(&mut b, 77, m, b"user-1", b"window-9");
            b.extend_from_slice(b"mapkey");
            let k = split_key(&b, m).unwrap();
            assert_eq!(k.key_group, 77);
            assert_eq!(k.key, b"user-1");
            assert_eq!(k.namespace, b"window-9");
            assert_eq!(k.suffix, b"mapkey");
            // Every truncation is an error or a shorter suffix, never a panic.
            for cut in 0..b.len() {
                let _ = split_key(&b[..cut], m);
            }
        }
        assert!(split_key(&[1, 200], 128).is_err());
    }

    #[test]
    fn prefix_end_bounds_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }

    #[test]
    fn typed_codec_rejects_trailing_bytes() {
        let b = encode(&(1u32, 2u32), "t").unwrap();
        assert!(decode::<u32>(&b, "t").is_err());
        assert_eq!(decode::<(u32, u32)>(&b, "t").unwrap(), (1, 2));
        assert!(decode::<String>(&[5, b'a'], "t").is_err());
    }
}
