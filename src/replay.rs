//! Changelog replay at restore: the log segments a changelog-mode manifest names
//! (docs/changelog-format.md) are downloaded, checked against the manifest (size, CRC-32,
//! the segment's own checks, and the sequence numbers: the first segment starts at the
//! materialization's, each next one where the one before ended) and applied in order onto
//! the downloaded materialization, before the rescale surgery and before anything opens the
//! backend. A source so replayed is its checkpoint's state exactly, as if the checkpoint had
//! uploaded its files; everything after (rescale, open, the checks) is the same for both.
//!
//! A keyed state's entry is applied only when its key group is in the restore's target; the
//! backend's own metadata (column family `default`: state registrations, the list-sequence
//! high-water mark) is applied whole. A long log goes in batches of segments
//! (`ChangelogOptions::replay_batch_bytes`), each downloaded and applied before the next, so
//! a restore's memory does not grow with the log.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use sst_format::{Changelog, CheckpointManifest, LogEntry, LogSegment, LogSegmentFile};

use crate::db::{Cf, Db, KeyLayout, MemoryBudget, DEFAULT_CF_NAME};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::meta::STATE_CF_PREFIX;
use crate::options::DbOptions;
use crate::parallel::run_parallel;
use crate::storage::CheckpointStorage;

/// What a replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReplayCounts {
    /// Segments applied.
    pub(crate) segments: usize,
    /// Entries applied.
    pub(crate) applied: u64,
    /// Keyed entries of key groups outside the target, not applied.
    pub(crate) skipped: u64,
    /// Batches the segments were downloaded and applied in.
    pub(crate) batches: usize,
}

/// Replays the log segments `m` (the manifest object `name`) names onto the database in
/// `dir`, the materialization of a backend owning `source` key groups; keyed entries only of
/// the groups in `target`. The segments go in batches of consecutive segments holding at most
/// `batch_bytes` stored bytes (at least one segment each): a batch is downloaded, checked and
/// applied before the next one is downloaded, so the log in memory stays near one batch
/// however long the log is. Each batch is applied above the ones before. The database is
/// closed before this returns; nothing happens for a manifest without log segments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn replay(
    storage: &dyn CheckpointStorage,
    name: &str,
    m: &CheckpointManifest,
    dir: &Path,
    target: KeyGroupRange,
    options: &DbOptions,
    budget: &MemoryBudget,
    threads: usize,
    batch_bytes: u64,
) -> Result<ReplayCounts> {
    let mut counts = ReplayCounts::default();
    let Some(log) = m.changelog.as_ref().filter(|l| !l.segments.is_empty()) else {
        return Ok(counts);
    };
    check_sequence(name, log)?;
    let source = KeyGroupRange::new(m.key_group_start, m.key_group_end)?;
    let db = Db::open(
        dir,
        options,
        budget,
        Some(KeyLayout::new(m.max_parallelism, source)),
    )?;
    let result = (|| {
        for batch in batches(&log.segments, batch_bytes) {
            let segments = fetch(storage, batch, threads)?;
            apply(
                &db,
                dir,
                name,
                &segments,
                target,
                m.max_parallelism,
                &mut counts,
            )?;
            counts.batches += 1;
        }
        Ok(())
    })();
    let closed = db.close();
    result?;
    closed?;
    Ok(counts)
}

/// Checks the sequence numbers of `log`'s segments (the manifest object `name`): the first
/// starts at the materialization's, each next one where the one before ended.
fn check_sequence(name: &str, log: &Changelog) -> Result<()> {
    let mut at = log.materialized_seq;
    for s in &log.segments {
        if s.first_seq != at {
            return Err(corrupt(
                name,
                format!(
                    "log segment {} starts at {}, the log before it ends at {at}",
                    s.remote_name, s.first_seq
                ),
            ));
        }
        at = at
            .checked_add(s.entries)
            .ok_or_else(|| corrupt(name, "log sequence numbers overflow".into()))?;
    }
    Ok(())
}

/// `CheckpointCorrupt` for `file`.
fn corrupt(file: &str, detail: String) -> Error {
    Error::CheckpointCorrupt {
        file: file.to_string(),
        detail,
    }
}

/// `segments` cut into runs of consecutive segments holding at most `batch_bytes` stored
/// bytes, at least one segment each.
fn batches(segments: &[LogSegmentFile], batch_bytes: u64) -> Vec<&[LogSegmentFile]> {
    let mut out = Vec::new();
    let mut from = 0;
    while from < segments.len() {
        let mut to = from + 1;
        let mut bytes = segments[from].size;
        while to < segments.len() && bytes.saturating_add(segments[to].size) <= batch_bytes {
            bytes += segments[to].size;
            to += 1;
        }
        out.push(&segments[from..to]);
        from = to;
    }
    out
}

/// Downloads `files` (log segments, in log order) and checks each against its manifest entry
/// (size, CRC-32, the segment's own checks, its first sequence number and entry count).
fn fetch(
    storage: &dyn CheckpointStorage,
    files: &[LogSegmentFile],
    threads: usize,
) -> Result<Vec<LogSegment>> {
    run_parallel(files, threads, |s| {
        let bytes = match storage.get_bytes(&s.remote_name) {
            Ok(b) => b,
            Err(Error::ObjectNotFound { .. }) => {
                return Err(corrupt(&s.remote_name, "missing from storage".into()))
            }
            Err(e) => return Err(e),
        };
        if bytes.len() as u64 != s.size {
            return Err(corrupt(
                &s.remote_name,
                format!("{} bytes, manifest says {}", bytes.len(), s.size),
            ));
        }
        let crc = crc32fast::hash(&bytes);
        if crc != s.crc32 {
            return Err(corrupt(
                &s.remote_name,
                format!("crc32 {crc:08x}, manifest says {:08x}", s.crc32),
            ));
        }
        let seg = sst_format::decode_log_segment(&bytes)
            .map_err(|e| corrupt(&s.remote_name, format!("log segment: {e}")))?;
        if (seg.first_seq(), seg.count()) != (s.first_seq, s.entries) {
            return Err(corrupt(
                &s.remote_name,
                format!(
                    "holds entries {}.. ({}), manifest says {}.. ({})",
                    seg.first_seq(),
                    seg.count(),
                    s.first_seq,
                    s.entries
                ),
            ));
        }
        Ok(seg)
    })
}

/// Applies `segments` (one batch of a source's log, in log order) to the open database `db`
/// in `dir`; keyed entries only of the groups in `target`.
///
/// Keyed entries are not written through the memtable: per column family, the last entry of
/// each key (the log's order decides) goes into sorted SSTs over disjoint key-group runs,
/// written in parallel and ingested together above everything the database holds, so
/// nothing is flushed. A batch holding a range deletion (which the recorder never writes
/// today, but the format allows) is applied entry by entry instead.
fn apply(
    db: &Arc<Db>,
    dir: &Path,
    name: &str,
    segments: &[LogSegment],
    target: KeyGroupRange,
    max_parallelism: u32,
    counts: &mut ReplayCounts,
) -> Result<()> {
    let ranged = segments.iter().any(|seg| {
        seg.entries()
            .any(|e| matches!(e, Ok(LogEntry::DeleteRange { .. })))
    });
    if ranged {
        for seg in segments {
            apply_segment(db, name, seg, target, max_parallelism, counts)?;
        }
    } else {
        ingest_sorted(
            db,
            dir,
            name,
            segments,
            target,
            max_parallelism,
            replay_threads(),
            counts,
        )?;
    }
    counts.segments += segments.len();
    Ok(())
}

/// Where the entries naming one column family of a segment go.
enum Dest {
    /// The backend's metadata: applied whole.
    Meta(Cf),
    /// A keyed state: applied for the target's key groups.
    Keyed(Cf),
}

/// The destination of each column family a segment names (created if missing).
fn destinations(db: &Arc<Db>, name: &str, seg: &LogSegment) -> Result<Vec<Dest>> {
    let mut dests = Vec::with_capacity(seg.column_families().len());
    for cf in seg.column_families() {
        dests.push(if cf == DEFAULT_CF_NAME {
            Dest::Meta(db.default_cf()?)
        } else if cf.starts_with(STATE_CF_PREFIX) {
            Dest::Keyed(match db.cf(cf)? {
                Some(c) => c,
                None => db.create_cf(cf)?,
            })
        } else {
            return Err(Error::CheckpointCorrupt {
                file: name.to_string(),
                detail: format!(
                    "log segment names column family `{cf}`, neither a state's nor the metadata's"
                ),
            });
        });
    }
    Ok(dests)
}

/// Whether a keyed entry's key lies in `target` (`Err` for a key without a prefix).
fn in_target(key: &[u8], name: &str, target: KeyGroupRange, max_parallelism: u32) -> Result<bool> {
    Ok(target.contains(group_of(key, name, max_parallelism)?))
}

/// At most this many threads sort and write a replay's SSTs; fewer on fewer cores (the work
/// is CPU-bound).
const REPLAY_THREADS: usize = 4;

/// The threads a replay sorts and writes on: one per core, at most [`REPLAY_THREADS`].
fn replay_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, REPLAY_THREADS)
}

/// One keyed change of the sorted path: the key's group, the key, the value (`None`: delete).
type Change<'a> = (u16, &'a [u8], Option<&'a [u8]>);

/// The sorted path of [`apply`]: metadata entries through the memtable (few), keyed entries
/// as sorted SSTs, ingested per column family in one call.
///
/// Per column family the changes are first laid out by key group (a stable counting sort, so
/// each group's changes keep log order), then cut into up to `threads` runs of whole groups
/// with about equal counts. Each run is sorted group by group (small sorts over keys that sit
/// near each other) and written into its own SST on its own thread; the runs' files cover
/// disjoint key ranges, so RocksDB takes them together.
#[allow(clippy::too_many_arguments)]
fn ingest_sorted(
    db: &Arc<Db>,
    dir: &Path,
    name: &str,
    segments: &[LogSegment],
    target: KeyGroupRange,
    max_parallelism: u32,
    threads: usize,
    counts: &mut ReplayCounts,
) -> Result<()> {
    let mut keyed: Vec<(Cf, Vec<Change<'_>>)> = Vec::new();
    for seg in segments {
        let dests = destinations(db, name, seg)?;
        let mut slot: Vec<Option<usize>> = vec![None; dests.len()];
        for entry in seg.entries() {
            let entry = entry.map_err(|e| Error::CheckpointCorrupt {
                file: name.to_string(),
                detail: format!("log segment: {e}"),
            })?;
            let (key, value) = match entry {
                LogEntry::Put { key, value, .. } => (key, Some(value)),
                LogEntry::Delete { key, .. } => (key, None),
                // `apply` sends logs with range deletions the other way.
                LogEntry::DeleteRange { .. } => {
                    return Err(Error::Internal(
                        "range deletion on the sorted replay".into(),
                    ))
                }
            };
            let i = entry.cf() as usize;
            match dests.get(i) {
                Some(Dest::Meta(cf)) => match value {
                    Some(v) => cf.put(key, v)?,
                    None => cf.delete(key)?,
                },
                Some(Dest::Keyed(cf)) => {
                    let group = group_of(key, name, max_parallelism)?;
                    if !target.contains(group) {
                        counts.skipped += 1;
                        continue;
                    }
                    let at = match slot[i] {
                        Some(at) => at,
                        None => {
                            let at = match keyed.iter().position(|(c, _)| c.name() == cf.name()) {
                                Some(at) => at,
                                None => {
                                    keyed.push((cf.clone(), Vec::new()));
                                    keyed.len() - 1
                                }
                            };
                            slot[i] = Some(at);
                            at
                        }
                    };
                    keyed[at].1.push((group, key, value));
                }
                None => {
                    return Err(Error::CheckpointCorrupt {
                        file: name.to_string(),
                        detail: "log entry names an unknown column family".into(),
                    })
                }
            }
            counts.applied += 1;
        }
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    let scratch = tempfile::Builder::new()
        .prefix(".rockstate-replay-")
        .tempdir_in(parent)
        .map_err(|e| Error::io(parent, e))?;
    for (i, (cf, changes)) in keyed.into_iter().enumerate() {
        let (mut laid, bounds) = by_group(changes, target);
        let runs = cut_runs(&bounds, threads);
        // Disjoint mutable runs, one per job; each lock is taken once, by its job.
        let mut jobs = Vec::with_capacity(runs.len());
        let mut rest = laid.as_mut_slice();
        let mut taken = 0;
        for (j, &(from, to)) in runs.iter().enumerate() {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(bounds[from] - taken);
            let (run, tail) = tail.split_at_mut(bounds[to] - bounds[from]);
            rest = tail;
            taken = bounds[to];
            let file = scratch.path().join(format!("replay-{i}-{j}.sst"));
            jobs.push((Mutex::new(run), &bounds[from..=to], file));
        }
        let written = run_parallel(&jobs, threads, |(run, bounds, file)| {
            let mut run = run.lock();
            let base = bounds[0];
            for w in bounds.windows(2) {
                // Stable: a key's changes stay in log order, and the last one wins.
                run[w[0] - base..w[1] - base].sort_by(|a, b| a.1.cmp(b.1));
            }
            db.write_sst(file, |sink| {
                for (j, (_, key, value)) in run.iter().enumerate() {
                    if run.get(j + 1).is_some_and(|next| next.1 == *key) {
                        continue; // a later change of the same key follows
                    }
                    match value {
                        Some(v) => sink.put(key, v)?,
                        None => sink.delete(key)?,
                    }
                }
                Ok(())
            })
        })?;
        let files: Vec<_> = jobs
            .into_iter()
            .zip(written)
            .filter_map(|((_, _, file), w)| w.map(|_| file))
            .collect();
        cf.ingest(&files)?;
    }
    Ok(())
}

/// A keyed entry's key group (`Err` for a key without a prefix).
fn group_of(key: &[u8], name: &str, max_parallelism: u32) -> Result<u16> {
    keygroup::read_prefix(key, max_parallelism).map_err(|_| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail: "a keyed log entry without a key-group prefix".into(),
    })
}

/// `changes` (all in `target`) laid out by key group, each group's in their old order, and
/// where each group starts: group `target.start + g` holds `laid[bounds[g]..bounds[g + 1]]`.
fn by_group(changes: Vec<Change<'_>>, target: KeyGroupRange) -> (Vec<Change<'_>>, Vec<usize>) {
    let groups = target.len() as usize;
    let mut bounds = vec![0usize; groups + 1];
    for c in &changes {
        bounds[usize::from(c.0 - target.start) + 1] += 1;
    }
    for g in 0..groups {
        bounds[g + 1] += bounds[g];
    }
    let mut next = bounds.clone();
    let mut laid: Vec<Change<'_>> = vec![(0, &[], None); changes.len()];
    for c in changes {
        let at = &mut next[usize::from(c.0 - target.start)];
        laid[*at] = c;
        *at += 1;
    }
    (laid, bounds)
}

/// Cuts the groups `bounds` describes (see [`by_group`]) into up to `threads` runs of whole
/// groups, `(first group, end group)`, with about equal numbers of changes; runs without
/// changes are left out.
fn cut_runs(bounds: &[usize], threads: usize) -> Vec<(usize, usize)> {
    let groups = bounds.len() - 1;
    let total = bounds[groups];
    let threads = threads.max(1);
    let mut runs = Vec::with_capacity(threads);
    let mut from = 0;
    for t in 1..=threads {
        // The group boundary nearest to this run's share of the changes (past `from`).
        let share = total * t / threads;
        let mut to = from;
        while to < groups && (bounds[to] < share || to == from) {
            to += 1;
        }
        if to - 1 > from && share - bounds[to - 1] < bounds[to].saturating_sub(share) {
            to -= 1;
        }
        if t == threads {
            to = groups;
        }
        if bounds[to] > bounds[from] {
            runs.push((from, to));
        }
        from = to;
        if from == groups {
            break;
        }
    }
    runs
}

fn apply_segment(
    db: &Arc<Db>,
    name: &str,
    seg: &LogSegment,
    target: KeyGroupRange,
    max_parallelism: u32,
    counts: &mut ReplayCounts,
) -> Result<()> {
    let dests = destinations(db, name, seg)?;
    for entry in seg.entries() {
        let entry = entry.map_err(|e| Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: format!("log segment: {e}"),
        })?;
        let cf = match dests.get(entry.cf() as usize) {
            Some(Dest::Meta(cf)) => cf,
            Some(Dest::Keyed(cf)) => {
                let key = match entry {
                    LogEntry::Put { key, .. } | LogEntry::Delete { key, .. } => key,
                    LogEntry::DeleteRange { start, .. } => start,
                };
                if !in_target(key, name, target, max_parallelism)? {
                    counts.skipped += 1;
                    continue;
                }
                cf
            }
            None => {
                return Err(Error::CheckpointCorrupt {
                    file: name.to_string(),
                    detail: "log entry names an unknown column family".into(),
                })
            }
        };
        match entry {
            LogEntry::Put { key, value, .. } => cf.put(key, value)?,
            LogEntry::Delete { key, .. } => cf.delete(key)?,
            LogEntry::DeleteRange { start, end, .. } => cf.delete_range(start, end)?,
        }
        counts.applied += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change(group: u16, key: &'static [u8]) -> Change<'static> {
        (group, key, None)
    }

    #[test]
    fn laying_out_by_group_keeps_each_groups_log_order() {
        let target = KeyGroupRange::new(10, 13).unwrap();
        let changes = vec![
            change(12, b"c1"),
            change(10, b"a1"),
            change(12, b"c2"),
            change(13, b"d1"),
            change(10, b"a2"),
        ];
        let (laid, bounds) = by_group(changes, target);
        let keys: Vec<&[u8]> = laid.iter().map(|c| c.1).collect();
        assert_eq!(
            keys,
            [&b"a1"[..], b"a2", b"c1", b"c2", b"d1"],
            "groups ascending, log order within"
        );
        assert_eq!(bounds, [0, 2, 2, 4, 5]);
    }

    #[test]
    fn batches_hold_consecutive_segments_up_to_the_limit_and_at_least_one() {
        let seg = |size| LogSegmentFile {
            remote_name: String::new(),
            size,
            crc32: 0,
            first_seq: 0,
            entries: 0,
            key_groups: None,
        };
        let segments = [seg(4), seg(4), seg(9), seg(1), seg(2)];
        let sizes = |limit| -> Vec<Vec<u64>> {
            batches(&segments, limit)
                .iter()
                .map(|b| b.iter().map(|s| s.size).collect())
                .collect()
        };
        assert_eq!(sizes(8), [vec![4, 4], vec![9], vec![1, 2]]);
        assert_eq!(sizes(0), [[4], [4], [9], [1], [2]]);
        assert_eq!(sizes(u64::MAX), [vec![4, 4, 9, 1, 2]]);
        assert!(batches(&[], 8).is_empty());
    }

    #[test]
    fn runs_cover_every_change_once_in_group_order() {
        // Four groups of 3, 0, 3, 2 changes.
        let bounds = [0, 3, 3, 6, 8];
        assert_eq!(cut_runs(&bounds, 1), [(0, 4)]);
        assert_eq!(cut_runs(&bounds, 2), [(0, 2), (2, 4)]);
        // More threads than groups with changes: one run per such group at most.
        assert_eq!(cut_runs(&bounds, 8), [(0, 1), (2, 3), (3, 4)]);
        assert_eq!(cut_runs(&[0, 0, 0], 4), Vec::<(usize, usize)>::new());
    }

    proptest! {
        #[test]
        fn runs_partition_the_changes(
            counts in prop::collection::vec(0usize..20, 1..40),
            threads in 1usize..9,
        ) {
            let mut bounds = vec![0];
            for c in &counts {
                bounds.push(bounds.last().unwrap() + c);
            }
            let runs = cut_runs(&bounds, threads);
            prop_assert!(runs.len() <= threads);
            let mut covered = 0;
            let mut end = 0;
            for &(from, to) in &runs {
                prop_assert!(from >= end && from < to, "{runs:?}");
                // Whatever lies between two runs holds no change.
                prop_assert_eq!(bounds[from], bounds[end]);
                covered += bounds[to] - bounds[from];
                end = to;
            }
            prop_assert_eq!(covered, *bounds.last().unwrap());
        }
    }
}
