//! Aggregating state: an accumulator folded with a user [`AggregateFunction`].

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};

use super::ValueState;
use crate::error::Result;

/// The user function of an [`AggregatingState`] (Flink's `AggregateFunction`).
pub trait AggregateFunction: Send + Sync + 'static {
    /// Input type of `add`.
    type In;
    /// The stored accumulator.
    type Acc: Serialize + DeserializeOwned;
    /// Result type of `get`.
    type Out;
    /// A fresh accumulator.
    fn create_accumulator(&self) -> Self::Acc;
    /// Folds `input` into `acc`.
    fn add(&self, input: &Self::In, acc: &mut Self::Acc);
    /// The result for an accumulator.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// State holding an accumulator per key and namespace.
pub struct AggregatingState<K, N, F: AggregateFunction> {
    acc: ValueState<K, N, F::Acc>,
    function: Arc<F>,
    _types: PhantomData<fn(&K, &N)>,
}

impl<K, N, F: AggregateFunction> Clone for AggregatingState<K, N, F> {
    fn clone(&self) -> Self {
        AggregatingState {
            acc: self.acc.clone(),
            function: Arc::clone(&self.function),
            _types: PhantomData,
        }
    }
}

impl<K: Serialize, N: Serialize, F: AggregateFunction> AggregatingState<K, N, F> {
    pub(crate) fn new(acc: ValueState<K, N, F::Acc>, function: Arc<F>) -> Self {
        AggregatingState {
            acc,
            function,
            _types: PhantomData,
        }
    }

    /// The result for the accumulator of `key` in `ns`, if anything was added.
    pub fn get(&self, key: &K, ns: &N) -> Result<Option<F::Out>> {
        Ok(self.acc.get(key, ns)?.map(|acc| self.function.result(&acc)))
    }

    /// Folds `input` into the accumulator.
    pub fn add(&self, key: &K, ns: &N, input: &F::In) -> Result<()> {
        let mut acc = match self.acc.get(key, ns)? {
            Some(acc) => acc,
            None => self.function.create_accumulator(),
        };
        self.function.add(input, &mut acc);
        self.acc.put(key, ns, &acc)
    }

    /// Removes the accumulator.
    pub fn clear(&self, key: &K, ns: &N) -> Result<()> {
        self.acc.clear(key, ns)
    }
}
