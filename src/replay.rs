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
//! high-water mark) is applied whole.

use std::path::Path;
use std::sync::Arc;

use sst_format::{CheckpointManifest, LogEntry, LogSegment};

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
}

/// Downloads and checks every log segment `m` (the manifest object `name`) names, in log
/// order; empty for a manifest without a changelog.
pub(crate) fn fetch(
    storage: &dyn CheckpointStorage,
    name: &str,
    m: &CheckpointManifest,
    threads: usize,
) -> Result<Vec<LogSegment>> {
    let Some(log) = &m.changelog else {
        return Ok(Vec::new());
    };
    let corrupt = |file: &str, detail: String| Error::CheckpointCorrupt {
        file: file.to_string(),
        detail,
    };
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
    run_parallel(&log.segments, threads, |s| {
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

/// Applies `segments` (one source's, in log order) to the database in `dir`, the
/// materialization of a backend owning `source` key groups; keyed entries only of the groups
/// in `target`. The database is closed before this returns.
///
/// Keyed entries are not written through the memtable: per column family, the last entry of
/// each key (the log's order decides) goes into one sorted SST, ingested above everything the
/// materialization holds, so nothing is flushed. A log holding a range deletion (which the
/// recorder never writes today, but the format allows) is applied entry by entry instead.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    dir: &Path,
    name: &str,
    segments: &[LogSegment],
    source: KeyGroupRange,
    target: KeyGroupRange,
    max_parallelism: u32,
    options: &DbOptions,
    budget: &MemoryBudget,
) -> Result<ReplayCounts> {
    let mut counts = ReplayCounts::default();
    if segments.is_empty() {
        return Ok(counts);
    }
    let db = Db::open(
        dir,
        options,
        budget,
        Some(KeyLayout::new(max_parallelism, source)),
    )?;
    let result = (|| {
        let ranged = segments.iter().any(|seg| {
            seg.entries()
                .any(|e| matches!(e, Ok(LogEntry::DeleteRange { .. })))
        });
        if ranged {
            for seg in segments {
                apply_segment(&db, name, seg, target, max_parallelism, &mut counts)?;
            }
        } else {
            ingest_sorted(
                &db,
                dir,
                name,
                segments,
                target,
                max_parallelism,
                &mut counts,
            )?;
        }
        counts.segments = segments.len();
        Ok(())
    })();
    let closed = db.close();
    result?;
    closed?;
    Ok(counts)
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
    let group =
        keygroup::read_prefix(key, max_parallelism).map_err(|_| Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: "a keyed log entry without a key-group prefix".into(),
        })?;
    Ok(target.contains(group))
}

/// The sorted path of [`apply`]: metadata entries through the memtable (few), keyed entries
/// as one ingested SST per column family.
fn ingest_sorted(
    db: &Arc<Db>,
    dir: &Path,
    name: &str,
    segments: &[LogSegment],
    target: KeyGroupRange,
    max_parallelism: u32,
    counts: &mut ReplayCounts,
) -> Result<()> {
    // Per column family name: (key, value or `None` for a delete), in log order.
    type Changes<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;
    let mut keyed: Vec<(Cf, Changes<'_>)> = Vec::new();
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
                    if !in_target(key, name, target, max_parallelism)? {
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
                    keyed[at].1.push((key, value));
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
    for (i, (cf, mut changes)) in keyed.into_iter().enumerate() {
        // Stable: a key's entries stay in log order, and the last one wins.
        changes.sort_by(|a, b| a.0.cmp(b.0));
        let file = scratch.path().join(format!("replay-{i}.sst"));
        let written = db.write_sst(&file, |sink| {
            for (j, (key, value)) in changes.iter().enumerate() {
                if changes.get(j + 1).is_some_and(|next| next.0 == *key) {
                    continue; // a later entry of the same key follows
                }
                match value {
                    Some(v) => sink.put(key, v)?,
                    None => sink.delete(key)?,
                }
            }
            Ok(())
        })?;
        if written.is_some() {
            cf.ingest(&[file])?;
        }
    }
    Ok(())
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
