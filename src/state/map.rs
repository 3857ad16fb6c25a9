//! Map state: one RocksDB entry per user key, keyed `[kg][key][ns][user key]`, so a key's map in
//! one namespace is one contiguous range iterated in user-key byte order.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::{with_encoded, KeyBuf, StateCore, Visitor, MAX_KEY_BYTES};
use crate::codec;
use crate::error::{Error, Result};

/// Map state over serialized bytes.
#[derive(Clone)]
pub struct RawMapState {
    pub(crate) core: Arc<StateCore>,
}

impl RawMapState {
    fn entry_key(&self, key: &[u8], ns: &[u8], user_key: &[u8]) -> Result<KeyBuf> {
        if user_key.len() > MAX_KEY_BYTES {
            return Err(Error::ValueTooLarge {
                what: "map user key",
                size: user_key.len(),
                limit: MAX_KEY_BYTES,
            });
        }
        let mut k = self.core.key(key, ns)?;
        k.extend_from_slice(user_key);
        Ok(k)
    }

    /// Calls `f` with the value under `user_key`, without copying it.
    pub fn get_with<R>(
        &self,
        key: &[u8],
        ns: &[u8],
        user_key: &[u8],
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        let k = self.entry_key(key, ns, user_key)?;
        self.core.read_entry(&k, f)
    }

    /// The value under `user_key`.
    pub fn get(&self, key: &[u8], ns: &[u8], user_key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, ns, user_key, |v| Ok(v.to_vec()))
    }

    /// Whether `user_key` is present.
    pub fn contains(&self, key: &[u8], ns: &[u8], user_key: &[u8]) -> Result<bool> {
        Ok(self.get_with(key, ns, user_key, |_| Ok(()))?.is_some())
    }

    /// Sets the value under `user_key`.
    pub fn put(&self, key: &[u8], ns: &[u8], user_key: &[u8], value: &[u8]) -> Result<()> {
        self.core.check_value("map value", value)?;
        let k = self.entry_key(key, ns, user_key)?;
        self.core.put_payload(&k, value)
    }

    /// Removes `user_key`.
    pub fn remove(&self, key: &[u8], ns: &[u8], user_key: &[u8]) -> Result<()> {
        let k = self.entry_key(key, ns, user_key)?;
        self.core.delete_entry(&k)
    }

    /// Visits the entries in user-key byte order until `f` returns `Ok(false)`. `f` may
    /// write to this map through this or another handle (iterate and update).
    pub fn for_each(
        &self,
        key: &[u8],
        ns: &[u8],
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.visit(key, ns, Visitor::MayWrite, f)
    }

    /// [`RawMapState::for_each`] with the visitor's kind.
    pub(crate) fn visit(
        &self,
        key: &[u8],
        ns: &[u8],
        visitor: Visitor,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        self.core.scan_prefix(&prefix, visitor, f)
    }

    /// All entries in user-key byte order.
    pub fn entries(&self, key: &[u8], ns: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.visit(key, ns, Visitor::Reads, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Whether the map of `key` in `ns` has no entry.
    pub fn is_empty(&self, key: &[u8], ns: &[u8]) -> Result<bool> {
        let mut empty = true;
        self.visit(key, ns, Visitor::Reads, |_, _| {
            empty = false;
            Ok(false)
        })?;
        Ok(empty)
    }

    /// Removes every entry of `key` in `ns`.
    pub fn clear(&self, key: &[u8], ns: &[u8]) -> Result<()> {
        let prefix = self.core.key(key, ns)?;
        self.core.clear_prefix(&prefix)
    }
}

/// Map state from serde user keys `UK` to serde values `UV`.
pub struct MapState<K, N, UK, UV> {
    raw: RawMapState,
    _types: PhantomData<fn(&K, &N, &UK) -> UV>,
}

impl<K, N, UK, UV> Clone for MapState<K, N, UK, UV> {
    fn clone(&self) -> Self {
        MapState {
            raw: self.raw.clone(),
            _types: PhantomData,
        }
    }
}

impl<K, N, UK, UV> MapState<K, N, UK, UV>
where
    K: Serialize,
    N: Serialize,
    UK: Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    pub(crate) fn new(raw: RawMapState) -> Self {
        MapState {
            raw,
            _types: PhantomData,
        }
    }

    fn with_key_ns<R>(
        &self,
        key: &K,
        ns: &N,
        f: impl FnOnce(&[u8], &[u8]) -> Result<R>,
    ) -> Result<R> {
        with_encoded(key, "key", |k| with_encoded(ns, "namespace", |n| f(k, n)))
    }

    /// The value under `user_key`.
    pub fn get(&self, key: &K, ns: &N, user_key: &UK) -> Result<Option<UV>> {
        self.with_key_ns(key, ns, |k, n| {
            with_encoded(user_key, "map user key", |u| {
                self.raw
                    .get_with(k, n, u, |v| codec::decode(v, "map value"))
            })
        })
    }

    /// Whether `user_key` is present.
    pub fn contains(&self, key: &K, ns: &N, user_key: &UK) -> Result<bool> {
        self.with_key_ns(key, ns, |k, n| {
            with_encoded(user_key, "map user key", |u| self.raw.contains(k, n, u))
        })
    }

    /// Sets the value under `user_key`.
    pub fn put(&self, key: &K, ns: &N, user_key: &UK, value: &UV) -> Result<()> {
        self.with_key_ns(key, ns, |k, n| {
            with_encoded(user_key, "map user key", |u| {
                with_encoded(value, "map value", |v| self.raw.put(k, n, u, v))
            })
        })
    }

    /// Removes `user_key`.
    pub fn remove(&self, key: &K, ns: &N, user_key: &UK) -> Result<()> {
        self.with_key_ns(key, ns, |k, n| {
            with_encoded(user_key, "map user key", |u| self.raw.remove(k, n, u))
        })
    }

    /// All entries, in the byte order of the encoded user keys.
    pub fn entries(&self, key: &K, ns: &N) -> Result<Vec<(UK, UV)>> {
        self.with_key_ns(key, ns, |k, n| {
            let mut out = Vec::new();
            self.raw.visit(k, n, Visitor::Reads, |uk, uv| {
                out.push((
                    codec::decode(uk, "map user key")?,
                    codec::decode(uv, "map value")?,
                ));
                Ok(true)
            })?;
            Ok(out)
        })
    }

    /// Whether the map of `key` in `ns` has no entry.
    pub fn is_empty(&self, key: &K, ns: &N) -> Result<bool> {
        self.with_key_ns(key, ns, |k, n| self.raw.is_empty(k, n))
    }

    /// Removes every entry of `key` in `ns`.
    pub fn clear(&self, key: &K, ns: &N) -> Result<()> {
        self.with_key_ns(key, ns, |k, n| self.raw.clear(k, n))
    }

    /// The raw-bytes view of the same state.
    pub fn raw(&self) -> &RawMapState {
        &self.raw
    }
}
