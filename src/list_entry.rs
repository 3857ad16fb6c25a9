//! How a list state's stored entries read: which suffixes exist, what each entry holds, and
//! which entries a *head* has made dead (docs/decisions/0033-list-runs.md,
//! docs/decisions/0034-blind-list-updates.md). Reads, the savepoint writer and the compaction
//! filter all classify entries through [`ListCursor`], so they agree on what a list holds.
//!
//! A list's entries sort under `[kg][key][ns]`, then by their suffix:
//!
//! - `[seq u64 BE]`: one element;
//! - `[seq u64 BE][RUN_MARK]`: a run of elements, each framed by its varint length;
//! - empty (the key is `[kg][key][ns]` itself): the *head*, written by a blind `update`. Its
//!   payload is `[seq u64 BE]` and a run. It sorts before every other entry of its list, and
//!   every element or run entry of the list with a smaller sequence number is dead: it was
//!   there when the `update` replaced the list.
//!
//! Sequence numbers come from one allocator per backend that never repeats or goes back, so an
//! entry written after a head always has a larger number than the head's.

use crate::codec;
use crate::error::{Error, Result};

/// The last byte of a run entry's key, after the 8-byte sequence number.
pub(crate) const RUN_MARK: u8 = 0x01;

/// Bytes of the sequence number in a suffix and at the start of a head's payload.
pub(crate) const SEQ_BYTES: usize = 8;

/// The key suffix of a run entry under sequence number `seq`: how a head is stored once it is
/// no longer the list's head (in a savepoint, or folded).
pub(crate) fn run_suffix(seq: u64) -> [u8; SEQ_BYTES + 1] {
    let mut suffix = [RUN_MARK; SEQ_BYTES + 1];
    suffix[..SEQ_BYTES].copy_from_slice(&seq.to_be_bytes());
    suffix
}

/// What an element or run entry whose key ends in `suffix` holds: `Some(false)` one element,
/// `Some(true)` a run, `None` for any other suffix (a head's empty suffix included: savepoints
/// carry no heads).
pub(crate) fn holds_run(suffix: &[u8]) -> Option<bool> {
    match suffix {
        [_, _, _, _, _, _, _, _] => Some(false),
        [_, _, _, _, _, _, _, _, RUN_MARK] => Some(true),
        _ => None,
    }
}

/// One stored list entry as [`ListCursor::next`] classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    /// Live elements: one element (`run` false) or a framed run, in list order after the
    /// entries before it. A head reads as a run under its own sequence number.
    Live {
        /// The entry's sequence number.
        seq: u64,
        /// Whether `payload` is a framed run rather than one element.
        run: bool,
        /// The element, or the run's framed elements.
        payload: &'a [u8],
    },
    /// Replaced by a head that sorts before it: skipped by reads, left out of savepoints,
    /// deleted by reads and dropped by compaction.
    Dead,
}

/// Classifies the stored entries of lists met in key order, one list after another: it
/// remembers the last head and which list it belongs to.
#[derive(Debug, Default)]
pub(crate) struct ListCursor {
    /// The key and namespace of the last head seen, and the head's sequence number.
    head_key: Vec<u8>,
    head_ns: Vec<u8>,
    head_seq: Option<u64>,
}

impl ListCursor {
    /// A cursor that has seen no head.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Classifies the entry of the list of `key` in `ns` (as stored) whose key ends in
    /// `suffix` and whose payload (after any TTL timestamp) is `payload`. Entries must come in
    /// key order. A malformed suffix or head is a `Decode` error.
    pub(crate) fn next<'a>(
        &mut self,
        (key, ns): (&[u8], &[u8]),
        suffix: &[u8],
        payload: &'a [u8],
    ) -> Result<Entry<'a>> {
        if suffix.is_empty() {
            let (seq, run) = split_head(payload)?;
            self.head_key.clear();
            self.head_key.extend_from_slice(key);
            self.head_ns.clear();
            self.head_ns.extend_from_slice(ns);
            self.head_seq = Some(seq);
            return Ok(Entry::Live {
                seq,
                run: true,
                payload: run,
            });
        }
        let run = holds_run(suffix).ok_or_else(|| {
            Error::decode(
                "list entry",
                format!("key suffix of {} bytes", suffix.len()),
            )
        })?;
        let seq = seq_of(suffix);
        if let Some(head) = self.head_seq {
            if seq < head && self.head_key == key && self.head_ns == ns {
                return Ok(Entry::Dead);
            }
        }
        Ok(Entry::Live { seq, run, payload })
    }
}

/// The sequence number at the start of an element or run suffix (at least 8 bytes).
fn seq_of(suffix: &[u8]) -> u64 {
    let mut seq = [0u8; SEQ_BYTES];
    seq.copy_from_slice(&suffix[..SEQ_BYTES]);
    u64::from_be_bytes(seq)
}

/// A head's payload split into its sequence number and its run.
fn split_head(payload: &[u8]) -> Result<(u64, &[u8])> {
    if payload.len() < SEQ_BYTES {
        return Err(Error::decode(
            "list head",
            format!("{} bytes, shorter than its sequence number", payload.len()),
        ));
    }
    let (seq, run) = payload.split_at(SEQ_BYTES);
    Ok((seq_of(seq), run))
}

/// Calls `f` on each element of a live entry until `f` returns `Ok(false)`; returns whether
/// to go on. A run that does not frame exactly is a `Decode` error.
pub(crate) fn visit_elements(
    run: bool,
    payload: &[u8],
    f: &mut impl FnMut(&[u8]) -> Result<bool>,
) -> Result<bool> {
    if !run {
        return f(payload);
    }
    let mut rest = payload;
    while !rest.is_empty() {
        let (len, used) = codec::read_varint(rest)?;
        let rest_after = &rest[used..];
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= rest_after.len())
            .ok_or_else(|| {
                Error::decode(
                    "list run",
                    format!("element of {len} bytes, {} left", rest_after.len()),
                )
            })?;
        if !f(&rest_after[..len])? {
            return Ok(false);
        }
        rest = &rest_after[len..];
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suffix(seq: u64, run: bool) -> Vec<u8> {
        let mut s = seq.to_be_bytes().to_vec();
        if run {
            s.push(RUN_MARK);
        }
        s
    }

    fn dead(e: Result<Entry<'_>>) -> bool {
        matches!(e.unwrap(), Entry::Dead)
    }

    fn head(seq: u64, run: &[u8]) -> Vec<u8> {
        [&seq.to_be_bytes()[..], run].concat()
    }

    #[test]
    fn entries_before_a_head_of_their_list_are_dead() {
        let mut c = ListCursor::new();
        // Entries of list "a" before any head are live.
        assert!(!dead(c.next((b"a", b""), &suffix(3, false), b"x")));
        let h = head(10, b"\x01y");
        assert_eq!(
            c.next((b"b", b""), &[], &h).unwrap(),
            Entry::Live {
                seq: 10,
                run: true,
                payload: b"\x01y"
            }
        );
        assert!(dead(c.next((b"b", b""), &suffix(4, false), b"old")));
        assert!(dead(c.next((b"b", b""), &suffix(9, true), b"\x01o")));
        assert!(!dead(c.next((b"b", b""), &suffix(11, false), b"new")));
        // Another list's entries are not judged by list "b"'s head.
        assert!(!dead(c.next((b"b", b"n"), &suffix(1, false), b"z")));
    }

    #[test]
    fn malformed_heads_and_suffixes_are_decode_errors() {
        let mut c = ListCursor::new();
        assert!(matches!(
            c.next((b"a", b""), &[], b"short"),
            Err(Error::Decode { .. })
        ));
        for bad in [&[0u8; 7][..], &[0; 10], &[0, 0, 0, 0, 0, 0, 0, 0, 2]] {
            assert!(
                matches!(c.next((b"a", b""), bad, b"x"), Err(Error::Decode { .. })),
                "{bad:?}"
            );
        }
    }

    proptest::proptest! {
        /// Lists met one after another, each an optional head and then entries in key order:
        /// an entry is dead exactly when its list has a head with a larger sequence number,
        /// and any bytes at all classify or fail with `Decode`, never panic.
        #[test]
        fn an_entry_is_dead_exactly_when_its_lists_head_is_newer(
            lists in proptest::collection::vec(
                (proptest::option::of(0u64..50), proptest::collection::btree_set(0u64..50, 0..8)),
                1..6,
            ),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        ) {
            let mut c = ListCursor::new();
            for (i, (head_seq, seqs)) in lists.iter().enumerate() {
                let key = [i as u8];
                if let Some(h) = head_seq {
                    let stored = head(*h, b"\x01h");
                    let live = c.next((&key, b""), &[], &stored).unwrap();
                    proptest::prop_assert!(!matches!(live, Entry::Dead));
                }
                for &seq in seqs {
                    let got = c.next((&key, b""), &suffix(seq, seq % 2 == 0), b"\x01e").unwrap();
                    let want_dead = head_seq.is_some_and(|h| seq < h);
                    proptest::prop_assert_eq!(matches!(got, Entry::Dead), want_dead, "seq {}", seq);
                }
            }
            if let Err(e) = c.next((b"j", b""), &junk, &junk) {
                proptest::prop_assert!(matches!(e, Error::Decode { .. }), "{}", e);
            }
        }
    }

    #[test]
    fn holds_run_refuses_the_heads_empty_suffix() {
        assert_eq!(holds_run(&[]), None);
        assert_eq!(holds_run(&suffix(1, false)), Some(false));
        assert_eq!(holds_run(&suffix(1, true)), Some(true));
    }
}
