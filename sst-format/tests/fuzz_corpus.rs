//! Replays the committed fuzz seed corpora (`fuzz/corpus/<target>/`) through the same calls
//! the fuzz targets make, so a plain `cargo test` exercises every decoder on every seed and
//! every past crasher (crashers are added to the corpus when fixed). Any panic fails the test.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

/// Same body as `fuzz/fuzz_targets/sst_footer.rs`.
fn sst_footer(data: &[u8]) {
    let _ = sst_format::parse_footer(data, data.len() as u64);
    let _ = sst_format::fuzzing::parse_footer_unverified(data, data.len() as u64);
    if let Some((size, tail)) = data.split_first_chunk::<8>() {
        let size = u64::from_le_bytes(*size);
        let _ = sst_format::parse_footer(tail, size);
        let _ = sst_format::fuzzing::parse_footer_unverified(tail, size);
    }
}

/// Same body as `fuzz/fuzz_targets/sst_file.rs`.
fn sst_file(data: &[u8]) {
    let verified = sst_format::parse_sst_meta(data);
    let unverified = sst_format::fuzzing::parse_sst_meta_unverified(data);
    if let Ok(v) = verified {
        assert_eq!(Some(v), unverified.ok());
    }
}

/// Same body as `fuzz/fuzz_targets/manifest_decode.rs`.
fn manifest_decode(data: &[u8]) {
    if let Ok(m) = sst_format::decode_manifest(data) {
        let again = sst_format::encode_manifest(&m).expect("re-encode");
        assert_eq!(
            sst_format::decode_manifest(&again).expect("decode re-encoded"),
            m
        );
    }
    if data.len() > 14 {
        let _ = sst_format::decode_manifest_body(&data[10..data.len() - 4]);
    }
    if let Ok(m) = sst_format::decode_manifest_body(data) {
        let again = sst_format::encode_manifest(&m).expect("re-encode");
        assert_eq!(
            sst_format::decode_manifest(&again).expect("decode re-encoded"),
            m
        );
    }
}

#[test]
fn replay_sst_footer_corpus() {
    for (p, data) in corpus("sst_footer") {
        eprintln!("{}", p.display());
        sst_footer(&data);
    }
}

#[test]
fn replay_sst_file_corpus() {
    let mut parsed = 0;
    for (p, data) in corpus("sst_file") {
        eprintln!("{}", p.display());
        sst_file(&data);
        parsed += usize::from(sst_format::parse_sst_meta(&data).is_ok());
    }
    assert!(parsed > 0, "the corpus holds valid SSTs");
}

#[test]
fn replay_manifest_decode_corpus() {
    let mut decoded = 0;
    for (p, data) in corpus("manifest_decode") {
        eprintln!("{}", p.display());
        manifest_decode(&data);
        decoded += usize::from(sst_format::decode_manifest(&data).is_ok());
    }
    assert!(decoded > 0, "the corpus holds valid manifests");
}

/// Same body as `fuzz/fuzz_targets/savepoint_decode.rs`.
#[test]
fn replay_savepoint_decode_corpus() {
    let mut verified = 0;
    for (p, data) in corpus("savepoint_decode") {
        eprintln!("{}", p.display());
        verified += usize::from(sst_format::verify_savepoint(std::io::Cursor::new(&data)).is_ok());
    }
    assert!(verified > 0, "the corpus holds valid savepoints");
}

/// Same body as `fuzz/fuzz_targets/job_record_decode.rs`.
fn job_record_decode(data: &[u8]) {
    if let Ok(r) = sst_format::decode_job_checkpoint(data) {
        let again = sst_format::encode_job_checkpoint(&r).expect("re-encode");
        assert_eq!(
            sst_format::decode_job_checkpoint(&again).expect("decode"),
            r
        );
    }
    let mut framed = b"RSJC\x01\x00".to_vec();
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(data);
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    if let Ok(r) = sst_format::decode_job_checkpoint(&framed) {
        let again = sst_format::encode_job_checkpoint(&r).expect("re-encode");
        assert_eq!(
            sst_format::decode_job_checkpoint(&again).expect("decode"),
            r
        );
    }
}

#[test]
fn replay_job_record_decode_corpus() {
    let mut decoded = 0;
    for (p, data) in corpus("job_record_decode") {
        eprintln!("{}", p.display());
        job_record_decode(&data);
        decoded += usize::from(sst_format::decode_job_checkpoint(&data).is_ok());
    }
    assert!(decoded > 0, "the corpus holds valid job records");
}
