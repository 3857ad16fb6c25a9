//! Fuzzes the job record decoders: the input as given (a completed checkpoint's record or a
//! void record, told apart by magic), and the same bytes framed with a correct header and CRC
//! so mutations reach the postcard body decoder. Anything that decodes must re-encode to a
//! record that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sst_format::JobRecord;

fn round_trip(r: JobRecord) {
    let again = match &r {
        JobRecord::Checkpoint(c) => sst_format::encode_job_checkpoint(c).expect("re-encode"),
        JobRecord::Void(v) => sst_format::encode_void_record(v),
    };
    assert_eq!(sst_format::decode_job_record(&again).expect("decode"), r);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = sst_format::decode_job_record(data) {
        round_trip(r);
    }
    let mut framed = b"RSJC\x01\x00".to_vec();
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(data);
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    if let Ok(r) = sst_format::decode_job_record(&framed) {
        round_trip(r);
    }
});
