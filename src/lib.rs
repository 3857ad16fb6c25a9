//! # rockstate
//!
//! The keyed state backend a stream processor embeds: state partitioned by key group on RocksDB,
//! value/list/map/reducing/aggregating state with namespaces, one bounded memory budget per
//! process. `docs/architecture.md` has the module map, the paths of a put, a get, a checkpoint
//! and a restore, and the invariants; `docs/` has the formats.
//!
//! ```no_run
//! use rockstate::{KeyedBackend, KeyGroupRange};
//! # fn main() -> rockstate::Result<()> {
//! let backend = KeyedBackend::builder("/tmp/op-0")
//!     .max_parallelism(128)
//!     .key_groups(KeyGroupRange::for_operator(128, 2, 0)?)
//!     .open()?;
//! let counts = backend.value_state::<String, (), u64>("counts")?;
//! # let key = "a".to_string();
//! let n = counts.get(&key, &())?.unwrap_or(0);
//! counts.put(&key, &(), &(n + 1))?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod backend;
pub mod barrier;
pub mod catalog;
mod change_log;
pub mod checkpoint;
mod clock;
pub mod codec;
pub mod coordinator;
mod db;
pub mod error;
mod heap;
mod key_bounds;
pub mod keygroup;
pub mod layout;
mod list_entry;
mod meta;
pub mod metrics;
pub mod operator_state;
pub mod options;
mod parallel;
mod replay;
mod rescale;
mod restore;
pub mod savepoint;
#[cfg(test)]
mod savepoint_cut_tests;
mod savepoint_runs;
mod shared_fetch;
pub mod state;
pub mod storage;
mod store;
mod system_memory;
pub mod ttl;
mod value_cache;
#[cfg(test)]
mod without_threads_tests;
mod write_cache;
mod zero_pages;

pub use backend::{BackendBuilder, BackendKind, KeyedBackend};
pub use checkpoint::{
    verify_checkpoints, ChangelogOptions, CheckpointOptions, CheckpointStats, PendingSnapshot,
    RestoreFrom, SweepStats,
};
pub use checkpoint::{GcStats, JobOwner, RestoreReport};
pub use clock::{Clock, ManualClock, SystemClock};
// The benchmarks' raw-RocksDB baseline (`rockstate-bench`), not part of the engine API.
#[doc(hidden)]
pub use db::RawRocksDb;
pub use db::{lower_compaction_priority, MemoryBudget};
pub use error::{Error, ErrorKind, Result};
pub use keygroup::KeyGroupRange;
pub use metrics::{BackendMetrics, CheckpointMetrics, LevelMetrics, RocksDbMetrics};
pub use options::{
    CacheKind, Compression, DbOptions, MemoryBudgetConfig, ValueCacheAdmission, ValueCacheWrites,
};
pub use shared_fetch::SharedFetches;
pub use state::{
    AggregateFunction, AggregatingState, CodecId, ListState, MapState, RawEntry, RawListState,
    RawMapState, RawValueState, ReducingState, StateDescriptor, StateKind, StateMeta, ValueState,
};
pub use storage::{open_storage, ObjectStorage, ObjectStorageOptions, ScopedStorage};
pub use storage::{CheckpointStorage, LocalStorage, ObjectDigest, ObjectInfo};
#[cfg(feature = "testing")]
pub use storage::{Fault, FaultyStorage, OpKind};
pub use ttl::TtlConfig;
