//! A savepoint whose write fails while its encoders still have blocks to hand over: one key
//! group of 48 MiB (max parallelism 1) continues over a dozen 4 MiB blocks, and the file's
//! filesystem is full, so the writer fails at the first block while the encoder has the rest
//! to send through a bounded channel. The write must end with a typed error and leave no file;
//! an encoder blocked on the channel the failed writer no longer drains would hang it for
//! good (the call runs on a thread watched here, so a hang fails the test instead of stalling
//! the suite). Once space is freed, the write succeeds.

#[path = "disk_common/mod.rs"]
mod disk;

use std::sync::mpsc;
use std::time::Duration;

use rockstate::{CodecId, ErrorKind, KeyedBackend};

/// A value of 1 MiB that zstd shrinks to about a quarter (text over four letters): each 4 MiB
/// block takes about 1 MiB of the file, so the encoder has many blocks to hand over long before
/// it is far enough ahead of the writer to stop on its own.
fn value(i: u32) -> Vec<u8> {
    let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"acgt"[(x & 3) as usize]
        })
        .collect()
}

#[test]
fn a_failed_write_of_a_many_block_key_group_ends_typed() {
    let fs = disk::SmallFs::mount(16);
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path().join("db"))
        .max_parallelism(1)
        .open()
        .unwrap();
    let v = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    for i in 0..48u32 {
        v.put(&i.to_be_bytes(), b"", &value(i)).unwrap();
    }
    let sp = fs.path("sp");
    fs.fill();
    let (done, outcome) = mpsc::channel();
    {
        let (b, sp) = (b.clone(), sp.clone());
        std::thread::spawn(move || {
            let _ = done.send(b.write_savepoint(&sp));
        });
    }
    let e = outcome
        .recv_timeout(Duration::from_secs(120))
        .expect("the failed savepoint write hung")
        .expect_err("a savepoint to a full disk succeeded");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(!sp.exists());
    let left = fs.files_besides_filler(&fs.root);
    assert_eq!(left, Vec::<String>::new(), "files left by the failed write");

    fs.free();
    drop(fs);
    let sp = dir.path().join("sp");
    let stats = b.write_savepoint(&sp).unwrap();
    assert_eq!(stats.entries, 48);
    assert!(stats.blocks >= 12, "{stats:?}");
}
