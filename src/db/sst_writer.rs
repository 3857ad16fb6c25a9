//! Writing SST files with a database's table options (savepoint restore, rescale rewrites),
//! for [`super::Cf::ingest`].

use std::path::Path;

use super::rocks_error;
use super::{options, Db, MemoryBudget};
use crate::error::Result;
use crate::options::DbOptions;

/// Receives the sorted entries of one SST file being written by [`Db::write_sst`].
pub(crate) struct SstSink<'a, 'w> {
    writer: &'a mut rocksdb::SstFileWriter<'w>,
    entries: u64,
    tombstones: u64,
}

impl SstSink<'_, '_> {
    /// Appends an entry; keys must be strictly increasing.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.writer.put(key, value).map_err(rocks_error)?;
        self.entries += 1;
        Ok(())
    }

    /// Appends a point tombstone for `key` (keys strictly increasing, puts and deletes
    /// together); once ingested it hides what the database held for `key` before.
    pub(crate) fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.writer.delete(key).map_err(rocks_error)?;
        self.tombstones += 1;
        Ok(())
    }

    /// Adds a range tombstone for `[from, to)`. Once ingested it deletes what the database
    /// held in that range before, but not the entries of this same file (RocksDB's
    /// `SstFileWriter::DeleteRange` contract: all get one sequence number, and a tombstone
    /// only covers older ones).
    pub(crate) fn delete_range(&mut self, from: &[u8], to: &[u8]) -> Result<()> {
        self.writer.delete_range(from, to).map_err(rocks_error)?;
        self.tombstones += 1;
        Ok(())
    }
}

impl Db {
    /// Writes an SST file at `path` with this database's table options, filled by `fill`.
    /// Returns the number of entries (puts) if a file was written; with neither entries nor
    /// tombstones, `None` and no file is left behind (RocksDB refuses to finish an empty SST).
    pub(crate) fn write_sst(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut SstSink<'_, '_>) -> Result<()>,
    ) -> Result<Option<u64>> {
        // One path, so exactly one sink.
        let written = self.write_ssts(&[path], |sinks| match sinks.first_mut() {
            Some(sink) => fill(sink),
            None => Ok(()),
        })?;
        Ok(written.into_iter().next().flatten())
    }

    /// Writes one SST file per path at once, filled by `fill` through one sink per path (in
    /// the same order); returns per path what [`Db::write_sst`] returns. Every writer is open
    /// until `fill` returns: one file descriptor each, and each holds its filter's key hashes
    /// (about 8 bytes per key) until it finishes.
    pub(crate) fn write_ssts(
        &self,
        paths: &[&Path],
        fill: impl FnOnce(&mut [SstSink<'_, '_>]) -> Result<()>,
    ) -> Result<Vec<Option<u64>>> {
        write_ssts(&self.options, &self.budget, paths, fill)
    }
}

/// [`Db::write_ssts`] without a database: SST files with the table options of `options` on
/// `budget`, written before the database they go into is open.
pub(crate) fn write_ssts(
    options: &DbOptions,
    budget: &MemoryBudget,
    paths: &[&Path],
    fill: impl FnOnce(&mut [SstSink<'_, '_>]) -> Result<()>,
) -> Result<Vec<Option<u64>>> {
    let opts = options::cf_options(options, budget)?;
    let mut writers = Vec::with_capacity(paths.len());
    for path in paths {
        let writer = rocksdb::SstFileWriter::create(&opts);
        writer.open(path).map_err(rocks_error)?;
        writers.push(writer);
    }
    let mut sinks: Vec<SstSink<'_, '_>> = writers
        .iter_mut()
        .map(|writer| SstSink {
            writer,
            entries: 0,
            tombstones: 0,
        })
        .collect();
    fill(&mut sinks)?;
    let counts: Vec<(u64, u64)> = sinks.iter().map(|s| (s.entries, s.tombstones)).collect();
    drop(sinks);
    let mut out = Vec::with_capacity(paths.len());
    for ((mut writer, path), (entries, tombstones)) in writers.into_iter().zip(paths).zip(counts) {
        if entries == 0 && tombstones == 0 {
            drop(writer);
            let _ = std::fs::remove_file(path);
            out.push(None);
        } else {
            writer.finish().map_err(rocks_error)?;
            out.push(Some(entries));
        }
    }
    Ok(out)
}
