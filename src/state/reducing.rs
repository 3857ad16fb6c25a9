//! Reducing state: a value folded with a user reduce function on every `add`.

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::ValueState;
use crate::error::Result;

/// The reduce function of a [`ReducingState`].
pub type ReduceFn<T> = Arc<dyn Fn(&T, &T) -> T + Send + Sync>;

/// State holding `reduce(reduce(a, b), c)…` of everything added for a key and namespace.
pub struct ReducingState<K, N, T> {
    value: ValueState<K, N, T>,
    reduce: ReduceFn<T>,
}

impl<K, N, T> Clone for ReducingState<K, N, T> {
    fn clone(&self) -> Self {
        ReducingState {
            value: self.value.clone(),
            reduce: Arc::clone(&self.reduce),
        }
    }
}

impl<K: Serialize, N: Serialize, T: Serialize + DeserializeOwned> ReducingState<K, N, T> {
    pub(crate) fn new(value: ValueState<K, N, T>, reduce: ReduceFn<T>) -> Self {
        ReducingState { value, reduce }
    }

    /// The reduced value, if anything was added.
    pub fn get(&self, key: &K, ns: &N) -> Result<Option<T>> {
        self.value.get(key, ns)
    }

    /// Folds `input` into the stored value.
    pub fn add(&self, key: &K, ns: &N, input: &T) -> Result<()> {
        let next = match self.value.get(key, ns)? {
            Some(current) => (self.reduce)(&current, input),
            None => return self.value.put(key, ns, input),
        };
        self.value.put(key, ns, &next)
    }

    /// Removes the value.
    pub fn clear(&self, key: &K, ns: &N) -> Result<()> {
        self.value.clear(key, ns)
    }
}
