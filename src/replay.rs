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
/// in `target`. The database is closed (its memtables flushed) before this returns.
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
        for seg in segments {
            apply_segment(&db, name, seg, target, max_parallelism, &mut counts)?;
            counts.segments += 1;
        }
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

fn apply_segment(
    db: &Arc<Db>,
    name: &str,
    seg: &LogSegment,
    target: KeyGroupRange,
    max_parallelism: u32,
    counts: &mut ReplayCounts,
) -> Result<()> {
    let corrupt = |detail: String| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail,
    };
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
            return Err(corrupt(format!(
                "log segment names column family `{cf}`, neither a state's nor the metadata's"
            )));
        });
    }
    for entry in seg.entries() {
        let entry = entry.map_err(|e| corrupt(format!("log segment: {e}")))?;
        // Indices were checked against the table when the segment was decoded.
        let Some(dest) = dests.get(entry.cf() as usize) else {
            return Err(corrupt("log entry names an unknown column family".into()));
        };
        let cf = match dest {
            Dest::Meta(cf) => cf,
            Dest::Keyed(cf) => {
                let key = match entry {
                    LogEntry::Put { key, .. } | LogEntry::Delete { key, .. } => key,
                    LogEntry::DeleteRange { start, .. } => start,
                };
                let group = keygroup::read_prefix(key, max_parallelism)
                    .map_err(|_| corrupt("a keyed log entry without a key-group prefix".into()))?;
                if !target.contains(group) {
                    counts.skipped += 1;
                    continue;
                }
                cf
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
