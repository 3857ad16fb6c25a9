//! List state, layout (B) of docs/decisions/0002: entries keyed `[kg][key][ns][sequence u64
//! BE]`, appended with a plain put. An entry under that key holds one element; an entry whose
//! key ends in one more byte, [`RUN_MARK`], holds a *run*: the elements one `add_all` or
//! `update` wrote together, each framed by its varint length (docs/decisions/0033). Elements
//! written together share their write time, so a run expires as a whole exactly when each of
//! its elements would have, and one entry per call is what makes replacing or filling a list
//! one write instead of one per element. On RocksDB, `update` is blind (unless reads may return
//! expired entries; `writes_heads`): its first run becomes the list's *head*, an entry under
//! `[kg][key][ns]` itself that sorts first and makes every older entry of the list dead
//! (`crate::list_entry`, docs/decisions/0034 and 0045), so replacing a list reads nothing. Reads skip and delete dead entries; the compaction filter
//! drops them.
//!
//! Why (B) and not (A) (one framed value extended by a merge operator): (B) needs no read and no
//! merge to append, reads a list with one short scan, has no 2^31-byte list limit (runs are cut
//! at [`RUN_BYTES`]), and lets the TTL compaction filter drop expired entries with `Remove` —
//! (A) would need the filter to rewrite a value, which rust-rocksdb only allows with a
//! `&'static` slice. The benchmark `benches/ops.rs` (`list_len_*`) compares both layouts;
//! figures in docs/decisions/0002-list-state-one-entry-per-element.md.
//!
//! Sequences come from a backend-wide allocator whose high-water mark is persisted before use,
//! so a list's elements keep insertion order across reopen and restore.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::{with_encoded, StateCore, TtlRuntime, Visitor};
use crate::codec;
use crate::error::Result;
use crate::list_entry::{self, Entry, ListCursor, RUN_MARK};
use crate::store::Table;
use crate::ttl;

/// A run holds at most this many stored bytes; longer writes are cut into several runs (and a
/// larger element goes into an entry of its own), so no entry nears RocksDB's value limit and
/// a TTL refresh rewrites at most this much per entry.
pub(crate) const RUN_BYTES: usize = 64 << 10;

/// Whether a list state stored in `table` with TTL runtime `ttl` is updated blindly, with a
/// head instead of reading the old entries to delete them
/// (docs/decisions/0034-blind-list-updates.md): on RocksDB, whose compaction filter then drops
/// the entries a head made dead (the backend installs it for every list). With TTL a head
/// must expire no earlier than the entries it replaced, so only a list whose timestamps a
/// mark covers writes heads (`TtlRuntime::floor`, docs/decisions/0045-blind-ttl-list-updates.md):
/// the backend gives one only to a list whose reads never return expired entries, and whose
/// every stored timestamp the mark covers. Not in changelog mode (`changelog`): there the
/// compaction filter may not drop dead entries (a restore replays the log onto an older
/// materialization that still holds them, and a later `clear` deletes only the entries it
/// finds), so every blind `update` would leave its replaced entries until a read.
pub(crate) fn writes_heads(table: &Table, ttl: Option<&TtlRuntime>, changelog: bool) -> bool {
    matches!(table, Table::Rocks(_)) && !changelog && ttl.is_none_or(|t| t.floor.is_some())
}

/// Folds the heads of the TTL list state in `table` (key groups `key_groups` of a backend of
/// `max_parallelism`) into ordinary run entries under their own sequence numbers, with their
/// timestamps, and deletes the entries they made dead, one batch per key group: afterwards
/// the state holds no head and every list reads as before. For a list whose reads may return
/// expired entries, where a head dropped as expired before the entries it replaced would let
/// them be returned (docs/decisions/0045-blind-ttl-list-updates.md). Returns the heads folded.
pub(crate) fn fold_heads(
    table: &Table,
    max_parallelism: u32,
    key_groups: crate::keygroup::KeyGroupRange,
) -> Result<u64> {
    let mut folded = 0;
    let mut key = Vec::new();
    for group in key_groups.iter() {
        let mut batch = table.batch();
        let mut cursor = ListCursor::new();
        super::scan_key_group(table, max_parallelism, group, |e| {
            let (stamp, payload) = ttl::split_stored(e.value)?;
            let entry = cursor.next((e.key, e.namespace), e.suffix, payload)?;
            if !e.suffix.is_empty() && entry != Entry::Dead {
                return Ok(true);
            }
            key.clear();
            codec::write_key_prefix(&mut key, group, max_parallelism, e.key, e.namespace);
            key.extend_from_slice(e.suffix);
            batch.delete(&key);
            if let Entry::Live { seq, payload, .. } = entry {
                key.extend_from_slice(&list_entry::run_suffix(seq));
                let mut value = Vec::with_capacity(ttl::TS_LEN + payload.len());
                value.extend_from_slice(&stamp.to_be_bytes());
                value.extend_from_slice(payload);
                batch.put(&key, &value);
                folded += 1;
            }
            Ok(true)
        })?;
        if batch.len() > 0 {
            batch.commit()?;
        }
    }
    Ok(folded)
}

/// List state over serialized bytes.
#[derive(Clone)]
pub struct RawListState {
    pub(crate) core: Arc<StateCore>,
}

impl RawListState {
    /// Visits the elements of `key` in `ns` in insertion order until `f` returns `Ok(false)`.
    /// Entries a head made dead are skipped and deleted after the scan. Under TTL, each
    /// entry is first classified by the heads before it, then by its timestamp: a dead entry
    /// is never refreshed, and an expired head (removed like any expired entry) still makes
    /// the entries it replaced dead.
    pub fn for_each(
        &self,
        key: &[u8],
        ns: &[u8],
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.visit(key, ns, Visitor::MayWrite, f)
    }

    /// [`RawListState::for_each`] with the visitor's kind.
    pub(crate) fn visit(
        &self,
        key: &[u8],
        ns: &[u8],
        visitor: Visitor,
        mut f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        let core = &self.core;
        let prefix = core.key(key, ns)?;
        let end = codec::prefix_end(&prefix);
        let mut cursor = ListCursor::new();
        let mut dead: Vec<Vec<u8>> = Vec::new();
        core.scan_for_read(&prefix, end.as_deref(), visitor, |k, stored| {
            let suffix = &k[prefix.len()..];
            let payload = match &core.ttl {
                None => stored,
                Some(_) => ttl::split_stored(stored)?.1,
            };
            let (run, elements) = match cursor.next((&[], &[]), suffix, payload)? {
                Entry::Dead => {
                    dead.push(suffix.to_vec());
                    return Ok(true);
                }
                Entry::Live { run, payload, .. } => (run, payload),
            };
            if core.read_live(k, stored)?.is_none() {
                return Ok(true);
            }
            list_entry::visit_elements(run, elements, &mut f)
        })?;
        if !dead.is_empty() {
            let mut batch = core.table.batch();
            let mut k = super::KeyBuf::from_slice(&prefix);
            for suffix in &dead {
                k.truncate(prefix.len());
                k.extend_from_slice(suffix);
                batch.delete(&k);
            }
            batch.commit()?;
        }
        // A list read is a state access too, as in Flink's incremental cleanup.
        core.cleanup_incrementally()
    }

    /// The elements of `key` in `ns`; empty when there are none.
    pub fn get(&self, key: &[u8], ns: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.visit(key, ns, Visitor::Reads, |v| {
            out.push(v.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Appends one element.
    pub fn add(&self, key: &[u8], ns: &[u8], element: &[u8]) -> Result<()> {
        self.core.check_value("list element", element)?;
        let mut k = self.core.key(key, ns)?;
        // The timestamp before the sequence number: a head another thread writes meanwhile
        // takes a later sequence number only after this timestamp (see `write_elements`).
        let stamp = self.core.write_stamp()?;
        k.extend_from_slice(&self.core.list_seq.next()?.to_be_bytes());
        self.core.put_payload_at(&k, stamp, element)
    }

    /// Appends elements in order, atomically.
    pub fn add_all<'a>(
        &self,
        key: &[u8],
        ns: &[u8],
        elements: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        self.write_elements(key, ns, elements, false)
    }

    /// Replaces the elements of `key` in `ns`, atomically.
    pub fn update<'a>(
        &self,
        key: &[u8],
        ns: &[u8],
        elements: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        self.write_elements(key, ns, elements, true)
    }

    /// One atomic write that (when `replace`) replaces the current elements, else appends
    /// `elements`: runs of consecutive elements up to [`RUN_BYTES`], an element alone where no
    /// other fits beside it. A blind replacement writes its first run as the list's head; one
    /// with no elements, or one that is not blind, deletes the entries it finds instead. A
    /// write of one entry and nothing else (a list of up to 64 KiB replaced blindly or
    /// appended) is a plain put; anything more goes in one batch.
    ///
    /// Under TTL a head must expire no earlier than any entry it makes dead, also when
    /// another thread writes the list at the same time: every entry takes its timestamp
    /// before its sequence number and a head after its own, and the clock's readings never go
    /// back ([`crate::meta::StampFloor`]), so an entry numbered below a head was stamped
    /// before it. One timestamp serves the whole write: taken first for an append, right after
    /// the head's sequence number for a blind replacement.
    fn write_elements<'a>(
        &self,
        key: &[u8],
        ns: &[u8],
        elements: impl IntoIterator<Item = &'a [u8]>,
        replace: bool,
    ) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        let mut batch = self.core.table.batch();
        let blind = replace && self.core.list_heads;
        if replace && !blind {
            self.delete_entries(&prefix, &mut batch)?;
        }
        let limit = RUN_BYTES.min(self.core.max_value_bytes);
        let mut pending: Vec<&[u8]> = Vec::new();
        let mut framed = 0usize;
        // The last entry built, held back so a write of one entry needs no batch.
        let mut held: Option<(super::KeyBuf, Vec<u8>)> = None;
        let mut head = blind;
        let mut stamp = if blind {
            None
        } else {
            self.core.write_stamp()?
        };
        for element in elements {
            self.core.check_value("list element", element)?;
            let size = element.len() + varint_len(element.len());
            if !pending.is_empty() && framed + size > limit {
                let entry = self.entry(&prefix, &pending, head)?;
                if head {
                    stamp = self.core.write_stamp()?;
                }
                if let Some((k, payload)) = held.replace(entry) {
                    StateCore::batch_put_payload_at(&mut batch, &k, stamp, &payload);
                }
                head = false;
                pending.clear();
                framed = 0;
            }
            pending.push(element);
            framed += size;
        }
        if !pending.is_empty() {
            let entry = self.entry(&prefix, &pending, head)?;
            if head {
                stamp = self.core.write_stamp()?;
            }
            if let Some((k, payload)) = held.replace(entry) {
                StateCore::batch_put_payload_at(&mut batch, &k, stamp, &payload);
            }
        } else if head {
            // Replaced by nothing: a head with no elements would stay behind for good.
            self.delete_entries(&prefix, &mut batch)?;
        }
        match held {
            // A single-entry write takes its incremental cleanup step itself.
            Some((k, payload)) if batch.len() == 0 => {
                return self.core.put_payload_at(&k, stamp, &payload)
            }
            Some((k, payload)) => StateCore::batch_put_payload_at(&mut batch, &k, stamp, &payload),
            None => {}
        }
        batch.commit()?;
        self.core.cleanup_incrementally()
    }

    /// Adds to `batch` a delete of every entry stored under `prefix` (and, in changelog
    /// mode, records the row cleared first: `StateCore::log_row_cleared`).
    fn delete_entries(&self, prefix: &[u8], batch: &mut crate::store::TableBatch) -> Result<()> {
        self.core.log_row_cleared(prefix)?;
        let end = codec::prefix_end(prefix);
        self.core.table.scan(prefix, end.as_deref(), |k, _| {
            batch.delete(k);
            Ok(true)
        })
    }

    /// The key and payload of one entry holding `elements` (at least one), under a fresh
    /// sequence number: the list's head when `head` (its key `prefix` itself, its payload the
    /// sequence number and the run); else the element itself under an 8-byte sequence suffix
    /// when alone, or a run under the suffix and [`RUN_MARK`].
    fn entry(
        &self,
        prefix: &[u8],
        elements: &[&[u8]],
        head: bool,
    ) -> Result<(super::KeyBuf, Vec<u8>)> {
        let seq = self.core.list_seq.next()?.to_be_bytes();
        let mut k = super::KeyBuf::from_slice(prefix);
        let mut payload = Vec::new();
        if head {
            payload.extend_from_slice(&seq);
            frame_run_into(elements, &mut payload);
            return Ok((k, payload));
        }
        k.extend_from_slice(&seq);
        if let [element] = elements {
            payload.extend_from_slice(element);
            return Ok((k, payload));
        }
        k.push(RUN_MARK);
        frame_run_into(elements, &mut payload);
        Ok((k, payload))
    }

    /// Removes every element of `key` in `ns`.
    pub fn clear(&self, key: &[u8], ns: &[u8]) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        self.core.clear_prefix(&prefix)
    }
}

/// List state of serde elements `T`.
pub struct ListState<K, N, T> {
    raw: RawListState,
    _types: PhantomData<fn(&K, &N) -> T>,
}

impl<K, N, T> Clone for ListState<K, N, T> {
    fn clone(&self) -> Self {
        ListState {
            raw: self.raw.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Serialize, N: Serialize, T: Serialize + DeserializeOwned> ListState<K, N, T> {
    pub(crate) fn new(raw: RawListState) -> Self {
        ListState {
            raw,
            _types: PhantomData,
        }
    }

    /// The elements of `key` in `ns` in insertion order.
    pub fn get(&self, key: &K, ns: &N) -> Result<Vec<T>> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                let mut out = Vec::new();
                self.raw.visit(k, n, Visitor::Reads, |v| {
                    out.push(codec::decode(v, "list element")?);
                    Ok(true)
                })?;
                Ok(out)
            })
        })
    }

    /// Appends one element.
    pub fn add(&self, key: &K, ns: &N, element: &T) -> Result<()> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                with_encoded(element, "list element", |e| self.raw.add(k, n, e))
            })
        })
    }

    /// Appends elements in order, atomically.
    pub fn add_all(&self, key: &K, ns: &N, elements: &[T]) -> Result<()> {
        let encoded = encode_all(elements)?;
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                self.raw.add_all(k, n, encoded.iter().map(Vec::as_slice))
            })
        })
    }

    /// Replaces the elements of `key` in `ns`, atomically.
    pub fn update(&self, key: &K, ns: &N, elements: &[T]) -> Result<()> {
        let encoded = encode_all(elements)?;
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                self.raw.update(k, n, encoded.iter().map(Vec::as_slice))
            })
        })
    }

    /// Removes every element of `key` in `ns`.
    pub fn clear(&self, key: &K, ns: &N) -> Result<()> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| self.raw.clear(k, n))
        })
    }

    /// The raw-bytes view of the same state.
    pub fn raw(&self) -> &RawListState {
        &self.raw
    }
}

/// Appends `elements` to `run` as a run's payload: each element as its varint length and its
/// bytes, in order.
fn frame_run_into(elements: &[&[u8]], run: &mut Vec<u8>) {
    for element in elements {
        codec::write_varint(run, element.len() as u64);
        run.extend_from_slice(element);
    }
}

/// Bytes of `len` as a varint.
fn varint_len(len: usize) -> usize {
    (usize::BITS - len.leading_zeros()).div_ceil(7).max(1) as usize
}

fn encode_all<T: Serialize>(elements: &[T]) -> Result<Vec<Vec<u8>>> {
    elements
        .iter()
        .map(|e| codec::encode(e, "list element"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Reads one entry as the first of its list.
    fn visit_entry(
        suffix: &[u8],
        payload: &[u8],
        f: &mut impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<bool> {
        match ListCursor::new().next((&[], &[]), suffix, payload)? {
            Entry::Live { run, payload, .. } => list_entry::visit_elements(run, payload, f),
            Entry::Dead => Ok(true),
        }
    }

    #[test]
    fn varint_len_matches_the_encoding() {
        for len in [0usize, 1, 127, 128, 16_383, 16_384, 1 << 21, (1 << 28) + 5] {
            let mut out = Vec::new();
            codec::write_varint(&mut out, len as u64);
            assert_eq!(varint_len(len), out.len(), "{len}");
        }
    }

    fn elements(suffix: &[u8], payload: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        visit_entry(suffix, payload, &mut |e| {
            out.push(e.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    #[test]
    fn entries_read_as_one_element_or_a_run() {
        assert_eq!(elements(&[0; 8], b"abc").unwrap(), vec![b"abc".to_vec()]);
        let mut run = vec![0; 9];
        run[8] = RUN_MARK;
        assert_eq!(
            elements(&run, b"\x01a\x00\x02bc").unwrap(),
            vec![b"a".to_vec(), b"".to_vec(), b"bc".to_vec()]
        );
        // A visit that stops inside a run stops there.
        let mut seen = 0;
        let go_on = visit_entry(&run, b"\x01a\x01b\x01c", &mut |_| {
            seen += 1;
            Ok(seen < 2)
        })
        .unwrap();
        assert!(!go_on);
        assert_eq!(seen, 2);
    }

    proptest::proptest! {
        #[test]
        fn framed_runs_read_back(elements in proptest::collection::vec(
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), 2..20)
        ) {
            let refs: Vec<&[u8]> = elements.iter().map(Vec::as_slice).collect();
            let mut run = Vec::new();
            frame_run_into(&refs, &mut run);
            let framed: usize = refs.iter().map(|e| e.len() + varint_len(e.len())).sum();
            proptest::prop_assert_eq!(run.len(), framed);
            let mut suffix = vec![7u8; 9];
            suffix[8] = RUN_MARK;
            proptest::prop_assert_eq!(self::elements(&suffix, &run).unwrap(), elements);
        }

        #[test]
        fn any_entry_reads_or_is_a_decode_error(
            suffix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            match self::elements(&suffix, &payload) {
                Ok(out) => {
                    let total: usize = out.iter().map(Vec::len).sum();
                    proptest::prop_assert!(total <= payload.len());
                }
                Err(e) => {
                    let decode = matches!(e, Error::Decode { .. });
                    proptest::prop_assert!(decode, "{}", e);
                }
            }
        }
    }

    #[test]
    fn damaged_runs_and_keys_are_decode_errors() {
        let mut run = vec![0; 9];
        run[8] = RUN_MARK;
        for payload in [&b"\x05ab"[..], b"\x80", b"\x01a\x03"] {
            assert!(
                matches!(elements(&run, payload), Err(Error::Decode { .. })),
                "{payload:?}"
            );
        }
        run[8] = 0x02;
        assert!(matches!(elements(&run, b"x"), Err(Error::Decode { .. })));
        assert!(matches!(elements(&[0; 7], b"x"), Err(Error::Decode { .. })));
    }
}
