//! List state, layout (B) of docs/decisions/0002: one RocksDB entry per element, keyed
//! `[kg][key][ns][sequence u64 BE]`, appended with a plain put.
//!
//! Why (B) and not (A) (one framed value extended by a merge operator): (B) needs no read and no
//! merge to append, reads a list with one short scan, has no 2^31-byte list limit, and lets the
//! TTL compaction filter drop single expired elements with `Remove` — (A) would need the
//! filter to rewrite a value, which rust-rocksdb only allows with a `&'static` slice. The
//! benchmark `benches/ops.rs` (`list_len_*`) compares both layouts; figures in
//! docs/decisions/0002-list-state-one-entry-per-element.md.
//!
//! Sequences come from a backend-wide allocator whose high-water mark is persisted before use,
//! so a list's elements keep insertion order across reopen and restore.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::{with_encoded, StateCore};
use crate::codec;
use crate::error::Result;

/// List state over serialized bytes.
#[derive(Clone)]
pub struct RawListState {
    pub(crate) core: Arc<StateCore>,
}

impl RawListState {
    /// Visits the elements of `key` in `ns` in insertion order until `f` returns `Ok(false)`.
    pub fn for_each(
        &self,
        key: &[u8],
        ns: &[u8],
        mut f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        self.core.scan_prefix(&prefix, |_, v| f(v))
    }

    /// The elements of `key` in `ns`; empty when there are none.
    pub fn get(&self, key: &[u8], ns: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.for_each(key, ns, |v| {
            out.push(v.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Appends one element.
    pub fn add(&self, key: &[u8], ns: &[u8], element: &[u8]) -> Result<()> {
        self.core.check_value("list element", element)?;
        let mut k = self.core.key(key, ns)?;
        k.extend_from_slice(&self.core.list_seq.next()?.to_be_bytes());
        self.core.put_payload(&k, element)
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

    /// One batch that (when `replace`) deletes the current elements, then appends `elements`.
    fn write_elements<'a>(
        &self,
        key: &[u8],
        ns: &[u8],
        elements: impl IntoIterator<Item = &'a [u8]>,
        replace: bool,
    ) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        let mut batch = self.core.table.batch();
        if replace {
            let end = codec::prefix_end(&prefix);
            self.core.table.scan(&prefix, end.as_deref(), |k, _| {
                batch.delete(k);
                Ok(true)
            })?;
        }
        for element in elements {
            self.core.check_value("list element", element)?;
            let mut k = super::KeyBuf::from_slice(&prefix);
            k.extend_from_slice(&self.core.list_seq.next()?.to_be_bytes());
            self.core.batch_put_payload(&mut batch, &k, element);
        }
        batch.commit()
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
                self.raw.for_each(k, n, |v| {
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

fn encode_all<T: Serialize>(elements: &[T]) -> Result<Vec<Vec<u8>>> {
    elements
        .iter()
        .map(|e| codec::encode(e, "list element"))
        .collect()
}
