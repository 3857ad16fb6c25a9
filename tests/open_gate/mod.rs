//! Holds opens of files in one directory (fanotify permission events; Linux, root), so a
//! test can stop a thread at the exact moment it opens a file and let another run past it:
//! interleavings of file-level races, made deterministic.
//!
//! ```text
//! let gate = OpenGate::watch(dir);
//! let first = gate.next_open(timeout).unwrap();   // a thread is blocked in open(2) now
//! ...                                             // let another thread act meanwhile
//! first.allow();                                  // its open returns
//! let _pass = gate.pass_all();                    // every later open passes at once
//! ```

#![allow(dead_code)]

use std::collections::VecDeque;
use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[repr(C)]
#[derive(Clone, Copy)]
struct EventMeta {
    event_len: u32,
    vers: u8,
    reserved: u8,
    metadata_len: u16,
    mask: u64,
    fd: i32,
    pid: i32,
}

#[repr(C)]
struct Response {
    fd: i32,
    response: u32,
}

extern "C" {
    fn fanotify_init(flags: u32, event_f_flags: u32) -> i32;
    fn fanotify_mark(fd: i32, flags: u32, mask: u64, dirfd: i32, path: *const libc::c_char) -> i32;
}

const FAN_CLASS_CONTENT: u32 = 0x4;
const FAN_MARK_ADD: u32 = 0x1;
const FAN_OPEN_PERM: u64 = 0x1_0000;
const FAN_EVENT_ON_CHILD: u64 = 0x0800_0000;
const FAN_ALLOW: u32 = 0x1;

/// A fanotify group holding every open of a file in one directory until it is allowed.
pub struct OpenGate {
    fan: Arc<Fan>,
    /// Events read but not handed out yet (one read returns several).
    pending: Mutex<VecDeque<i32>>,
}

/// The group's descriptor, closed (every pending open allowed by the kernel) when the last
/// user goes.
struct Fan(i32);

impl Drop for Fan {
    fn drop(&mut self) {
        // SAFETY: closes the fanotify group this value owns.
        unsafe { libc::close(self.0) };
    }
}

/// One open held in the kernel: the opening thread waits in open(2) until this is allowed or
/// dropped.
pub struct HeldOpen {
    fan: Arc<Fan>,
    fd: i32,
    name: String,
}

impl HeldOpen {
    /// The name of the file being opened (`" (deleted)"` removed).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lets the open proceed.
    pub fn allow(self) {}
}

impl Drop for HeldOpen {
    fn drop(&mut self) {
        allow(self.fan.0, self.fd);
    }
}

fn allow(fan: i32, fd: i32) {
    let r = Response {
        fd,
        response: FAN_ALLOW,
    };
    // SAFETY: writes a plain struct to the fanotify descriptor and closes the event's
    // descriptor, both owned here.
    unsafe {
        libc::write(
            fan,
            &r as *const Response as *const libc::c_void,
            std::mem::size_of::<Response>(),
        );
        libc::close(fd);
    }
}

fn name_of(fd: i32) -> String {
    let p = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
    let s = p
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    s.trim_end_matches(" (deleted)").to_string()
}

impl OpenGate {
    /// Holds every later open of a file in `dir` (needs root).
    pub fn watch(dir: &Path) -> OpenGate {
        // SAFETY: plain fanotify setup.
        let fan = unsafe { fanotify_init(FAN_CLASS_CONTENT, libc::O_RDONLY as u32) };
        assert!(
            fan >= 0,
            "fanotify_init (root needed): {}",
            std::io::Error::last_os_error()
        );
        let fan = Fan(fan);
        let c = CString::new(dir.to_str().unwrap()).unwrap();
        // SAFETY: marks `dir` for open-permission events of its children.
        let r = unsafe {
            fanotify_mark(
                fan.0,
                FAN_MARK_ADD,
                FAN_OPEN_PERM | FAN_EVENT_ON_CHILD,
                libc::AT_FDCWD,
                c.as_ptr(),
            )
        };
        assert_eq!(r, 0, "fanotify_mark: {}", std::io::Error::last_os_error());
        OpenGate {
            fan: Arc::new(fan),
            pending: Mutex::new(VecDeque::new()),
        }
    }

    /// The next open of a file in the directory, held; `None` if none came within `timeout`.
    pub fn next_open(&self, timeout: Duration) -> Option<HeldOpen> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(fd) = self.pending.lock().pop_front() {
                return Some(HeldOpen {
                    fan: Arc::clone(&self.fan),
                    fd,
                    name: name_of(fd),
                });
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.read_events(left.min(Duration::from_millis(20)));
        }
    }

    /// Opens until `wanted` says yes to one, which is returned held; the others are allowed.
    /// Panics after `timeout`, naming `what`.
    pub fn hold_first(
        &self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> HeldOpen {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let open = self
                .next_open(left)
                .unwrap_or_else(|| panic!("never happened: {what}"));
            if wanted(open.name()) {
                return open;
            }
        }
    }

    /// From now on every open passes at once (on a thread of its own, until the result is
    /// dropped); opens already held stay held until allowed.
    pub fn pass_all(self) -> PassAll {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    while let Some(open) = self.next_open(Duration::from_millis(20)) {
                        open.allow();
                    }
                }
            })
        };
        PassAll {
            stop,
            thread: Some(thread),
        }
    }

    /// Reads the events there are, waiting up to `wait` for the first.
    fn read_events(&self, wait: Duration) {
        let fan = self.fan.0;
        let mut pfd = libc::pollfd {
            fd: fan,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one descriptor owned here.
        if unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) } <= 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: reads events into a local buffer.
        let n = unsafe { libc::read(fan, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n <= 0 {
            return;
        }
        let mut at = 0usize;
        while at + std::mem::size_of::<EventMeta>() <= n as usize {
            // SAFETY: the kernel wrote a fanotify_event_metadata at `at`.
            let m: EventMeta =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr() as *const EventMeta) };
            at += m.event_len as usize;
            if m.fd < 0 {
                continue;
            }
            if m.mask & FAN_OPEN_PERM == 0 {
                // SAFETY: closes the event's descriptor.
                unsafe { libc::close(m.fd) };
                continue;
            }
            self.pending.lock().push_back(m.fd);
        }
    }
}

/// Lets every open pass while it lives ([`OpenGate::pass_all`]).
pub struct PassAll {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PassAll {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
