//! The keyed backend: opening a RocksDB instance (or, with [`BackendKind::Heap`], in-memory
//! tables) for one key-group range, the registry of states (one column family or heap table
//! each, metadata persisted and checked), and the handles.
//!
//! Metadata lives in RocksDB's default column family (the heap backend keeps the same keys in
//! a metadata heap table):
//! `backend` → [`BackendMeta`], `state/<name>` → [`StateMeta`], `list-seq` → u64 BE high-water
//! mark of list element sequences, `ttl-floor/<name>` → u64 BE high-water mark of a TTL list's
//! timestamps (`crate::meta::StampFloor`). `BackendMeta` and `StateMeta` are postcard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{de::DeserializeOwned, Serialize};

use crate::checkpoint::registry::Checkpointer;
use crate::checkpoint::{
    CheckpointOptions, CheckpointStats, JobOwner, PendingSnapshot, RestoreFrom, SnapshotSource,
    SweepStats,
};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::codec;
use crate::db::{CfFilter, TtlFilter};
use crate::db::{Db, KeyLayout, MemoryBudget};
use crate::error::{Error, Result};
use crate::heap::HeapTable;
use crate::keygroup::{self, KeyGroupRange};
use crate::operator_state::OperatorState;
use crate::options::DbOptions;
use crate::restore::{RestoreParams, Restored};
use crate::savepoint::{FullSnapshot, SavepointTarget};
use crate::state::{
    AggregateFunction, AggregatingState, CodecId, IncrementalCleanup, ListState, MapState,
    RawEntry, RawListState, RawMapState, RawValueState, ReducingState, StateCore, StateDescriptor,
    StateKind, StateMeta, TtlRuntime, ValueState,
};
use crate::storage::CheckpointStorage;
use crate::store::Table;
use crate::ttl::{TimeDomain, TtlCounters, TtlStats, UpdateType};
use sst_format::SavepointStats;

use crate::meta::{
    read_list_seq, read_watermark, SequenceAllocator, StampFloor, META_BACKEND, META_STATE_PREFIX,
    META_WATERMARK, STATE_CF_PREFIX,
};
pub use crate::meta::{BackendMeta, BACKEND_META_VERSION, MAX_STATE_NAME};
use crate::state::{check_state_name, mismatch_error, same_state};

/// Builds a [`KeyedBackend`]: its path, key groups, options and injected components;
/// [`BackendBuilder::open`] opens it.
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
    ownership: crate::checkpoint::Ownership,
    restore_source: Option<Arc<dyn CheckpointStorage>>,
    shared_fetches: Option<crate::SharedFetches>,
    checkpoint_clock: Arc<dyn Clock>,
    kind: BackendKind,
    incremental_cleanup: usize,
    compact_clipped: bool,
}

/// Where a backend keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// RocksDB on local disk (the default).
    #[default]
    RocksDb,
    /// In memory, in copy-on-write ordered maps with RocksDB's byte layout (docs/heap-backend.md).
    /// Nothing is written to the builder's path; state survives only through savepoints.
    Heap,
}

impl BackendBuilder {
    /// Where state lives (default [`BackendKind::RocksDb`]).
    pub fn kind(mut self, kind: BackendKind) -> Self {
        self.kind = kind;
        self
    }

    /// Heap backend only: on every TTL-state put, add, list `add_all` and `update`, `clear`,
    /// map `remove`, point read and list or map read, also examine the next `entries` entries
    /// of that state (a cursor walks the state round-robin) and remove the expired ones, like
    /// Flink's `cleanupIncrementally`. Default 0: off (expired entries go when read or, in
    /// savepoints, when snapshotted). Non-zero on RocksDB is [`Error::InvalidOption`]: its
    /// compaction filter does this job there.
    pub fn heap_incremental_cleanup(mut self, entries: usize) -> Self {
        self.incremental_cleanup = entries;
        self
    }

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

    /// The memory budget to share (default: [`MemoryBudget::process_default`], the process's
    /// one shared budget of [`crate::MemoryBudgetConfig::default`]).
    pub fn memory_budget(mut self, budget: MemoryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Opens or creates the backend. A RocksDB directory that holds an unfinished restore
    /// (killed before it ended) is [`Error::RestoreIncomplete`], never opened.
    pub fn open(self) -> Result<KeyedBackend> {
        if self.kind == BackendKind::RocksDb && crate::restore::restore_marker(&self.path).exists()
        {
            return Err(Error::RestoreIncomplete(self.path.clone()));
        }
        self.open_inner(None)
    }

    /// Opens the backend, at a restore on the database the restore left open (`restored`).
    pub(crate) fn open_inner(self, restored: Option<Restored>) -> Result<KeyedBackend> {
        keygroup::validate_max_parallelism(self.max_parallelism)?;
        // Both kinds: the heap reads `max_value_bytes` too.
        self.options.validate()?;
        let key_groups = match self.key_groups {
            Some(r) => r,
            None => KeyGroupRange::all(self.max_parallelism)?,
        };
        // `KeyGroupRange`'s fields are public: a range built without `new` may be inverted.
        let key_groups = KeyGroupRange::new(key_groups.start, key_groups.end)?;
        if u32::from(key_groups.end) >= self.max_parallelism {
            return Err(Error::InvalidKeyGroups(format!(
                "range {key_groups} exceeds max parallelism {}",
                self.max_parallelism
            )));
        }
        let (engine, meta) = match self.kind {
            BackendKind::RocksDb => {
                if self.incremental_cleanup > 0 {
                    return Err(Error::InvalidOption {
                        name: "heap_incremental_cleanup",
                        detail: "only the heap backend cleans up incrementally".into(),
                    });
                }
                let db = match restored.as_ref() {
                    // Opened by the restore with this builder's options, budget and layout.
                    Some(r) => Arc::clone(&r.db),
                    None => {
                        let budget = match self.budget {
                            Some(b) => b,
                            None => MemoryBudget::process_default()?,
                        };
                        std::fs::create_dir_all(&self.path)
                            .map_err(|e| Error::io(&self.path, e))?;
                        Db::open(
                            &self.path,
                            &self.options,
                            &budget,
                            Some(KeyLayout::new(self.max_parallelism, key_groups)),
                        )?
                    }
                };
                crate::savepoint::sweep_staging(&self.path)?;
                let meta = Table::Rocks(db.default_cf()?);
                (Engine::Rocks(db), meta)
            }
            BackendKind::Heap => {
                if self.checkpoint_storage.is_some() || restored.is_some() {
                    return Err(Error::Unsupported(
                        "checkpoints of the heap backend (use savepoints)".into(),
                    ));
                }
                let gate = Arc::new(parking_lot::RwLock::new(()));
                let meta = HeapTable::with_gate(&self.path, Arc::clone(&gate));
                let engine = Engine::Heap {
                    path: self.path.clone(),
                    tables: Mutex::new(BTreeMap::new()),
                    gate,
                };
                (engine, Table::Heap(meta))
            }
        };
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
        let reserved = read_list_seq(&meta)?;
        let (backend_id, checkpointer) = match &meta {
            Table::Rocks(cf) => crate::checkpoint::attach(
                cf,
                self.checkpoint_storage,
                &self.checkpoint_options,
                self.ownership,
                Arc::clone(&self.checkpoint_clock),
                restored.map(|r| r.base),
                self.max_parallelism,
            )?,
            Table::Heap(_) => (crate::layout::new_backend_id(), None),
        };
        let list_seq = Arc::new(SequenceAllocator::new(meta.clone(), reserved));
        // The watermark goes on from where the state was left (a reopen, a restore, a
        // rescale: the highest of its sources), so event-time TTL stamps taken before the
        // engine's first `advance_watermark` are not 0.
        let watermark = read_watermark(&meta)?;
        Ok(KeyedBackend {
            inner: Arc::new(Inner {
                engine,
                meta,
                key_groups,
                max_parallelism: self.max_parallelism,
                max_value_bytes: self.options.max_value_bytes,
                incremental_cleanup: self.incremental_cleanup,
                states: Mutex::new(BTreeMap::new()),
                list_seq,
                clock: self.clock,
                watermark: ManualClock::new(watermark),
                watermark_persisted: AtomicU64::new(watermark),
                backend_id,
                checkpointer,
                checkpoint_metrics: Default::default(),
                restoring_savepoint: Mutex::new(()),
            }),
        })
    }
}

fn read_meta<T: DeserializeOwned>(
    meta: &Table,
    key: &[u8],
    what: &'static str,
) -> Result<Option<T>> {
    meta.get_with(key, |b| codec::decode::<T>(b, what))?
        .transpose()
}

/// The storage engine behind a backend.
enum Engine {
    Rocks(Arc<Db>),
    Heap {
        path: PathBuf,
        /// One table per state, by state name.
        tables: Mutex<BTreeMap<String, HeapTable>>,
        /// The snapshot gate every table shares (`HeapTable::gate`).
        gate: Arc<parking_lot::RwLock<()>>,
    },
}

struct Inner {
    engine: Engine,
    meta: Table,
    key_groups: KeyGroupRange,
    max_parallelism: u32,
    max_value_bytes: usize,
    /// Entries examined per access by heap incremental TTL cleanup (0: off).
    incremental_cleanup: usize,
    states: Mutex<BTreeMap<String, Arc<StateCore>>>,
    list_seq: Arc<SequenceAllocator>,
    clock: Arc<dyn Clock>,
    watermark: ManualClock,
    /// The watermark last written to the metadata (`META_WATERMARK`).
    watermark_persisted: AtomicU64,
    backend_id: String,
    checkpointer: Option<Arc<Checkpointer>>,
    /// Figures of the last checkpoint, shared with pending snapshots that record them.
    checkpoint_metrics: Arc<Mutex<crate::metrics::CheckpointMetrics>>,
    /// Held through a savepoint restore, from its check that the backend holds no state to
    /// the end: a second restore waits, then finds the first one's states and is refused.
    restoring_savepoint: Mutex<()>,
}

impl Drop for Inner {
    /// The backend's last handle went: as [`KeyedBackend::close`] does, its checkpoint
    /// bookkeeping answers `Closed` and its staging lock goes, so the directory opens again at
    /// once while an upload it began (a `PendingSnapshot` on another thread) runs on; the
    /// database closes once the state handles holding it are gone.
    fn drop(&mut self) {
        if let Some(cp) = &self.checkpointer {
            cp.close();
        }
    }
}

/// Keyed state of one operator instance: the key groups it owns, on one RocksDB instance (or
/// in memory, [`BackendKind::Heap`]). Cheap to clone; handles stay valid as long as any clone or handle lives.
#[derive(Clone)]
pub struct KeyedBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KeyedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedBackend")
            .field("path", &self.path())
            .field("kind", &self.kind())
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
            ownership: Default::default(),
            restore_source: None,
            shared_fetches: None,
            checkpoint_clock: Arc::new(SystemClock),
            kind: BackendKind::RocksDb,
            incremental_cleanup: 0,
            compact_clipped: false,
        }
    }

    /// Starts configuring a heap backend ([`BackendKind::Heap`]); its path is empty.
    pub fn heap_builder() -> BackendBuilder {
        Self::builder("").kind(BackendKind::Heap)
    }

    /// Where this backend keeps its state.
    pub fn kind(&self) -> BackendKind {
        match self.inner.engine {
            Engine::Rocks(_) => BackendKind::RocksDb,
            Engine::Heap { .. } => BackendKind::Heap,
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

    /// The database directory (for a heap backend: the builder's path, unused).
    pub fn path(&self) -> &Path {
        match &self.inner.engine {
            Engine::Rocks(db) => db.path(),
            Engine::Heap { path, .. } => path,
        }
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
    /// and returns the state's table (column family or heap table), whether the state is new,
    /// and its metadata as stored (the persisted one where `requested` matched it by
    /// [`same_state`], so checkpoints keep describing the state as it was written).
    fn persist_state(&self, requested: &StateMeta) -> Result<(Table, bool, StateMeta)> {
        let name = requested.name.as_str();
        check_state_name(name)?;
        let meta_key = format!("{META_STATE_PREFIX}{name}");
        let existing =
            read_meta::<StateMeta>(&self.inner.meta, meta_key.as_bytes(), "state metadata")?;
        if let Some(existing) = existing.as_ref().filter(|e| !same_state(e, requested)) {
            return Err(mismatch_error(existing, requested));
        }
        // The state's table first, its metadata after: a table refused (the column-family
        // limit, a RocksDB error) leaves no state registered behind.
        let table = match &self.inner.engine {
            Engine::Rocks(db) => Table::Rocks(db.create_cf(&format!("{STATE_CF_PREFIX}{name}"))?),
            Engine::Heap { tables, path, gate } => Table::Heap(
                tables
                    .lock()
                    .entry(name.to_string())
                    .or_insert_with(|| HeapTable::with_gate(path, Arc::clone(gate)))
                    .clone(),
            ),
        };
        let created = existing.is_none();
        if created {
            self.inner.meta.put(
                meta_key.as_bytes(),
                &codec::encode(requested, "state metadata")?,
            )?;
            // Durable before the state's first entry can reach disk (WAL off).
            self.inner.meta.flush()?;
        }
        Ok((
            table,
            created,
            existing.unwrap_or_else(|| requested.clone()),
        ))
    }

    /// Whether checkpoints run in changelog mode (`ChangelogOptions::enabled`).
    fn changelog_mode(&self) -> bool {
        self.inner
            .checkpointer
            .as_ref()
            .is_some_and(|c| c.options.changelog.enabled)
    }

    /// The timestamp floor of TTL list state `name` registering with `config` (`created`: its
    /// metadata was written just now), or `None` when its `update` must read
    /// (docs/decisions/0045-blind-ttl-list-updates.md). A list's timestamps never go back when
    /// its mark covers them, so a blind `update`'s head outlives the entries it replaced. Only
    /// a list whose reads never return expired entries gets one, and only if the mark has
    /// covered it since it was created (a new state gets its mark now; a state written before
    /// marks existed has none and keeps the reading `update`). A list holding a mark may hold
    /// heads written under other settings: registering with a visibility that returns expired
    /// entries, or in another time domain than its mark's (whose times say nothing of this
    /// domain's clock, so stamping with the mark would keep every write alive for as long as
    /// the two clocks differ), its heads are folded into ordinary runs first and the mark
    /// dropped. A mark whose domain is not recorded is taken as this registration's.
    fn list_floor(
        &self,
        name: &str,
        config: &crate::ttl::TtlConfig,
        created: bool,
        table: &Table,
        clock: &Arc<dyn Clock>,
    ) -> Result<Option<Arc<StampFloor>>> {
        let meta = &self.inner.meta;
        let key = crate::meta::ttl_floor_key(name);
        let mark = crate::meta::read_ttl_mark(meta, &key)?;
        let heads = config.visibility == crate::ttl::Visibility::NeverReturnExpired
            || config.update_type == UpdateType::Disabled;
        let other_domain = mark
            .and_then(|m| m.domain)
            .is_some_and(|d| d != config.time_domain);
        if !heads || other_domain {
            if mark.is_some() {
                let folded = crate::state::fold_list_heads(
                    table,
                    self.inner.max_parallelism,
                    self.inner.key_groups,
                )?;
                tracing::info!(state = name, folded, "list heads folded into runs");
                meta.delete(&key)?;
            }
            return Ok(None);
        }
        let stamp = match (created, mark) {
            (true, _) => 0,
            (false, None) => return Ok(None),
            (false, Some(m)) => m.stamp,
        };
        if created || mark.is_some_and(|m| m.domain.is_none()) {
            let mark = crate::meta::TtlMark {
                stamp,
                domain: Some(config.time_domain),
            };
            meta.put(&key, &mark.encode())?;
        }
        Ok(Some(Arc::new(StampFloor::new(
            meta.clone(),
            name,
            Arc::clone(clock),
            stamp,
            config.time_domain,
        ))))
    }

    /// A handle core for persisted state `meta`: the registered one if registered in this
    /// session, else a fresh one without TTL knowledge that is not registered (so a later typed
    /// registration still installs its TTL settings). Creates the state when new.
    pub(crate) fn core_for(&self, meta: &StateMeta) -> Result<Arc<StateCore>> {
        if let Some(core) = self.inner.states.lock().get(&meta.name) {
            if !same_state(&core.meta, meta) {
                return Err(mismatch_error(&core.meta, meta));
            }
            return Ok(Arc::clone(core));
        }
        let (table, _, meta) = self.persist_state(meta)?;
        Ok(Arc::new(self.new_core(table, meta, None)))
    }

    fn new_core(&self, table: Table, meta: StateMeta, ttl: Option<TtlRuntime>) -> StateCore {
        let list_heads = meta.kind == StateKind::List
            && crate::state::list_writes_heads(&table, ttl.as_ref(), self.changelog_mode());
        StateCore {
            list_heads,
            table,
            meta,
            key_groups: self.inner.key_groups,
            max_parallelism: self.inner.max_parallelism,
            max_value_bytes: self.inner.max_value_bytes,
            list_seq: Arc::clone(&self.inner.list_seq),
            incremental: ttl
                .as_ref()
                .filter(|t| t.config.expires())
                .filter(|_| self.inner.incremental_cleanup > 0)
                .map(|_| IncrementalCleanup::new(self.inner.incremental_cleanup)),
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
            if !same_state(&core.meta, &requested) {
                return Err(mismatch_error(&core.meta, &requested));
            }
            // The registered handle runs its first TTL settings: another set in the same
            // session would be ignored without a word (a reopen may change them).
            let registered = core.ttl.as_ref().map(|t| &t.config);
            if registered != desc.ttl.as_ref() {
                return Err(Error::StateMismatch {
                    name: name.to_string(),
                    existing: format!("TTL {registered:?}"),
                    requested: format!("TTL {:?} (TTL settings change at a reopen)", desc.ttl),
                });
            }
            return Ok(Arc::clone(core));
        }
        let (table, created, requested) = self.persist_state(&requested)?;
        let ttl = match desc.ttl {
            None => None,
            Some(config) => {
                let clock: Arc<dyn Clock> = match config.time_domain {
                    TimeDomain::ProcessingTime => Arc::clone(&self.inner.clock),
                    TimeDomain::EventTime => Arc::new(self.inner.watermark.clone()),
                };
                let floor = match (kind, &table) {
                    (StateKind::List, Table::Rocks(_)) => {
                        self.list_floor(name, &config, created, &table, &clock)?
                    }
                    _ => None,
                };
                Some(TtlRuntime {
                    ttl_ms: config.ttl_ms(),
                    clock,
                    counters: Arc::new(TtlCounters::default()),
                    config,
                    floor,
                })
            }
        };
        if let Table::Rocks(cf) = &table {
            let mut filter = CfFilter {
                stamped: ttl.is_some(),
                ..CfFilter::default()
            };
            let mut periodic_secs = None;
            if let Some(t) = &ttl {
                // In changelog mode a compaction's drop is not logged; a cleared row is
                // (`StateCore::log_row_cleared`), so a replay onto a materialization that
                // still holds a dropped entry deletes it where the row was cleared.
                if t.config.cleanup.compaction_filter && t.config.expires() {
                    filter.ttl = Some(TtlFilter {
                        ttl_ms: t.ttl_ms,
                        clock: Arc::clone(&t.clock),
                        refresh_every: t.config.cleanup.refresh_every,
                        counters: Arc::clone(&t.counters),
                    });
                    // RocksDB counts whole seconds and reads 0 as off: a period under a
                    // second (not zero) is one second, not off.
                    let period = t.config.cleanup.periodic_compaction;
                    periodic_secs = Some(
                        period
                            .as_secs()
                            .saturating_add(u64::from(period.subsec_nanos() > 0)),
                    );
                    if t.config.visibility == crate::ttl::Visibility::ReturnExpiredIfNotCleanedUp {
                        cf.keep_out_of_value_cache()?;
                    }
                }
            }
            if kind == StateKind::List {
                // Lists are read only by scans, which never consult the value cache: their
                // entries there would only take the room of values that point reads find
                // (docs/decisions/0033-list-runs.md).
                cf.keep_out_of_value_cache()?;
                cf.tune_for_scans()?;
                // Every list may hold heads (one written under other settings too), so its
                // compactions drop what they made dead; not in changelog mode, where such a
                // drop is not logged and a restore replays the log onto a materialization
                // that still holds the entry: a `clear` after the drop finds nothing to
                // delete there, and the entry would be read again once its head is gone.
                if !self.changelog_mode() {
                    filter.dead_list_entries = Some(self.inner.max_parallelism);
                }
            }
            if filter.ttl.is_some() || filter.dead_list_entries.is_some() {
                cf.set_filter(filter, periodic_secs)?;
            }
        }
        let core = Arc::new(self.new_core(table, requested, ttl));
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

    /// The state registered as `name`, or [`Error::InvalidStateName`] when there is none.
    pub(crate) fn registered(&self, name: &str) -> Result<Arc<StateCore>> {
        self.inner
            .states
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::InvalidStateName(format!("{name} (not registered)")))
    }

    /// Visits every stored entry of registered state `name` in key group `key_group`, in key
    /// order, until `f` returns `Ok(false)` (savepoints and rescaling walk state this way).
    /// Values are as stored: TTL states' values start with their 8-byte timestamp. A list's
    /// entries are as stored too: after a blind `update` its head (empty suffix, a value of
    /// the TTL timestamp if any, the head's 8-byte sequence number and a run) and, until a
    /// read deletes them or a
    /// compaction drops them, the entries the head replaced (docs/decisions/0034). A key
    /// group at or above the max parallelism is [`Error::InvalidKeyGroups`], one below it
    /// that this backend does not own [`Error::KeyGroupOutOfRange`].
    pub fn scan_key_group(
        &self,
        name: &str,
        key_group: u16,
        f: impl FnMut(RawEntry<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.registered(name)?.scan_key_group(key_group, f)
    }

    /// Advances the event-time watermark that event-time TTL states expire against. It never
    /// moves backwards. A checkpoint, a savepoint and a close keep it with the state: a
    /// reopened, restored or rescaled backend starts at the watermark it had (the highest of
    /// a rescale's sources or of the savepoints it loaded), not at 0.
    pub fn advance_watermark(&self, watermark_ms: u64) {
        self.inner.watermark.set(watermark_ms);
    }

    /// Writes the watermark to the metadata if it moved since it was last written.
    fn persist_watermark(&self) -> Result<()> {
        let now = self.inner.watermark.now_ms();
        if now > self.inner.watermark_persisted.load(Ordering::Acquire) {
            self.inner.meta.put(META_WATERMARK, &now.to_be_bytes())?;
            self.inner
                .watermark_persisted
                .fetch_max(now, Ordering::AcqRel);
        }
        Ok(())
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
    /// background compaction would eventually, running the TTL filter over every entry. A
    /// no-op on the heap backend (no compaction filter there; see docs/heap-backend.md).
    pub fn compact_state(&self, name: &str) -> Result<()> {
        self.registered(name)?.table.compact_all()
    }

    /// A RocksDB integer property of state `name`'s column family, e.g.
    /// `rocksdb.estimate-num-keys` or `rocksdb.live-sst-files-size`. The heap backend answers
    /// only `rocksdb.estimate-num-keys` (exactly) and `None` for the rest.
    pub fn state_property(&self, name: &str, property: &str) -> Result<Option<u64>> {
        self.registered(name)?.table.property_u64(property)
    }

    /// Flushes memtables to disk. With the WAL off (the default), state written since the last
    /// flush or checkpoint is lost on a crash; `close` flushes too.
    /// A no-op on the heap backend.
    pub fn flush(&self) -> Result<()> {
        match &self.inner.engine {
            Engine::Rocks(db) => db.flush_all(),
            Engine::Heap { .. } => Ok(()),
        }
    }

    /// Flushes memtables and waits until RocksDB has no compaction pending or running (for
    /// benchmarks and tests that want a quiescent database).
    pub fn wait_for_compactions(&self) -> Result<()> {
        match &self.inner.engine {
            Engine::Rocks(db) => db.wait_for_compactions(),
            Engine::Heap { .. } => Ok(()),
        }
    }

    /// Waits until the files the savepoint restores, rescale rewrites and changelog replays
    /// into this backend wrote so far are read into the page cache
    /// (`DbOptions::warm_restored_files`; reads and writes do not wait for it): for a job that
    /// wants its state's first reads served from memory, and for benchmarks and tests.
    /// Returns at once where nothing is being warmed.
    pub fn wait_for_page_cache_warming(&self) {
        if let Engine::Rocks(db) = &self.inner.engine {
            db.wait_for_warming();
        }
    }

    /// Closes the backend: writes out every cached write, flushes the memtables and closes
    /// RocksDB, releasing its directory lock and the backend's shares of the memory budget, so
    /// the same path can be opened again at once. It closes the backend for every clone and
    /// state handle: they may stay alive, and each later call through them returns an error of
    /// kind [`crate::ErrorKind::Closed`] (checkpoint notifications and sweeps too: they change
    /// nothing in storage). Waits for calls in flight on other threads (a
    /// state callback must not call it: it would wait for itself). The heap backend drops its
    /// tables (savepoints already taken keep their copy). Closing twice does nothing more. On
    /// an error the backend stays open, so nothing cached is lost: retry, or drop it (the
    /// drop writes everything out too). A flush refused for want of disk space is tried
    /// again for a few seconds: RocksDB takes writes again only once it has seen the space
    /// come back.
    pub fn close(&self) -> Result<()> {
        match &self.inner.engine {
            Engine::Rocks(db) => {
                match self.persist_watermark() {
                    // Closed already (through another clone): closing again does nothing.
                    Ok(()) | Err(Error::Closed { .. }) => {}
                    Err(e) => return Err(e),
                }
                db.close()?;
                if let Some(cp) = self.checkpointer() {
                    cp.close();
                }
                Ok(())
            }
            Engine::Heap { tables, .. } => {
                if let Table::Heap(meta) = &self.inner.meta {
                    meta.close();
                }
                for table in tables.lock().values() {
                    table.close();
                }
                Ok(())
            }
        }
    }
}

/// The TTL-mark hook of a savepoint target that restores nothing (a savepoint being written).
fn no_restore(_: &str, _: u64) -> Result<()> {
    Ok(())
}

fn type_name<T>() -> &'static str {
    std::any::type_name::<T>()
}

/// Checkpoint configuration and restore (the logic lives in `checkpoint` and `restore`).
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

    /// This backend is a task of a job whose coordinator, in this process, completes its
    /// checkpoints through `owner` (`docs/ownership.md`): `notify_checkpoint_complete` then
    /// writes no job record and deletes nothing, and the owner's garbage passes see this
    /// backend's attempts in flight. Without this (or [`BackendBuilder::job_coordinated`]) a
    /// backend is a job of one task with its own owner.
    pub fn job_owner(mut self, owner: Arc<crate::checkpoint::JobOwner>) -> Self {
        self.ownership = crate::checkpoint::Ownership::Job(Some(owner));
        self
    }

    /// The clock checkpoint storage ages are read on (default: the wall clock): the time a
    /// shared file's put began and a restore pin's time, and, for a backend without a
    /// coordinator, its owner's garbage decisions. A backend linked to a job owner
    /// ([`BackendBuilder::job_owner`]) uses that owner's clock instead. Separate from
    /// [`BackendBuilder::clock`] (processing time for TTL), which tests and engines often
    /// drive by hand.
    pub fn checkpoint_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.checkpoint_clock = clock;
        self
    }

    /// Restores from `source` instead of the checkpoint storage, without claiming (Flink's
    /// NO_CLAIM): the restored checkpoint belongs to another job and is never deleted by this
    /// one, and the first checkpoint into this backend's own storage reuses none of its files.
    pub fn restore_source(mut self, source: Arc<dyn CheckpointStorage>) -> Self {
        self.restore_source = Some(source);
        self
    }

    /// This backend is a task of a job whose owner lives in another process (it commits the
    /// job records and deletes); see [`BackendBuilder::job_owner`]. That owner cannot see this
    /// backend's uploads in flight: start checkpoint `e` only once checkpoint `e - retained`
    /// completed, or the owner may delete a file `e` reuses and reject its commit
    /// (`docs/ownership.md` §4).
    pub fn job_coordinated(mut self) -> Self {
        self.ownership = crate::checkpoint::Ownership::Job(None);
        self
    }

    /// Shares the shared SSTs this restore fetches with the other restores given the same
    /// [`crate::SharedFetches`], and links theirs: with the instances of a job in one process
    /// restoring from the same checkpoint (a 1 -> 2 rescale gives both halves every SST that
    /// spans both), each file is fetched once. Without it, a restore shares only within
    /// itself (a file several of its sources list).
    pub fn shared_fetches(mut self, shared: crate::SharedFetches) -> Self {
        self.shared_fetches = Some(shared);
        self
    }

    /// After a rescaling restore, also compact the clipped key-group ranges (drops their data
    /// from disk now instead of at the next natural compaction; the rewritten files make the
    /// first checkpoint upload more). Default false.
    pub fn compact_clipped(mut self, compact: bool) -> Self {
        self.compact_clipped = compact;
        self
    }

    /// Restores a checkpoint from the configured storage into this builder's (empty or
    /// missing) directory: downloads every file in parallel, verifies size, CRC-32 and (for
    /// SSTs) footer, properties and unique id against the manifest, then opens. The max
    /// parallelism must equal the checkpoint's; the key-group range may differ (rescaling):
    /// the manifests of the checkpoint that overlap the range are merged and clipped (see
    /// `crate::restore`). The restored backend gets a new backend id and keeps the base
    /// checkpoint's files as its reuse base, so its next checkpoint is incremental.
    pub fn restore(self, from: RestoreFrom) -> Result<KeyedBackend> {
        self.restore_with_report(from).map(|(backend, _)| backend)
    }

    /// [`restore`](Self::restore), also reporting how many bytes came from this machine's
    /// local copy (local recovery, `CheckpointOptions::local_recovery`) and how many were
    /// downloaded.
    pub fn restore_with_report(
        self,
        from: RestoreFrom,
    ) -> Result<(KeyedBackend, crate::checkpoint::RestoreReport)> {
        if self.kind == BackendKind::Heap {
            return Err(Error::Unsupported(
                "checkpoints of the heap backend (use savepoints)".into(),
            ));
        }
        let params = self.restore_params();
        crate::restore::restore(params, from, |restored| {
            let backend = self.open_inner(Some(restored))?;
            let states = backend.states()?;
            Ok((backend, states))
        })
    }

    fn restore_params(&self) -> RestoreParams {
        RestoreParams {
            path: self.path.clone(),
            max_parallelism: self.max_parallelism,
            key_groups: self.key_groups,
            storage: self.checkpoint_storage.clone(),
            source: self.restore_source.clone(),
            transfer_threads: self.checkpoint_options.transfer_threads,
            options: self.options.clone(),
            budget: self.budget.clone(),
            compact_clipped: self.compact_clipped,
            staging_dir: self.checkpoint_options.staging_dir.clone(),
            local_recovery: self.checkpoint_options.local_recovery,
            replay_batch_bytes: self.checkpoint_options.changelog.replay_batch_bytes,
            shared_fetches: self.shared_fetches.clone().unwrap_or_default(),
            clock: match &self.ownership {
                crate::checkpoint::Ownership::Job(Some(owner)) => Arc::clone(owner.clock()),
                _ => Arc::clone(&self.checkpoint_clock),
            },
        }
    }
}

/// Savepoints: the facade over `crate::savepoint`, which owns the format's writer and reader
/// (`docs/savepoint-format.md`).
impl KeyedBackend {
    /// What `crate::savepoint` reads from and writes into.
    fn savepoint_target<'a>(
        &'a self,
        core_for: &'a dyn Fn(&StateMeta) -> Result<Arc<StateCore>>,
        raise_ttl_floor: &'a dyn Fn(&str, u64) -> Result<()>,
    ) -> Result<SavepointTarget<'a>> {
        Ok(SavepointTarget {
            max_parallelism: self.max_parallelism(),
            key_groups: self.key_groups(),
            db: match &self.inner.engine {
                Engine::Rocks(db) => Some(db),
                Engine::Heap { .. } => None,
            },
            path: self.path(),
            list_seq: &self.inner.list_seq,
            clock: self.inner.clock.as_ref(),
            watermark: &self.inner.watermark,
            states: self.states()?,
            core_for,
            raise_ttl_floor,
        })
    }

    /// Stores a TTL timestamp mark of at least `stamp` for list state `name`, where its
    /// registration will read it (a savepoint restores only into a backend that has
    /// registered no state).
    fn raise_ttl_floor(&self, name: &str, stamp: u64) -> Result<()> {
        let key = crate::meta::ttl_floor_key(name);
        // The savepoint does not record the time domain: the mark keeps the one it has, if
        // any, and the next registration takes it as its own otherwise.
        let mark = match crate::meta::read_ttl_mark(&self.inner.meta, &key)? {
            Some(m) if m.stamp >= stamp => return Ok(()),
            Some(m) => crate::meta::TtlMark { stamp, ..m },
            None => crate::meta::TtlMark {
                stamp,
                domain: None,
            },
        };
        self.inner.meta.put(&key, &mark.encode())
    }

    /// Writes every state of this backend into a canonical savepoint at `path` (created; an
    /// existing file is an error: savepoints are never overwritten). The file is written as
    /// `.<name>.partial-<random>` beside `path` and linked to `path` once complete and
    /// durable: a process killed midway leaves no file under the name, and the next write to
    /// it removes the partial one. On RocksDB the states are
    /// read live while the call runs: call it where the task is not writing, as at a barrier
    /// (writes other threads make meanwhile may or may not be in it). The heap backend's is a
    /// point-in-time view ([`KeyedBackend::full_snapshot`]). Memory stays bounded by a few
    /// blocks of about 4 MiB per encoder thread, whatever the state's size or a key group's
    /// (docs/savepoint-format.md); only a single entry above the format's 1 GiB block is
    /// refused, with [`Error::ValueTooLarge`], and then no file is left.
    pub fn write_savepoint(&self, path: &Path) -> Result<SavepointStats> {
        self.write_savepoint_with(path, &OperatorState::new())
    }

    /// [`KeyedBackend::write_savepoint`], also storing the operator's non-keyed state. On the
    /// heap backend this is [`KeyedBackend::full_snapshot`] then
    /// [`FullSnapshot::write_savepoint`] on the calling thread.
    pub fn write_savepoint_with(
        &self,
        path: &Path,
        operator_state: &OperatorState,
    ) -> Result<SavepointStats> {
        self.snapshot_view()?.write_savepoint(path, operator_state)
    }

    /// The view a savepoint is written from (`crate::savepoint::snapshot_view`). On the heap,
    /// the states are listed again if one registered since their listing holds entries by
    /// the time the gate is held: its writes may precede others the view holds.
    fn snapshot_view(&self) -> Result<FullSnapshot> {
        let core_for = |m: &StateMeta| self.core_for(m);
        let unlisted = |listed: &[StateMeta]| match &self.inner.engine {
            Engine::Heap { tables, .. } => tables
                .lock()
                .iter()
                .any(|(name, t)| !t.is_empty_ungated() && !listed.iter().any(|m| m.name == *name)),
            Engine::Rocks(_) => false,
        };
        loop {
            let target = self.savepoint_target(&core_for, &no_restore)?;
            if let Some(view) = crate::savepoint::snapshot_view(&target, &unlisted)? {
                return Ok(view);
            }
        }
    }

    /// A point-in-time view of a heap backend's keyed state for a savepoint, taken
    /// copy-on-write: every state's map is cloned in O(1) and the current time is fixed for
    /// full-snapshot TTL cleanup, so the view holds exactly the state at this call. Move it to
    /// another thread and call [`FullSnapshot::write_savepoint`] while the task keeps writing.
    /// A RocksDB backend answers [`Error::Unsupported`]: use [`KeyedBackend::write_savepoint`]
    /// or checkpoints there.
    pub fn full_snapshot(&self) -> Result<FullSnapshot> {
        if self.kind() != BackendKind::Heap {
            return Err(Error::Unsupported(
                "full_snapshot of a RocksDB backend (use write_savepoint or snapshot)".into(),
            ));
        }
        self.snapshot_view()
    }

    /// Loads the savepoint at `path` into this backend, which must hold no state yet. Only key
    /// groups in this backend's range are loaded, so any parallelism works; the max parallelism
    /// must match. The file's header and index, and every block of this backend's key groups,
    /// are verified before anything is written (blocks of other key groups are not read): a
    /// corrupt savepoint is a typed error and leaves the backend's data untouched. The
    /// restored files are then read into the page cache beside the job where they fit in
    /// memory (`DbOptions::warm_restored_files`,
    /// [`KeyedBackend::wait_for_page_cache_warming`]).
    pub fn restore_savepoint(&self, path: &Path) -> Result<SavepointStats> {
        self.restore_savepoints(&[path])
    }

    /// Loads the savepoints of several old instances (one file each, e.g. the two halves of a
    /// parallelism-2 job) into this empty backend, keeping only this backend's key groups: the
    /// restore side of rescaling through savepoints. The files' key-group ranges must not
    /// overlap and together must hold every key group of this backend
    /// ([`Error::InvalidKeyGroups`] names the missing ones), their max parallelism must be
    /// this backend's, and their state metadata must agree. Every file's header and index,
    /// and every block of this backend's key groups, are verified before anything is
    /// written. Calls on one backend run one after another: a second one then finds the
    /// first one's state and is refused.
    pub fn restore_savepoints(&self, paths: &[&Path]) -> Result<SavepointStats> {
        // Restores one at a time: two started together (a retried call on another thread)
        // both passed the emptiness check and both ingested, every list twice.
        let _one_at_a_time = self.inner.restoring_savepoint.lock();
        let core_for = |m: &StateMeta| self.core_for(m);
        let raise = |name: &str, stamp: u64| self.raise_ttl_floor(name, stamp);
        let stats = crate::savepoint::restore_savepoints(
            &self.savepoint_target(&core_for, &raise)?,
            paths,
        )?;
        self.persist_watermark()?;
        Ok(stats)
    }
}

/// Checkpoints: the facade over `crate::checkpoint`, which owns the snapshot, upload and
/// bookkeeping (`docs/checkpoint-format.md`, `docs/ownership.md`).
impl KeyedBackend {
    fn checkpoint_ctx(&self) -> Result<&Arc<Checkpointer>> {
        self.database()?;
        let cp = self.checkpointer().ok_or(Error::NoCheckpointStorage)?;
        // A clone of a closed backend changes nothing in storage: its directory may be open
        // again, with an owner of its own.
        if cp.is_closed() {
            return Err(Error::Closed {
                path: self.path().to_path_buf(),
            });
        }
        Ok(cp)
    }

    /// The sync phase of checkpoint `checkpoint_id` (ids must increase): a RocksDB checkpoint
    /// (memtables flushed, SSTs hard-linked) into a local staging directory, plus the state
    /// metadata. Short; the task may keep reading and writing as soon as it returns. Move the
    /// result to another thread and call [`PendingSnapshot::upload`].
    pub fn snapshot(&self, checkpoint_id: u64) -> Result<PendingSnapshot> {
        self.snapshot_with(checkpoint_id, &OperatorState::new())
    }

    /// [`KeyedBackend::snapshot`], also storing the operator's non-keyed state (as of this
    /// call) in the checkpoint's manifest; read it back with
    /// [`crate::checkpoint::read_operator_states`].
    pub fn snapshot_with(
        &self,
        checkpoint_id: u64,
        operator_state: &OperatorState,
    ) -> Result<PendingSnapshot> {
        let started = std::time::Instant::now();
        let cp = self.checkpoint_ctx()?;
        self.persist_watermark()?;
        let states = self.states()?;
        crate::checkpoint::begin_snapshot(
            SnapshotSource {
                started,
                cp,
                db: self.database()?,
                key_groups: self.key_groups(),
                max_parallelism: self.max_parallelism(),
                states: &states,
                metrics: self.checkpoint_metrics_cell(),
            },
            checkpoint_id,
            operator_state,
        )
    }

    /// Sync and async phase on the calling thread: `snapshot(id)?.upload()`.
    pub fn checkpoint(&self, checkpoint_id: u64) -> Result<CheckpointStats> {
        self.snapshot(checkpoint_id)?.upload()
    }

    /// Sync and async phase on the calling thread, with operator state:
    /// `snapshot_with(id, operator_state)?.upload()`.
    pub fn checkpoint_with(
        &self,
        checkpoint_id: u64,
        operator_state: &OperatorState,
    ) -> Result<CheckpointStats> {
        self.snapshot_with(checkpoint_id, operator_state)?.upload()
    }

    /// Checkpoint `checkpoint_id` completed (job-wide): it becomes the base SSTs are reused
    /// from, and uploaded checkpoints with smaller ids can never complete any more. A backend
    /// without a coordinator is a job of one task: this writes its job record (the commit
    /// point, after checking that every file the manifest names is in storage) and lets its
    /// owner delete the subsumed checkpoints beyond the newest `retained` and every leftover
    /// no retained checkpoint needs. A backend of a coordinated job deletes nothing here (the
    /// job's [`JobOwner`] does). A late notification (id not newer than the last completed)
    /// is ignored; an id this backend has not finished uploading is
    /// [`Error::UnknownCheckpoint`] and changes nothing. A deletion error is returned after
    /// the completion itself took effect.
    pub fn notify_checkpoint_complete(&self, checkpoint_id: u64) -> Result<()> {
        crate::checkpoint::complete(self.checkpoint_ctx()?, checkpoint_id, self.key_groups())
    }

    /// Checkpoint `checkpoint_id` was aborted: deletes exactly what that attempt uploaded (its
    /// new shared files and its checkpoint directory). An attempt still uploading stops and
    /// cleans up itself (its `upload` returns [`Error::CheckpointAborted`]). Completed or
    /// unknown ids are ignored.
    pub fn notify_checkpoint_aborted(&self, checkpoint_id: u64) -> Result<()> {
        crate::checkpoint::abort(self.checkpoint_ctx()?, checkpoint_id)
    }

    /// The owner's sweep ([`JobOwner::sweep`]): deletes what can never be needed again and,
    /// once `min_age` old by the backend's clock, leftovers that may belong to an attempt in
    /// flight (shared files by the time their put began, directories without a manifest,
    /// restore pins). A backend of a job whose owner lives in another process is
    /// [`Error::Unsupported`]: that owner sweeps.
    pub fn sweep_orphans(&self, min_age: Duration) -> Result<SweepStats> {
        crate::checkpoint::sweep(self.checkpoint_ctx()?, min_age)
    }

    /// A bare RocksDB checkpoint of this backend into `dir` (must not exist), without any
    /// registry work: the baseline `rockstate-bench checkpoint` compares the sync phase with.
    #[doc(hidden)]
    pub fn bare_rocksdb_checkpoint(&self, dir: &Path) -> Result<()> {
        self.database()?.checkpoint(dir)
    }

    /// The last completed (or restored-from) checkpoint id.
    pub fn last_completed_checkpoint(&self) -> Option<u64> {
        self.checkpointer().and_then(|c| c.last_completed())
    }

    /// Retained completed checkpoints `(id, backend id)`, oldest first: the job records the
    /// owner keeps, with this backend's id where the record names a manifest of this backend
    /// and the first named backend otherwise. Empty when the owner lives in another process.
    pub fn retained_checkpoints(&self) -> Vec<(u64, String)> {
        self.checkpointer()
            .map(|c| crate::checkpoint::retained(c, self.backend_id()))
            .unwrap_or_default()
    }

    /// The job owner this backend's checkpoints are completed by, when it lives in this
    /// process (its own for a backend without a coordinator).
    pub fn job_owner(&self) -> Option<Arc<JobOwner>> {
        self.checkpointer().and_then(|c| c.owner().cloned())
    }
}

/// Crate-internal access for the modules under the facade.
impl KeyedBackend {
    /// This backend's id: random, persisted in the database, new for a restored backend.
    pub fn backend_id(&self) -> &str {
        &self.inner.backend_id
    }

    pub(crate) fn checkpointer(&self) -> Option<&Arc<Checkpointer>> {
        self.inner.checkpointer.as_ref()
    }

    /// The RocksDB instance; [`Error::Unsupported`] for a heap backend.
    pub(crate) fn database(&self) -> Result<&Arc<Db>> {
        match &self.inner.engine {
            Engine::Rocks(db) => Ok(db),
            Engine::Heap { .. } => Err(Error::Unsupported(
                "the heap backend has no RocksDB: no checkpoints (use savepoints) and no RocksDB metrics".into(),
            )),
        }
    }

    pub(crate) fn checkpoint_metrics_cell(&self) -> &Arc<Mutex<crate::metrics::CheckpointMetrics>> {
        &self.inner.checkpoint_metrics
    }

    /// This backend's RocksDB and checkpoint figures (plain data; see [`crate::metrics`]).
    /// A heap backend has neither: [`Error::Unsupported`].
    pub fn metrics(&self) -> Result<crate::metrics::BackendMetrics> {
        let rocksdb = self.database()?.metrics()?;
        let mut checkpoint = self.inner.checkpoint_metrics.lock().clone();
        checkpoint.last_completed = self.last_completed_checkpoint();
        Ok(crate::metrics::BackendMetrics {
            rocksdb,
            checkpoint,
        })
    }
}
