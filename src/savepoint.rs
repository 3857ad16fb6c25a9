//! Canonical savepoints (design.md §8): writing a backend's keyed state into the portable
//! format of `sst_format::savepoint`, and restoring one into an empty backend at any
//! parallelism (entries of key groups outside the backend's range are skipped).
//!
//! Writing walks the backend's key groups in order and, per group, every state; expired TTL
//! entries are dropped while writing when the state's `Cleanup::full_snapshot` is on (only
//! states registered with their TTL settings in this session are filtered: the TTL duration is
//! not persisted). List elements are written with their position; restore gives them fresh
//! sequence numbers in the same order.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use sst_format::{
    SavepointEntry, SavepointHeader, SavepointReader, SavepointStats, SavepointWriter,
};

use crate::backend::KeyedBackend;
use crate::codec;
use crate::error::{Error, Result};
use crate::operator_state::OperatorState;
use crate::state::{KeyBuf, StateKind};
use crate::ttl;

/// zstd level of savepoint blocks: fast to write, still compact.
pub const SAVEPOINT_ZSTD_LEVEL: i32 = 1;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl KeyedBackend {
    /// Writes every state of this backend into a canonical savepoint at `path` (created; an
    /// existing file is an error: savepoints are never overwritten).
    pub fn write_savepoint(&self, path: &Path) -> Result<SavepointStats> {
        self.write_savepoint_with(path, &OperatorState::new())
    }

    /// [`KeyedBackend::write_savepoint`], also storing the operator's non-keyed state.
    pub fn write_savepoint_with(
        &self,
        path: &Path,
        operator_state: &OperatorState,
    ) -> Result<SavepointStats> {
        let metas = self.states()?;
        let cores = metas
            .iter()
            .map(|m| self.core_for(m))
            .collect::<Result<Vec<_>>>()?;
        let range = self.key_groups();
        let header = SavepointHeader {
            max_parallelism: self.max_parallelism(),
            key_group_start: range.start,
            key_group_end: range.end,
            states: metas,
            operator_state: operator_state.snapshot(),
            created_at_ms: now_ms(),
        };
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let mut writer = SavepointWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            &header,
            SAVEPOINT_ZSTD_LEVEL,
        )?;
        for key_group in range.iter() {
            for (state, core) in cores.iter().enumerate() {
                let expiry = core
                    .ttl
                    .as_ref()
                    .filter(|t| t.config.cleanup.full_snapshot)
                    .map(|t| (t.ttl_ms, t.clock.now_ms()));
                core.scan_key_group(key_group, |e| {
                    if let Some((ttl_ms, now)) = expiry {
                        if ttl::stored_is_expired(e.value, ttl_ms, now) {
                            return Ok(true);
                        }
                    }
                    writer.add(
                        key_group,
                        SavepointEntry {
                            state: state as u32,
                            key: e.key,
                            namespace: e.namespace,
                            suffix: e.suffix,
                            value: e.value,
                        },
                    )?;
                    Ok(true)
                })?;
            }
        }
        let (out, stats) = writer.finish()?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(path, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(path, e))?;
        Ok(stats)
    }

    /// Loads the savepoint at `path` into this backend, which must hold no state yet. Only key
    /// groups in this backend's range are loaded, so any parallelism works; the max parallelism
    /// must match. Every block is verified before anything is written: a corrupt savepoint is
    /// a typed error and leaves the backend's data untouched.
    pub fn restore_savepoint(&self, path: &Path) -> Result<SavepointStats> {
        if !self.states()?.is_empty() {
            return Err(Error::InvalidOption {
                name: "restore_savepoint",
                detail: "the backend already holds state; restore into an empty backend".into(),
            });
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut reader = SavepointReader::open(BufReader::new(file))?;
        let header = reader.header().clone();
        if header.max_parallelism != self.max_parallelism() {
            return Err(Error::BackendMismatch {
                path: path.to_path_buf(),
                existing: format!("max parallelism {}", header.max_parallelism),
                requested: format!("max parallelism {}", self.max_parallelism()),
            });
        }
        let range = self.key_groups();
        let mut stats = SavepointStats::default();
        let index = reader.index().to_vec();
        let blocks: Vec<_> = index
            .iter()
            .filter(|b| range.contains(b.key_group))
            .collect();
        // Verify every block (checksum, decompression, entry structure, key groups) before
        // writing anything, so a corrupt savepoint leaves the backend untouched.
        let max_parallelism = self.max_parallelism();
        for block in &blocks {
            reader.for_each_entry(block, |e| {
                if crate::keygroup::key_group_of(e.key, max_parallelism) != block.key_group {
                    return Err(sst_format::Error::Corrupt {
                        what: format!(
                            "savepoint entry stored under key group {} hashes elsewhere",
                            block.key_group
                        ),
                    });
                }
                Ok(())
            })?;
        }
        let cores = header
            .states
            .iter()
            .map(|m| self.core_for(m))
            .collect::<Result<Vec<_>>>()?;
        for block in blocks {
            let mut batches: Vec<_> = cores.iter().map(|c| c.table.batch()).collect();
            let mut failure: Option<Error> = None;
            let read = reader.for_each_entry(block, |e| {
                let core = &cores[e.state as usize];
                let mut key = KeyBuf::new();
                codec::write_key_prefix(
                    &mut key,
                    block.key_group,
                    max_parallelism,
                    e.key,
                    e.namespace,
                );
                match core.meta.kind {
                    StateKind::List => match core.list_seq.next() {
                        Ok(seq) => key.extend_from_slice(&seq.to_be_bytes()),
                        Err(err) => {
                            failure = Some(err);
                            return Err(sst_format::Error::Corrupt {
                                what: "restore aborted".into(),
                            });
                        }
                    },
                    _ => key.extend_from_slice(e.suffix),
                }
                batches[e.state as usize].put(&key, e.value);
                stats.entries += 1;
                stats.raw_bytes +=
                    (e.key.len() + e.namespace.len() + e.suffix.len() + e.value.len()) as u64;
                Ok(())
            });
            if let Some(err) = failure {
                return Err(err);
            }
            read?;
            stats.blocks += 1;
            for batch in batches {
                batch.commit()?;
            }
        }
        stats.file_bytes = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len();
        Ok(stats)
    }
}

/// The operator state stored in the savepoint at `path` (verified like the rest of the header).
pub fn read_operator_state(path: &Path) -> Result<OperatorState> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = SavepointReader::open(BufReader::new(file))?;
    OperatorState::from_snapshot(reader.header().operator_state.clone())
}
