//! Barrier alignment, property-tested over random channel contents and interleavings: no
//! record is lost, duplicated or reordered per channel; an aligned snapshot holds exactly the
//! records before its barrier on every channel; an unaligned snapshot plus its in-flight
//! records holds exactly those; a cancel marker in place of a barrier aborts that checkpoint
//! and holds nothing back.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::barrier::{AlignmentMode, BarrierAligner, Input, Output};

/// A record: (channel, sequence number within the channel).
type Rec = (usize, u32);

/// Per channel: `records` records with barriers 1..=`barriers` at random positions.
fn channels(n: usize, records: u32, barriers: u64, rng: &mut SmallRng) -> Vec<Vec<Input<Rec>>> {
    (0..n)
        .map(|c| {
            let mut v: Vec<Input<Rec>> = (0..records).map(|s| Input::Record((c, s))).collect();
            for b in 1..=barriers {
                // Positions grow with b, so barriers stay in order.
                let lo = v
                    .iter()
                    .rposition(|i| matches!(i, Input::Barrier(_)))
                    .map_or(0, |p| p + 1);
                let at = rng.random_range(lo..=v.len());
                v.insert(at, Input::Barrier(b));
            }
            v
        })
        .collect()
}

/// Records before barrier `id` in every channel.
fn before_barrier(chans: &[Vec<Input<Rec>>], id: u64) -> BTreeSet<Rec> {
    let mut out = BTreeSet::new();
    for ch in chans {
        for i in ch {
            match i {
                Input::Record(r) => {
                    out.insert(*r);
                }
                Input::Barrier(b) if *b == id => break,
                Input::Barrier(_) | Input::Cancel(_) => {}
            }
        }
    }
    out
}

struct Run {
    processed: Vec<Rec>,
    snapshots: BTreeMap<u64, BTreeSet<Rec>>,
    in_flight: BTreeMap<u64, Vec<(usize, Rec)>>,
    aborted: BTreeSet<u64>,
    max_held: usize,
}

fn run(mode: AlignmentMode, chans: &[Vec<Input<Rec>>], rng: &mut SmallRng) -> Run {
    let mut a = BarrierAligner::new(chans.len(), mode).unwrap();
    let mut r = Run {
        processed: Vec::new(),
        snapshots: BTreeMap::new(),
        in_flight: BTreeMap::new(),
        aborted: BTreeSet::new(),
        max_held: 0,
    };
    let apply = |outs: Vec<Output<Rec>>, r: &mut Run| {
        for o in outs {
            match o {
                Output::Record { channel, record } => {
                    assert_eq!(channel, record.0, "record reported on its own channel");
                    r.processed.push(record);
                }
                Output::Snapshot { checkpoint_id } => {
                    let state = r.processed.iter().copied().collect();
                    assert!(r.snapshots.insert(checkpoint_id, state).is_none());
                }
                Output::InFlight {
                    checkpoint_id,
                    records,
                } => {
                    assert!(r.in_flight.insert(checkpoint_id, records).is_none());
                }
                Output::Aborted { checkpoint_id } => {
                    r.aborted.insert(checkpoint_id);
                }
            }
        }
    };
    let mut pos = vec![0usize; chans.len()];
    loop {
        let open: Vec<usize> = (0..chans.len())
            .filter(|c| pos[*c] < chans[*c].len())
            .collect();
        if open.is_empty() {
            break;
        }
        let c = open[rng.random_range(0..open.len())];
        let outs = a.push(c, chans[c][pos[c]].clone()).unwrap();
        pos[c] += 1;
        apply(outs, &mut r);
        r.max_held = r.max_held.max(a.held());
        if pos[c] == chans[c].len() && rng.random_bool(0.5) {
            apply(a.close(c).unwrap(), &mut r);
        }
    }
    for c in 0..chans.len() {
        if let Ok(outs) = a.close(c) {
            apply(outs, &mut r);
        }
    }
    assert_eq!(a.held(), 0, "everything held was released");
    r
}

/// Replaces barrier `b` of one random channel by its cancel marker, for each `b` in `ids`
/// (an upstream task on that channel declined checkpoint `b`).
fn cancel(chans: &mut [Vec<Input<Rec>>], ids: &BTreeSet<u64>, rng: &mut SmallRng) {
    for &b in ids {
        let c = rng.random_range(0..chans.len());
        for i in chans[c].iter_mut() {
            if *i == Input::Barrier(b) {
                *i = Input::Cancel(b);
            }
        }
    }
}

fn per_channel(v: &[Rec], n: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); n];
    for (c, s) in v {
        out[*c].push(*s);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn aligned_snapshots_are_exact_cuts(n in 1usize..5, records in 0u32..25, barriers in 1u64..4, seed in any::<u64>()) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let chans = channels(n, records, barriers, &mut rng);
        let r = run(AlignmentMode::Aligned, &chans, &mut rng);
        // No loss, duplication or reordering per channel.
        let expected: Vec<Vec<u32>> = (0..n).map(|_| (0..records).collect()).collect();
        prop_assert_eq!(per_channel(&r.processed, n), expected);
        prop_assert!(r.aborted.is_empty());
        prop_assert_eq!(r.snapshots.len() as u64, barriers);
        for (id, state) in &r.snapshots {
            prop_assert_eq!(state, &before_barrier(&chans, *id), "checkpoint {}", id);
        }
    }

    #[test]
    fn unaligned_snapshot_plus_in_flight_is_the_cut(n in 1usize..5, records in 0u32..25, barriers in 1u64..4, seed in any::<u64>()) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let chans = channels(n, records, barriers, &mut rng);
        let r = run(AlignmentMode::Unaligned, &chans, &mut rng);
        let expected: Vec<Vec<u32>> = (0..n).map(|_| (0..records).collect()).collect();
        prop_assert_eq!(per_channel(&r.processed, n), expected);
        prop_assert_eq!(r.max_held, 0, "unaligned mode never holds a channel back");
        for id in 1..=barriers {
            if r.aborted.contains(&id) {
                prop_assert!(!r.in_flight.contains_key(&id));
                continue;
            }
            let state = &r.snapshots[&id];
            let flight = &r.in_flight[&id];
            let mut all = state.clone();
            for (c, rec) in flight {
                prop_assert_eq!(*c, rec.0);
                prop_assert!(all.insert(*rec), "in-flight record {:?} already in the snapshot", rec);
            }
            prop_assert_eq!(all, before_barrier(&chans, id), "checkpoint {}", id);
            // In-flight records keep their per-channel order.
            let ordered = flight.iter().map(|(_, r)| *r).collect::<Vec<_>>();
            for ch in per_channel(&ordered, n) {
                prop_assert!(ch.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_cancel_marker_aborts_its_checkpoint_only(n in 1usize..5, records in 0u32..25, barriers in 1u64..5, aligned in any::<bool>(), seed in any::<u64>()) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut chans = channels(n, records, barriers, &mut rng);
        let cancelled: BTreeSet<u64> = (1..=barriers).filter(|_| rng.random_bool(0.4)).collect();
        cancel(&mut chans, &cancelled, &mut rng);
        let mode = if aligned { AlignmentMode::Aligned } else { AlignmentMode::Unaligned };
        let r = run(mode, &chans, &mut rng);
        let expected: Vec<Vec<u32>> = (0..n).map(|_| (0..records).collect()).collect();
        prop_assert_eq!(per_channel(&r.processed, n), expected);
        for id in 1..=barriers {
            if cancelled.contains(&id) {
                prop_assert!(r.aborted.contains(&id), "cancelled {} not aborted", id);
                prop_assert!(!r.in_flight.contains_key(&id));
                if aligned {
                    prop_assert!(!r.snapshots.contains_key(&id));
                }
                continue;
            }
            if r.aborted.contains(&id) {
                // Unaligned: a newer barrier overtook it.
                prop_assert!(!aligned, "aligned checkpoint {} aborted without a cancel", id);
                continue;
            }
            let mut all = r.snapshots[&id].clone();
            if !aligned {
                all.extend(r.in_flight[&id].iter().map(|(_, rec)| *rec));
            }
            prop_assert_eq!(all, before_barrier(&chans, id), "checkpoint {}", id);
        }
    }
}

#[test]
fn a_cancel_marker_releases_held_channels_and_drops_later_barriers() {
    let mut a = BarrierAligner::new(2, AlignmentMode::Aligned).unwrap();
    assert!(a.push(0, Input::Barrier(1)).unwrap().is_empty());
    assert!(a.push(0, Input::Record("held")).unwrap().is_empty());
    assert_eq!(
        a.push(1, Input::Cancel(1)).unwrap(),
        vec![
            Output::Aborted { checkpoint_id: 1 },
            Output::Record {
                channel: 0,
                record: "held"
            }
        ]
    );
    assert_eq!(a.aligning(), None);
    assert!(a.push(1, Input::Barrier(1)).unwrap().is_empty(), "stale");
    // A cancel marker of a checkpoint not started here aborts it once; its barriers are
    // dropped after it.
    assert_eq!(
        a.push(0, Input::Cancel(3)).unwrap(),
        vec![Output::Aborted { checkpoint_id: 3 }]
    );
    assert!(a.push(1, Input::Cancel(3)).unwrap().is_empty());
    assert!(a.push(1, Input::Barrier(3)).unwrap().is_empty(), "stale");
    assert!(a.push(0, Input::Barrier(4)).unwrap().is_empty());
    assert_eq!(
        a.push(1, Input::Barrier(4)).unwrap(),
        vec![Output::Snapshot { checkpoint_id: 4 }]
    );
}

#[test]
fn aligned_holds_a_channel_until_every_barrier_arrived() {
    let mut a = BarrierAligner::new(2, AlignmentMode::Aligned).unwrap();
    assert!(a.push(0, Input::Barrier(1)).unwrap().is_empty());
    assert!(a.push(0, Input::Record("held")).unwrap().is_empty());
    assert_eq!(a.held(), 1);
    assert_eq!(
        a.push(1, Input::Record("free")).unwrap(),
        vec![Output::Record {
            channel: 1,
            record: "free"
        }]
    );
    assert_eq!(
        a.push(1, Input::Barrier(1)).unwrap(),
        vec![
            Output::Snapshot { checkpoint_id: 1 },
            Output::Record {
                channel: 0,
                record: "held"
            }
        ]
    );
    // A stale barrier is dropped; a bad channel is a typed error.
    assert!(a.push(0, Input::Barrier(1)).unwrap().is_empty());
    assert!(a.push(2, Input::Record("x")).is_err());
    assert!(BarrierAligner::<u8>::new(0, AlignmentMode::Aligned).is_err());
}

#[test]
fn newer_barrier_aborts_the_older_alignment() {
    let mut a = BarrierAligner::new(2, AlignmentMode::Unaligned).unwrap();
    assert_eq!(
        a.push(0, Input::Barrier(1)).unwrap(),
        vec![Output::Snapshot { checkpoint_id: 1 }]
    );
    assert_eq!(
        a.push(0, Input::Barrier(2)).unwrap(),
        vec![
            Output::Aborted { checkpoint_id: 1 },
            Output::Snapshot { checkpoint_id: 2 }
        ]
    );
    assert!(a.push(1, Input::Barrier(1)).unwrap().is_empty(), "stale");
    assert_eq!(
        a.push(1, Input::Barrier(2)).unwrap(),
        vec![Output::InFlight::<u8> {
            checkpoint_id: 2,
            records: vec![]
        }]
    );
}
