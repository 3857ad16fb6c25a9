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
fn job_record_round_trip(r: sst_format::JobRecord) {
    let again = match &r {
        sst_format::JobRecord::Checkpoint(c) => {
            sst_format::encode_job_checkpoint(c).expect("re-encode")
        }
        sst_format::JobRecord::Void(v) => sst_format::encode_void_record(v),
    };
    assert_eq!(sst_format::decode_job_record(&again).expect("decode"), r);
}

/// Same body as `fuzz/fuzz_targets/job_record_decode.rs`.
fn job_record_decode(data: &[u8]) {
    if let Ok(r) = sst_format::decode_job_record(data) {
        job_record_round_trip(r);
    }
    let mut framed = b"RSJC\x01\x00".to_vec();
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(data);
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    if let Ok(r) = sst_format::decode_job_record(&framed) {
        job_record_round_trip(r);
    }
}

#[test]
fn replay_job_record_decode_corpus() {
    let (mut records, mut voids) = (0, 0);
    for (p, data) in corpus("job_record_decode") {
        eprintln!("{}", p.display());
        job_record_decode(&data);
        match sst_format::decode_job_record(&data) {
            Ok(sst_format::JobRecord::Checkpoint(_)) => records += 1,
            Ok(sst_format::JobRecord::Void(_)) => voids += 1,
            Err(_) => {}
        }
    }
    assert!(records > 0, "the corpus holds valid job records");
    assert!(voids > 0, "the corpus holds valid void records");
}

/// Same body as `fuzz/fuzz_targets/log_segment_decode.rs`.
fn log_segment_decode(data: &[u8]) {
    log_segment_check(data);
    if let Some((&count, body)) = data.split_first() {
        log_segment_check(&log_segment_frame(u64::from(count), body));
    }
}

/// An uncompressed segment of `count` entries around `body`, with a correct CRC.
fn log_segment_frame(count: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"RSCL\x01\x00\x00\x00".to_vec();
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    out
}

fn log_segment_check(data: &[u8]) {
    use sst_format::{decode_log_segment, LogEntry, LogSegmentBuilder};
    let Ok(segment) = decode_log_segment(data) else {
        return;
    };
    let entries: Vec<LogEntry<'_>> = segment
        .entries()
        .map(|e| e.expect("an entry of a decoded segment"))
        .collect();
    assert_eq!(entries.len() as u64, segment.count());
    let mut b = LogSegmentBuilder::new();
    for e in &entries {
        match *e {
            LogEntry::Put { cf, key, value } => b.put(cf, key, value),
            LogEntry::Delete { cf, key } => b.delete(cf, key),
            LogEntry::DeleteRange { cf, start, end } => b.delete_range(cf, start, end),
        }
    }
    let again = b
        .finish(segment.first_seq(), segment.column_families(), false)
        .expect("re-encode");
    if data[6] == 0 {
        assert_eq!(
            again, data,
            "an uncompressed segment re-encodes to its own bytes"
        );
    }
    let decoded = decode_log_segment(&again).expect("decode re-encoded");
    assert_eq!(decoded.first_seq(), segment.first_seq());
    assert_eq!(decoded.column_families(), segment.column_families());
    let again_entries: Vec<LogEntry<'_>> = decoded
        .entries()
        .map(|e| e.expect("an entry of the re-encoded segment"))
        .collect();
    assert_eq!(again_entries, entries);
}

#[test]
fn replay_log_segment_decode_corpus() {
    let (mut decoded, mut framed) = (0, 0);
    for (p, data) in corpus("log_segment_decode") {
        eprintln!("{}", p.display());
        log_segment_decode(&data);
        decoded += usize::from(sst_format::decode_log_segment(&data).is_ok());
        if let Some((&count, body)) = data.split_first() {
            framed += usize::from(
                sst_format::decode_log_segment(&log_segment_frame(u64::from(count), body)).is_ok(),
            );
        }
    }
    assert!(decoded > 0, "the corpus holds valid segments");
    assert!(framed > 0, "the corpus holds raw bodies");
}
