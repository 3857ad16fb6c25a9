//! docs/changelog-format.md §1: the decoder "also accepts several frames, or skippable frames,
//! back to back whose contents together are the raw body"; §3 step 10: "a frame followed by
//! bytes that are not one" is `Error::Decompress`.

fn segment(raw: &[u8], body: &[u8]) -> Vec<u8> {
    let mut seg = Vec::new();
    seg.extend_from_slice(b"RSCL");
    seg.extend_from_slice(&1u16.to_le_bytes());
    seg.extend_from_slice(&[1, 0]);
    seg.extend_from_slice(&300u64.to_le_bytes());
    seg.extend_from_slice(&1u64.to_le_bytes());
    seg.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    seg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    seg.extend_from_slice(body);
    let crc = crc32fast::hash(&seg);
    seg.extend_from_slice(&crc.to_le_bytes());
    seg
}

fn raw() -> Vec<u8> {
    let mut raw = vec![2, 7];
    raw.extend_from_slice(b"default");
    raw.extend_from_slice(&[1, b's']);
    raw.extend_from_slice(&[0x01, 0x01, 0x02, 0x05, b'k', 0x01, b'v']);
    raw
}

#[test]
fn two_frames_and_a_skippable_frame_decode() {
    let raw = raw();
    let (a, b) = raw.split_at(5);
    let mut body = zstd::bulk::compress(a, 1).unwrap();
    // A skippable frame: magic 0x184D2A50, u32 length, that many bytes.
    body.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(&[9, 9, 9]);
    body.extend_from_slice(&zstd::bulk::compress(b, 1).unwrap());
    let s = sst_format::decode_log_segment(&segment(&raw, &body)).unwrap();
    assert_eq!(s.count(), 1);
}

#[test]
fn a_frame_followed_by_garbage_is_a_decompress_error() {
    let raw = raw();
    let mut body = zstd::bulk::compress(&raw, 1).unwrap();
    body.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let got = sst_format::decode_log_segment(&segment(&raw, &body));
    assert!(
        matches!(got, Err(sst_format::Error::Decompress(_))),
        "{got:?}"
    );
}
