//! Reading the SST files a restore wrote back into the page cache
//! (`DbOptions::warm_restored_files`): which restores fit the machine's memory, and the
//! thread that reads them.
//!
//! RocksDB's `SstFileWriter` drops what it writes from the page cache (its
//! `invalidate_page_cache`, on by default and not reachable through the C API). A savepoint
//! restore, a rescale's rewrite and a changelog restore's replay write their files with it,
//! so right after them every block-cache miss reads the device until the job's own reads
//! have brought the files back: the first 300,000 uniform gets of 1M × 1 KiB restored on a
//! 128 MiB budget ran at 26.5–30.9k/s that way, and at 105.6–118.3k/s with the files read
//! back (`rockstate-bench rescale --savepoint-gets`, decision 0053). State written through
//! the memtable, as Flink's savepoint restore writes it, keeps its pages cached.
//!
//! So a database reads such files once, sequentially, on a thread of its own, while the job
//! runs, where they fit in memory: at most half of what the process can still fill with page
//! cache ([`crate::system_memory`]: the kernel's `MemAvailable`, which counts reclaimable
//! page cache, bounded by the process's cgroup limit), less the bytes the open databases of
//! this process have warmed already. State beyond that would only
//! evict itself (and the rest of the machine's page cache) while it is read, and its reads
//! go to the device anyway. Where the kernel reports no figure, nothing is warmed.

use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

/// Bytes of restored files warmed by the databases of this process still open.
static WARMED_BY_OPEN: AtomicU64 = AtomicU64::new(0);

/// Bytes one read of the warming thread asks for.
const READ_BYTES: usize = 256 << 10;

/// The warming of one database's restored files: its threads, and the bytes it counts in
/// [`WARMED_BY_OPEN`] until it stops.
#[derive(Default)]
pub(crate) struct Warmer {
    /// Set by [`Warmer::stop`]: threads end at their next read, and nothing more is warmed.
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Bytes this database added to [`WARMED_BY_OPEN`].
    counted: AtomicU64,
    /// Bytes handed to a warming thread since the database opened.
    total: AtomicU64,
}

/// Whether `bytes` more of restored files fit in memory: at most half of `available`
/// ([`crate::system_memory::available`], `None` where unknown) less `warmed`, what the open
/// databases of the process have warmed.
fn fits(bytes: u64, available: Option<u64>, warmed: u64) -> bool {
    available.is_some_and(|a| bytes <= (a / 2).saturating_sub(warmed))
}

/// Files to warm, open for reading, with their sizes: opened while they still lie where
/// they were written ([`ToWarm::open`]), so a handle reads a file wherever an ingestion
/// moved it.
#[derive(Default)]
pub(crate) struct ToWarm(Vec<(File, u64)>);

impl ToWarm {
    /// `paths` open for reading; a file that cannot be opened is left out.
    pub(crate) fn open<'p>(paths: impl IntoIterator<Item = &'p std::path::PathBuf>) -> Self {
        ToWarm(
            paths
                .into_iter()
                .filter_map(|path| {
                    let file = File::open(path).ok()?;
                    let len = file.metadata().ok()?.len();
                    Some((file, len))
                })
                .collect(),
        )
    }
}

impl Warmer {
    /// Reads `files` into the page cache on a thread of its own, if they fit
    /// in memory ([`fits`]) with `available` bytes of memory (`None`:
    /// [`crate::system_memory::available`]).
    /// Returns the bytes it warms (0 when they do not fit, or once stopped).
    pub(crate) fn warm(&self, ToWarm(files): ToWarm, available: Option<u64>) -> u64 {
        let bytes: u64 = files.iter().map(|(_, len)| len).sum();
        // Held until the thread is listed, so a `stop` on another thread (a close beside
        // the restore's end) either comes first and is seen here, or joins this thread and
        // takes its bytes off the count.
        let mut threads = self.threads.lock();
        if bytes == 0 || self.stop.load(Ordering::Acquire) {
            return 0;
        }
        let available = available.or_else(crate::system_memory::available);
        // Reserved in the process's count before the thread starts, so two databases
        // restoring at once cannot both take the same memory.
        let reserved = WARMED_BY_OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            fits(bytes, available, w).then(|| w + bytes)
        });
        if reserved.is_err() {
            return 0;
        }
        let stop = Arc::clone(&self.stop);
        let spawned = std::thread::Builder::new()
            .name("rockstate-warm".into())
            .spawn(move || read_all(files, &stop));
        match spawned {
            Ok(handle) => {
                threads.push(handle);
                self.counted.fetch_add(bytes, Ordering::AcqRel);
                self.total.fetch_add(bytes, Ordering::AcqRel);
                bytes
            }
            // Warming only saves reads: without a thread, the job's reads fill the cache.
            Err(_) => {
                uncount(bytes);
                0
            }
        }
    }

    /// Bytes handed to a warming thread since the database opened.
    pub(crate) fn warmed(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// Waits until every file handed to [`Warmer::warm`] so far has been read (or the
    /// warming stopped).
    pub(crate) fn wait(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for handle in threads {
            // A panicking read thread only leaves its files cold.
            let _ = handle.join();
        }
    }

    /// Stops warming: threads end at their next read, later calls warm nothing, and the
    /// bytes this database warmed leave the process's count.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wait();
        uncount(self.counted.swap(0, Ordering::AcqRel));
    }
}

/// Takes `bytes` a warmer added off the process's count (never below 0).
fn uncount(bytes: u64) {
    let _ = WARMED_BY_OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
        Some(w.saturating_sub(bytes))
    });
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads every file to its end, or until `stop` is set or a read fails (the job's own reads
/// will report a file that cannot be read).
fn read_all(files: Vec<(File, u64)>, stop: &AtomicBool) {
    let mut buf = vec![0u8; READ_BYTES];
    for (mut file, _) in files {
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            match file.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_fit_in_half_the_available_memory_less_what_is_warmed() {
        assert!(fits(500, Some(1000), 0));
        assert!(!fits(501, Some(1000), 0));
        assert!(fits(300, Some(1000), 200));
        assert!(!fits(301, Some(1000), 200));
        assert!(!fits(1, Some(1000), 600));
        assert!(!fits(1, None, 0));
    }

    /// Files of `lens` bytes in `dir`, open for warming.
    fn files(dir: &std::path::Path, lens: &[usize]) -> ToWarm {
        let paths: Vec<std::path::PathBuf> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let path = dir.join(format!("{i}.sst"));
                std::fs::write(&path, vec![7u8; len]).unwrap();
                path
            })
            .collect();
        ToWarm::open(&paths)
    }

    // The tests below share the process's count with each other: each checks only its own
    // warmer's share, which it keeps until it stops.

    #[test]
    fn a_warmer_counts_what_it_warms_until_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let warmer = Warmer::default();
        let plenty = Some(u64::MAX / 2);
        assert_eq!(warmer.warm(files(dir.path(), &[3000, 5000]), plenty), 8000);
        warmer.wait();
        assert_eq!(warmer.warmed(), 8000);
        assert_eq!(warmer.counted.load(Ordering::Acquire), 8000);
        assert!(WARMED_BY_OPEN.load(Ordering::Acquire) >= 8000);
        warmer.stop();
        assert_eq!(warmer.counted.load(Ordering::Acquire), 0);
        assert_eq!(warmer.warmed(), 8000);
        // Stopped: nothing more is warmed.
        assert_eq!(warmer.warm(files(dir.path(), &[100]), plenty), 0);
    }

    #[test]
    fn files_beyond_half_the_available_memory_are_not_warmed() {
        let dir = tempfile::tempdir().unwrap();
        let warmer = Warmer::default();
        assert_eq!(warmer.warm(files(dir.path(), &[3000]), Some(5999)), 0);
        assert_eq!(warmer.warm(files(dir.path(), &[3000]), Some(0)), 0);
        assert_eq!(warmer.counted.load(Ordering::Acquire), 0);
        assert!(warmer.threads.lock().is_empty());
    }

    #[test]
    fn empty_files_start_no_thread() {
        let dir = tempfile::tempdir().unwrap();
        let warmer = Warmer::default();
        assert_eq!(
            warmer.warm(files(dir.path(), &[0, 0]), Some(u64::MAX / 2)),
            0
        );
        assert!(warmer.threads.lock().is_empty());
    }
}
