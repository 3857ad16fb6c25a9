//! Fuzzes the checkpoint manifest decoder: the whole envelope as given, the body decoder
//! (zstd + postcard) directly, so mutations are not all stopped by the CRC, and re-encoding
//! of anything that decodes (which must round-trip).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = sst_format::decode_manifest(data) {
        let again = sst_format::encode_manifest(&m).expect("re-encode");
        assert_eq!(
            sst_format::decode_manifest(&again).expect("decode re-encoded"),
            m
        );
    }
    if data.len() > 14 {
        // The body of a framed input, without its header and CRC.
        let _ = sst_format::decode_manifest_body(&data[10..data.len() - 4]);
    }
    if let Ok(m) = sst_format::decode_manifest_body(data) {
        let again = sst_format::encode_manifest(&m).expect("re-encode");
        assert_eq!(
            sst_format::decode_manifest(&again).expect("decode re-encoded"),
            m
        );
    }
});
