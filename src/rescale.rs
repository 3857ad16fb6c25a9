//! Rescaling (design.md §7): turns the downloaded databases of one or several checkpoint
//! manifests into one database for another key-group range of the same max parallelism.
//!
//! This module owns the database surgery between download and open; `crate::restore` picks
//! the manifests and downloads them. Steps, all below the backend layer (the database is
//! opened with [`Db`] directly and closed again before the backend opens it):
//!
//! 1. **Check every source** right after opening it, before anything is changed: its stored
//!    backend metadata must match its manifest (max parallelism, key-group range), its stored
//!    state metadata must equal the manifest's, and no state column family may hold a key
//!    outside the manifest's claimed key groups. The last check is two bounded seeks per
//!    column family (below the first claimed group's prefix, at or above the prefix after the
//!    last one): keys are ordered by their key-group prefix, so a live key outside the range
//!    is found by one of them. Any failure is a typed error
//!    ([`Error::DataOutsideKeyGroups`], [`Error::CheckpointCorrupt`]).
//! 2. **Clip the base** (the source with the most overlap, opened in the target directory):
//!    per state column family, drop the SST files entirely outside the target range and
//!    `delete_range` the rest of `[start of keyspace, target start)` and
//!    `[target end + 1, max parallelism)`; optionally compact those ranges.
//! 3. **Merge the others**: per state, their in-range key groups are cut into up to
//!    `threads` contiguous slices, each scanned in key order into a new SST ([`Db::write_sst`])
//!    in parallel, and a state's SSTs are ingested into the base in one call (moved, not
//!    copied). Ingested
//!    entries get newer sequence numbers than the clip's range tombstones, so clipping first
//!    is correct. States must agree ([`Error::MergedStateMismatch`]); a state only the other
//!    source has is created in the base. No key-by-key write batch is used.
//! 4. **Fix the metadata**: the backend metadata gets the target range, the list-sequence
//!    high-water mark becomes the maximum over all sources (so new list elements sort after
//!    every restored one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sst_format::CheckpointManifest;

use crate::backend::{
    BackendMeta, BACKEND_META_VERSION, META_BACKEND, META_LIST_SEQ, META_STATE_PREFIX,
    STATE_CF_PREFIX,
};
use crate::checkpoint::uploader::run_parallel;
use crate::codec;
use crate::db::{Cf, Db, MemoryBudget};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::options::DbOptions;
use crate::state::StateMeta;

/// One downloaded checkpoint database.
pub(crate) struct Source<'a> {
    /// The manifest's object name (for errors).
    pub(crate) name: &'a str,
    /// The manifest.
    pub(crate) manifest: &'a CheckpointManifest,
    /// The directory holding its downloaded files.
    pub(crate) dir: &'a Path,
}

/// The target of a rescale and how to open databases.
pub(crate) struct Target<'a> {
    /// The key groups the restored backend owns.
    pub(crate) key_groups: KeyGroupRange,
    /// The job's max parallelism.
    pub(crate) max_parallelism: u32,
    /// RocksDB options (as the backend will open with).
    pub(crate) options: &'a DbOptions,
    /// Memory budget for the temporarily opened databases.
    pub(crate) budget: &'a MemoryBudget,
    /// Compact the clipped ranges of the base.
    pub(crate) compact_clipped: bool,
    /// Scratch directory on the target's filesystem for ingest files.
    pub(crate) scratch: &'a Path,
    /// Threads scanning the other sources into ingest files.
    pub(crate) threads: usize,
}

/// What a rescale did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RescaleStats {
    /// Entries copied from the other sources into ingested SSTs.
    pub(crate) entries_ingested: u64,
    /// SST files ingested.
    pub(crate) files_ingested: usize,
}

/// Checks `base` (already in the target directory) and, unless its range is the target's and
/// there are no `others`, rebuilds it for `target`, merging `others`.
pub(crate) fn rescale(
    base: &Source<'_>,
    others: &[Source<'_>],
    target: &Target<'_>,
) -> Result<RescaleStats> {
    let mut stats = RescaleStats::default();
    let m = target.max_parallelism;
    let db = Db::open(base.dir, target.options, target.budget)?;
    let base_states = check_source(&db, base, m)?;
    let meta = db.default_cf()?;
    let mut list_seq = read_list_seq(&meta)?;

    let claimed = claimed_range(base)?;
    if others.is_empty() && claimed == target.key_groups {
        // A plain restore: checked, nothing to change.
        return Ok(stats);
    }

    // 2. Clip the base: only the parts of its claimed range outside the target get a range
    //    tombstone (a narrower tombstone overlaps fewer later files and ingests).
    let clips: Vec<(Vec<u8>, Vec<u8>)> = [
        (
            claimed.start,
            target.key_groups.start.min(claimed.end.saturating_add(1)),
        ),
        (
            target.key_groups.end.saturating_add(1).max(claimed.start),
            claimed.end.saturating_add(1),
        ),
    ]
    .into_iter()
    .filter(|(from, to)| from < to)
    .map(|(from, to)| (prefix(u32::from(from), m), prefix(u32::from(to), m)))
    .collect();
    for state in base_states.values() {
        let cf = state_cf(&db, base, &state.name)?;
        for (from, to) in &clips {
            cf.delete_range(from, to)?;
        }
    }
    if target.compact_clipped {
        db.flush_all()?;
        for state in base_states.values() {
            let cf = state_cf(&db, base, &state.name)?;
            for (from, to) in &clips {
                cf.compact_range(from, to)?;
            }
        }
    }

    // 3. Merge the others' in-range key groups.
    let mut states = base_states;
    for (i, other) in others.iter().enumerate() {
        let odb = Db::open(other.dir, target.options, target.budget)?;
        let other_states = check_source(&odb, other, m)?;
        list_seq = list_seq.max(read_list_seq(&odb.default_cf()?)?);
        let claimed = claimed_range(other)?;
        let Some(copy) = claimed.intersect(&target.key_groups) else {
            continue;
        };
        // Each state's in-range groups are cut into up to `threads` contiguous slices, each
        // scanned into its own SST in parallel; a state's slices are ingested in one call.
        let slices = split(copy, target.threads);
        let mut jobs: Vec<(String, Cf, KeyGroupRange, PathBuf)> = Vec::new();
        for (j, (name, st)) in other_states.iter().enumerate() {
            match states.get(name) {
                Some(have) if have != st => {
                    return Err(Error::MergedStateMismatch {
                        name: name.clone(),
                        base: base.name.to_string(),
                        base_meta: crate::state::describe(have),
                        other: other.name.to_string(),
                        other_meta: crate::state::describe(st),
                    })
                }
                Some(_) => {}
                None => {
                    let key = format!("{META_STATE_PREFIX}{name}");
                    meta.put(key.as_bytes(), &codec::encode(st, "state metadata")?)?;
                    states.insert(name.clone(), st.clone());
                }
            }
            let src = state_cf(&odb, other, name)?;
            for (k, slice) in slices.iter().enumerate() {
                let file = target.scratch.join(format!("ingest-{i}-{j}-{k}.sst"));
                jobs.push((name.clone(), src.clone(), *slice, file));
            }
        }
        let counts = run_parallel(&jobs, target.threads, |(_, src, slice, file)| {
            let from = prefix(u32::from(slice.start), m);
            let to = prefix(u32::from(slice.end) + 1, m);
            db.write_sst(file, |sink| {
                src.scan(&from, Some(&to), |k, v| {
                    sink.put(k, v)?;
                    Ok(true)
                })
            })
        })?;
        let mut by_state: BTreeMap<&str, Vec<PathBuf>> = BTreeMap::new();
        for ((name, _, _, file), n) in jobs.iter().zip(counts) {
            if n > 0 {
                by_state.entry(name).or_default().push(file.clone());
                stats.entries_ingested += n;
                stats.files_ingested += 1;
            }
        }
        for name in other_states.keys() {
            let dst = db.create_cf(&format!("{STATE_CF_PREFIX}{name}"))?;
            if let Some(files) = by_state.get(name.as_str()) {
                dst.ingest(files)?;
            }
        }
    }

    // 4. Metadata for the new range.
    let backend_meta = BackendMeta {
        version: BACKEND_META_VERSION,
        max_parallelism: m,
        key_groups: target.key_groups,
    };
    meta.put(
        META_BACKEND,
        &codec::encode(&backend_meta, "backend metadata")?,
    )?;
    meta.put(META_LIST_SEQ, &list_seq.to_be_bytes())?;
    db.flush_all()?;
    Ok(stats)
}

/// `range` cut into at most `parts` contiguous, non-empty slices, in order.
fn split(range: KeyGroupRange, parts: usize) -> Vec<KeyGroupRange> {
    let len = range.len() as usize;
    let parts = parts.clamp(1, len.max(1));
    let mut out = Vec::with_capacity(parts);
    let mut start = usize::from(range.start);
    for p in 0..parts {
        let n = len / parts + usize::from(p < len % parts);
        // `start + n - 1 <= range.end`, a u16, by construction.
        out.push(KeyGroupRange {
            start: start as u16,
            end: (start + n - 1) as u16,
        });
        start += n;
    }
    out
}

/// The big-endian key-group prefix of group `group` (which may be `max_parallelism`, the
/// prefix right after the last group).
fn prefix(group: u32, max_parallelism: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(2);
    // `group <= max_parallelism <= 32768`, validated before any restore, so it fits in u16.
    keygroup::write_prefix(&mut out, group as u16, max_parallelism);
    out
}

fn corrupt(src: &Source<'_>, detail: impl Into<String>) -> Error {
    Error::CheckpointCorrupt {
        file: src.name.to_string(),
        detail: detail.into(),
    }
}

fn claimed_range(src: &Source<'_>) -> Result<KeyGroupRange> {
    KeyGroupRange::new(src.manifest.key_group_start, src.manifest.key_group_end)
        .map_err(|e| corrupt(src, format!("bad key-group range: {e}")))
}

fn state_cf(db: &Arc<Db>, src: &Source<'_>, name: &str) -> Result<Cf> {
    db.cf(&format!("{STATE_CF_PREFIX}{name}"))
        .ok_or_else(|| corrupt(src, format!("state `{name}` has no column family")))
}

fn read_list_seq(meta: &Cf) -> Result<u64> {
    match meta.get_with(META_LIST_SEQ, |b| <[u8; 8]>::try_from(b))? {
        None => Ok(0),
        Some(Ok(b)) => Ok(u64::from_be_bytes(b)),
        Some(Err(_)) => Err(Error::decode("list sequence", "not 8 bytes")),
    }
}

/// Step 1: checks a freshly opened source against its manifest; returns its states by name.
/// The data check comes first, so data outside the claimed range is reported as such even
/// when the stored backend metadata disagrees with the manifest too.
fn check_source(
    db: &Arc<Db>,
    src: &Source<'_>,
    max_parallelism: u32,
) -> Result<BTreeMap<String, StateMeta>> {
    let meta = db.default_cf()?;
    let claimed = claimed_range(src)?;
    if src.manifest.max_parallelism != max_parallelism {
        return Err(corrupt(
            src,
            format!(
                "max parallelism {} differs from the restore's {max_parallelism}",
                src.manifest.max_parallelism
            ),
        ));
    }
    let below = prefix(u32::from(claimed.start), max_parallelism);
    let above = prefix(u32::from(claimed.end) + 1, max_parallelism);
    for cf_name in db.cf_names() {
        let Some(name) = cf_name.strip_prefix(STATE_CF_PREFIX) else {
            continue;
        };
        let cf = state_cf(db, src, name)?;
        let outside = match first_key(&cf, &[], Some(&below))? {
            Some(k) => Some(k),
            None => first_key(&cf, &above, None)?,
        };
        if let Some(key) = outside {
            let key_group = keygroup::read_prefix(&key, max_parallelism)
                .map_err(|_| corrupt(src, format!("state `{name}` has a key without prefix")))?;
            return Err(Error::DataOutsideKeyGroups {
                checkpoint: src.name.to_string(),
                state: name.to_string(),
                key_group,
                claimed,
            });
        }
    }
    let stored: BackendMeta = meta
        .get_with(META_BACKEND, |b| codec::decode(b, "backend metadata"))?
        .transpose()?
        .ok_or_else(|| corrupt(src, "database has no backend metadata"))?;
    if stored.max_parallelism != max_parallelism || stored.key_groups != claimed {
        return Err(corrupt(
            src,
            format!(
                "database holds key groups {} of max parallelism {}, manifest says {claimed} of {max_parallelism}",
                stored.key_groups, stored.max_parallelism
            ),
        ));
    }
    let mut states = BTreeMap::new();
    let p = META_STATE_PREFIX.as_bytes();
    meta.scan(p, codec::prefix_end(p).as_deref(), |_, v| {
        let s: StateMeta = codec::decode(v, "state metadata")?;
        states.insert(s.name.clone(), s);
        Ok(true)
    })?;
    let mut want: Vec<&StateMeta> = src.manifest.states.iter().collect();
    want.sort_by(|a, b| a.name.cmp(&b.name));
    if !states.values().eq(want.iter().copied()) {
        return Err(corrupt(
            src,
            "the manifest's state list differs from the database's",
        ));
    }
    Ok(states)
}

/// The first live key in `[lower, upper)`.
fn first_key(cf: &Cf, lower: &[u8], upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
    let mut found = None;
    cf.scan(lower, upper, |k, _| {
        found = Some(k.to_vec());
        Ok(false)
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_range_in_order() {
        for (start, end, parts) in [(0u16, 127u16, 4usize), (43, 63, 4), (5, 5, 8), (0, 2, 3)] {
            let r = KeyGroupRange { start, end };
            let s = split(r, parts);
            assert!(s.len() <= parts && !s.is_empty());
            assert_eq!(s[0].start, start);
            assert_eq!(s[s.len() - 1].end, end);
            for w in s.windows(2) {
                assert_eq!(w[0].end + 1, w[1].start);
            }
            assert!(s.iter().all(|x| x.start <= x.end));
        }
    }
}
