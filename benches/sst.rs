//! SST verification costs on a ~64 MB SST written by RocksDB's `SstFileWriter` (default table
//! options: format_version 7, XXH3; compression off so the file really is 64 MB):
//!
//! * `read_sst_meta` — footer, metaindex, properties and index-block checksum, read with
//!   positioned reads of the tail only (target: well under 1 ms);
//! * a whole-file CRC-32 (crc32fast), in memory and streamed from the (cached) file
//!   (target: ≥ 1 GB/s).
//!
//! Before the criterion groups it prints one summary line:
//! `sst_tail_verify_us=<mean µs> bytes_read=<bytes> reads=<n> file_bytes=<n> crc32_gb_s=<in-memory> crc32_file_gb_s=<streamed>`.
//!
//! Run: `cargo bench --bench sst` (add `-- --quick` for a short criterion run).

use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use rocksdb::{DBCompressionType, Options, SstFileWriter};

const TARGET_BYTES: u64 = 64 * 1024 * 1024;

/// Writes `dir/big.sst`, ~64 MB: 16-byte keys, 100-byte pseudo-random values.
fn write_sst(dir: &Path) -> PathBuf {
    let path = dir.join("big.sst");
    let mut opts = Options::default();
    opts.set_compression_type(DBCompressionType::None);
    let mut w = SstFileWriter::create(&opts);
    w.open(&path).expect("open sst");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut value = [0u8; 100];
    let mut i: u64 = 0;
    while w.file_size() < TARGET_BYTES {
        for chunk in value.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        w.put(format!("key-{i:012}"), value).expect("put");
        i += 1;
    }
    w.finish().expect("finish");
    path
}

fn crc32_file(path: &Path) -> u32 {
    let mut f = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; 1 << 20];
    let mut h = crc32fast::Hasher::new();
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize()
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed()
        })
        .min()
        .expect("runs > 0")
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_sst(dir.path());
    let bytes = std::fs::read(&path).expect("read sst"); // also warms the page cache
    let file_bytes = bytes.len() as u64;

    // Summary line.
    let (meta, stats) = sst_format::read_sst_meta_with_stats(&path).expect("verify sst");
    assert_eq!(meta.file_size, file_bytes);
    let iters = 2_000u32;
    let t = Instant::now();
    for _ in 0..iters {
        black_box(sst_format::read_sst_meta(black_box(&path)).expect("verify"));
    }
    let tail_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    let gb = file_bytes as f64 / 1e9;
    let crc_mem = gb / best_of(5, || crc32fast::hash(black_box(&bytes))).as_secs_f64();
    let crc_file = gb / best_of(5, || crc32_file(&path)).as_secs_f64();
    println!(
        "sst_tail_verify_us={tail_us:.1} bytes_read={} reads={} file_bytes={file_bytes} crc32_gb_s={crc_mem:.2} crc32_file_gb_s={crc_file:.2}",
        stats.bytes_read, stats.reads
    );
    println!(
        "  (entries={} data_blocks={} index_bytes={}; targets: tail verify well under 1000 us, crc32 >= 1 GB/s)",
        meta.properties.num_entries, meta.properties.num_data_blocks, meta.index_handle.size
    );

    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("sst_tail_verify_64mb");
        g.bench_function("read_sst_meta", |b| {
            b.iter(|| sst_format::read_sst_meta(black_box(&path)).expect("verify"))
        });
        g.bench_function("parse_sst_meta_in_memory", |b| {
            b.iter(|| sst_format::parse_sst_meta(black_box(&bytes)).expect("verify"))
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("crc32_64mb");
        g.throughput(Throughput::Bytes(file_bytes));
        g.sample_size(10);
        g.bench_function("crc32fast_in_memory", |b| {
            b.iter(|| crc32fast::hash(black_box(&bytes)))
        });
        g.bench_function("crc32fast_streamed_from_file", |b| {
            b.iter(|| crc32_file(black_box(&path)))
        });
        g.finish();
    }
    c.final_summary();
}
