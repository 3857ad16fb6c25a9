//! Writing SST files with a database's table options (savepoint restore, rescale rewrites,
//! changelog replay), for [`super::Cf::ingest`], each file at the data block size its entries
//! call for ([`BlockSizing`]).

use std::path::Path;

use super::block_sizes::{entries_are_large, large_entry_block_size, SAMPLE_WRITES};
use super::rocks_error;
use super::{options, Db, MemoryBudget};
use crate::error::Result;
use crate::options::DbOptions;

/// How the data block size of one SST written by [`write_ssts`] is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockSizing {
    /// `DbOptions::block_size`, the size every column family starts with: metadata, list
    /// states (their runs keep it, [`super::block_sizes`]) and entries of unknown kind.
    Shared,
    /// From the file's first [`SAMPLE_WRITES`] puts, or fewer if they reach
    /// [`HELD_BYTES`] first (all of them if the file has fewer), by the rule a column
    /// family's block size follows ([`super::block_sizes::entries_are_large`]):
    /// `DbOptions::large_entry_block_size` where they average 512 bytes or more. An ingested
    /// file keeps its blocks until a compaction rewrites it, and files ingested into the bottom
    /// level often never are: a savepoint restore's file of 1 KiB values written at the
    /// shared 16 KiB would read 16 KiB per block-cache miss for as long as the job runs.
    FromEntries,
}

/// Bytes of key and value a sink holds at most (and the put that reaches them) before it
/// decides its block size: puts averaging 512 bytes (the large-entry threshold) decide after
/// 128 of them, and a savepoint restore's sinks (one per state and reader thread) hold little
/// each.
const HELD_BYTES: u64 = 64 << 10;

/// What a sink received before its file was opened, replayed into the file in order.
enum Held {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
}

/// Receives the sorted entries of one SST file being written by [`Db::write_sst`]. The file
/// is opened at its first entry (none is left behind without one), or, for a
/// [`BlockSizing::FromEntries`] file, once its first entries decide its block size: until
/// then they are held in memory (at most [`SAMPLE_WRITES`] puts, or [`HELD_BYTES`] and the
/// put that reaches them).
pub(crate) struct SstSink<'o, 'p> {
    path: &'p Path,
    /// The options of a file at the shared block size.
    shared: &'o rocksdb::Options,
    /// The options of a file of large entries while its block size is undecided: `None`
    /// once decided, for a [`BlockSizing::Shared`] file, and where large entries keep the
    /// shared size (`large_entry_block_size` 0 or equal to `block_size`).
    large: Option<&'o rocksdb::Options>,
    writer: Option<rocksdb::SstFileWriter<'o>>,
    /// Entries held while the block size is undecided.
    held: Vec<Held>,
    /// Puts held, and their key and value bytes.
    held_puts: u64,
    held_bytes: u64,
    entries: u64,
    tombstones: u64,
}

impl<'o> SstSink<'o, '_> {
    /// Appends an entry; keys must be strictly increasing.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.entries += 1;
        if let Some(writer) = self.writer()? {
            return writer.put(key, value).map_err(rocks_error);
        }
        self.held_puts += 1;
        self.held_bytes = self
            .held_bytes
            .saturating_add((key.len() + value.len()) as u64);
        self.held.push(Held::Put(key.to_vec(), value.to_vec()));
        if self.held_puts >= SAMPLE_WRITES || self.held_bytes >= HELD_BYTES {
            self.open_held()?;
        }
        Ok(())
    }

    /// Appends a point tombstone for `key` (keys strictly increasing, puts and deletes
    /// together); once ingested it hides what the database held for `key` before.
    pub(crate) fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.tombstones += 1;
        match self.writer()? {
            Some(writer) => writer.delete(key).map_err(rocks_error),
            None => {
                self.held.push(Held::Delete(key.to_vec()));
                Ok(())
            }
        }
    }

    /// Adds a range tombstone for `[from, to)`. Once ingested it deletes what the database
    /// held in that range before, but not the entries of this same file (RocksDB's
    /// `SstFileWriter::DeleteRange` contract: all get one sequence number, and a tombstone
    /// only covers older ones).
    pub(crate) fn delete_range(&mut self, from: &[u8], to: &[u8]) -> Result<()> {
        self.tombstones += 1;
        match self.writer()? {
            Some(writer) => writer.delete_range(from, to).map_err(rocks_error),
            None => {
                self.held
                    .push(Held::DeleteRange(from.to_vec(), to.to_vec()));
                Ok(())
            }
        }
    }

    /// The open file; opened here at the shared size when the block size is not to be
    /// decided (`None` while entries are held for the decision).
    fn writer(&mut self) -> Result<Option<&mut rocksdb::SstFileWriter<'o>>> {
        if self.writer.is_none() && self.large.is_none() {
            self.open(self.shared)?;
        }
        Ok(self.writer.as_mut())
    }

    /// Opens the file at the block size the held puts call for and writes what is held.
    fn open_held(&mut self) -> Result<&mut rocksdb::SstFileWriter<'o>> {
        let opts = match self.large {
            Some(large_opts) if entries_are_large(self.held_puts, self.held_bytes) => large_opts,
            _ => self.shared,
        };
        self.large = None;
        let held = std::mem::take(&mut self.held);
        let writer = self.open(opts)?;
        for held in held {
            match held {
                Held::Put(k, v) => writer.put(k, v),
                Held::Delete(k) => writer.delete(k),
                Held::DeleteRange(from, to) => writer.delete_range(from, to),
            }
            .map_err(rocks_error)?;
        }
        Ok(writer)
    }

    /// Creates the file with `opts`.
    fn open(&mut self, opts: &'o rocksdb::Options) -> Result<&mut rocksdb::SstFileWriter<'o>> {
        let writer = rocksdb::SstFileWriter::create(opts);
        writer.open(self.path).map_err(rocks_error)?;
        Ok(self.writer.insert(writer))
    }

    /// Finishes the file: `Some(puts)` if one was written, `None` (and no file) without
    /// entries or tombstones.
    fn finish(mut self) -> Result<Option<u64>> {
        if self.entries == 0 && self.tombstones == 0 {
            return Ok(None);
        }
        let writer = match self.writer.as_mut() {
            Some(writer) => writer,
            None => self.open_held()?,
        };
        writer.finish().map_err(rocks_error)?;
        Ok(Some(self.entries))
    }
}

impl Db {
    /// Writes an SST file at `path` with this database's table options and the block size
    /// `sizing` chooses, filled by `fill`. Returns the number of entries (puts) if a file was
    /// written; with neither entries nor tombstones, `None` and no file (RocksDB refuses to
    /// finish an empty SST).
    pub(crate) fn write_sst(
        &self,
        path: &Path,
        sizing: BlockSizing,
        fill: impl FnOnce(&mut SstSink<'_, '_>) -> Result<()>,
    ) -> Result<Option<u64>> {
        // One file, so exactly one sink.
        let written = self.write_ssts(&[(path, sizing)], |sinks| match sinks.first_mut() {
            Some(sink) => fill(sink),
            None => Ok(()),
        })?;
        Ok(written.into_iter().next().flatten())
    }

    /// Writes one SST file per `(path, sizing)` at once, filled by `fill` through one sink
    /// per file (in the same order); returns per file what [`Db::write_sst`] returns. A file
    /// is open from its first entry (or the decision of its block size) until `fill`
    /// returns: one file descriptor each, and each holds its filter's key hashes (about 8
    /// bytes per key) until it finishes.
    pub(crate) fn write_ssts(
        &self,
        files: &[(&Path, BlockSizing)],
        fill: impl FnOnce(&mut [SstSink<'_, '_>]) -> Result<()>,
    ) -> Result<Vec<Option<u64>>> {
        write_ssts(&self.options, &self.budget, files, fill)
    }
}

/// [`Db::write_ssts`] without a database: SST files with the table options of `options` on
/// `budget`, written before the database they go into is open.
pub(crate) fn write_ssts(
    options: &DbOptions,
    budget: &MemoryBudget,
    files: &[(&Path, BlockSizing)],
    fill: impl FnOnce(&mut [SstSink<'_, '_>]) -> Result<()>,
) -> Result<Vec<Option<u64>>> {
    let shared = options::cf_options(options, budget)?;
    let large = match large_entry_block_size(options) {
        Some(size) if files.iter().any(|(_, s)| *s == BlockSizing::FromEntries) => {
            let large_options = DbOptions {
                block_size: size,
                ..options.clone()
            };
            Some(options::cf_options(&large_options, budget)?)
        }
        _ => None,
    };
    let mut sinks: Vec<SstSink<'_, '_>> = files
        .iter()
        .map(|&(path, sizing)| SstSink {
            path,
            shared: &shared,
            large: match sizing {
                BlockSizing::FromEntries => large.as_ref(),
                BlockSizing::Shared => None,
            },
            writer: None,
            held: Vec::new(),
            held_puts: 0,
            held_bytes: 0,
            entries: 0,
            tombstones: 0,
        })
        .collect();
    fill(&mut sinks)?;
    sinks.into_iter().map(SstSink::finish).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Compression, MemoryBudgetConfig};
    use std::path::PathBuf;

    fn options() -> DbOptions {
        DbOptions {
            large_entry_block_size: 4096,
            // Stored sizes are the written sizes.
            compression: Compression::None,
            ..DbOptions::default()
        }
    }

    fn budget() -> MemoryBudget {
        MemoryBudget::new(MemoryBudgetConfig::default()).unwrap()
    }

    /// `n` puts of `len`-byte values under ascending keys from `from`.
    fn puts_from(sink: &mut SstSink<'_, '_>, from: u32, n: u32, len: usize) {
        for i in from..from + n {
            sink.put(&i.to_be_bytes(), &vec![i as u8; len]).unwrap();
        }
    }

    fn puts(sink: &mut SstSink<'_, '_>, n: u32, len: usize) {
        puts_from(sink, 0, n, len);
    }

    /// The file's table properties.
    fn properties(path: &Path) -> sst_format::TableProperties {
        sst_format::read_sst_meta(path).unwrap().properties
    }

    fn bytes_per_block(path: &Path) -> u64 {
        let p = properties(path);
        p.data_size / p.num_data_blocks
    }

    fn file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
        dir.path().join(name)
    }

    #[test]
    fn large_entries_are_written_in_the_large_entry_block_size() {
        let dir = tempfile::tempdir().unwrap();
        let (large, shared) = (file(&dir, "large.sst"), file(&dir, "shared.sst"));
        let files = [
            (large.as_path(), BlockSizing::FromEntries),
            (shared.as_path(), BlockSizing::Shared),
        ];
        let written = write_ssts(&options(), &budget(), &files, |sinks| {
            for sink in sinks.iter_mut() {
                puts(sink, 2000, 1000);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(written, vec![Some(2000), Some(2000)]);
        let bytes = bytes_per_block(&large);
        assert!((3000..5200).contains(&bytes), "{bytes} per block, sized");
        let bytes = bytes_per_block(&shared);
        assert!(bytes >= 14 << 10, "{bytes} per block, shared");
    }

    #[test]
    fn small_entries_keep_the_shared_block_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(&dir, "small.sst");
        write_ssts(
            &options(),
            &budget(),
            &[(&path, BlockSizing::FromEntries)],
            |sinks| {
                puts(&mut sinks[0], 5000, 100);
                Ok(())
            },
        )
        .unwrap();
        let bytes = bytes_per_block(&path);
        assert!(bytes >= 14 << 10, "{bytes} per block");
    }

    #[test]
    fn held_entries_reach_the_file_in_order_with_their_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(&dir, "held.sst");
        let written = write_ssts(
            &options(),
            &budget(),
            &[(&path, BlockSizing::FromEntries)],
            |sinks| {
                let sink = &mut sinks[0];
                sink.delete_range(b"\x00", b"\xff")?;
                sink.delete(b"\x00")?;
                puts(sink, 10, 1000);
                assert!(sink.writer.is_none(), "10 puts decide nothing yet");
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(written, vec![Some(10)]);
        let p = properties(&path);
        // RocksDB counts the range tombstone among the entries and the deletions too.
        assert_eq!(
            (p.num_entries, p.num_deletions, p.num_range_deletions),
            (12, 2, 1)
        );
        let bytes = p.data_size / p.num_data_blocks;
        assert!(bytes < 5200, "{bytes} per block: sized by its 10 puts");
    }

    #[test]
    fn holding_is_bounded_by_bytes_as_well_as_puts() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(&dir, "bounded.sst");
        write_ssts(
            &options(),
            &budget(),
            &[(&path, BlockSizing::FromEntries)],
            |sinks| {
                let sink = &mut sinks[0];
                // 8 puts of 8 KiB reach the 64 KiB held at most before 1,024 puts.
                puts(sink, 7, 8192);
                assert_eq!(sink.held.len(), 7);
                puts_from(sink, 7, 1, 8192);
                assert!(sink.held.is_empty() && sink.writer.is_some());
                Ok(())
            },
        )
        .unwrap();
    }

    #[test]
    fn no_file_without_entries_and_tombstones_only_at_the_shared_size() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, tombstones) = (file(&dir, "empty.sst"), file(&dir, "tombstones.sst"));
        let written = write_ssts(
            &options(),
            &budget(),
            &[
                (&empty, BlockSizing::FromEntries),
                (&tombstones, BlockSizing::FromEntries),
            ],
            |sinks| sinks[1].delete_range(b"a", b"b"),
        )
        .unwrap();
        assert_eq!(written, vec![None, Some(0)]);
        assert!(!empty.exists());
        assert_eq!(properties(&tombstones).num_range_deletions, 1);
    }

    #[test]
    fn the_option_off_sizes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(&dir, "off.sst");
        let off = DbOptions {
            large_entry_block_size: 0,
            ..options()
        };
        write_ssts(
            &off,
            &budget(),
            &[(&path, BlockSizing::FromEntries)],
            |sinks| {
                puts(&mut sinks[0], 2000, 1000);
                Ok(())
            },
        )
        .unwrap();
        let bytes = bytes_per_block(&path);
        assert!(bytes >= 14 << 10, "{bytes} per block");
    }
}
