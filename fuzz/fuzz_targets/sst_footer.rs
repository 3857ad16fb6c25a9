//! Fuzzes the footer decoder. Input: the tail of a file. The file size is the input length,
//! and additionally a size read from the first 8 bytes (so tails shorter than the file, and
//! footer offsets above 4 GiB, are exercised). Both the verified and the checksum-skipping
//! decoder run, so the code behind the fv >= 6 footer checksum is reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sst_format::parse_footer(data, data.len() as u64);
    let _ = sst_format::fuzzing::parse_footer_unverified(data, data.len() as u64);
    if let Some((size, tail)) = data.split_first_chunk::<8>() {
        let size = u64::from_le_bytes(*size);
        let _ = sst_format::parse_footer(tail, size);
        let _ = sst_format::fuzzing::parse_footer_unverified(tail, size);
    }
});
