//! The body types of the checkpoint manifest (`chk-<id>/_metadata`, docs/manifest-format.md),
//! version 4 (version 3 lacked [`Changelog::tables`], version 2 the whole
//! [`CheckpointManifest::changelog`], version 1 also [`SharedFile::key_range`]; their layouts
//! live on in `crate::manifest` as their decoders).
//!
//! This module owns the *content* of a manifest; [`crate::manifest`] owns its *framing*
//! (magic, version, length, zstd, CRC). The types are serialized with postcard, which encodes
//! struct fields in declaration order and enum variants by their index, so **field order and
//! variant order are part of the on-disk format**: never reorder or remove fields or variants;
//! any change to these types needs a new [`crate::MANIFEST_VERSION`] and a decoder for the old
//! one. `docs/manifest-format.md` lists every field's encoding.

use serde::{Deserialize, Serialize};

use crate::sst::SstUniqueId;

/// Everything needed to restore one completed checkpoint of one backend instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointManifest {
    /// The checkpoint id this manifest commits.
    pub checkpoint_id: u64,
    /// Identity of the backend instance that took it (operator + subtask, chosen by the caller).
    pub backend_id: String,
    /// First key group owned by the backend (inclusive).
    pub key_group_start: u16,
    /// Last key group owned by the backend (**inclusive**).
    pub key_group_end: u16,
    /// The job's max parallelism (number of key groups); never changes for a job.
    pub max_parallelism: u32,
    /// Registered keyed states (one RocksDB column family each).
    pub states: Vec<StateMeta>,
    /// SSTs, uploaded once under `shared/` and referenced by every checkpoint containing them.
    pub shared_files: Vec<SharedFile>,
    /// Files uploaded for this checkpoint only (MANIFEST, CURRENT, OPTIONS).
    pub private_files: Vec<PrivateFile>,
    /// Operator (non-keyed) list states.
    pub operator_state: Vec<OperatorListState>,
    /// Wall-clock creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Changelog mode (version 3): the shared and private files above are a materialization,
    /// and these log segments hold every change made after it; `None` for a checkpoint that
    /// is its files alone (and for every manifest of versions 1 and 2).
    pub changelog: Option<Changelog>,
}

/// The log part of a changelog-mode checkpoint (manifest version 3; `tables` since version
/// 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changelog {
    /// The checkpoint whose sync phase cut the materialization (the manifest's files).
    pub materialization_id: u64,
    /// Sequence number of the first change the materialization does not hold; every change
    /// numbered below it is in the materialization's files.
    pub materialized_seq: u64,
    /// The segments holding the changes from `materialized_seq` on: in sequence order, each
    /// starting where the one before it ended, the first at `materialized_seq`.
    pub segments: Vec<LogSegmentFile>,
    /// The same changes from `materialized_seq` on, up to some segment boundary, as sorted
    /// tables a restore ingests instead of replaying those segments (version 4; empty in
    /// every manifest of version 3): in sequence order, each starting where the one before
    /// it ended, the first at `materialized_seq`, each ending where a segment ends.
    pub tables: Vec<LogTable>,
}

/// The changes of a run of consecutive log segments, `[first_seq, end_seq)`, as sorted
/// tables: per column family one SST holding the last change of every key the run changed
/// (a delete as a point tombstone), so ingesting the tables above the state before the run
/// gives the state after it (manifest version 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogTable {
    /// Sequence number of the run's first change (where its first segment starts).
    pub first_seq: u64,
    /// Sequence number after its last change (where its last segment ends).
    pub end_seq: u64,
    /// How many merges built it: 1 for a table built from segments not in a table before,
    /// one more than the level of the tables a merge replaced. The writer's merge policy
    /// reads it; a restore does not.
    pub level: u8,
    /// One SST per column family the run changed, in column-family name order.
    pub files: Vec<LogTableFile>,
}

/// One uploaded SST of a [`LogTable`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogTableFile {
    /// The column family it goes into (`default`, or a keyed state's).
    pub column_family: String,
    /// Object name under the storage root (`shared/<id>-<ms>-<16 hex>.sst`).
    pub remote_name: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the whole object.
    pub crc32: u32,
}

/// One uploaded changelog segment (docs/changelog-format.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSegmentFile {
    /// Object name under the storage root (`shared/<id>-<ms>-<16 hex>.log`).
    pub remote_name: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the whole object.
    pub crc32: u32,
    /// Sequence number of its first entry.
    pub first_seq: u64,
    /// Number of entries.
    pub entries: u64,
    /// The smallest and largest key group of its keyed-state entries, `None` when it holds
    /// none; a restore into other key groups skips a segment lying wholly outside them.
    pub key_groups: Option<(u16, u16)>,
}

/// The kind of a keyed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateKind {
    /// One value per key and namespace.
    Value,
    /// A list per key and namespace.
    List,
    /// A map per key and namespace.
    Map,
    /// A value folded with a reduce function.
    Reducing,
    /// A value folded with an aggregate function.
    Aggregating,
}

/// Persisted metadata of one registered state, checked on re-registration and restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMeta {
    /// State name (its column family is `state:<name>`).
    pub name: String,
    /// State kind.
    pub kind: StateKind,
    /// Identifier of the value codec.
    pub codec: String,
    /// Version of the value codec.
    pub codec_version: u32,
    /// Whether values carry a TTL timestamp.
    pub ttl: bool,
}

/// An SST in shared storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedFile {
    /// Object name under the storage root (e.g. `shared/<hex>.sst`).
    pub remote_name: String,
    /// File name inside the RocksDB directory (e.g. `000009.sst`).
    pub local_name: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
    /// The SST's unique identity from its properties block.
    pub sst_id: SstUniqueId,
    /// Where the file's keys lie, for a file of a keyed state's column family (keys start
    /// with their key-group prefix) whose range the checkpoint knew; `None` otherwise (and
    /// for every file of a version-1 manifest). A restore into other key groups skips
    /// downloading a file whose range lies wholly outside them (docs/rescale.md).
    pub key_range: Option<SstKeyRange>,
}

/// The key range and LSM level of one SST of a keyed state (manifest version 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SstKeyRange {
    /// The file's level when its database was listed before the checkpoint was cut (0 is
    /// L0). A file only ever moves to deeper levels, so the checkpoint holds it at this level
    /// or deeper.
    pub level: u32,
    /// Smallest user key in the file, range tombstone starts included.
    pub smallest: Vec<u8>,
    /// Largest user key in the file, range tombstone ends (exclusive bounds) included.
    pub largest: Vec<u8>,
}

/// A file stored for one checkpoint only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivateFile {
    /// Object name under the storage root (e.g. `chk-7/MANIFEST-000005`).
    pub remote_name: String,
    /// File name inside the RocksDB directory.
    pub local_name: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
}

/// How an operator list state is redistributed when parallelism changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RedistributionMode {
    /// Elements are spread evenly over the new instances.
    Split,
    /// Every new instance gets all elements of all old instances.
    Union,
    /// Every instance holds an identical copy.
    Broadcast,
}

/// One named operator list state of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorListState {
    /// State name.
    pub name: String,
    /// Redistribution mode.
    pub mode: RedistributionMode,
    /// Serialized elements.
    pub elements: Vec<Vec<u8>>,
}
