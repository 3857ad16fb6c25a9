//! Fuzzes the job record decoder: the framed input as given, and the same bytes framed with a
//! correct header and CRC so mutations reach the postcard body decoder. Anything that decodes
//! must re-encode to a record that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = sst_format::decode_job_checkpoint(data) {
        let again = sst_format::encode_job_checkpoint(&r).expect("re-encode");
        assert_eq!(sst_format::decode_job_checkpoint(&again).expect("decode"), r);
    }
    let mut framed = b"RSJC\x01\x00".to_vec();
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(data);
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    if let Ok(r) = sst_format::decode_job_checkpoint(&framed) {
        let again = sst_format::encode_job_checkpoint(&r).expect("re-encode");
        assert_eq!(sst_format::decode_job_checkpoint(&again).expect("decode"), r);
    }
});
