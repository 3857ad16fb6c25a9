//! Lists with TTL written by several threads at once (docs/decisions/0045): a head makes the
//! entries before it dead and must expire no earlier than any of them, or a compaction that
//! drops the expired head alone lets them be read again. An `add` on one thread and an
//! `update` of the same list on another may interleave anywhere, so an entry takes its
//! timestamp before its sequence number, and a head after its own.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rockstate::{
    Clock, CodecId, DbOptions, KeyedBackend, RawListState, StateDescriptor, TtlConfig,
};

thread_local! {
    /// Set on a thread whose next clock reading must wait for another thread's write.
    static PAUSE_NEXT_READING: Cell<bool> = const { Cell::new(false) };
}

/// A clock that, read on a thread flagged with `PAUSE_NEXT_READING`, lets another thread
/// write first (through `wake`/`done`) and then reads a second later than before.
#[derive(Debug)]
struct Pausing {
    now: AtomicU64,
    wake: Mutex<Sender<()>>,
    done: Mutex<Receiver<()>>,
}

impl Clock for Pausing {
    fn now_ms(&self) -> u64 {
        if PAUSE_NEXT_READING.with(|p| p.replace(false)) {
            self.wake.lock().unwrap().send(()).unwrap();
            self.done.lock().unwrap().recv().unwrap();
            self.now.fetch_add(1000, Ordering::SeqCst);
        }
        self.now.load(Ordering::SeqCst)
    }
}

/// A stored list entry's (sequence number, TTL timestamp).
type Stamped = (u64, u64);

/// The list's head and its other entries.
fn stored(b: &KeyedBackend) -> (Option<Stamped>, Vec<Stamped>) {
    let mut head = None;
    let mut entries = Vec::new();
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group("l", g, |e| {
            let stamp = u64::from_be_bytes(e.value[..8].try_into().unwrap());
            if e.suffix.is_empty() {
                head = Some((
                    u64::from_be_bytes(e.value[8..16].try_into().unwrap()),
                    stamp,
                ));
            } else {
                entries.push((u64::from_be_bytes(e.suffix[..8].try_into().unwrap()), stamp));
            }
            Ok(true)
        })
        .unwrap();
    }
    (head, entries)
}

/// Runs `write` on this thread with its first clock reading held until another thread has
/// replaced the list by `[x]`; returns what the list reads then.
fn interleaved(write: impl FnOnce(&RawListState)) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let (wake_tx, wake_rx) = channel();
    let (done_tx, done_rx) = channel();
    let clock = Arc::new(Pausing {
        now: AtomicU64::new(1_000_000),
        wake: Mutex::new(wake_tx),
        done: Mutex::new(done_rx),
    });
    let b = KeyedBackend::builder(dir.path())
        .options(DbOptions::default())
        .max_parallelism(16)
        .clock(clock)
        .open()
        .unwrap();
    let l = b
        .raw_list_state(
            StateDescriptor::new("l").with_ttl(TtlConfig::new(Duration::from_secs(3600))),
            CodecId::new("bytes", 1),
        )
        .unwrap();
    let key = 7u32.to_be_bytes();
    l.add(&key, b"", b"a").unwrap();
    let other = {
        let l = l.clone();
        std::thread::spawn(move || {
            wake_rx.recv().unwrap();
            l.update(&key, b"", [&b"x"[..]]).unwrap();
            done_tx.send(()).unwrap();
        })
    };
    PAUSE_NEXT_READING.with(|p| p.set(true));
    write(&l);
    other.join().unwrap();
    // Nothing has read the list yet, so every entry the head made dead is still stored.
    let (head, entries) = stored(&b);
    let (head_seq, head_stamp) = head.expect("the update wrote a head");
    let outliving: Vec<&Stamped> = entries
        .iter()
        .filter(|(seq, stamp)| *seq < head_seq && *stamp > head_stamp)
        .collect();
    assert!(
        outliving.is_empty(),
        "entries the head (seq {head_seq}, stamp {head_stamp}) made dead expire after it: \
         {outliving:?}"
    );
    l.get(&key, b"").unwrap()
}

#[test]
fn an_add_interleaved_with_an_update_never_outlives_the_head() {
    let key = 7u32.to_be_bytes();
    let read = interleaved(|l| l.add(&key, b"", b"c").unwrap());
    // The update came first: it replaced `a`, and `c` follows it.
    assert_eq!(read, vec![b"x".to_vec(), b"c".to_vec()]);
}

#[test]
fn an_add_all_interleaved_with_an_update_never_outlives_the_head() {
    let key = 7u32.to_be_bytes();
    let read = interleaved(|l| l.add_all(&key, b"", [&b"c"[..], b"d"]).unwrap());
    assert_eq!(read, vec![b"x".to_vec(), b"c".to_vec(), b"d".to_vec()]);
}
