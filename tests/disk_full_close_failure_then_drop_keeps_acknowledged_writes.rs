//! `close` on a full filesystem fails (typed); the space is then freed and the backend
//! dropped, as `KeyedBackend::close` documents ("On an error the backend stays open, so
//! nothing cached is lost: retry, or drop it"). RocksDB refuses writes after the failed
//! flush until it has seen the space come back (every few seconds), so a drop right after
//! the space was freed used to close it with its memtables unwritten: reopening the
//! directory must show every write acknowledged before, not silently the state of the last
//! flush.

#[path = "disk_common/mod.rs"]
mod disk;

use rockstate::{DbOptions, ErrorKind, KeyedBackend};

fn options() -> DbOptions {
    DbOptions {
        write_buffer_size: 1 << 20,
        target_file_size_base: 1 << 20,
        ..DbOptions::default()
    }
}

#[test]
fn a_backend_whose_close_failed_on_a_full_disk_loses_nothing_when_dropped_after_space_is_freed() {
    let fs = disk::SmallFs::mount(32);
    let path = fs.path("db");
    let b = KeyedBackend::builder(&path)
        .options(options())
        .open()
        .unwrap();
    let s = b.value_state::<u32, (), u64>("v").unwrap();
    for k in 0..3000 {
        s.put(&k, &(), &0).unwrap();
    }
    b.flush().unwrap();
    for k in 0..3000 {
        s.put(&k, &(), &1).unwrap();
    }
    fs.fill();
    let e = b.close().expect_err("close on a full disk succeeded");
    eprintln!("close on a full disk: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    fs.free();
    drop(s);
    drop(b);

    let b = KeyedBackend::builder(&path)
        .options(options())
        .open()
        .unwrap();
    let s = b.value_state::<u32, (), u64>("v").unwrap();
    let lost: Vec<u32> = (0..3000)
        .filter(|k| s.get(k, &()).unwrap() != Some(1))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of 3000 acknowledged writes lost (first {:?}: {:?})",
        lost.len(),
        lost.first(),
        lost.first().map(|k| s.get(k, &()).unwrap())
    );
}
