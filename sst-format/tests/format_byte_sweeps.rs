//! Every single-byte corruption (eight one-bit flips and `^ 0xff` at every position), every
//! truncation and an appended byte, on small real files of every framed format: each must be a
//! typed error (or, where the changed byte carries no meaning, the very same decoded value),
//! never a panic and never a different value.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

fn corpus(dir: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(dir)
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Runs `decode` on every mutation; returns the failures.
fn sweep<T: PartialEq + std::fmt::Debug>(
    what: &str,
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, sst_format::Error>,
) -> Vec<String> {
    let original = decode(bytes).unwrap_or_else(|e| panic!("{what}: original: {e}"));
    let mut bad = Vec::new();
    let mut check =
        |label: String, b: &[u8], may_equal: bool| match catch_unwind(AssertUnwindSafe(|| {
            decode(b)
        })) {
            Err(_) => bad.push(format!("{what}: {label}: PANIC")),
            Ok(Ok(v)) if v != original => {
                bad.push(format!("{what}: {label}: decoded a DIFFERENT value {v:?}"))
            }
            Ok(Ok(_)) if !may_equal => bad.push(format!("{what}: {label}: accepted")),
            _ => {}
        };
    for i in 0..bytes.len() {
        for mask in [1u8, 2, 4, 8, 16, 32, 64, 128, 0xff] {
            let mut b = bytes.to_vec();
            b[i] ^= mask;
            // Equal values are tolerated here and reported by the value check above.
            check(format!("byte {i} ^ {mask:#04x}"), &b, true);
        }
    }
    for n in 0..bytes.len() {
        check(format!("cut to {n} bytes"), &bytes[..n], false);
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    check("one byte appended".into(), &longer, false);
    bad
}

fn savepoint(bytes: &[u8]) -> sst_format::Result<(sst_format::SavepointHeader, Vec<Vec<u8>>)> {
    let mut r = sst_format::SavepointReader::open(std::io::Cursor::new(bytes))?;
    let header = r.header().clone();
    let mut out = Vec::new();
    for e in r.index().to_vec() {
        r.for_each_entry(&e, |x| {
            let mut v = vec![x.state as u8];
            for p in [x.key, x.namespace, x.suffix, x.value] {
                v.extend_from_slice(&(p.len() as u32).to_le_bytes());
                v.extend_from_slice(p);
            }
            out.push(v);
            Ok(())
        })?;
    }
    Ok((header, out))
}

fn segment(bytes: &[u8]) -> sst_format::Result<(u64, Vec<String>, Vec<String>)> {
    let s = sst_format::decode_log_segment(bytes)?;
    let e = s
        .entries()
        .map(|e| e.map(|e| format!("{e:?}")))
        .collect::<sst_format::Result<_>>()?;
    Ok((s.first_seq(), s.column_families().to_vec(), e))
}

#[test]
fn manifest_every_byte_and_cut() {
    let mut bad = Vec::new();
    for f in [
        "v4_tables.rstm",
        "v3_changelog.rstm",
        "v2_sample.rstm",
        "v1_sample.rstm",
    ] {
        bad.extend(sweep(
            f,
            &corpus("manifest_decode", f),
            sst_format::decode_manifest,
        ));
    }
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn job_record_every_byte_and_cut() {
    let mut bad = Vec::new();
    for f in ["v1_sample.rsjc", "v1_no_tasks.rsjc"] {
        bad.extend(sweep(
            f,
            &corpus("job_record_decode", f),
            sst_format::decode_job_checkpoint,
        ));
    }
    bad.extend(sweep(
        "v1_void.rsjv",
        &corpus("job_record_decode", "v1_void.rsjv"),
        sst_format::decode_job_record,
    ));
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn log_segment_every_byte_and_cut() {
    let mut bad = Vec::new();
    for f in [
        "small.rscl",
        "small_zstd.rscl",
        "empty.rscl",
        "delete_range.rscl",
    ] {
        bad.extend(sweep(f, &corpus("log_segment_decode", f), segment));
    }
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn savepoint_every_byte_and_cut() {
    let mut bad = Vec::new();
    for f in [
        "one_block.rssp",
        "three_states.rssp",
        "empty.rssp",
        "one_block_v3.rssp",
        "three_states_v3.rssp",
        "empty_v3.rssp",
        "one_block_v4.rssp",
        "continued_v4.rssp",
    ] {
        bad.extend(sweep(f, &corpus("savepoint_decode", f), savepoint));
    }
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
