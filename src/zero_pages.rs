//! Zeroed buffers mapped fresh from the kernel: untouched until used, whatever state the
//! allocator is in.
//!
//! The value cache's ring and index are large (tens of MiB on the default budget) and
//! filled one entry at a time, so they should cost nothing until an entry reaches a page.
//! `vec![0; n]` does not promise that: it gets its memory from `calloc`, and glibc's
//! `calloc` zeroes recycled heap memory all at once. Below glibc's mmap threshold it takes
//! such memory, and the threshold rises to the size of any mapped block freed (up to 32
//! MiB on 64-bit), which a closed database's cache is. In a process that had restored a
//! backend before, the first value a restore read (its own metadata check) then paid
//! 1.6–1.8 ms for zeroing a whole index and ring; with the threshold pinned
//! (`MALLOC_MMAP_THRESHOLD_=131072`) the same read took 0.3 ms (`rockstate-bench checkpoint
//! --mode changelog`, phase timers, 2-core VM). An anonymous mapping is zero-filled by the
//! kernel page by page as it is first touched, and given back whole when dropped.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Element types whose all-zero bytes are a valid value, so a zero-filled mapping may be
/// read as them.
pub(crate) trait ZeroValid: Copy + private::Sealed {}
impl ZeroValid for u8 {}
impl ZeroValid for u64 {}

mod private {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u64 {}
}

/// `len` zeroed `T`s in memory of their own (an anonymous mapping on Unix), readable and
/// writable as a slice, returned to the system when dropped.
pub(crate) struct ZeroPages<T: ZeroValid> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a `ZeroPages` owns its memory exclusively, as a `Vec` does; `&` gives shared
// reads only and `&mut` the only writes.
unsafe impl<T: ZeroValid + Send> Send for ZeroPages<T> {}
// SAFETY: as above; shared access is read-only.
unsafe impl<T: ZeroValid + Sync> Sync for ZeroPages<T> {}

impl<T: ZeroValid> ZeroPages<T> {
    /// No elements, no memory.
    pub(crate) const fn empty() -> Self {
        ZeroPages {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// `len` zeroed elements, in ordinary pages: no huge pages are asked for, since on the
    /// virtual machines measured the first touch of a huge page cost 10 to 20 times that of
    /// the same bytes in 4 KiB pages, and gave no faster access after
    /// (docs/decisions/0050-value-cache-in-ordinary-pages.md). Out of memory aborts, as a
    /// `Vec` allocation does.
    pub(crate) fn new(len: usize) -> Self {
        let Ok(layout) = Layout::array::<T>(len) else {
            // More bytes than the address space: `Vec` panics the same way.
            panic!("capacity overflow: {len} elements");
        };
        if layout.size() == 0 {
            return Self::empty();
        }
        ZeroPages {
            ptr: map(layout),
            len,
        }
    }
}

#[cfg(unix)]
fn map<T>(layout: Layout) -> NonNull<T> {
    // SAFETY: a new private anonymous mapping; no existing memory is named or changed.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(layout);
    }
    // Page-aligned, so aligned for every `ZeroValid` type; not null (MAP_FAILED is checked).
    NonNull::new(p.cast()).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

#[cfg(not(unix))]
fn map<T>(layout: Layout) -> NonNull<T> {
    // SAFETY: `layout` has a non-zero size (checked by the caller).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    NonNull::new(p.cast()).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

impl<T: ZeroValid> Drop for ZeroPages<T> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let size = std::mem::size_of_val::<[T]>(self);
        #[cfg(unix)]
        // SAFETY: the mapping `map` made for this buffer, of this size, unmapped once; no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), size);
        }
        #[cfg(not(unix))]
        // SAFETY: allocated by `map` with this layout (the size and `T`'s alignment).
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr().cast(),
                Layout::from_size_align_unchecked(size, std::mem::align_of::<T>()),
            );
        }
    }
}

impl<T: ZeroValid> std::ops::Deref for ZeroPages<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized elements (zero bytes are a valid `T`) at `ptr`, or a
        // dangling, aligned pointer with `len` 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> std::ops::DerefMut for ZeroPages<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> std::fmt::Debug for ZeroPages<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZeroPages({} elements)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_reads_zero_and_keeps_what_is_written() {
        let mut b = ZeroPages::<u64>::new(1 << 20);
        assert_eq!(b.len(), 1 << 20);
        assert!(b.iter().step_by(4096).all(|&x| x == 0));
        b[0] = 7;
        b[(1 << 20) - 1] = u64::MAX;
        assert_eq!((b[0], b[(1 << 20) - 1], b[1]), (7, u64::MAX, 0));
        let mut r = ZeroPages::<u8>::new(5);
        r.copy_from_slice(b"abcde");
        assert_eq!(&r[..], b"abcde");
    }

    #[test]
    fn an_empty_buffer_holds_nothing() {
        let b = ZeroPages::<u8>::new(0);
        assert!(b.is_empty());
        assert!(ZeroPages::<u64>::empty().is_empty());
    }

    /// Resident pages of the buffer's memory, counted by `mincore`.
    #[cfg(target_os = "linux")]
    fn resident(b: &ZeroPages<u8>) -> usize {
        let page = 4096;
        let mut v = vec![0u8; b.len().div_ceil(page)];
        // SAFETY: the range is the buffer's own mapping, page-aligned (mmap); `v` has a
        // byte per page of it.
        let rc = unsafe { libc::mincore(b.as_ptr() as *mut libc::c_void, b.len(), v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().filter(|&&x| x & 1 == 1).count()
    }

    /// The property the value cache relies on: a new buffer costs no memory until used,
    /// and using a part of it maps only that part. (It catches an implementation that
    /// touches every page up front; glibc's recycling of heap memory, which the mapping
    /// avoids, depends on the process's allocation history and is not reproduced here.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_new_buffer_is_untouched_until_used() {
        let mut b = ZeroPages::<u8>::new(64 << 20);
        assert_eq!(resident(&b), 0);
        b[32 << 20] = 1;
        let after = resident(&b);
        assert!(
            after > 0 && after <= (4 << 20) / 4096,
            "{after} pages resident"
        );
    }
}
