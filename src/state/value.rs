//! Value state: one value per key and namespace, stored as one RocksDB entry `[kg][key][ns]`.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::{with_encoded, StateCore};
use crate::codec;
use crate::error::Result;

/// Value state over serialized bytes.
#[derive(Clone)]
pub struct RawValueState {
    pub(crate) core: Arc<StateCore>,
}

impl RawValueState {
    /// Calls `f` with the stored bytes of `key` in `ns`, without copying them.
    #[inline]
    pub fn get_with<R>(
        &self,
        key: &[u8],
        ns: &[u8],
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        let k = self.core.key(key, ns)?;
        self.core.read_entry(&k, f)
    }

    /// The value of `key` in `ns`.
    pub fn get(&self, key: &[u8], ns: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, ns, |v| Ok(v.to_vec()))
    }

    /// Sets the value of `key` in `ns`.
    #[inline]
    pub fn put(&self, key: &[u8], ns: &[u8], value: &[u8]) -> Result<()> {
        self.core.check_value("value", value)?;
        let k = self.core.key(key, ns)?;
        self.core.put_payload(&k, value)
    }

    /// Removes the value of `key` in `ns`.
    pub fn clear(&self, key: &[u8], ns: &[u8]) -> Result<()> {
        let k = self.core.key(key, ns)?;
        self.core.delete_entry(&k)
    }
}

/// Value state of serde types `V`, keyed by `K`, scoped by namespace `N` (use `()` for none).
pub struct ValueState<K, N, V> {
    raw: RawValueState,
    _types: PhantomData<fn(&K, &N) -> V>,
}

impl<K, N, V> Clone for ValueState<K, N, V> {
    fn clone(&self) -> Self {
        ValueState {
            raw: self.raw.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Serialize, N: Serialize, V: Serialize + DeserializeOwned> ValueState<K, N, V> {
    pub(crate) fn new(raw: RawValueState) -> Self {
        ValueState {
            raw,
            _types: PhantomData,
        }
    }

    /// The value of `key` in `ns`.
    #[inline]
    pub fn get(&self, key: &K, ns: &N) -> Result<Option<V>> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                self.raw.get_with(k, n, |b| codec::decode(b, "value"))
            })
        })
    }

    /// Sets the value of `key` in `ns`.
    #[inline]
    pub fn put(&self, key: &K, ns: &N, value: &V) -> Result<()> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| {
                with_encoded(value, "value", |v| self.raw.put(k, n, v))
            })
        })
    }

    /// Removes the value of `key` in `ns`.
    pub fn clear(&self, key: &K, ns: &N) -> Result<()> {
        with_encoded(key, "key", |k| {
            with_encoded(ns, "namespace", |n| self.raw.clear(k, n))
        })
    }

    /// The raw-bytes view of the same state.
    pub fn raw(&self) -> &RawValueState {
        &self.raw
    }
}
