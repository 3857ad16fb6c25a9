//! Parallel jobs over a list: a fixed number of scoped threads pull jobs from a shared index
//! (callers sort largest files first, so one big file does not start last); the calling thread
//! is one of them, and threads the process cannot start are done without. Used for uploads
//! (checkpoint), downloads (restore), SST rewrites (rescale) and ingestions (one per column
//! family, `db::Cf::ingest_each`). The first error stops the remaining jobs from starting and
//! is returned; jobs already running finish.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::Result;

/// Runs `job` on every item with up to `threads` threads; returns the results in item order,
/// or the first error.
pub(crate) fn run_parallel<T, R, F>(items: &[T], threads: usize, job: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> Result<R> + Sync,
{
    let threads = threads.max(1).min(items.len());
    if threads <= 1 {
        return items.iter().map(&job).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let first_error = Mutex::new(None);
    let work = || loop {
        if failed.load(Ordering::Relaxed) {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { return };
        match job(item) {
            Ok(r) => results.lock()[i] = Some(r),
            Err(e) => {
                failed.store(true, Ordering::Relaxed);
                let mut first = first_error.lock();
                if first.is_none() {
                    *first = Some(e);
                }
                return;
            }
        }
    };
    std::thread::scope(|scope| {
        // The calling thread works too, so a process out of threads (EAGAIN) runs the jobs
        // on fewer of them instead of failing: a thread that cannot be started is skipped.
        for _ in 1..threads {
            if std::thread::Builder::new()
                .spawn_scoped(scope, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
    if let Some(e) = first_error.into_inner() {
        return Err(e);
    }
    // No error was recorded, so every job ran and stored its result.
    Ok(results.into_inner().into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn order_and_errors() {
        let items: Vec<u32> = (0..100).collect();
        let out = run_parallel(&items, 4, |i| Ok(i * 2)).unwrap();
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let err = run_parallel(&items, 3, |i| {
            if *i == 50 {
                Err(Error::InvalidObjectName("x".into()))
            } else {
                Ok(*i)
            }
        });
        assert!(matches!(err, Err(Error::InvalidObjectName(_))));
        assert!(run_parallel(&[] as &[u32], 4, |i| Ok(*i))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_calling_thread_is_one_of_the_workers() {
        let caller = std::thread::current().id();
        let items: Vec<u32> = (0..2).collect();
        let workers = Mutex::new(Vec::new());
        // Each job waits until both have been taken: two threads must be working.
        run_parallel(&items, 2, |_| {
            workers.lock().push(std::thread::current().id());
            let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while workers.lock().len() < 2 && std::time::Instant::now() < end {
                std::thread::yield_now();
            }
            Ok(())
        })
        .unwrap();
        let workers = workers.into_inner();
        assert_eq!(workers.len(), 2);
        assert_ne!(workers[0], workers[1], "two threads took the two jobs");
        assert!(workers.contains(&caller), "{workers:?}");
    }
}
