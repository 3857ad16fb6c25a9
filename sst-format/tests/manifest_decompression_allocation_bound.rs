//! docs/manifest-format.md §1 step 6: a decompressed body above 256 MiB is `TooLarge`,
//! "checked while streaming, so a hostile frame cannot make the decoder allocate more".
//! A 14-byte envelope around a small zstd frame of 257 MiB of zeros (valid CRC) must be
//! refused without any allocation above the 256 MiB bound.

use std::io::Write;

#[path = "common/largest_allocation.rs"]
mod largest_allocation;

#[global_allocator]
static A: largest_allocation::Largest = largest_allocation::Largest;

#[test]
fn a_zstd_bomb_manifest_never_allocates_beyond_the_documented_bound() {
    let chunk = vec![0u8; 1 << 20];
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    for _ in 0..257 {
        enc.write_all(&chunk).unwrap();
    }
    let body = enc.finish().unwrap();
    drop(chunk);
    let mut file = Vec::new();
    file.extend_from_slice(b"RSTM");
    file.extend_from_slice(&4u16.to_le_bytes());
    file.extend_from_slice(&(body.len() as u32).to_le_bytes());
    file.extend_from_slice(&body);
    file.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());

    largest_allocation::reset();
    let got = sst_format::decode_manifest(&file);
    let largest = largest_allocation::largest() as u64;
    assert!(
        matches!(got, Err(sst_format::Error::TooLarge { .. })),
        "{got:?}"
    );
    assert!(
        largest <= sst_format::MAX_MANIFEST_BODY_BYTES + (1 << 20),
        "decoding a {}-byte manifest allocated {largest} bytes at once (bound {})",
        file.len(),
        sst_format::MAX_MANIFEST_BODY_BYTES
    );
}
