//! How a savepoint write is divided among its encoder threads (`crate::savepoint`): runs of
//! consecutive key groups, and a key group holding more than a run's share (a hot key's huge
//! list or map, a backend of few key groups) cut into several runs, so that it is scanned,
//! encoded and compressed on several threads instead of one.
//!
//! A savepoint holds a key group's entries state by state, each state's in key order, so a
//! position inside a key group is a state and a key of it ([`Cut`]). Cuts lie at the start of
//! a row (a key's entries in one namespace): a list's entries, and the heads that make some of
//! them dead, stay in one run. The blocks of a cut key group follow one another in the file as
//! those of a key group larger than one block do (docs/savepoint-format.md), so the file reads
//! the same whether and where a key group was cut.
//!
//! Where to cut comes from RocksDB's estimates of the bytes its files hold in a key range
//! (index positions, no scan), found by bisection over the key space and moved back to the
//! start of the row they fall in; the heap backend, which has no such estimate, is not cut.

use std::collections::BTreeMap;

use crate::codec;
use crate::error::Result;
use crate::state;
use crate::store::Table;

/// A position inside one key group: its entries of states before `state`, and those of
/// `state` below `row`, come before it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cut {
    pub(crate) state: usize,
    /// The start of a row of `state` in the key group (or the key group's first key).
    pub(crate) row: Vec<u8>,
}

/// One run of a savepoint write: the key groups `groups[first..=last]`, from `from` in the
/// first of them (or its start) to `to` in the last (or its end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: usize,
    pub(crate) last: usize,
    pub(crate) from: Option<Cut>,
    pub(crate) to: Option<Cut>,
}

/// Bounds of a key-group range: lower, and upper (`None`: past every key).
type Bounds = (Vec<u8>, Option<Vec<u8>>);

impl Run {
    /// Per state (of `states`), the key range this run reads of it.
    pub(crate) fn bounds(
        &self,
        groups: &[u16],
        states: usize,
        max_parallelism: u32,
    ) -> Vec<Bounds> {
        let (first, last) = (groups[self.first], groups[self.last]);
        let (first_lower, first_upper) = state::key_group_bounds(max_parallelism, first, first);
        let (last_lower, last_upper) = state::key_group_bounds(max_parallelism, last, last);
        (0..states)
            .map(|i| {
                // Past every key: nothing of this state is read (the upper bound below it).
                let lower = match &self.from {
                    Some(c) if i < c.state => first_upper.clone(),
                    Some(c) if i == c.state => Some(c.row.clone()),
                    _ => Some(first_lower.clone()),
                };
                let upper = match &self.to {
                    Some(c) if i == c.state => Some(c.row.clone()),
                    Some(c) if i > c.state => Some(last_lower.clone()),
                    _ => last_upper.clone(),
                };
                match lower {
                    Some(lower) => (lower, upper),
                    None => (first_lower.clone(), Some(first_lower.clone())),
                }
            })
            .collect()
    }
}

/// The runs over `groups`: chunks of `run_len` consecutive key groups, each chunk cut further
/// at every cut of its key groups (`cuts`, per key group in order).
pub(crate) fn plan(groups: &[u16], run_len: usize, cuts: &BTreeMap<u16, Vec<Cut>>) -> Vec<Run> {
    let mut runs = Vec::new();
    let run_len = run_len.max(1);
    let mut start = 0;
    while start < groups.len() {
        let end = (start + run_len).min(groups.len()) - 1;
        let mut from: (usize, Option<Cut>) = (start, None);
        for (i, g) in groups.iter().enumerate().take(end + 1).skip(start) {
            for c in cuts.get(g).into_iter().flatten() {
                runs.push(Run {
                    first: from.0,
                    last: i,
                    from: from.1.take(),
                    to: Some(c.clone()),
                });
                from = (i, Some(c.clone()));
            }
        }
        runs.push(Run {
            first: from.0,
            last: end,
            from: from.1,
            to: None,
        });
        start = end + 1;
    }
    runs
}

/// Bytes of a piece of a cut key group at the least: a run this small is encoded in a few
/// milliseconds, and below the 32 MiB an encoder may hand over before the writer reaches its
/// run, so the runs of one key group are encoded side by side.
const MIN_PIECE_BYTES: u64 = 8 << 20;

#[cfg(test)]
thread_local! {
    /// Tests: the least piece, in place of [`MIN_PIECE_BYTES`], for savepoints written on
    /// this thread.
    pub(crate) static TEST_MIN_PIECE_BYTES: std::cell::Cell<Option<u64>> =
        const { std::cell::Cell::new(None) };
}

fn min_piece_bytes() -> u64 {
    #[cfg(test)]
    if let Some(b) = TEST_MIN_PIECE_BYTES.with(|b| b.get()) {
        return b;
    }
    MIN_PIECE_BYTES
}

/// The cuts of every key group of `groups` whose states' files hold at least two pieces, each
/// cut into pieces of about a `max_pieces`-th of the whole (at least [`MIN_PIECE_BYTES`], and
/// at most `max_pieces` per key group); none for heap tables. `tables` are the states in
/// savepoint order.
pub(crate) fn cuts(
    tables: &[&Table],
    groups: &[u16],
    max_parallelism: u32,
    max_pieces: usize,
) -> Result<BTreeMap<u16, Vec<Cut>>> {
    let mut out = BTreeMap::new();
    let cfs: Vec<&crate::db::Cf> = tables
        .iter()
        .filter_map(|t| match t {
            Table::Rocks(cf) => Some(cf),
            Table::Heap(_) => None,
        })
        .collect();
    if cfs.len() != tables.len() || groups.is_empty() || max_pieces < 2 {
        return Ok(out);
    }
    let range = |a: usize, b: usize| -> Option<(Vec<u8>, Vec<u8>)> {
        let (lower, upper) = state::key_group_bounds(max_parallelism, groups[a], groups[b]);
        upper.map(|u| (lower, u))
    };
    let bytes = |lower: &[u8], upper: &[u8]| -> Result<Vec<u64>> {
        cfs.iter()
            .map(|cf| cf.approximate_file_bytes(lower, upper))
            .collect()
    };
    let Some((lower, upper)) = range(0, groups.len() - 1) else {
        return Ok(out);
    };
    let whole: u64 = bytes(&lower, &upper)?.iter().sum();
    let piece_bytes = (whole / max_pieces as u64).max(min_piece_bytes()).max(1);
    // Key groups of two pieces or more: ranges below that hold none and are not split.
    let mut hot = Vec::new();
    let mut todo = vec![(0, groups.len() - 1)];
    while let Some((a, b)) = todo.pop() {
        let Some((lower, upper)) = range(a, b) else {
            continue;
        };
        let sizes = bytes(&lower, &upper)?;
        if sizes.iter().sum::<u64>() < 2 * piece_bytes {
            continue;
        }
        if a == b {
            hot.push((a, lower, upper, sizes));
        } else {
            let mid = a + (b - a) / 2;
            todo.push((a, mid));
            todo.push((mid + 1, b));
        }
    }
    for (i, lower, upper, sizes) in hot {
        let total: u64 = sizes.iter().sum();
        let pieces = (total.div_ceil(piece_bytes) as usize).min(max_pieces) as u64;
        let mut group_cuts = Vec::new();
        for j in 1..pieces {
            // The j-th piece boundary: which state it falls in, and how far into it.
            let mut at = total * j / pieces;
            let Some(s) = sizes.iter().position(|&size| {
                let inside = at < size;
                if !inside {
                    at -= size;
                }
                inside
            }) else {
                continue;
            };
            let key = key_at_bytes(cfs[s], &lower, &upper, at, piece_bytes / 8)?;
            let Some(found) = cfs[s].first_key_from(&key, Some(&upper))? else {
                continue;
            };
            // A key the layout does not take is cut nowhere; the scan reports it.
            let Ok(parts) = codec::split_key(&found, max_parallelism) else {
                continue;
            };
            let row = found[..found.len() - parts.suffix.len()].to_vec();
            if s == 0 && row <= lower {
                continue;
            }
            group_cuts.push(Cut { state: s, row });
        }
        group_cuts.sort();
        group_cuts.dedup();
        if !group_cuts.is_empty() {
            out.insert(groups[i], group_cuts);
        }
    }
    Ok(out)
}

/// Bytes of a key taken as a number: its first [`KEY_WIDTH`] bytes, big-endian, zero-padded.
const KEY_WIDTH: usize = 16;

fn key_number(key: &[u8]) -> u128 {
    let mut b = [0u8; KEY_WIDTH];
    let n = key.len().min(KEY_WIDTH);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

fn number_key(n: u128) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

/// A key between `lower` and `upper` below which `cf`'s files hold `at` bytes of the range,
/// give or take `slack`, by bisection over the keys taken as numbers.
fn key_at_bytes(
    cf: &crate::db::Cf,
    lower: &[u8],
    upper: &[u8],
    at: u64,
    slack: u64,
) -> Result<Vec<u8>> {
    let (mut lo, mut hi) = (key_number(lower), key_number(upper));
    // At most one step per bit of the numbers; the estimates are per data block, so the slack
    // ends it long before.
    for _ in 0..128 {
        if hi <= lo + 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        let below = cf.approximate_file_bytes(lower, &number_key(mid))?;
        if below.abs_diff(at) <= slack {
            return Ok(number_key(mid));
        }
        if below < at {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(number_key(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(state: usize, row: &[u8]) -> Cut {
        Cut {
            state,
            row: row.to_vec(),
        }
    }

    #[test]
    fn runs_cover_every_group_once_and_are_cut_at_each_cut() {
        let groups: Vec<u16> = (0..6).collect();
        let cuts = BTreeMap::from([
            (1, vec![cut(0, b"a"), cut(1, b"b")]),
            (4, vec![cut(2, b"c")]),
        ]);
        let runs = plan(&groups, 3, &cuts);
        let r = |first, last, from: Option<Cut>, to: Option<Cut>| Run {
            first,
            last,
            from,
            to,
        };
        assert_eq!(
            runs,
            vec![
                r(0, 1, None, Some(cut(0, b"a"))),
                r(1, 1, Some(cut(0, b"a")), Some(cut(1, b"b"))),
                r(1, 2, Some(cut(1, b"b")), None),
                r(3, 4, None, Some(cut(2, b"c"))),
                r(4, 5, Some(cut(2, b"c")), None),
            ]
        );
        assert_eq!(plan(&groups, 4, &BTreeMap::new()).len(), 2);
    }

    #[test]
    fn a_cut_run_reads_each_state_from_and_to_its_cut() {
        let groups = [7u16];
        let (lower, upper) = state::key_group_bounds(128, 7, 7);
        let run = Run {
            first: 0,
            last: 0,
            from: Some(cut(1, b"\x07from")),
            to: Some(cut(2, b"\x07to")),
        };
        let b = run.bounds(&groups, 4, 128);
        // State 0 went to the run before; states 1 and 2 are cut; state 3 to the run after.
        assert!(matches!(&b[0], (l, Some(u)) if u <= l));
        assert_eq!(b[1], (b"\x07from".to_vec(), upper.clone()));
        assert_eq!(b[2], (lower.clone(), Some(b"\x07to".to_vec())));
        assert_eq!(b[3], (lower.clone(), Some(lower)));
    }

    #[test]
    fn keys_as_numbers_keep_their_order() {
        let keys: [&[u8]; 5] = [b"", b"\x00", b"\x01", b"\x01\x00\x05", b"\xff\xff"];
        for w in keys.windows(2) {
            assert!(key_number(w[0]) <= key_number(w[1]));
        }
        assert_eq!(number_key(key_number(b"\x07")).first(), Some(&7));
    }
}
