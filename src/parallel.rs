//! Work on scoped threads that never fails for want of a thread.
//!
//! [`run_parallel`]: parallel jobs over a list: a fixed number of scoped threads pull jobs from
//! a shared index (callers sort largest files first, so one big file does not start last); the
//! calling thread is one of them, and threads the process cannot start are done without. Used
//! for uploads (checkpoint), downloads (restore), SST rewrites (rescale) and ingestions (one per
//! column family, `db::Cf::ingest_each`). The first error stops the remaining jobs from
//! starting and is returned; jobs already running finish.
//!
//! [`beside`]: one piece of work beside the calling thread's, on a thread of its own if the
//! process can start one (`std::thread::Scope::spawn` panics when it cannot, EAGAIN), else
//! run by the calling thread when it joins.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use parking_lot::Mutex;

use crate::error::Result;

/// Starts a scoped thread, `None` when the process cannot start one.
pub(crate) fn try_spawn<'scope, 'env, T, F>(
    scope: &'scope Scope<'scope, 'env>,
    f: F,
) -> Option<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    #[cfg(test)]
    if tests::REFUSE_SPAWNS.with(|r| r.get()) {
        tests::REFUSED.with(|n| n.set(n.get() + 1));
        return None;
    }
    std::thread::Builder::new().spawn_scoped(scope, f).ok()
}

/// Work started by [`beside`].
pub(crate) struct Beside<'scope, T, F> {
    /// Its thread, if one started.
    handle: Option<ScopedJoinHandle<'scope, T>>,
    /// The work, until a thread or the joining thread takes it.
    work: Arc<Mutex<Option<F>>>,
}

/// Runs `f` on a thread of its own within `scope`, or, when the process cannot start one, on
/// the calling thread at [`Beside::join`]: later, never lost.
pub(crate) fn beside<'scope, 'env, T, F>(
    scope: &'scope Scope<'scope, 'env>,
    f: F,
) -> Beside<'scope, T, F>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let work = Arc::new(Mutex::new(Some(f)));
    let taken = Arc::clone(&work);
    let handle = try_spawn(scope, move || {
        // Invariant: only a thread that started takes the work, and only once.
        let f = taken.lock().take().expect("work taken once");
        f()
    });
    Beside { handle, work }
}

impl<T, F: FnOnce() -> T> Beside<'_, T, F> {
    /// The work's result (`Err` if its thread panicked), running it here if no thread could
    /// be started for it.
    pub(crate) fn join(self) -> std::thread::Result<T> {
        match self.handle {
            Some(handle) => handle.join(),
            None => {
                let f = self.work.lock().take();
                // Invariant: no thread started, so the work is still here.
                Ok(f.expect("deferred work present")())
            }
        }
    }
}

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
            if try_spawn(scope, work).is_none() {
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
pub(crate) mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::Cell;

    thread_local! {
        /// Makes [`try_spawn`] on this thread fail as in a process out of threads.
        pub(crate) static REFUSE_SPAWNS: Cell<bool> = const { Cell::new(false) };
        /// Thread starts refused on this thread.
        pub(crate) static REFUSED: Cell<usize> = const { Cell::new(0) };
    }

    /// Runs `f` with every thread start on this thread refused; returns its result and how
    /// many starts were refused.
    pub(crate) fn without_threads<R>(f: impl FnOnce() -> R) -> (R, usize) {
        REFUSE_SPAWNS.with(|r| r.set(true));
        REFUSED.with(|n| n.set(0));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        REFUSE_SPAWNS.with(|r| r.set(false));
        let refused = REFUSED.with(|n| n.get());
        (
            out.unwrap_or_else(|p| std::panic::resume_unwind(p)),
            refused,
        )
    }

    #[test]
    fn work_beside_runs_on_the_joining_thread_without_threads() {
        let caller = std::thread::current().id();
        let (ran_on, refused) = without_threads(|| {
            std::thread::scope(|s| beside(s, || std::thread::current().id()).join().unwrap())
        });
        assert_eq!((ran_on, refused), (caller, 1));
        let ran_on =
            std::thread::scope(|s| beside(s, || std::thread::current().id()).join().unwrap());
        assert_ne!(ran_on, caller);
        let items: Vec<u32> = (0..50).collect();
        let (out, refused) = without_threads(|| run_parallel(&items, 4, |i| Ok(i + 1)));
        assert_eq!(out.unwrap(), (1..51).collect::<Vec<_>>());
        assert_eq!(refused, 1, "the first refused start ends the tries");
    }

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
