//! Fuzzes the whole-file parser on an in-memory SST, with and without checksum verification
//! (without, the fuzzer reaches the metaindex and properties decoders, which checksums would
//! otherwise shield from almost every mutation).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let verified = sst_format::parse_sst_meta(data);
    let unverified = sst_format::fuzzing::parse_sst_meta_unverified(data);
    // Whatever passes verification must parse identically without it.
    if let Ok(v) = verified {
        assert_eq!(Some(v), unverified.ok());
    }
});
