//! `redistribute` against a model of the documented rules (src/operator_state.rs): per list
//! name, a mode conflict is `StateMismatch`; Split cuts the concatenation (instance order)
//! into contiguous runs, the first `len % p` one longer, and at unchanged parallelism leaves
//! every instance its own list; Union gives everyone everything;
//! Broadcast needs every old instance to hold the same copy. Names present in only some
//! instances, empty lists, rescale up and down and p→p; the result is deterministic.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rockstate::operator_state::{redistribute, OperatorState, RedistributionMode};
use rockstate::Error;

type Inst = BTreeMap<String, (RedistributionMode, Vec<Vec<u8>>)>;

fn mode_of(i: u8) -> RedistributionMode {
    match i % 3 {
        0 => RedistributionMode::Split,
        1 => RedistributionMode::Union,
        _ => RedistributionMode::Broadcast,
    }
}

#[derive(Debug, PartialEq)]
enum ModelErr {
    Mismatch,
    Broadcast,
}

/// A list's elements in each old instance (`None`: the instance does not hold the list).
type PerInstance = Vec<Option<Vec<Vec<u8>>>>;

fn model(old: &[Inst], p: usize) -> Result<Vec<Inst>, ModelErr> {
    let mut names: BTreeMap<String, (RedistributionMode, PerInstance)> = BTreeMap::new();
    for (i, inst) in old.iter().enumerate() {
        for (name, (mode, els)) in inst {
            let e = names
                .entry(name.clone())
                .or_insert((*mode, vec![None; old.len()]));
            if e.0 != *mode {
                return Err(ModelErr::Mismatch);
            }
            e.1[i] = Some(els.clone());
        }
    }
    let mut out = vec![Inst::new(); p];
    for (name, (mode, per)) in names {
        match mode {
            RedistributionMode::Split if old.len() == p => {
                for (o, own) in out.iter_mut().zip(&per) {
                    o.insert(name.clone(), (mode, own.clone().unwrap_or_default()));
                }
            }
            RedistributionMode::Split => {
                let all: Vec<Vec<u8>> = per.iter().flatten().flatten().cloned().collect();
                let mut pos = 0;
                for (i, o) in out.iter_mut().enumerate() {
                    let n = all.len() / p + usize::from(i < all.len() % p);
                    o.insert(name.clone(), (mode, all[pos..pos + n].to_vec()));
                    pos += n;
                }
                assert_eq!(pos, all.len());
            }
            RedistributionMode::Union => {
                let all: Vec<Vec<u8>> = per.iter().flatten().flatten().cloned().collect();
                for o in &mut out {
                    o.insert(name.clone(), (mode, all.clone()));
                }
            }
            RedistributionMode::Broadcast => {
                if per.iter().any(|c| c.is_none() || *c != per[0]) {
                    return Err(ModelErr::Broadcast);
                }
                for o in &mut out {
                    o.insert(name.clone(), (mode, per[0].clone().unwrap()));
                }
            }
        }
    }
    Ok(out)
}

fn to_state(inst: &Inst) -> OperatorState {
    let mut s = OperatorState::new();
    for (name, (mode, els)) in inst {
        s.update_raw(name, *mode, els.clone()).unwrap();
    }
    s
}

fn to_inst(s: &OperatorState) -> Inst {
    s.snapshot()
        .into_iter()
        .map(|l| (l.name, (l.mode, l.elements)))
        .collect()
}

/// Old instances: each holds a subset of names a, b, c; the mode of a name is usually the
/// same everywhere (from `modes`), sometimes flipped; broadcast copies often agree.
fn case() -> impl Strategy<Value = (Vec<Inst>, usize)> {
    (
        proptest::collection::vec(0u8..3, 3),
        proptest::collection::vec(
            proptest::collection::vec(
                (
                    any::<bool>(),
                    prop_oneof![9 => Just(None), 1 => (0u8..3).prop_map(Some)],
                    prop_oneof![
                        2 => Just(None),
                        1 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3), 0..9).prop_map(Some),
                    ],
                ),
                3,
            ),
            1..7,
        ),
        1usize..8,
    )
        .prop_map(|(modes, insts, p)| {
            let shared: Vec<Vec<u8>> = vec![vec![7], vec![8, 9]];
            let old = insts
                .into_iter()
                .map(|lists| {
                    let mut inst = Inst::new();
                    for (n, (present, flip, els)) in lists.into_iter().enumerate() {
                        if !present {
                            continue;
                        }
                        let mode = mode_of(flip.unwrap_or(modes[n]));
                        let els = match (mode, els) {
                            (RedistributionMode::Broadcast, None) => shared.clone(),
                            (_, e) => e.unwrap_or_default(),
                        };
                        inst.insert(["a", "b", "c"][n].to_string(), (mode, els));
                    }
                    inst
                })
                .collect();
            (old, p)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn redistribute_matches_the_model((old, p) in case()) {
        let states: Vec<OperatorState> = old.iter().map(to_state).collect();
        let got = redistribute(&states, p);
        let again = redistribute(&states, p);
        prop_assert_eq!(format!("{got:?}"), format!("{again:?}"), "deterministic");
        match (model(&old, p), got) {
            (Ok(want), Ok(got)) => {
                let got: Vec<Inst> = got.iter().map(to_inst).collect();
                prop_assert_eq!(got, want);
            }
            (Err(ModelErr::Mismatch), Err(Error::StateMismatch { .. })) => {}
            (Err(ModelErr::Broadcast), Err(Error::Decode { what: "broadcast operator state", .. })) => {}
            (want, got) => prop_assert!(false, "model {:?}, redistribute {:?}", want, got),
        }
    }
}

#[test]
fn rescale_shapes_and_large_lists() {
    for (from, to) in [(1usize, 3usize), (3, 1), (4, 6), (6, 4), (5, 5)] {
        let old: Vec<Inst> = (0..from)
            .map(|i| {
                let els: Vec<Vec<u8>> = (0..(10_000 + i))
                    .map(|k| (k as u32 + 100_000 * i as u32).to_le_bytes().to_vec())
                    .collect();
                Inst::from([("s".to_string(), (RedistributionMode::Split, els))])
            })
            .collect();
        let states: Vec<OperatorState> = old.iter().map(to_state).collect();
        let got: Vec<Inst> = redistribute(&states, to)
            .unwrap()
            .iter()
            .map(to_inst)
            .collect();
        assert_eq!(got, model(&old, to).unwrap(), "{from} -> {to}");
    }
}
