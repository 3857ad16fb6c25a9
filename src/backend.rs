//! The keyed backend: opening a RocksDB instance for one key-group range, the registry of
//! states (one column family each, metadata persisted and checked), and the handles.
//!
//! Metadata lives in RocksDB's default column family:
//! `backend` → [`BackendMeta`], `state/<name>` → [`StateMeta`], `list-seq` → u64 BE high-water
//! mark of list element sequences. All values are postcard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::checkpoint::registry::{Checkpointer, RestoredBase};
use crate::checkpoint::{CheckpointOptions, RestoreFrom};
use crate::codec;
use crate::db::TtlFilter;
use crate::db::{Cf, Db, MemoryBudget};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::options::{DbOptions, MemoryBudgetConfig};
use crate::state::{
    AggregateFunction, AggregatingState, CodecId, ListState, MapState, RawEntry, RawListState,
    RawMapState, RawValueState, ReducingState, StateCore, StateDescriptor, StateKind, StateMeta,
    TtlRuntime, ValueState,
};
use crate::storage::CheckpointStorage;
use crate::store::Table;
use crate::ttl::{Clock, ManualClock, SystemClock, TimeDomain, TtlCounters, TtlStats, UpdateType};

/// Version of the metadata layout in the default column family.
pub const BACKEND_META_VERSION: u32 = 1;
const META_BACKEND: &[u8] = b"backend";
const META_STATE_PREFIX: &str = "state/";
const META_LIST_SEQ: &[u8] = b"list-seq";
const STATE_CF_PREFIX: &str = "state:";
/// Longest accepted state name in bytes.
pub const MAX_STATE_NAME: usize = 255;

/// Backend-level metadata, checked on every open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendMeta {
    /// Layout version ([`BACKEND_META_VERSION`]).
    pub version: u32,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// Groups this database holds.
    pub key_groups: KeyGroupRange,
}

/// Hands out list-element sequence numbers; the high-water mark is persisted before a number
/// is used, so numbers only grow across reopen and restore.
pub(crate) struct SequenceAllocator {
    next: AtomicU64,
    /// Numbers below this are persisted as reserved; read lock-free on every append.
    reserved: AtomicU64,
    /// Serializes persisting a new reservation.
    reserving: Mutex<()>,
    meta: Cf,
}

const SEQ_BLOCK: u64 = 1 << 16;

impl SequenceAllocator {
    pub(crate) fn next(&self) -> Result<u64> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n < self.reserved.load(Ordering::Acquire) {
            return Ok(n);
        }
        let _guard = self.reserving.lock();
        // Another thread may have reserved past `n` while we waited.
        if n >= self.reserved.load(Ordering::Acquire) {
            let new = n + SEQ_BLOCK;
            self.meta.put(META_LIST_SEQ, &new.to_be_bytes())?;
            self.reserved.store(new, Ordering::Release);
        }
        Ok(n)
    }
}

/// Options for [`KeyedBackend::open`].
#[derive(Clone, Debug)]
pub struct BackendBuilder {
    path: PathBuf,
    max_parallelism: u32,
    key_groups: Option<KeyGroupRange>,
    options: DbOptions,
    budget: Option<MemoryBudget>,
    clock: Arc<dyn Clock>,
    checkpoint_storage: Option<Arc<dyn CheckpointStorage>>,
    checkpoint_options: CheckpointOptions,
}

impl BackendBuilder {
    /// The processing-time clock TTL uses (default: the wall clock). Tests inject a
    /// [`ManualClock`] so they never sleep.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Number of key groups of the job (default 128). Never changes for a job's life.
    pub fn max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// The groups this backend owns (default: all).
    pub fn key_groups(mut self, range: KeyGroupRange) -> Self {
        self.key_groups = Some(range);
        self
    }

    /// RocksDB settings (default [`DbOptions::default`]).
    pub fn options(mut self, options: DbOptions) -> Self {
        self.options = options;
        self
    }

    /// The memory budget to share (default: one process-wide budget of
    /// [`MemoryBudgetConfig::default`]).
    pub fn memory_budget(mut self, budget: MemoryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Opens or creates the backend.
    pub fn open(self) -> Result<KeyedBackend> {
        self.open_inner(None)
    }

    pub(crate) fn open_inner(self, restored: Option<RestoredBase>) -> Result<KeyedBackend> {
        keygroup::validate_max_parallelism(self.max_parallelism)?;
        let key_groups = match self.key_groups {
            Some(r) => r,
            None => KeyGroupRange::all(self.max_parallelism)?,
        };
        if u32::from(key_groups.end) >= self.max_parallelism {
            return Err(Error::InvalidKeyGroups(format!(
                "range {key_groups} exceeds max parallelism {}",
                self.max_parallelism
            )));
        }
        let budget = match self.budget {
            Some(b) => b,
            None => process_budget()?,
        };
        std::fs::create_dir_all(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let db = Db::open(&self.path, &self.options, &budget)?;
        let meta = db.default_cf()?;
        let wanted = BackendMeta {
            version: BACKEND_META_VERSION,
            max_parallelism: self.max_parallelism,
            key_groups,
        };
        match read_meta::<BackendMeta>(&meta, META_BACKEND, "backend metadata")? {
            None => meta.put(META_BACKEND, &codec::encode(&wanted, "backend metadata")?)?,
            Some(existing) if existing == wanted => {}
            Some(existing) => {
                return Err(Error::BackendMismatch {
                    path: self.path.clone(),
                    existing: format!("{existing:?}"),
                    requested: format!("{wanted:?}"),
                })
            }
        }
        let reserved = match meta.get_with(META_LIST_SEQ, |b| <[u8; 8]>::try_from(b))? {
            None => 0,
            Some(Ok(b)) => u64::from_be_bytes(b),
            Some(Err(_)) => return Err(Error::decode("list sequence", "not 8 bytes")),
        };
        let (backend_id, checkpointer) = crate::checkpoint::attach(
            &meta,
            self.checkpoint_storage,
            &self.checkpoint_options,
            restored,
        )?;
        let list_seq = Arc::new(SequenceAllocator {
            next: AtomicU64::new(reserved),
            reserved: AtomicU64::new(reserved),
            reserving: Mutex::new(()),
            meta: meta.clone(),
        });
        Ok(KeyedBackend {
            inner: Arc::new(Inner {
                db,
                meta,
                key_groups,
                max_parallelism: self.max_parallelism,
                max_value_bytes: self.options.max_value_bytes,
                states: Mutex::new(BTreeMap::new()),
                list_seq,
                clock: self.clock,
                watermark: ManualClock::new(0),
                backend_id,
                checkpointer,
            }),
        })
    }
}

fn process_budget() -> Result<MemoryBudget> {
    static BUDGET: OnceLock<MemoryBudget> = OnceLock::new();
    if let Some(b) = BUDGET.get() {
        return Ok(b.clone());
    }
    let budget = MemoryBudget::new(MemoryBudgetConfig::default())?;
    Ok(BUDGET.get_or_init(|| budget).clone())
}

fn read_meta<T: DeserializeOwned>(meta: &Cf, key: &[u8], what: &'static str) -> Result<Option<T>> {
    meta.get_with(key, |b| codec::decode::<T>(b, what))?
        .transpose()
}

struct Inner {
    db: Arc<Db>,
    meta: Cf,
    key_groups: KeyGroupRange,
    max_parallelism: u32,
    max_value_bytes: usize,
    states: Mutex<BTreeMap<String, Arc<StateCore>>>,
    list_seq: Arc<SequenceAllocator>,
    clock: Arc<dyn Clock>,
    watermark: ManualClock,
    backend_id: String,
    checkpointer: Option<Arc<Checkpointer>>,
}

/// Keyed state of one operator instance: the key groups it owns, on one RocksDB instance.
/// Cheap to clone; handles stay valid as long as any clone or handle lives.
#[derive(Clone)]
pub struct KeyedBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KeyedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedBackend")
            .field("path", &self.inner.db.path())
            .field("key_groups", &self.inner.key_groups)
            .field("max_parallelism", &self.inner.max_parallelism)
            .finish()
    }
}

impl KeyedBackend {
    /// Starts configuring a backend stored in `path`.
    pub fn builder(path: impl AsRef<Path>) -> BackendBuilder {
        BackendBuilder {
            path: path.as_ref().to_path_buf(),
            max_parallelism: 128,
            key_groups: None,
            options: DbOptions::default(),
            budget: None,
            clock: Arc::new(SystemClock),
            checkpoint_storage: None,
            checkpoint_options: CheckpointOptions::default(),
        }
    }

    /// The key groups this backend owns.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.inner.key_groups
    }

    /// The job's number of key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.inner.max_parallelism
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        self.inner.db.path()
    }

    /// Metadata of every state persisted in this backend, registered in this session or not.
    pub fn states(&self) -> Result<Vec<StateMeta>> {
        let mut out = Vec::new();
        let prefix = META_STATE_PREFIX.as_bytes();
        self.inner
            .meta
            .scan(prefix, codec::prefix_end(prefix).as_deref(), |_, v| {
                out.push(codec::decode(v, "state metadata")?);
                Ok(true)
            })?;
        Ok(out)
    }

    /// Checks `requested` against the persisted metadata of its state (persisting it when new)
    /// and returns the state's column family.
    fn persist_state(&self, requested: &StateMeta) -> Result<Cf> {
        let name = requested.name.as_str();
        if name.is_empty() || name.len() > MAX_STATE_NAME {
            return Err(Error::InvalidStateName(name.to_string()));
        }
        let meta_key = format!("{META_STATE_PREFIX}{name}");
        match read_meta::<StateMeta>(&self.inner.meta, meta_key.as_bytes(), "state metadata")? {
            Some(existing) if &existing != requested => {
                return Err(mismatch_error(&existing, requested))
            }
            Some(_) => {}
            None => self.inner.meta.put(
                meta_key.as_bytes(),
                &codec::encode(requested, "state metadata")?,
            )?,
        }
        self.inner.db.create_cf(&format!("{STATE_CF_PREFIX}{name}"))
    }

    /// A handle core for persisted state `meta`: the registered one if registered in this
    /// session, else a fresh one without TTL knowledge that is not registered (so a later typed
    /// registration still installs its TTL settings). Creates the state when new.
    pub(crate) fn core_for(&self, meta: &StateMeta) -> Result<Arc<StateCore>> {
        if let Some(core) = self.inner.states.lock().get(&meta.name) {
            if &core.meta != meta {
                return Err(mismatch_error(&core.meta, meta));
            }
            return Ok(Arc::clone(core));
        }
        let cf = self.persist_state(meta)?;
        Ok(Arc::new(self.new_core(cf, meta.clone(), None)))
    }

    fn new_core(&self, cf: Cf, meta: StateMeta, ttl: Option<TtlRuntime>) -> StateCore {
        StateCore {
            table: Table::Rocks(cf),
            meta,
            key_groups: self.inner.key_groups,
            max_parallelism: self.inner.max_parallelism,
            max_value_bytes: self.inner.max_value_bytes,
            list_seq: Arc::clone(&self.inner.list_seq),
            ttl,
        }
    }

    fn register(
        &self,
        desc: StateDescriptor,
        kind: StateKind,
        codec: CodecId,
    ) -> Result<Arc<StateCore>> {
        let name = desc.name.as_str();
        let requested = StateMeta {
            name: name.to_string(),
            kind,
            codec: codec.name,
            codec_version: codec.version,
            ttl: desc.ttl.is_some(),
        };
        let mut states = self.inner.states.lock();
        if let Some(core) = states.get(name) {
            if core.meta != requested {
                return Err(mismatch_error(&core.meta, &requested));
            }
            return Ok(Arc::clone(core));
        }
        let cf = self.persist_state(&requested)?;
        let ttl = desc.ttl.map(|config| {
            let clock: Arc<dyn Clock> = match config.time_domain {
                TimeDomain::ProcessingTime => Arc::clone(&self.inner.clock),
                TimeDomain::EventTime => Arc::new(self.inner.watermark.clone()),
            };
            TtlRuntime {
                ttl_ms: config.ttl_ms(),
                clock,
                counters: Arc::new(TtlCounters::default()),
                config,
            }
        });
        if let Some(t) = &ttl {
            if t.config.cleanup.compaction_filter && t.config.update_type != UpdateType::Disabled {
                cf.set_ttl_filter(
                    TtlFilter {
                        ttl_ms: t.ttl_ms,
                        clock: Arc::clone(&t.clock),
                        refresh_every: t.config.cleanup.refresh_every,
                        counters: Arc::clone(&t.counters),
                    },
                    t.config.cleanup.periodic_compaction.as_secs(),
                )?;
            }
        }
        let core = Arc::new(self.new_core(cf, requested, ttl));
        states.insert(name.to_string(), Arc::clone(&core));
        Ok(core)
    }

    /// Registers (or re-opens) a value state of serde type `V`.
    pub fn value_state<K, N, V>(
        &self,
        desc: impl Into<StateDescriptor>,
    ) -> Result<ValueState<K, N, V>>
    where
        K: Serialize,
        N: Serialize,
        V: Serialize + DeserializeOwned,
    {
        let codec = CodecId::postcard(&[type_name::<K>(), type_name::<N>(), type_name::<V>()]);
        let core = self.register(desc.into(), StateKind::Value, codec)?;
        Ok(ValueState::new(RawValueState { core }))
    }

    /// Registers a list state of serde elements `T`.
    pub fn list_state<K, N, T>(
        &self,
        desc: impl Into<StateDescriptor>,
    ) -> Result<ListState<K, N, T>>
    where
        K: Serialize,
        N: Serialize,
        T: Serialize + DeserializeOwned,
    {
        let codec = CodecId::postcard(&[type_name::<K>(), type_name::<N>(), type_name::<T>()]);
        let core = self.register(desc.into(), StateKind::List, codec)?;
        Ok(ListState::new(RawListState { core }))
    }

    /// Registers a map state from serde `UK` to serde `UV`.
    pub fn map_state<K, N, UK, UV>(
        &self,
        desc: impl Into<StateDescriptor>,
    ) -> Result<MapState<K, N, UK, UV>>
    where
        K: Serialize,
        N: Serialize,
        UK: Serialize + DeserializeOwned,
        UV: Serialize + DeserializeOwned,
    {
        let codec = CodecId::postcard(&[
            type_name::<K>(),
            type_name::<N>(),
            type_name::<UK>(),
            type_name::<UV>(),
        ]);
        let core = self.register(desc.into(), StateKind::Map, codec)?;
        Ok(MapState::new(RawMapState { core }))
    }

    /// Registers a reducing state folding values with `reduce`.
    pub fn reducing_state<K, N, T>(
        &self,
        desc: impl Into<StateDescriptor>,
        reduce: impl Fn(&T, &T) -> T + Send + Sync + 'static,
    ) -> Result<ReducingState<K, N, T>>
    where
        K: Serialize,
        N: Serialize,
        T: Serialize + DeserializeOwned,
    {
        let codec = CodecId::postcard(&[type_name::<K>(), type_name::<N>(), type_name::<T>()]);
        let core = self.register(desc.into(), StateKind::Reducing, codec)?;
        Ok(ReducingState::new(
            ValueState::new(RawValueState { core }),
            Arc::new(reduce),
        ))
    }

    /// Registers an aggregating state with the aggregate function `function`.
    pub fn aggregating_state<K, N, F>(
        &self,
        desc: impl Into<StateDescriptor>,
        function: F,
    ) -> Result<AggregatingState<K, N, F>>
    where
        K: Serialize,
        N: Serialize,
        F: AggregateFunction,
    {
        let codec = CodecId::postcard(&[type_name::<K>(), type_name::<N>(), type_name::<F::Acc>()]);
        let core = self.register(desc.into(), StateKind::Aggregating, codec)?;
        Ok(AggregatingState::new(
            ValueState::new(RawValueState { core }),
            Arc::new(function),
        ))
    }

    /// Registers a value state over raw bytes serialized by the caller's `codec`.
    pub fn raw_value_state(
        &self,
        desc: impl Into<StateDescriptor>,
        codec: CodecId,
    ) -> Result<RawValueState> {
        Ok(RawValueState {
            core: self.register(desc.into(), StateKind::Value, codec)?,
        })
    }

    /// Registers a list state over raw bytes.
    pub fn raw_list_state(
        &self,
        desc: impl Into<StateDescriptor>,
        codec: CodecId,
    ) -> Result<RawListState> {
        Ok(RawListState {
            core: self.register(desc.into(), StateKind::List, codec)?,
        })
    }

    /// Registers a map state over raw bytes.
    pub fn raw_map_state(
        &self,
        desc: impl Into<StateDescriptor>,
        codec: CodecId,
    ) -> Result<RawMapState> {
        Ok(RawMapState {
            core: self.register(desc.into(), StateKind::Map, codec)?,
        })
    }

    fn registered(&self, name: &str) -> Result<Arc<StateCore>> {
        self.inner
            .states
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::InvalidStateName(format!("{name} (not registered)")))
    }

    /// Visits every stored entry of registered state `name` in key group `key_group`, in key
    /// order, until `f` returns `Ok(false)` (savepoints and rescaling walk state this way).
    /// Values are as stored: TTL states' values start with their 8-byte timestamp.
    pub fn scan_key_group(
        &self,
        name: &str,
        key_group: u16,
        f: impl FnMut(RawEntry<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.registered(name)?.scan_key_group(key_group, f)
    }

    /// Advances the event-time watermark that event-time TTL states expire against. It never
    /// moves backwards.
    pub fn advance_watermark(&self, watermark_ms: u64) {
        self.inner.watermark.set(watermark_ms);
    }

    /// What TTL cleanup removed from state `name` so far (zero for states without TTL).
    pub fn ttl_stats(&self, name: &str) -> Result<TtlStats> {
        Ok(self
            .registered(name)?
            .ttl
            .as_ref()
            .map(|t| t.counters.snapshot())
            .unwrap_or_default())
    }

    /// Compacts every column family of registered state `name` fully, the way RocksDB's
    /// background compaction would eventually, running the TTL filter over every entry.
    pub fn compact_state(&self, name: &str) -> Result<()> {
        self.registered(name)?.table.compact_all()
    }

    /// A RocksDB integer property of state `name`'s column family, e.g.
    /// `rocksdb.estimate-num-keys` or `rocksdb.live-sst-files-size`.
    pub fn state_property(&self, name: &str, property: &str) -> Result<Option<u64>> {
        self.registered(name)?.table.property_u64(property)
    }

    /// Flushes memtables to disk. With the WAL off (the default), state written since the last
    /// flush or checkpoint is lost on a crash; `close` flushes too.
    pub fn flush(&self) -> Result<()> {
        self.inner.db.flush_all()
    }

    /// Flushes memtables and waits until RocksDB has no compaction pending or running (for
    /// benchmarks and tests that want a quiescent database).
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.inner.db.wait_for_compactions()
    }

    /// Flushes and closes this handle (the database closes when the last clone and state handle
    /// are dropped).
    pub fn close(self) -> Result<()> {
        self.flush()
    }
}

fn mismatch_error(existing: &StateMeta, requested: &StateMeta) -> Error {
    Error::StateMismatch {
        name: requested.name.clone(),
        existing: crate::state::describe(existing),
        requested: crate::state::describe(requested),
    }
}

fn type_name<T>() -> &'static str {
    std::any::type_name::<T>()
}

/// Checkpoint configuration and restore (issue 4; the logic lives in `checkpoint` and `restore`).
impl BackendBuilder {
    /// Where checkpoints go (default: none; `snapshot` then fails with
    /// [`Error::NoCheckpointStorage`]). On open, the shared-file registry is rebuilt from the
    /// manifests in this storage.
    pub fn checkpoint_storage(mut self, storage: Arc<dyn CheckpointStorage>) -> Self {
        self.checkpoint_storage = Some(storage);
        self
    }

    /// Checkpoint settings (default [`CheckpointOptions::default`]).
    pub fn checkpoint_options(mut self, options: CheckpointOptions) -> Self {
        self.checkpoint_options = options;
        self
    }

    /// Restores a checkpoint from the configured storage into this builder's (empty or
    /// missing) directory: downloads every file in parallel, verifies size, CRC-32 and (for
    /// SSTs) footer, properties and unique id against the manifest, then opens. The key-group
    /// range and max parallelism must equal the checkpoint's. The restored backend gets a new
    /// backend id and keeps the checkpoint's files as its reuse base, so its next checkpoint
    /// is incremental.
    pub fn restore(self, from: RestoreFrom) -> Result<KeyedBackend> {
        crate::restore::restore(self, from)
    }

    /// [`restore`](Self::restore), also reporting how many bytes came from this machine's
    /// local copy (local recovery, `CheckpointOptions::local_recovery`) and how many were
    /// downloaded.
    pub fn restore_with_report(
        self,
        from: RestoreFrom,
    ) -> Result<(KeyedBackend, crate::checkpoint::RestoreReport)> {
        crate::restore::restore_with_report(self, from)
    }

    pub(crate) fn restore_params(&self) -> RestoreParams {
        RestoreParams {
            path: self.path.clone(),
            max_parallelism: self.max_parallelism,
            key_groups: self.key_groups,
            storage: self.checkpoint_storage.clone(),
            transfer_threads: self.checkpoint_options.transfer_threads,
            staging_dir: self.checkpoint_options.staging_dir.clone(),
            local_recovery: self.checkpoint_options.local_recovery,
        }
    }
}

/// What `restore` needs from a builder.
pub(crate) struct RestoreParams {
    pub(crate) path: PathBuf,
    pub(crate) max_parallelism: u32,
    pub(crate) key_groups: Option<KeyGroupRange>,
    pub(crate) storage: Option<Arc<dyn CheckpointStorage>>,
    pub(crate) transfer_threads: usize,
    pub(crate) staging_dir: Option<PathBuf>,
    pub(crate) local_recovery: bool,
}

/// Crate-internal access for the checkpoint module.
impl KeyedBackend {
    /// This backend's id: random, persisted in the database, new for a restored backend.
    pub fn backend_id(&self) -> &str {
        &self.inner.backend_id
    }

    pub(crate) fn checkpointer(&self) -> Option<&Arc<Checkpointer>> {
        self.inner.checkpointer.as_ref()
    }

    pub(crate) fn database(&self) -> &Arc<Db> {
        &self.inner.db
    }
}
