//! Operator (non-keyed) state: named list states per operator instance, stored in the
//! checkpoint manifest (docs/manifest-format.md §2.5) and in savepoints, with the
//! redistribution rule applied when parallelism changes:
//!
//! - **Split**: the elements of all old instances, concatenated in instance order, are cut into
//!   contiguous, near-equal runs, one per new instance (a source's partition offsets); at
//!   unchanged parallelism each instance keeps its own list (a failover moves nothing);
//! - **Union**: every new instance receives every element;
//! - **Broadcast**: every old instance holds the same copy (checked), every new one gets it.
//!
//! The state is plain data, stored in checkpoint manifests and savepoint headers as
//! `sst_format::OperatorListState`. To rescale, read every old instance's state
//! ([`crate::checkpoint::read_operator_states`] or [`crate::savepoint::read_operator_states`],
//! which order the instances and check none is missing) and call [`redistribute`].

use std::collections::BTreeMap;

use serde::{de::DeserializeOwned, Serialize};
pub use sst_format::{OperatorListState, RedistributionMode};

use crate::codec;
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;

/// The operator state of one operator instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorState {
    lists: BTreeMap<String, (RedistributionMode, Vec<Vec<u8>>)>,
}

impl OperatorState {
    /// Empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds the state from its snapshot form. Duplicate names are a typed error.
    pub fn from_snapshot(lists: Vec<OperatorListState>) -> Result<Self> {
        let mut out = OperatorState::new();
        for l in lists {
            if out
                .lists
                .insert(l.name.clone(), (l.mode, l.elements))
                .is_some()
            {
                return Err(Error::decode(
                    "operator state",
                    format!("list `{}` appears twice", l.name),
                ));
            }
        }
        Ok(out)
    }

    /// The snapshot form, sorted by name.
    pub fn snapshot(&self) -> Vec<OperatorListState> {
        self.lists
            .iter()
            .map(|(name, (mode, elements))| OperatorListState {
                name: name.clone(),
                mode: *mode,
                elements: elements.clone(),
            })
            .collect()
    }

    fn check_mode(&self, name: &str, mode: RedistributionMode) -> Result<()> {
        match self.lists.get(name) {
            Some((m, _)) if *m != mode => Err(Error::StateMismatch {
                name: name.to_string(),
                existing: format!("operator list {m:?}"),
                requested: format!("operator list {mode:?}"),
            }),
            _ => Ok(()),
        }
    }

    /// Replaces list `name` (raw elements).
    pub fn update_raw(
        &mut self,
        name: &str,
        mode: RedistributionMode,
        elements: Vec<Vec<u8>>,
    ) -> Result<()> {
        self.check_mode(name, mode)?;
        self.lists.insert(name.to_string(), (mode, elements));
        Ok(())
    }

    /// The raw elements of list `name` (empty when absent).
    pub fn get_raw(&self, name: &str) -> &[Vec<u8>] {
        self.lists
            .get(name)
            .map(|(_, e)| e.as_slice())
            .unwrap_or(&[])
    }

    /// Replaces list `name` with serde elements.
    pub fn update<T: Serialize>(
        &mut self,
        name: &str,
        mode: RedistributionMode,
        elements: &[T],
    ) -> Result<()> {
        let raw = elements
            .iter()
            .map(|e| codec::encode(e, "operator state element"))
            .collect::<Result<Vec<_>>>()?;
        self.update_raw(name, mode, raw)
    }

    /// The serde elements of list `name`.
    pub fn get<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>> {
        self.get_raw(name)
            .iter()
            .map(|e| codec::decode(e, "operator state element"))
            .collect()
    }

    /// Names of the lists held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.lists.keys().map(String::as_str)
    }
}

/// Redistributes the operator state of `old` instances (index = old instance) over
/// `new_parallelism` instances. A list must have the same mode everywhere; broadcast copies
/// must be identical. At unchanged parallelism a Split list stays with its instance.
pub fn redistribute(old: &[OperatorState], new_parallelism: usize) -> Result<Vec<OperatorState>> {
    if new_parallelism == 0 {
        return Err(Error::InvalidKeyGroups("new parallelism 0".into()));
    }
    /// Per list name: its mode and each old instance's elements.
    type Merged<'a> = BTreeMap<&'a str, (RedistributionMode, Vec<&'a Vec<Vec<u8>>>)>;
    let mut merged: Merged<'_> = BTreeMap::new();
    for state in old {
        for (name, (mode, elements)) in &state.lists {
            let entry = merged.entry(name).or_insert((*mode, Vec::new()));
            if entry.0 != *mode {
                return Err(Error::StateMismatch {
                    name: name.clone(),
                    existing: format!("operator list {:?}", entry.0),
                    requested: format!("operator list {mode:?}"),
                });
            }
            entry.1.push(elements);
        }
    }
    let mut out = vec![OperatorState::new(); new_parallelism];
    for (name, (mode, parts)) in merged {
        match mode {
            // At unchanged parallelism every instance keeps its own list (a failover: a
            // source keeps its partitions, a sink its transactions), as Flink's round-robin
            // repartitioner leaves them.
            RedistributionMode::Split if old.len() == new_parallelism => {
                for (target, state) in out.iter_mut().zip(old) {
                    let own = state.lists.get(name).map(|(_, e)| e.clone());
                    target
                        .lists
                        .insert(name.to_string(), (mode, own.unwrap_or_default()));
                }
            }
            RedistributionMode::Split => {
                let all: Vec<Vec<u8>> = parts.into_iter().flatten().cloned().collect();
                let (base, extra) = (all.len() / new_parallelism, all.len() % new_parallelism);
                let mut it = all.into_iter();
                for (i, target) in out.iter_mut().enumerate() {
                    let take = base + usize::from(i < extra);
                    target
                        .lists
                        .insert(name.to_string(), (mode, it.by_ref().take(take).collect()));
                }
            }
            RedistributionMode::Union => {
                let all: Vec<Vec<u8>> = parts.into_iter().flatten().cloned().collect();
                for target in &mut out {
                    target.lists.insert(name.to_string(), (mode, all.clone()));
                }
            }
            RedistributionMode::Broadcast => {
                let first = parts[0];
                // Every old instance holds a copy, the same one: an instance without the
                // list holds another copy (none), as one holding an empty list would.
                if parts.len() != old.len() || parts.iter().any(|p| *p != first) {
                    return Err(Error::Decode {
                        what: "broadcast operator state",
                        detail: format!("instances hold different copies of `{name}`"),
                    });
                }
                for target in &mut out {
                    target.lists.insert(name.to_string(), (mode, first.clone()));
                }
            }
        }
    }
    Ok(out)
}

/// Orders the operator states of one operator's instances by their key-group ranges and checks
/// that the ranges tile `[0, max_parallelism)` exactly, so that no instance's state is missing
/// or counted twice before [`redistribute`].
pub(crate) fn in_instance_order(
    mut parts: Vec<(KeyGroupRange, OperatorState)>,
    max_parallelism: u32,
) -> Result<Vec<OperatorState>> {
    parts.sort_by_key(|(r, _)| (r.start, r.end));
    let mut next: u32 = 0;
    for (range, _) in &parts {
        if u32::from(range.start) != next {
            return Err(Error::InvalidKeyGroups(format!(
                "operator state of instances: key groups from {next} expected, next instance \
                 holds {range} (an instance is missing or appears twice)"
            )));
        }
        next = u32::from(range.end) + 1;
    }
    if next != max_parallelism {
        return Err(Error::InvalidKeyGroups(format!(
            "operator state of instances covers key groups [0, {next}) of {max_parallelism}: \
             an instance is missing"
        )));
    }
    Ok(parts.into_iter().map(|(_, s)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with(lists: &[(&str, RedistributionMode, Vec<u32>)]) -> OperatorState {
        let mut s = OperatorState::new();
        for (name, mode, els) in lists {
            s.update(name, *mode, els).unwrap();
        }
        s
    }

    proptest! {
        #[test]
        fn split_loses_and_duplicates_nothing_and_is_balanced_unless_p_to_p(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u32>(), 0..20), 1..6),
            p in 1usize..9,
        ) {
            let old: Vec<_> = parts.iter().map(|e| with(&[("offsets", RedistributionMode::Split, e.clone())])).collect();
            let new = redistribute(&old, p).unwrap();
            let all: Vec<u32> = parts.concat();
            let got: Vec<u32> = new.iter().flat_map(|s| s.get::<u32>("offsets").unwrap()).collect();
            prop_assert_eq!(&got, &all);
            let sizes: Vec<usize> = new.iter().map(|s| s.get_raw("offsets").len()).collect();
            if parts.len() == p {
                // Unchanged parallelism: each instance keeps its own list.
                let own: Vec<usize> = parts.iter().map(Vec::len).collect();
                prop_assert_eq!(sizes, own);
            } else {
                prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            }
        }

        #[test]
        fn union_gives_everyone_everything(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u32>(), 0..10), 1..5),
            p in 1usize..7,
        ) {
            let old: Vec<_> = parts.iter().map(|e| with(&[("u", RedistributionMode::Union, e.clone())])).collect();
            for s in redistribute(&old, p).unwrap() {
                prop_assert_eq!(s.get::<u32>("u").unwrap(), parts.concat());
            }
        }
    }

    #[test]
    fn broadcast_is_copied_and_checked() {
        let b = |v: Vec<u32>| with(&[("rules", RedistributionMode::Broadcast, v)]);
        let new = redistribute(&[b(vec![1, 2]), b(vec![1, 2])], 3).unwrap();
        assert!(new
            .iter()
            .all(|s| s.get::<u32>("rules").unwrap() == vec![1, 2]));
        assert!(redistribute(&[b(vec![1, 2]), b(vec![1, 3])], 2).is_err());
    }

    #[test]
    fn mode_mismatch_and_snapshot_round_trip() {
        let a = with(&[("x", RedistributionMode::Split, vec![1])]);
        let b = with(&[("x", RedistributionMode::Union, vec![2])]);
        assert!(matches!(
            redistribute(&[a.clone(), b], 2),
            Err(Error::StateMismatch { .. })
        ));
        let mut c = a.clone();
        assert!(c
            .update::<u32>("x", RedistributionMode::Union, &[])
            .is_err());
        assert_eq!(OperatorState::from_snapshot(a.snapshot()).unwrap(), a);
        let mut dup = a.snapshot();
        dup.extend(a.snapshot());
        assert!(OperatorState::from_snapshot(dup).is_err());
        assert!(redistribute(&[a], 0).is_err());
    }
}
