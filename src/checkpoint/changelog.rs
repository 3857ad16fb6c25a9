//! Changelog mode ([`ChangelogOptions`]): a checkpoint uploads the changes made since the
//! last one instead of the SSTs RocksDB rewrote meanwhile, and the SSTs are *materialized*
//! (an ordinary checkpoint of the files) only now and then.
//!
//! A checkpoint in changelog mode is one of two kinds:
//!
//! - a **materialization**: the files of a RocksDB checkpoint, as without changelog mode, cut
//!   at log sequence number `S` (every change numbered below `S` is in them); its manifest's
//!   `changelog` names itself and `S`, with no segments;
//! - a **log checkpoint**: the shared files of the materialization the last completed
//!   checkpoint rests on (at the sync phase, or a newer one that completed before the
//!   upload, `rebase`; referenced, never uploaded again), copies of its private files
//!   (MANIFEST, CURRENT, OPTIONS: small, and a checkpoint's private objects are deleted with
//!   its directory), and the log segments from `S` to now, of which only those the last
//!   completed checkpoint lacks are uploaded.
//!
//! This module owns the backend's side of it: the local segment files (cut in every sync
//! phase, written by the first async phase that needs them, kept until a completed
//! materialization covers them, so a failed attempt loses no change), the private files of
//! recent materializations, the choice between the two kinds, and the log checkpoint's
//! upload. Restore replays the segments (`crate::restore`);
//! docs/changelog-format.md has the segment format, docs/checkpoint-format.md the layout.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sst_format::{Changelog, CheckpointManifest, LogSegmentBuilder, LogSegmentFile, LogTable};

use super::layout;
use super::registry::Checkpointer;
use crate::change_log::LogCut;
use crate::error::{Error, Result};

/// Changelog-mode settings (part of [`super::CheckpointOptions`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChangelogOptions {
    /// Changelog mode on. Default false. A compaction's drops are not logged, so in this mode
    /// lists keep the entries their heads made dead until a read removes them; a TTL state's
    /// cleared row is logged whole, so an expired entry the compaction filter dropped does not
    /// come back from the materialization after a restore.
    pub enabled: bool,
    /// Materialize when this long has passed since the last materialization began
    /// (milliseconds, the checkpoint clock). Default 600,000 (10 minutes).
    pub materialize_interval_ms: u64,
    /// Materialize when the log since the materialization the last completed checkpoint
    /// rests on is larger than this percentage of that materialization's files (and at least
    /// `materialize_min_log_bytes`): it bounds what a restore replays and what storage holds
    /// besides the state. Default 100.
    pub materialize_log_percent: u32,
    /// The log size below which the percentage rule does not materialize. Default 4 MiB.
    pub materialize_min_log_bytes: u64,
    /// Bytes of changes held in memory between two checkpoints. A backend that writes more
    /// stops recording until the next checkpoint, which then materializes. Default 64 MiB.
    pub max_log_buffer_bytes: usize,
    /// zstd-compress log segments. Default true.
    pub compress: bool,
    /// A restore replays the log in batches of consecutive segments holding at most this
    /// many stored bytes (at least one segment each, so 0 means one segment per batch): each
    /// batch is downloaded, sorted and written into SST files on disk before the next is
    /// downloaded (all batches are ingested in order once the materialization is there), so
    /// the memory a restore holds for the log stays near twice this (segments and their
    /// sorted order) however long the log is. Smaller batches cost restore time: each is one
    /// more set of files ingested into level 0, and compactions start while later batches
    /// replay (a 54 MB log in 7 batches of
    /// 8 MiB restored in 763–989 ms against 252–321 ms in one batch: `rockstate-bench
    /// checkpoint --keys 1000000 --value-bytes 100 --rounds 50 --mode changelog --changelog
    /// '{"replay_batch_bytes":8388608}'`). Read by the restoring backend. Default 256 MiB.
    pub replay_batch_bytes: u64,
    /// Log tables (`sst_format::LogTable`): once the segments after the log's last table hold
    /// this many stored bytes, the log checkpoint that sees it also uploads their changes
    /// sorted into one SST per column family (a level-1 table), which a restore ingests
    /// instead of replaying those segments. 0: no tables (a restore replays the whole log).
    /// Default 512 KiB: a checkpoint whose change compresses to that much tables it at once,
    /// smaller ones gather that much first (each table is one more object per column family).
    pub table_bytes: u64,
    /// Log tables: this many consecutive tables of one level are merged into one table of
    /// the next level (built from their segments again), as far as
    /// `table_upload_percent` allows, so a restore ingests few tables. At least 2. Default 4.
    pub table_fanout: u32,
    /// Log tables: the merges a log checkpoint makes upload at most this percentage of the
    /// bytes of the segments it uploads itself (or `table_bytes`, if more), so a merge never
    /// makes one checkpoint's upload many times its change. Default 500.
    pub table_upload_percent: u32,
}

impl Default for ChangelogOptions {
    fn default() -> Self {
        ChangelogOptions {
            enabled: false,
            materialize_interval_ms: 600_000,
            materialize_log_percent: 100,
            materialize_min_log_bytes: 4 << 20,
            max_log_buffer_bytes: 64 << 20,
            compress: true,
            replay_batch_bytes: 256 << 20,
            table_bytes: 512 << 10,
            table_fanout: 4,
            table_upload_percent: 500,
        }
    }
}

impl ChangelogOptions {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if self.max_log_buffer_bytes < 4096 {
            return Err(Error::InvalidOption {
                name: "changelog.max_log_buffer_bytes",
                detail: format!("{} is below 4096", self.max_log_buffer_bytes),
            });
        }
        if self.table_fanout < 2 {
            return Err(Error::InvalidOption {
                name: "changelog.table_fanout",
                detail: format!("{} is below 2", self.table_fanout),
            });
        }
        Ok(())
    }

    /// Changelog mode on, with the settings `json` gives (an object of this type's fields;
    /// those it omits keep their defaults, and `enabled` is true either way), checked: what
    /// command lines take as `--changelog`. A malformed object is
    /// [`Error::InvalidOption`].
    pub fn enabled_from_json(json: &str) -> Result<Self> {
        let given: ChangelogOptions =
            serde_json::from_str(json).map_err(|e| Error::InvalidOption {
                name: "changelog",
                detail: e.to_string(),
            })?;
        let options = ChangelogOptions {
            enabled: true,
            ..given
        };
        options.validate()?;
        Ok(options)
    }
}

/// A local segment file, removed from disk when its last holder lets go of it. The log book
/// holds it until a completed checkpoint covers it, and every log checkpoint whose plan lists
/// it holds it until that checkpoint's upload ends: a checkpoint completing while a later one
/// (planned on an older base) is still uploading cannot take the file from under it.
///
/// A sync phase only cuts the log: the segment is encoded (and compressed) and written by the
/// first async phase that needs its bytes ([`SegmentFile::written`]), so the sync phase, which
/// holds processing up, does not grow with the change since the last checkpoint.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    path: PathBuf,
    state: parking_lot::Mutex<SegmentState>,
    /// At least the written file's size (`LogSegmentBuilder::encoded_len_bound`).
    bound_bytes: u64,
    /// The written file's size; 0 until it is written. Read without the lock, so a sync
    /// phase planning over a segment never waits for another thread writing it.
    stored_bytes: AtomicU64,
}

/// What a [`SegmentFile`] holds so far.
#[derive(Debug)]
enum SegmentState {
    /// Cut in a sync phase, not written yet: the entries, numbered from `first_seq`, and the
    /// column families by slot.
    Cut {
        builder: LogSegmentBuilder,
        first_seq: u64,
        names: Vec<String>,
        compress: bool,
    },
    /// Written to `path`.
    Written(StoredSegment),
}

/// Size and CRC-32 of a segment file as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredSegment {
    pub(crate) size: u64,
    pub(crate) crc32: u32,
}

impl SegmentFile {
    /// The file's path (its bytes are there once [`SegmentFile::written`] returned).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Encodes the segment and writes it to its path unless that was done before; its size
    /// and CRC-32. A failed write leaves no file and the segment still cut, so a later call
    /// tries again.
    pub(crate) fn written(&self) -> Result<StoredSegment> {
        let mut state = self.state.lock();
        let bytes = match &*state {
            SegmentState::Written(stored) => return Ok(*stored),
            SegmentState::Cut {
                builder,
                first_seq,
                names,
                compress,
            } => builder
                .finish(*first_seq, names, *compress)
                .map_err(Error::format)?,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        if let Err(e) = fs::write(&self.path, &bytes) {
            // A part written (a full disk) is no segment: nothing would ever delete it.
            let _ = fs::remove_file(&self.path);
            return Err(Error::io(&self.path, e));
        }
        let stored = StoredSegment {
            size: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
        };
        *state = SegmentState::Written(stored);
        self.stored_bytes.store(stored.size, Ordering::Relaxed);
        Ok(stored)
    }

    /// The written file's size, if it is written.
    fn stored_bytes(&self) -> Option<u64> {
        match self.stored_bytes.load(Ordering::Relaxed) {
            0 => None,
            size => Some(size),
        }
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        if matches!(self.state.get_mut(), SegmentState::Cut { .. }) {
            return; // never written
        }
        // Best effort: a file left behind is removed with the log directory when the next
        // backend on this staging root opens.
        let _ = fs::remove_file(&self.path);
    }
}

/// One segment cut by a sync phase, as a local file.
#[derive(Debug, Clone)]
pub(crate) struct LocalSegment {
    pub(crate) first_seq: u64,
    pub(crate) end_seq: u64,
    /// The file. Its name holds `first_seq` and `end_seq`, which no other segment of this
    /// backend shares (cuts follow one another), so dropping it removes no other segment.
    pub(crate) file: Arc<SegmentFile>,
    pub(crate) key_groups: Option<(u16, u16)>,
}

/// The private files of one uploaded materialization, kept in memory: a log checkpoint
/// stores copies of them.
#[derive(Debug)]
pub(crate) struct Materialized {
    /// `(local name, bytes)`.
    pub(crate) private: Vec<(String, Vec<u8>)>,
}

/// A backend's changelog bookkeeping (inside its [`Checkpointer`]).
#[derive(Debug, Default)]
pub(crate) struct LogBook {
    /// Segments cut and not yet covered by a completed materialization, by first sequence
    /// number. A gap between two (changes the log lost) means only a materialization after
    /// it can be built on.
    pub(crate) segments: BTreeMap<u64, LocalSegment>,
    /// Private files of uploaded materializations, by checkpoint id.
    pub(crate) materialized: BTreeMap<u64, Arc<Materialized>>,
    /// Log checkpoints planned and neither completed, subsumed nor failed, by checkpoint id:
    /// the materialization each rests on and its private files. When checkpoints overlap, a
    /// log checkpoint planned on an older materialization can complete after a newer one
    /// did (which drops the older one's files from `materialized`); it then becomes the base,
    /// and the next log checkpoint must still find its materialization's files.
    pub(crate) resting: BTreeMap<u64, (u64, Arc<Materialized>)>,
    /// When the last materialization began (clock ms).
    pub(crate) last_materialization_ms: Option<u64>,
    /// A materialization whose upload has not ended yet.
    pub(crate) materializing: Option<u64>,
    /// The sequence number the database's log starts at (a restored backend continues its
    /// checkpoint's log).
    pub(crate) first_seq: u64,
}

/// A plain restore of changelog-mode checkpoint whose log part is `c` and private files
/// `private`: the restored backend's log checkpoints rest on the same materialization and
/// continue its log after the restored segments. The materialization interval counts from
/// `now_ms`, the restore.
pub(crate) fn resume(
    book: &mut LogBook,
    c: &Changelog,
    private: Vec<(String, Vec<u8>)>,
    now_ms: u64,
) {
    let end = c.segments.iter().try_fold(c.materialized_seq, |at, s| {
        (s.first_seq == at)
            .then(|| at.checked_add(s.entries))
            .flatten()
    });
    if let Some(end) = end {
        book.materialized
            .insert(c.materialization_id, Arc::new(Materialized { private }));
        book.first_seq = end;
        book.last_materialization_ms = Some(now_ms);
    }
}

/// One segment of a log checkpoint's plan.
#[derive(Debug, Clone)]
pub(crate) enum Planned {
    /// Named by the last completed checkpoint: referenced as it is.
    Stored(LogSegmentFile),
    /// Cut by this backend: referenced if the base names the same one, else uploaded.
    Local(LocalSegment),
}

/// What a log checkpoint uploads and references, decided in its sync phase.
#[derive(Debug)]
pub(crate) struct LogPlan {
    /// The materialization's private files.
    pub(crate) materialized: Arc<Materialized>,
    /// The checkpoint id of the materialization the log rests on.
    pub(crate) materialization_id: u64,
    /// The sequence number the materialization holds every change below.
    pub(crate) materialized_seq: u64,
    /// Every segment from `materialized_seq` on, in log order (those not yet uploaded as
    /// local files).
    pub(crate) segments: Vec<Planned>,
    /// The table options log tables are written with (the database's).
    pub(crate) table_writer: TableWriter,
}

/// What log tables are written with: the database's table options on its memory budget.
#[derive(Debug, Clone)]
pub(crate) struct TableWriter {
    pub(crate) options: crate::options::DbOptions,
    pub(crate) budget: crate::db::MemoryBudget,
}

/// The directory of a backend's local segment files.
fn segment_dir(cp: &Checkpointer) -> PathBuf {
    layout::log_dir(&cp.staging_root, &cp.backend_id)
}

/// Sync phase: keeps `cut` (if it holds entries) as a local segment, written later by the
/// async phase that first needs it ([`SegmentFile::written`]); `names` are the database's
/// column families by slot.
pub(crate) fn keep_cut(cp: &Checkpointer, cut: LogCut, names: Vec<String>) {
    if cut.builder.is_empty() {
        return;
    }
    let path = segment_dir(cp).join(format!("{}-{}.rscl", cut.first_seq, cut.end_seq));
    cp.log.lock().segments.insert(
        cut.first_seq,
        LocalSegment {
            first_seq: cut.first_seq,
            end_seq: cut.end_seq,
            file: Arc::new(SegmentFile {
                path,
                bound_bytes: cut
                    .builder
                    .encoded_len_bound(&names, cp.options.changelog.compress),
                stored_bytes: AtomicU64::new(0),
                state: parking_lot::Mutex::new(SegmentState::Cut {
                    builder: cut.builder,
                    first_seq: cut.first_seq,
                    names,
                    compress: cp.options.changelog.compress,
                }),
            }),
            key_groups: cut.key_groups,
        },
    );
}

/// A local segment could not be written: the log book forgets it, so the log has a gap
/// there and the next checkpoint materializes (which holds its changes). A log checkpoint
/// already planned over it writes it itself or fails.
pub(crate) fn segment_lost(cp: &Checkpointer, first_seq: u64) {
    cp.log.lock().segments.remove(&first_seq);
}

/// Sync phase: a log checkpoint on top of `base` if one can be built and no materialization
/// is due, `None` for a materialization. `end_seq` is where the log now ends.
pub(crate) fn plan(
    cp: &Checkpointer,
    id: u64,
    base: Option<&CheckpointManifest>,
    end_seq: u64,
    complete: bool,
    now_ms: u64,
    table_writer: TableWriter,
) -> Option<LogPlan> {
    let opts = &cp.options.changelog;
    let base = base?;
    let c = base.changelog.as_ref()?;
    let mut book = cp.log.lock();
    let materialized = Arc::clone(book.materialized.get(&c.materialization_id)?);
    if !complete {
        return None;
    }
    // The segments from the materialization on, contiguous up to now: the base's, then the
    // ones cut since.
    let mut segments = Vec::new();
    let mut at = c.materialized_seq;
    // The log's stored bytes: those known, and the segments not written yet.
    let mut log_bytes = 0u64;
    let mut unwritten = Vec::new();
    for s in &c.segments {
        if s.first_seq != at {
            return None;
        }
        at = at.checked_add(s.entries)?;
        log_bytes += s.size;
        segments.push(Planned::Stored(s.clone()));
    }
    for s in book.segments.range(at..).map(|(_, s)| s) {
        if s.first_seq != at {
            return None; // a gap: changes the log lost
        }
        at = s.end_seq;
        match s.file.stored_bytes() {
            Some(size) => log_bytes += size,
            None => unwritten.push(Arc::clone(&s.file)),
        }
        segments.push(Planned::Local(s.clone()));
    }
    if at != end_seq {
        return None;
    }
    let in_flight = book.materializing.is_some();
    let by_time = book
        .last_materialization_ms
        .is_none_or(|t| now_ms.saturating_sub(t) >= opts.materialize_interval_ms);
    if !in_flight {
        let state_bytes: u64 = base.shared_files.iter().map(|f| f.size).sum();
        let due = |log_bytes: u64| {
            log_bytes >= opts.materialize_min_log_bytes
                && u128::from(log_bytes) * 100
                    >= u128::from(state_bytes) * u128::from(opts.materialize_log_percent)
        };
        if by_time || due(log_bytes) {
            return None;
        }
        // Segments not written yet count their size bound; only where that decides does
        // this sync phase write them to know their sizes (near the threshold, about once
        // a materialization cycle). One it cannot write counts its bound.
        let bound: u64 = unwritten.iter().map(|f| f.bound_bytes).sum();
        if due(log_bytes + bound) {
            let exact: u64 = unwritten
                .iter()
                .map(|f| f.written().map_or(f.bound_bytes, |w| w.size))
                .sum();
            if due(log_bytes + exact) {
                return None;
            }
        }
    }
    book.resting
        .insert(id, (c.materialization_id, Arc::clone(&materialized)));
    Some(LogPlan {
        materialized,
        materialization_id: c.materialization_id,
        materialized_seq: c.materialized_seq,
        segments,
        table_writer,
    })
}

/// A materialization of checkpoint `id` at `seq` begins (its sync phase is done).
pub(crate) fn materialization_started(cp: &Checkpointer, id: u64, now_ms: u64) {
    let mut book = cp.log.lock();
    book.materializing = Some(id);
    book.last_materialization_ms = Some(now_ms);
}

/// The upload of materialization `id` ended: with `private` its private files (it
/// succeeded), without them it failed.
pub(crate) fn materialization_ended(cp: &Checkpointer, id: u64, private: Option<&Path>) {
    let mut book = cp.log.lock();
    if book.materializing == Some(id) {
        book.materializing = None;
    }
    let Some(dir) = private else {
        return;
    };
    let mut files = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // The private files are what the upload took besides SSTs (it skips an empty WAL).
        let empty_wal = name.ends_with(".log") && e.metadata().is_ok_and(|m| m.len() == 0);
        if name.ends_with(".sst") || empty_wal {
            continue;
        }
        match fs::read(e.path()) {
            Ok(bytes) => files.push((name, bytes)),
            // Without its private files no log checkpoint rests on it: the next
            // checkpoint materializes again.
            Err(_) => return,
        }
    }
    files.sort();
    book.materialized
        .insert(id, Arc::new(Materialized { private: files }));
}

impl Planned {
    /// The segment's first sequence number.
    fn first_seq(&self) -> u64 {
        match self {
            Planned::Stored(f) => f.first_seq,
            Planned::Local(s) => s.first_seq,
        }
    }

    /// The sequence number after its last entry.
    fn end_seq(&self) -> u64 {
        match self {
            Planned::Stored(f) => f.first_seq.saturating_add(f.entries),
            Planned::Local(s) => s.end_seq,
        }
    }
}

/// Async phase of log checkpoint `id`, planned on an older base: when `current` (the last
/// completed checkpoint now) rests on a newer materialization than `plan`, the plan rebased
/// onto it (that materialization's files and private files, and only the plan's segments
/// from its sequence number on); `None` keeps the plan. Without this, a log checkpoint
/// completing after a newer materialization would make the next checkpoints rest on the
/// older one again, and the job would keep two chains of log checkpoints, each
/// materializing on its own. The caller protects the newer materialization's files for
/// its checkpoint and checks that `current` is still the last completed checkpoint (so they
/// were kept when the protection began) before it uses the plan and records it
/// ([`rest_on`]).
pub(crate) fn rebase(
    cp: &Checkpointer,
    plan: &LogPlan,
    current: &CheckpointManifest,
) -> Option<LogPlan> {
    let c = current.changelog.as_ref()?;
    if c.materialization_id <= plan.materialization_id {
        return None;
    }
    let from = c.materialized_seq;
    let plan_end = plan
        .segments
        .last()
        .map_or(plan.materialized_seq, Planned::end_seq);
    let segments: Vec<Planned> = plan
        .segments
        .iter()
        .filter(|s| s.first_seq() >= from)
        .cloned()
        .collect();
    // The plan's log must reach the materialization and have a segment boundary there.
    let contiguous = match segments.first() {
        Some(s) => s.first_seq() == from,
        None => plan_end == from,
    };
    if !contiguous {
        return None;
    }
    let materialized = Arc::clone(cp.log.lock().materialized.get(&c.materialization_id)?);
    Some(LogPlan {
        materialized,
        materialization_id: c.materialization_id,
        materialized_seq: from,
        segments,
        table_writer: plan.table_writer.clone(),
    })
}

/// Log checkpoint `id` rests on `plan`'s materialization (after [`rebase`]).
pub(crate) fn rest_on(cp: &Checkpointer, id: u64, plan: &LogPlan) {
    cp.log.lock().resting.insert(
        id,
        (plan.materialization_id, Arc::clone(&plan.materialized)),
    );
}

/// Log checkpoint `id`'s upload failed or was dropped: it will not complete.
pub(crate) fn log_ended(cp: &Checkpointer, id: u64) {
    cp.log.lock().resting.remove(&id);
}

/// Checkpoint `base` completed: segments it no longer needs (covered by its
/// materialization) and the private files of older materializations go.
pub(crate) fn completed(cp: &Checkpointer, base: &CheckpointManifest) {
    let id = base.checkpoint_id;
    let mut book = cp.log.lock();
    // The log checkpoints up to this one can never complete now.
    let done = book.resting.remove(&id);
    book.resting.retain(|k, _| *k > id);
    let Some(c) = &base.changelog else {
        return;
    };
    // A log checkpoint completing after a newer materialization did brings its own
    // materialization back: the next log checkpoint rests on it.
    if let Some((m, files)) = done {
        book.materialized.entry(m).or_insert(files);
    }
    // Covered by the materialization, or stored and named by this completed checkpoint (later
    // log checkpoints reference those as they are).
    let covered = c.materialized_seq + c.segments.iter().map(|s| s.entries).sum::<u64>();
    let gone: Vec<u64> = book
        .segments
        .range(..covered)
        .filter(|(_, s)| s.end_seq <= covered)
        .map(|(k, _)| *k)
        .collect();
    for k in gone {
        // The file goes once no upload in flight lists it either.
        book.segments.remove(&k);
    }
    book.materialized
        .retain(|id, _| *id >= c.materialization_id);
}

/// The manifest's log part for a log checkpoint: `plan`'s segments, each reused from `base`
/// when it holds the same one, otherwise written locally if it is not yet
/// ([`SegmentFile::written`]; one that cannot be is forgotten, [`segment_lost`]) and uploaded
/// by `upload` (which returns its object's name, size and CRC-32).
pub(crate) fn log_part(
    cp: &Checkpointer,
    plan: &LogPlan,
    base: &CheckpointManifest,
    mut upload: impl FnMut(&LocalSegment, StoredSegment) -> Result<(String, u64, u32)>,
) -> Result<(Changelog, u64, usize)> {
    let reusable: BTreeMap<u64, &LogSegmentFile> = base
        .changelog
        .iter()
        .flat_map(|c| c.segments.iter())
        .map(|s| (s.first_seq, s))
        .collect();
    let mut segments = Vec::new();
    let mut uploaded = 0u64;
    let mut reused = 0usize;
    for planned in &plan.segments {
        let s = match planned {
            Planned::Stored(f) => {
                reused += 1;
                segments.push(f.clone());
                continue;
            }
            Planned::Local(s) => s,
        };
        let stored = s
            .file
            .written()
            .inspect_err(|_| segment_lost(cp, s.first_seq))?;
        let entries = s.end_seq - s.first_seq;
        match reusable.get(&s.first_seq) {
            Some(r) if r.size == stored.size && r.crc32 == stored.crc32 && r.entries == entries => {
                reused += 1;
                segments.push((*r).clone());
            }
            _ => {
                let (remote_name, size, crc32) = upload(s, stored)?;
                uploaded += size;
                segments.push(LogSegmentFile {
                    remote_name,
                    size,
                    crc32,
                    first_seq: s.first_seq,
                    entries,
                    key_groups: s.key_groups,
                });
            }
        }
    }
    Ok((
        Changelog {
            materialization_id: plan.materialization_id,
            materialized_seq: plan.materialized_seq,
            segments,
            tables: Vec::new(),
        },
        uploaded,
        reused,
    ))
}

/// The local file of each segment of `plan` this backend cut and has written, by first
/// sequence number.
pub(crate) fn local_files(plan: &LogPlan) -> HashMap<u64, (PathBuf, StoredSegment)> {
    plan.segments
        .iter()
        .filter_map(|p| match p {
            Planned::Local(s) => {
                let stored = s.file.written().ok()?;
                Some((s.first_seq, (s.file.path().to_path_buf(), stored)))
            }
            Planned::Stored(_) => None,
        })
        .collect()
}

/// One log table a log checkpoint names (see [`table_slots`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TableSlot {
    /// Named by the base: referenced as it is.
    Keep(LogTable),
    /// To be built from the log's segments in `segments` and uploaded.
    Build {
        first_seq: u64,
        end_seq: u64,
        level: u8,
        segments: Range<usize>,
    },
}

impl TableSlot {
    fn first_seq(&self) -> u64 {
        match self {
            TableSlot::Keep(t) => t.first_seq,
            TableSlot::Build { first_seq, .. } => *first_seq,
        }
    }

    fn end_seq(&self) -> u64 {
        match self {
            TableSlot::Keep(t) => t.end_seq,
            TableSlot::Build { end_seq, .. } => *end_seq,
        }
    }

    fn level(&self) -> u8 {
        match self {
            TableSlot::Keep(t) => t.level,
            TableSlot::Build { level, .. } => *level,
        }
    }
}

/// The tables of a log checkpoint whose log (segments, from its materialization on) is
/// `log` and which uploaded `own_bytes` of segments itself, on top of `base`: the base's
/// tables while they follow one another from the materialization on and end at segment
/// boundaries of `log`; then, if the segments after them hold at least
/// `options.table_bytes` stored bytes, a new level-1 table over all of them; then, while
/// the last `options.table_fanout` tables share a level and the tables to build stay within
/// the upload budget (`table_upload_percent` of `own_bytes`, at least `table_bytes`; a
/// table counts the stored bytes of its segments), one table of the next level in their
/// place. Only the tables of the result that the base lacks are built, so a table a merge
/// replaces in the same checkpoint is never built.
pub(crate) fn table_slots(
    log: &Changelog,
    base: &CheckpointManifest,
    options: &ChangelogOptions,
    own_bytes: u64,
) -> Vec<TableSlot> {
    if options.table_bytes == 0 {
        return Vec::new();
    }
    // The index of the first segment after each segment boundary.
    let mut after: HashMap<u64, usize> = HashMap::new();
    after.insert(log.materialized_seq, 0);
    for (i, s) in log.segments.iter().enumerate() {
        after.insert(s.first_seq.saturating_add(s.entries), i + 1);
    }
    let mut chain: Vec<TableSlot> = Vec::new();
    let mut at = log.materialized_seq;
    let same_log = |c: &&Changelog| {
        (c.materialization_id, c.materialized_seq) == (log.materialization_id, log.materialized_seq)
    };
    for t in base
        .changelog
        .iter()
        .filter(same_log)
        .flat_map(|c| &c.tables)
    {
        if t.first_seq != at || t.end_seq <= at || !after.contains_key(&t.end_seq) {
            break;
        }
        at = t.end_seq;
        chain.push(TableSlot::Keep(t.clone()));
    }
    let from = after.get(&at).copied().unwrap_or(log.segments.len());
    let untabled: u64 = log.segments[from..].iter().map(|s| s.size).sum();
    if from < log.segments.len() && untabled >= options.table_bytes {
        let last = &log.segments[log.segments.len() - 1];
        chain.push(TableSlot::Build {
            first_seq: at,
            end_seq: last.first_seq.saturating_add(last.entries),
            level: 1,
            segments: from..log.segments.len(),
        });
    }
    let fanout = options.table_fanout.max(2) as usize;
    let budget = (u128::from(own_bytes) * u128::from(options.table_upload_percent) / 100)
        .max(u128::from(options.table_bytes));
    // What the built tables of a chain upload, counted as their segments' stored bytes.
    let cost = |chain: &[TableSlot]| -> u128 {
        chain
            .iter()
            .filter_map(|t| match t {
                TableSlot::Build { segments, .. } => Some(segments.clone()),
                TableSlot::Keep(_) => None,
            })
            .flat_map(|r| log.segments[r].iter().map(|s| u128::from(s.size)))
            .sum()
    };
    while chain.len() >= fanout {
        let tail = &chain[chain.len() - fanout..];
        let level = tail[0].level();
        if level == u8::MAX || tail.iter().any(|t| t.level() != level) {
            break;
        }
        let (first_seq, end_seq) = (tail[0].first_seq(), tail[fanout - 1].end_seq());
        let (Some(&start), Some(&end)) = (after.get(&first_seq), after.get(&end_seq)) else {
            break;
        };
        let mut merged = chain[..chain.len() - fanout].to_vec();
        merged.push(TableSlot::Build {
            first_seq,
            end_seq,
            level: level + 1,
            segments: start..end,
        });
        if cost(&merged) > budget {
            break;
        }
        chain = merged;
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log from sequence number 100 of segments of the given sizes, 10 entries each.
    fn log_of(sizes: &[u64]) -> Changelog {
        Changelog {
            materialization_id: 1,
            materialized_seq: 100,
            segments: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| LogSegmentFile {
                    remote_name: format!("shared/{i}.log"),
                    size,
                    crc32: 0,
                    first_seq: 100 + 10 * i as u64,
                    entries: 10,
                    key_groups: None,
                })
                .collect(),
            tables: Vec::new(),
        }
    }

    fn base_with(tables: Vec<LogTable>) -> CheckpointManifest {
        let mut log = log_of(&[]);
        log.tables = tables;
        CheckpointManifest {
            checkpoint_id: 1,
            backend_id: "b".into(),
            key_group_start: 0,
            key_group_end: 127,
            max_parallelism: 128,
            states: Vec::new(),
            shared_files: Vec::new(),
            private_files: Vec::new(),
            operator_state: Vec::new(),
            created_at_ms: 0,
            changelog: Some(log),
        }
    }

    fn table(first_seq: u64, end_seq: u64, level: u8) -> LogTable {
        LogTable {
            first_seq,
            end_seq,
            level,
            files: Vec::new(),
        }
    }

    fn options(table_bytes: u64, table_fanout: u32) -> ChangelogOptions {
        ChangelogOptions {
            table_bytes,
            table_fanout,
            ..ChangelogOptions::default()
        }
    }

    /// [`table_slots`] with a budget no merge here exceeds.
    fn slots_of(
        log: &Changelog,
        base: &CheckpointManifest,
        o: &ChangelogOptions,
    ) -> Vec<TableSlot> {
        table_slots(log, base, o, u64::MAX / 1000)
    }

    /// `(first_seq, end_seq, level, built)` of each slot.
    fn shape(slots: &[TableSlot]) -> Vec<(u64, u64, u8, bool)> {
        slots
            .iter()
            .map(|s| {
                let built = matches!(s, TableSlot::Build { .. });
                (s.first_seq(), s.end_seq(), s.level(), built)
            })
            .collect()
    }

    #[test]
    fn a_table_waits_for_its_bytes_then_covers_every_untabled_segment() {
        let log = log_of(&[3, 3, 3]);
        let none = base_with(Vec::new());
        assert!(slots_of(&log, &none, &options(10, 4)).is_empty());
        assert_eq!(
            shape(&slots_of(&log, &none, &options(9, 4))),
            [(100, 130, 1, true)]
        );
        match &slots_of(&log, &none, &options(9, 4))[0] {
            TableSlot::Build { segments, .. } => assert_eq!(*segments, 0..3),
            other => panic!("{other:?}"),
        }
        assert!(slots_of(&log, &none, &options(0, 4)).is_empty());
    }

    #[test]
    fn the_bases_tables_are_kept_and_merged_by_level() {
        let log = log_of(&[5; 8]);
        // Three level-1 tables and one more due: the four merge into one level-2 table.
        let base = base_with(vec![
            table(100, 110, 1),
            table(110, 120, 1),
            table(120, 130, 1),
        ]);
        let slots = slots_of(&log, &base, &options(5, 4));
        assert_eq!(shape(&slots), [(100, 180, 2, true)]);
        match &slots[0] {
            TableSlot::Build { segments, .. } => assert_eq!(*segments, 0..8),
            other => panic!("{other:?}"),
        }
        // Below the bytes: the base's tables kept as they are.
        let slots = slots_of(&log, &base, &options(1000, 4));
        assert_eq!(
            shape(&slots),
            [
                (100, 110, 1, false),
                (110, 120, 1, false),
                (120, 130, 1, false)
            ]
        );
        // A level-2 table stays beside new level-1 ones.
        let base = base_with(vec![table(100, 140, 2), table(140, 150, 1)]);
        assert_eq!(
            shape(&slots_of(&log, &base, &options(5, 4))),
            [
                (100, 140, 2, false),
                (140, 150, 1, false),
                (150, 180, 1, true)
            ]
        );
        // Merges cascade: fan-out 2, tables of levels 2 and 1 and a new level 1.
        let base = base_with(vec![table(100, 140, 2), table(140, 160, 1)]);
        assert_eq!(
            shape(&slots_of(&log, &base, &options(5, 2))),
            [(100, 180, 3, true)]
        );
    }

    #[test]
    fn merges_stay_within_the_upload_budget() {
        let log = log_of(&[5; 8]);
        let base = base_with(vec![
            table(100, 110, 1),
            table(110, 120, 1),
            table(120, 130, 1),
        ]);
        // The merge of all eight segments costs 40: within 500 % of 8 bytes, not of 7.
        assert_eq!(
            shape(&table_slots(&log, &base, &options(5, 4), 8)),
            [(100, 180, 2, true)]
        );
        assert_eq!(
            shape(&table_slots(&log, &base, &options(5, 4), 7)),
            [
                (100, 110, 1, false),
                (110, 120, 1, false),
                (120, 130, 1, false),
                (130, 180, 1, true)
            ]
        );
        // `table_bytes` is the least budget.
        assert_eq!(
            shape(&table_slots(&log, &base, &options(40, 4), 0)),
            [
                (100, 110, 1, false),
                (110, 120, 1, false),
                (120, 130, 1, false)
            ]
        );
        // A checkpoint that uploaded nothing itself still builds its level-1 table, but
        // merges only within `table_bytes`.
        let four = log_of(&[5; 4]);
        assert_eq!(
            shape(&table_slots(&four, &base, &options(5, 4), 0)),
            [
                (100, 110, 1, false),
                (110, 120, 1, false),
                (120, 130, 1, false),
                (130, 140, 1, true)
            ]
        );
        assert_eq!(
            shape(&table_slots(&four, &base, &options(5, 4), 4)),
            [(100, 140, 2, true)]
        );
    }

    #[test]
    fn tables_that_do_not_fit_the_log_are_dropped_from_the_first_misfit_on() {
        let log = log_of(&[5; 4]);
        // The second table ends inside a segment: it and everything after it go, and the
        // segments after the first table get a table of their own.
        let base = base_with(vec![
            table(100, 110, 1),
            table(110, 125, 1),
            table(125, 130, 1),
        ]);
        assert_eq!(
            shape(&slots_of(&log, &base, &options(5, 4))),
            [(100, 110, 1, false), (110, 140, 1, true)]
        );
        // Another materialization: none of the base's tables is kept.
        let mut other = base_with(vec![table(100, 110, 1)]);
        if let Some(c) = other.changelog.as_mut() {
            c.materialization_id = 2;
        }
        assert_eq!(
            shape(&slots_of(&log, &other, &options(5, 4))),
            [(100, 140, 1, true)]
        );
    }
}
