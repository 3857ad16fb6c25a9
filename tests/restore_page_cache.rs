//! The files a savepoint restore, a rescale's rewrite and a changelog restore's replay write
//! are read back into the page cache after their ingestion (`DbOptions::warm_restored_files`,
//! docs/decisions/0053-restored-files-read-into-the-page-cache.md): RocksDB's SST writer drops
//! what it writes from the page cache, so without it the first reads of a restored state go
//! to the device. Checked with `mincore(2)` on the restored SSTs, before anything reads the
//! state; with the option off the same files stay out of the page cache, which is what makes
//! the check fail without the warming.
//!
//! The directories lie in Cargo's scratch directory for tests, on the disk the build uses: a
//! `/tmp` on tmpfs would keep every page it is given.

mod rescale_common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rescale_common::*;
use rockstate::{
    CheckpointOptions, CheckpointStorage, CodecId, DbOptions, KeyedBackend, LocalStorage,
    RestoreFrom, StateDescriptor,
};

/// Values of the savepoint's state: 8 MB of SST data, over a megabyte per reader thread.
const KEYS: u32 = 8000;
const VALUE_BYTES: usize = 1000;

/// At or above this share of a warmed file's pages are resident: the test's files are a
/// few megabytes on a machine with gigabytes free.
const WARM_AT_LEAST: f64 = 0.9;
/// Below this share of the pages of a file the SST writer wrote are resident when nothing
/// warmed or read it (ingestion reads its footer, properties, index and filter).
const COLD_BELOW: f64 = 0.3;

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn options(warm: bool) -> DbOptions {
    DbOptions {
        warm_restored_files: warm,
        // Stored sizes are the written sizes.
        compression: rockstate::Compression::None,
        ..DbOptions::default()
    }
}

/// Resident pages of `path` (`mincore(2)` over a read-only mapping) and all its pages.
fn resident_pages(path: &Path) -> (u64, u64) {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    if len == 0 {
        return (0, 0);
    }
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: a read-only shared mapping of an open file's whole length, unmapped below;
    // `vec` holds one byte per page of it, as mincore requires. Nothing reads the mapping.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED, "mmap {}", path.display());
        let rc = libc::mincore(addr, len, vec.as_mut_ptr());
        libc::munmap(addr, len);
        assert_eq!(rc, 0, "mincore {}", path.display());
    }
    let resident = vec.iter().filter(|&&b| b & 1 == 1).count() as u64;
    (resident, pages as u64)
}

/// Resident pages over pages of every file in `files`.
fn share_of(files: &[PathBuf]) -> f64 {
    let (resident, pages) = files
        .iter()
        .map(|p| resident_pages(p))
        .fold((0, 0), |(r, p), (r2, p2)| (r + r2, p + p2));
    assert!(pages > 0, "no pages in {files:?}");
    resident as f64 / pages as f64
}

/// The SSTs of the database directory `dir` whose table properties carry no column family
/// name: those RocksDB's `SstFileWriter` wrote (a restore's or a rewrite's), not a flush's.
fn written_by_sst_writer(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .filter(|p| {
            sst_format::read_sst_meta(p)
                .unwrap()
                .properties
                .column_family_name
                .is_empty()
        })
        .collect()
}

/// Writes a savepoint of one value state of [`KEYS`] values into `dir`, restores it into a
/// new backend with `warm_restored_files` at `warm`, waits for the warming, and returns the
/// restored backend and the share of its state files' pages in the page cache.
fn restore_savepoint(dir: &Path, warm: bool) -> (KeyedBackend, f64) {
    let source = KeyedBackend::builder(dir.join("source"))
        .options(options(warm))
        .open()
        .unwrap();
    let codec = CodecId::new("bytes", 1);
    let state = source
        .raw_value_state(StateDescriptor::new("s"), codec)
        .unwrap();
    for i in 0..KEYS {
        state
            .put(&i.to_be_bytes(), b"", &vec![i as u8; VALUE_BYTES])
            .unwrap();
    }
    drop(state);
    let savepoint = dir.join("savepoint");
    source.write_savepoint(&savepoint).unwrap();
    source.close().unwrap();

    let restored = KeyedBackend::builder(dir.join("restored"))
        .options(options(warm))
        .open()
        .unwrap();
    restored.restore_savepoint(&savepoint).unwrap();
    restored.wait_for_page_cache_warming();
    let files = written_by_sst_writer(&dir.join("restored"));
    assert!(!files.is_empty(), "the restore ingested no file");
    (restored, share_of(&files))
}

#[test]
fn a_restored_savepoint_is_read_into_the_page_cache() {
    let dir = scratch();
    let (restored, share) = restore_savepoint(dir.path(), true);
    assert!(
        share >= WARM_AT_LEAST,
        "{share:.3} of the restored pages cached"
    );
    let metrics = restored.metrics().unwrap().rocksdb;
    assert!(
        metrics.restored_bytes_warmed >= (KEYS as u64) * VALUE_BYTES as u64,
        "{metrics:?}"
    );
    // The state reads as written.
    let state = restored
        .raw_value_state(StateDescriptor::new("s"), CodecId::new("bytes", 1))
        .unwrap();
    for i in (0..KEYS).step_by(97) {
        assert_eq!(
            state.get(&i.to_be_bytes(), b"").unwrap(),
            Some(vec![i as u8; VALUE_BYTES])
        );
    }
}

#[test]
fn without_warming_a_restored_savepoint_stays_out_of_the_page_cache() {
    let dir = scratch();
    let (restored, share) = restore_savepoint(dir.path(), false);
    assert!(
        share < COLD_BELOW,
        "{share:.3} of the restored pages cached"
    );
    assert_eq!(restored.metrics().unwrap().rocksdb.restored_bytes_warmed, 0);
}

/// Splits a backend of [`KEYS`] values in two, rewrites the upper half's values, and merges
/// the halves back with `warm_restored_files` at `warm`: the merge rewrites the upper half's
/// key groups. Returns the share of the rewritten files' pages in the page cache once the
/// warming is done, before anything reads them.
fn merge_rewriting(dir: &Path, warm: bool) -> f64 {
    let options = DbOptions {
        warm_restored_files: warm,
        compression: rockstate::Compression::None,
        ..small_options_without_compaction()
    };
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let src = open_fresh_with(dir, &storage, "src", 1, &opts, &options).remove(0);
    let values = src.value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in 0..KEYS {
        values.put(&key, &0, &vec![key as u8; VALUE_BYTES]).unwrap();
    }
    drop(values);
    checkpoint_job(&storage, &[&src], 1);
    drop(src);
    let halves = restore_all_with(
        dir,
        &storage,
        "h",
        2,
        &opts,
        RestoreFrom::Checkpoint(1),
        &options,
    );
    let upper = halves[1].value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in (0..KEYS).filter(|&k| owns(&halves[1], k)) {
        upper
            .put(&key, &0, &vec![key as u8 ^ 0xff; VALUE_BYTES])
            .unwrap();
    }
    drop(upper);
    halves[1].flush().unwrap();
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);

    let (merged, report) = restore_one_with(dir, &storage, "merged", 2, &options);
    assert!(report.entries_rewritten > 0, "{report:?}");
    merged.wait_for_page_cache_warming();
    let files = written_by_sst_writer(&dir.join("merged"));
    assert!(!files.is_empty(), "the merge rewrote no file");
    share_of(&files)
}

#[test]
fn a_merge_reads_the_files_it_rewrote_into_the_page_cache() {
    let dir = scratch();
    let share = merge_rewriting(dir.path(), true);
    assert!(
        share >= WARM_AT_LEAST,
        "{share:.3} of the rewritten pages cached"
    );
}

#[test]
fn without_warming_the_files_a_merge_rewrote_stay_out_of_the_page_cache() {
    let dir = scratch();
    let share = merge_rewriting(dir.path(), false);
    assert!(
        share < COLD_BELOW,
        "{share:.3} of the rewritten pages cached"
    );
}

/// Writes [`KEYS`] values into a changelog-mode backend, checkpoints them (materialized), then
/// writes new values over a third of the keys and checkpoints again (a log checkpoint), and
/// restores the latest checkpoint with `warm_restored_files` at `warm`: the replay sorts the
/// log's changes into SSTs it ingests. Returns the share of those files' pages in the page
/// cache once the warming is done, before anything reads them.
fn changelog_restore(dir: &Path, warm: bool) -> f64 {
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.join("storage")).unwrap());
    let opts = changelog_options();
    let source = KeyedBackend::builder(dir.join("source"))
        .options(options(warm))
        .checkpoint_storage(Arc::clone(&storage))
        .checkpoint_options(opts.clone())
        .open()
        .unwrap();
    let values = source.value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in 0..KEYS {
        values.put(&key, &0, &vec![key as u8; VALUE_BYTES]).unwrap();
    }
    assert!(source.checkpoint(1).unwrap().materialized);
    source.notify_checkpoint_complete(1).unwrap();
    for key in (0..KEYS).step_by(3) {
        values
            .put(&key, &0, &vec![key as u8 ^ 0xff; VALUE_BYTES])
            .unwrap();
    }
    drop(values);
    assert!(!source.checkpoint(2).unwrap().materialized);
    source.notify_checkpoint_complete(2).unwrap();
    source.close().unwrap();

    let restored = KeyedBackend::builder(dir.join("restored"))
        .options(options(warm))
        .checkpoint_storage(storage)
        .checkpoint_options(opts)
        .restore(RestoreFrom::Latest)
        .unwrap();
    restored.wait_for_page_cache_warming();
    let files = written_by_sst_writer(&dir.join("restored"));
    assert!(!files.is_empty(), "the replay ingested no file");
    let share = share_of(&files);
    // The restore holds the latest values.
    let values = restored.value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in (0..KEYS).step_by(7) {
        let byte = key as u8 ^ if key % 3 == 0 { 0xff } else { 0 };
        assert_eq!(values.get(&key, &0).unwrap(), Some(vec![byte; VALUE_BYTES]));
    }
    share
}

#[test]
fn a_changelog_restore_reads_the_files_of_its_replay_into_the_page_cache() {
    let dir = scratch();
    let share = changelog_restore(dir.path(), true);
    assert!(
        share >= WARM_AT_LEAST,
        "{share:.3} of the replayed pages cached"
    );
}

#[test]
fn without_warming_the_files_of_a_changelog_replay_stay_out_of_the_page_cache() {
    let dir = scratch();
    let share = changelog_restore(dir.path(), false);
    assert!(
        share < COLD_BELOW,
        "{share:.3} of the replayed pages cached"
    );
}
