//! The backend's own directory runs out of space: flushes fail with a typed error (no panic),
//! and once space is freed the writes acknowledged before are all there, through the open
//! backend and after a clean close and reopen (docs/decisions/0004-wal-off.md: `close`
//! flushes, so a clean reopen loses nothing).

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

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{k}-{round}-").into_bytes();
    v.resize(200, (k % 251) as u8);
    v
}

#[test]
fn enospc_in_the_backend_directory_is_typed_and_loses_no_acknowledged_write() {
    let fs = disk::SmallFs::mount(32);
    let path = fs.path("db");
    let b = KeyedBackend::builder(&path)
        .options(options())
        .open()
        .unwrap();
    let s = b.value_state::<u32, (), Vec<u8>>("v").unwrap();
    for k in 0..5000 {
        s.put(&k, &(), &value(k, 0)).unwrap();
    }
    b.flush().unwrap();
    // Acknowledged, not flushed yet.
    for k in 0..5000 {
        s.put(&k, &(), &value(k, 1)).unwrap();
    }
    fs.fill();
    let e = b
        .flush()
        .expect_err("a flush into a full filesystem succeeded");
    eprintln!("flush on full disk: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    // More writes while full: each either acknowledged or refused with a typed error.
    let mut acked = 0;
    for k in 0..2000 {
        match s.put(&k, &(), &value(k, 2)) {
            Ok(()) => acked += 1,
            Err(e) => {
                eprintln!("put on full disk: kind {:?}: {e}", e.kind());
                assert_eq!(e.kind(), ErrorKind::Io, "{e}");
                break;
            }
        }
    }
    eprintln!("puts acknowledged while full: {acked}");
    // Reads answer the acknowledged values meanwhile.
    for k in 0..5000 {
        let want = value(k, if k < acked { 2 } else { 1 });
        assert_eq!(s.get(&k, &()).unwrap(), Some(want), "key {k} while full");
    }

    fs.free();
    // Once space is back the backend goes on: a flush succeeds.
    disk::retry_until_recovered("flush", || b.flush());
    for k in 0..5000 {
        let want = value(k, if k < acked { 2 } else { 1 });
        assert_eq!(s.get(&k, &()).unwrap(), Some(want), "key {k} after free");
    }
    drop(s);
    b.close().unwrap();
    let b = KeyedBackend::builder(&path)
        .options(options())
        .open()
        .unwrap();
    let s = b.value_state::<u32, (), Vec<u8>>("v").unwrap();
    for k in 0..5000 {
        let want = value(k, if k < acked { 2 } else { 1 });
        assert_eq!(s.get(&k, &()).unwrap(), Some(want), "key {k} after reopen");
    }
    b.close().unwrap();
}
