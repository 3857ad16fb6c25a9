//! A global allocator that remembers the largest single allocation (or reallocation) since it
//! was last reset, for the tests that check a decoder never reserves what a small input only
//! claims. A test binary installs it with
//! `#[global_allocator] static A: largest_allocation::Largest = largest_allocation::Largest;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, watched.
pub struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Forgets the largest allocation so far.
pub fn reset() {
    LARGEST.store(0, Ordering::Relaxed);
}

/// The largest allocation since the last [`reset`].
pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

// SAFETY: every call is passed on to `System` unchanged; only the sizes are recorded.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LARGEST.fetch_max(n, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}
