//! `rockstate-bench ops`: the foundation workload through rockstate's value state and through
//! raw rust-rocksdb opened with the same options, phase by phase in one process, so the ratio
//! is measured under the same machine conditions (`rockstate::RawRocksDb`, the database
//! layer's baseline, so no `rocksdb::` type is named here).
//!
//! `--backend heap` runs the same phases through the heap backend, against plain
//! `BTreeMap<Vec<u8>, Vec<u8>>` baselines (raw keys, and rockstate's key layout), then times a
//! copy-on-write snapshot of the whole state into a savepoint while the task keeps updating.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rockstate::{
    CodecId, DbOptions, KeyGroupRange, KeyedBackend, MemoryBudget, MemoryBudgetConfig,
    RawValueState,
};

use crate::report::Line;
use crate::support::io;

/// Arguments of `bench ops`.
#[derive(clap::Args, Debug)]
pub struct OpsArgs {
    /// Number of keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Which backend runs the workload.
    #[arg(long, value_enum, default_value_t = BenchBackend::Rocksdb)]
    backend: BenchBackend,
    /// Overrides of the RocksDB options (applied to both sides) as JSON, e.g.
    /// `{"block_size":4096}`; fields not given keep their defaults.
    #[arg(long)]
    options: Option<String>,
    /// Overrides of the memory budget as JSON, e.g. `{"cache":"Lru"}`.
    #[arg(long)]
    budget: Option<String>,
    /// Skip the second pass that runs the workload through rockstate alone (one database in
    /// the process, as a Flink task has) for absolute figures, and the reference pass after it.
    #[arg(long)]
    no_solo: bool,
    /// Skip the reference pass (raw rust-rocksdb in the reference configuration).
    #[arg(long)]
    no_reference: bool,
    /// Skip the interleaved comparison pass (ratios); run the solo pass only.
    #[arg(long, conflicts_with = "no_solo")]
    solo_only: bool,
    /// Draw the existing keys of update, get and read-modify-write from a Zipf distribution
    /// with this exponent (0.99 is YCSB's) instead of uniformly: a few keys are hot, as in
    /// most keyed streams. Key ranks are scattered over the key space, so hot keys sit in
    /// every key group. get_missing stays uniform.
    #[arg(long)]
    zipf: Option<f64>,
    /// Operations of each phase after the insert (default: as many as keys; at most that).
    #[arg(long)]
    ops: Option<u64>,
    /// The order the insert phase writes the keys in.
    #[arg(long, value_enum, default_value_t = InsertOrder::Shuffled)]
    insert_order: InsertOrder,
    /// Gives rockstate's value state a TTL of a week (nothing expires during the run; every
    /// access pays the timestamp and its check); the raw baselines store the values as they
    /// are.
    #[arg(long)]
    ttl: bool,
    /// Operator instances per store in the comparison pass: the 128 key groups split among
    /// this many rockstate backends sharing one memory budget, and as many raw databases
    /// sharing another of the same size, each key going to the instance that owns its key
    /// group, as an engine runs its parallel operator instances in one process. The memory is
    /// the budget's whatever the count; `files_before` are the first instance's.
    #[arg(long, default_value_t = 1)]
    instances: u32,
}

/// The order of the insert phase's keys (docs/decisions/0039-shuffled-insert-order.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InsertOrder {
    /// Every key once, in an order scattered over the key space, as a stream's new keys
    /// arrive: neither store gets its keys sorted.
    Shuffled,
    /// Keys 0..N in order, their big-endian bytes ascending: sorted for a store of raw keys
    /// (RocksDB then appends to its memtable and flushes files that never overlap), scattered
    /// for a store whose keys start with their key group (rockstate's, Flink's). Flink's side
    /// of `scripts/flink-bench.sh` inserts in this order.
    Ascending,
}

impl InsertOrder {
    /// The order's name as the option spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            InsertOrder::Shuffled => "shuffled",
            InsertOrder::Ascending => "ascending",
        }
    }
}

/// The state `bench ops` runs on: a raw value state named `bench`, with a week's TTL when
/// `ttl`.
pub(crate) fn bench_state(backend: &KeyedBackend, ttl: bool) -> rockstate::Result<RawValueState> {
    let codec = CodecId::new("bytes", 1);
    if ttl {
        let ttl = rockstate::TtlConfig::new(std::time::Duration::from_secs(7 * 24 * 3600));
        backend.raw_value_state(
            rockstate::StateDescriptor::new("bench").with_ttl(ttl),
            codec,
        )
    } else {
        backend.raw_value_state("bench", codec)
    }
}

/// The backend `bench ops` measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchBackend {
    /// RocksDB, against raw rust-rocksdb.
    Rocksdb,
    /// The heap backend, against a plain BTreeMap.
    Heap,
}

/// Parses a JSON override of a serde-default settings struct.
pub(crate) fn parse_override<T: serde::de::DeserializeOwned + Default>(
    what: &'static str,
    json: Option<&str>,
) -> rockstate::Result<T> {
    match json {
        None => Ok(T::default()),
        Some(j) => serde_json::from_str(j).map_err(|e| rockstate::Error::Decode {
            what,
            detail: e.to_string(),
        }),
    }
}

/// Raw rust-rocksdb. With `same_layout`, keys are stored in rockstate's layout
/// (`[key group][len][key][len][namespace]`), so only rockstate's code path differs.
pub(crate) struct Raw {
    pub(crate) db: rockstate::RawRocksDb,
    pub(crate) same_layout: bool,
}

/// A baseline's stored key: the raw key, or with `same_layout` rockstate's layout
/// (`[key group][len][key][len][namespace]`, max parallelism 128, empty namespace).
fn baseline_key(key: &[u8], same_layout: bool) -> Vec<u8> {
    if !same_layout {
        return key.to_vec();
    }
    let mut k = Vec::with_capacity(key.len() + 4);
    let group = rockstate::keygroup::key_group_of(key, 128);
    rockstate::codec::write_key_prefix(&mut k, group, 128, key, &[]);
    k
}

impl Raw {
    fn key(&self, key: &[u8]) -> Vec<u8> {
        baseline_key(key, self.same_layout)
    }
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>> {
        self.db.get(&self.key(key))
    }
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()> {
        self.db.put(&self.key(key), value)
    }
    /// SST files per non-empty level, as `L<n>:<files>` joined by commas.
    pub(crate) fn files(&self) -> String {
        levels(|p| self.db.property_u64(p).ok().flatten())
    }
    pub(crate) fn settle(&self) -> rockstate::Result<()> {
        self.db.wait_for_compactions()
    }
}

/// `L<n>:<files>` for every non-empty level, from RocksDB's `num-files-at-level<n>` property.
pub(crate) fn levels(property: impl Fn(&str) -> Option<u64>) -> String {
    (0..7)
        .filter_map(|l| {
            let n = property(&format!("rocksdb.num-files-at-level{l}"))?;
            (n > 0).then(|| format!("L{l}:{n}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A store the phases run on: rockstate's value state or a baseline.
pub(crate) trait Store {
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>>;
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()>;
}

impl Store for Raw {
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>> {
        Raw::get(self, key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()> {
        Raw::put(self, key, value)
    }
}

impl Store for RawValueState {
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>> {
        RawValueState::get(self, key, &[])
    }
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()> {
        RawValueState::put(self, key, &[], value)
    }
}

/// Stores of one kind, each owning a share of the 128 key groups; a key goes to the one that
/// owns its key group.
pub(crate) struct Sharded<S> {
    parts: Vec<S>,
    /// Per key group, the index of its store.
    owner: Vec<usize>,
}

impl<S> Sharded<S> {
    /// The stores `open` makes for the key-group ranges of `instances` operator instances of
    /// max parallelism 128 (instance index and range).
    fn open(
        instances: u32,
        mut open: impl FnMut(usize, KeyGroupRange) -> rockstate::Result<S>,
    ) -> rockstate::Result<Self> {
        let mut parts = Vec::new();
        let mut owner = vec![0; 128];
        for i in 0..instances {
            let range = KeyGroupRange::for_operator(128, instances, i)?;
            for g in range.iter() {
                owner[g as usize] = i as usize;
            }
            parts.push(open(i as usize, range)?);
        }
        Ok(Sharded { parts, owner })
    }

    fn part(&self, key: &[u8]) -> &S {
        &self.parts[self.owner[rockstate::keygroup::key_group_of(key, 128) as usize]]
    }
}

impl<S: Store> Store for Sharded<S> {
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>> {
        self.part(key).get(key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()> {
        self.part(key).put(key, value)
    }
}

/// One phase of the workload.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Insert,
    Update,
    Get,
    GetMissing,
    ReadModifyWrite,
}

impl Phase {
    pub(crate) const ALL: [Phase; 5] = [
        Phase::Insert,
        Phase::Update,
        Phase::Get,
        Phase::GetMissing,
        Phase::ReadModifyWrite,
    ];
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Insert => "insert",
            Phase::Update => "update",
            Phase::Get => "get",
            Phase::GetMissing => "get_missing",
            Phase::ReadModifyWrite => "read_modify_write",
        }
    }
}

/// Number of slices a phase is cut into. The stores take turns slice by slice, so a burst of
/// load from elsewhere on a shared machine hits all of them alike instead of one whole phase.
const SLICES: u64 = 20;

/// Runs slice `slice` (of [`SLICES`]) of one phase on one store; returns the elapsed seconds
/// and how many reads found a value. Every store sees the same key sequence.
fn run_slice(
    store: &dyn Store,
    phase: Phase,
    slice: u64,
    w: &Workload,
) -> rockstate::Result<(f64, u64)> {
    let n = w.keys;
    let ops = w.ops(phase);
    let (lo, hi) = (ops * slice / SLICES, ops * (slice + 1) / SLICES);
    let mut rng = SmallRng::seed_from_u64(w.seed ^ ((phase as u64) << 32) ^ slice);
    // The slice's keys are drawn before the clock starts: a Zipf draw costs a binary search
    // over N weights, which would otherwise be timed along with the store.
    let keys: Vec<u64> = (lo..hi)
        .map(|i| match phase {
            Phase::Insert => w.inserted_key(i),
            Phase::GetMissing => rng.random_range(n..2 * n),
            Phase::Update | Phase::Get | Phase::ReadModifyWrite => w.existing_key(&mut rng, n),
        })
        .collect();
    let mut found = 0u64;
    let start = Instant::now();
    for (i, key) in (lo..hi).zip(keys) {
        let value = &w.values[(i as usize) % w.values.len()];
        let key = key.to_be_bytes();
        match phase {
            Phase::Insert | Phase::Update => store.put(&key, value)?,
            Phase::Get | Phase::GetMissing => found += u64::from(store.get(&key)?.is_some()),
            Phase::ReadModifyWrite => {
                let mut v = store.get(&key)?.unwrap_or_default();
                if let Some(b) = v.first_mut() {
                    *b = b.wrapping_add(1);
                }
                store.put(&key, &v)?;
            }
        }
    }
    Ok((start.elapsed().as_secs_f64(), found))
}

/// Runs one phase on every store, slice by slice in turn; returns ops/s per store.
/// Prints one phase's rates: ours, raw, raw with our key layout (the order of `ops`).
/// `files` (the stores' SST files per level before the phase) is printed when not empty.
fn phase_line(phase: Phase, ops: &[f64], files: &[String; 3]) {
    let (ours_ops, raw_ops, same_ops) = (ops[0], ops[1], ops[2]);
    let mut line = Line::new()
        .text("phase", phase.name())
        .num("rockstate_ops_s", ours_ops, 0)
        .num("raw_ops_s", raw_ops, 0)
        .num("ratio", ours_ops / raw_ops, 3)
        .num("raw_same_layout_ops_s", same_ops, 0)
        .num("layout_ratio", ours_ops / same_ops, 3);
    for (name, f) in [
        "files_before",
        "raw_files_before",
        "raw_same_layout_files_before",
    ]
    .into_iter()
    .zip(files)
    {
        if !f.is_empty() {
            line = line.text(name, f);
        }
    }
    line.print();
}

pub(crate) fn run_phase(
    stores: &[&dyn Store],
    phase: Phase,
    w: &Workload,
) -> rockstate::Result<Vec<f64>> {
    let mut secs = vec![0.0; stores.len()];
    let mut found = vec![0u64; stores.len()];
    for slice in 0..SLICES {
        // The store that goes first changes from slice to slice (and, through `w.rotate`,
        // from run to run), so none always runs right after another's writes.
        for j in 0..stores.len() {
            let i = (j + slice as usize + w.rotate) % stores.len();
            let (s, f) = run_slice(stores[i], phase, slice, w)?;
            secs[i] += s;
            found[i] += f;
        }
    }
    let n = w.ops(phase);
    for f in found {
        let expected = match phase {
            Phase::Get => n,
            Phase::GetMissing => 0,
            _ => f,
        };
        if f != expected {
            return Err(rockstate::Error::Decode {
                what: "benchmark",
                detail: format!("phase {} found {f} keys, expected {expected}", phase.name()),
            });
        }
    }
    Ok(secs.iter().map(|s| n as f64 / s).collect())
}

/// Runs the workload and prints one line per phase.
pub fn run(args: &OpsArgs) -> rockstate::Result<()> {
    if args.backend == BenchBackend::Heap {
        return run_heap(args);
    }
    let dir = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    let options: DbOptions = parse_override("--options", args.options.as_deref())?;
    let budget_config: MemoryBudgetConfig = parse_override("--budget", args.budget.as_deref())?;
    let workload = Workload::new(args)?;
    if args.solo_only {
        return run_solo(args, dir.path(), options, budget_config, &workload);
    }

    // One budget per kind of store, shared by its instances, as in one process.
    let instances = args.instances.max(1);
    let budget = MemoryBudget::new(budget_config.clone())?;
    let backends = Sharded::open(instances, |i, range| {
        let name = match instances {
            1 => "rockstate".to_string(),
            _ => format!("rockstate-{i}"),
        };
        KeyedBackend::builder(dir.path().join(name))
            .options(options.clone())
            .memory_budget(budget.clone())
            .max_parallelism(128)
            .key_groups(range)
            .open()
    })?;
    let ours = Sharded {
        parts: backends
            .parts
            .iter()
            .map(|b| bench_state(b, args.ttl))
            .collect::<rockstate::Result<Vec<_>>>()?,
        owner: backends.owner.clone(),
    };
    let backend = &backends.parts[0];

    let open_raw = |name: &str, same_layout: bool| -> rockstate::Result<Sharded<Raw>> {
        let budget = MemoryBudget::new(budget_config.clone())?;
        Sharded::open(instances, |i, range| {
            // Cut files as rockstate's backend of those key groups cuts them. On raw keys
            // that changes nothing: keys below 2^56 share their first byte.
            let partition = rockstate::keygroup::file_partition_prefix_len(128, range);
            let path = match instances {
                1 => dir.path().join(name),
                _ => dir.path().join(format!("{name}-{i}")),
            };
            let db =
                rockstate::RawRocksDb::open_like_rockstate(&path, &options, &budget, partition)?;
            Ok(Raw { db, same_layout })
        })
    };
    let raw = open_raw("raw", false)?;
    let raw_same = open_raw("raw-same-layout", true)?;

    Line::header()
        .label("bench ops:")
        .int("keys", args.keys)
        .int("value_bytes", args.value_bytes as u64)
        .text("existing_keys", key_distribution(args))
        .text("insert_order", args.insert_order.name())
        .int("ops", args.ops.unwrap_or(args.keys).min(args.keys))
        .text("ttl", if args.ttl { "week" } else { "off" })
        .int("instances", u64::from(instances))
        .note(
            "rockstate RawValueState vs raw rust-rocksdb, same options; raw_same_layout stores \
             rockstate's key layout, so layout_ratio is rockstate's code cost alone (rockstate \
             hands writes to RocksDB in sorted batches from its write cache, the raw stores put \
             one at a time, and answers reads of keys above every stored key of their key group \
             from its key bounds); every \
             store is flushed and compacted, untimed, before each phase; the stores take turns \
             in 20 slices per phase",
        )
        .print();
    for phase in Phase::ALL {
        for b in &backends.parts {
            b.wait_for_compactions()?;
        }
        for r in raw.parts.iter().chain(&raw_same.parts) {
            r.settle()?;
        }
        // The state's own files (not the metadata's): reads probe the ones whose range holds
        // the key.
        let files = [
            levels(|p| backend.state_property("bench", p).ok().flatten()),
            raw.parts[0].files(),
            raw_same.parts[0].files(),
        ];
        let ops = run_phase(&[&ours, &raw, &raw_same], phase, &workload)?;
        phase_line(phase, &ops, &files);
    }
    drop((ours, backends, raw, raw_same));
    if args.no_solo {
        return Ok(());
    }
    run_solo(args, dir.path(), options, budget_config, &workload)
}

/// The workload through rockstate alone, one line per phase.
fn run_solo(
    args: &OpsArgs,
    dir: &std::path::Path,
    options: DbOptions,
    budget_config: MemoryBudgetConfig,
    workload: &Workload,
) -> rockstate::Result<()> {
    // The interleaved pass runs three databases whose flushes and compactions compete for the
    // same cores; a stream task has one. Absolute figures come from this second pass.
    Line::header()
        .label("bench ops solo:")
        .int("keys", args.keys)
        .int("value_bytes", args.value_bytes as u64)
        .text("existing_keys", key_distribution(args))
        .text("insert_order", args.insert_order.name())
        .int("ops", args.ops.unwrap_or(args.keys).min(args.keys))
        .text("ttl", if args.ttl { "week" } else { "off" })
        .note(
            "the same workload through rockstate alone (a fresh database, the other stores \
             closed), for absolute figures",
        )
        .print();
    let backend = KeyedBackend::builder(dir.join("rockstate-solo"))
        .options(options)
        .memory_budget(MemoryBudget::new(budget_config)?)
        .open()?;
    let ours = bench_state(&backend, args.ttl)?;
    let mut solo = Vec::new();
    for phase in Phase::ALL {
        backend.wait_for_compactions()?;
        // Reads probe every file whose key range holds the key, so the shape of the tree
        // before a phase (which varies with flush timing) explains much of its spread.
        let before = backend.metrics()?.rocksdb;
        // The state's own files, as the comparison pass prints them: the backend's metrics
        // count every column family's, the default one's (metadata) too.
        let lsm = levels(|p| backend.state_property("bench", p).ok().flatten());
        let ops = run_phase(&[&ours], phase, workload)?;
        solo.push(ops[0]);
        Line::new()
            .text("solo_phase", phase.name())
            .num("rockstate_ops_s", ops[0], 0)
            .text("files_before", &lsm)
            .int("cache_pinned_bytes_before", before.block_cache_pinned_bytes)
            .int("value_cache_entries_before", before.value_cache_entries)
            .print();
    }
    drop((ours, backend));
    if args.no_reference {
        return Ok(());
    }

    // The issue's figures for Flink came with raw rust-rocksdb "with bloom filters and a 256 MB
    // block cache" measured in the same conditions. Running that configuration here tells how
    // fast this machine is today next to those conditions.
    Line::header()
        .label("bench ops reference:")
        .note(
            "raw rust-rocksdb alone with RocksDB's default options plus a 10-bit bloom filter, a \
             256 MiB LRU block cache, LZ4 and the WAL off (the issue's reference configuration), \
             8-byte keys as they are; its compactions run in the process's one compaction pool, \
             at low priority unless --normal-priority-compaction; vs_reference = \
             rockstate solo / reference",
        )
        .print();
    let reference = open_reference(&dir.join("reference"))?;
    for (phase, ours) in Phase::ALL.into_iter().zip(solo) {
        reference.settle()?;
        let ops = run_phase(&[&reference], phase, workload)?;
        Line::new()
            .text("reference_phase", phase.name())
            .num("reference_ops_s", ops[0], 0)
            .num("vs_reference", ours / ops[0], 3)
            .print();
    }
    Ok(())
}

/// Raw rust-rocksdb in the reference configuration (see the reference pass).
fn open_reference(path: &std::path::Path) -> rockstate::Result<Raw> {
    Ok(Raw {
        db: rockstate::RawRocksDb::open_reference(path)?,
        same_layout: false,
    })
}

/// The heap baseline: a plain ordered map, keys raw or in rockstate's layout.
struct RawHeap {
    map: std::cell::RefCell<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
    same_layout: bool,
}

impl RawHeap {
    fn new(same_layout: bool) -> Self {
        RawHeap {
            map: Default::default(),
            same_layout,
        }
    }
    fn key(&self, key: &[u8]) -> Vec<u8> {
        baseline_key(key, self.same_layout)
    }
}

impl Store for RawHeap {
    fn get(&self, key: &[u8]) -> rockstate::Result<Option<Vec<u8>>> {
        Ok(self.map.borrow().get(&self.key(key)).cloned())
    }
    fn put(&self, key: &[u8], value: &[u8]) -> rockstate::Result<()> {
        self.map.borrow_mut().insert(self.key(key), value.to_vec());
        Ok(())
    }
}

/// How update, get and read-modify-write draw existing keys, for the header lines.
fn key_distribution(args: &OpsArgs) -> String {
    match args.zipf {
        Some(s) => format!("zipf:{s}"),
        None => "uniform".to_string(),
    }
}

/// What every store of a run shares: the key count, the operations per phase, the values
/// written and how existing keys are drawn.
pub(crate) struct Workload {
    /// Keys inserted (the insert phase writes each once).
    keys: u64,
    /// Operations of every other phase (at most `keys`).
    ops: u64,
    seed: u64,
    /// Which store goes first in the first slice of each phase.
    pub(crate) rotate: usize,
    values: Vec<Vec<u8>>,
    /// Cumulative Zipf weights of key ranks 0..N (`--zipf`); `None`: keys are uniform.
    zipf_cdf: Option<Vec<f64>>,
    /// The insert phase's keys in order, a seeded random permutation of `0..keys`; `None`:
    /// ascending.
    shuffled: Option<Vec<u64>>,
}

impl Workload {
    fn new(args: &OpsArgs) -> rockstate::Result<Self> {
        let ops = args.ops.unwrap_or(args.keys);
        Workload::with(
            args.keys,
            ops,
            args.value_bytes,
            args.zipf,
            args.seed,
            args.insert_order,
        )
    }

    /// `keys` keys of `value_bytes`-byte values, inserted in `insert_order`, `ops` operations
    /// per phase after the insert (capped at `keys`), existing keys uniform or
    /// Zipf-distributed with exponent `zipf`.
    pub(crate) fn with(
        keys: u64,
        ops: u64,
        value_bytes: usize,
        zipf: Option<f64>,
        seed: u64,
        insert_order: InsertOrder,
    ) -> rockstate::Result<Self> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let shuffled = (insert_order == InsertOrder::Shuffled).then(|| {
            let mut order: Vec<u64> = (0..keys).collect();
            // A stream of its own: no other draw of the benchmark uses this seed.
            order.shuffle(&mut SmallRng::seed_from_u64(seed ^ 0x1_05e2_7ede_0dde));
            order
        });
        let values = (0..4096)
            .map(|_| {
                let mut v = vec![0u8; value_bytes];
                rng.fill_bytes(&mut v);
                v
            })
            .collect();
        let zipf_cdf = match zipf {
            None => None,
            Some(s) if s > 0.0 && s.is_finite() && keys > 0 => {
                let mut total = 0.0;
                let cdf = (1..=keys)
                    .map(|rank| {
                        total += 1.0 / (rank as f64).powf(s);
                        total
                    })
                    .collect();
                Some(cdf)
            }
            Some(s) => {
                return Err(rockstate::Error::InvalidOption {
                    name: "--zipf",
                    detail: format!("{s} is not a positive exponent (or --keys is 0)"),
                })
            }
        };
        Ok(Workload {
            keys,
            ops: ops.min(keys),
            seed,
            rotate: 0,
            values,
            zipf_cdf,
            shuffled,
        })
    }

    /// Operations of `phase`: every key for the insert, `ops` for the others.
    fn ops(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Insert => self.keys,
            _ => self.ops,
        }
    }

    /// The `i`-th key the insert phase writes (`i` in `0..keys`).
    fn inserted_key(&self, i: u64) -> u64 {
        self.shuffled.as_ref().map_or(i, |keys| keys[i as usize])
    }

    /// An existing key: uniform in `0..n`, or Zipf-distributed ranks scattered over `0..n`
    /// (rank r is key `r * P mod n` for a prime P that does not divide n, a bijection).
    fn existing_key(&self, rng: &mut SmallRng, n: u64) -> u64 {
        let Some(cdf) = &self.zipf_cdf else {
            return rng.random_range(0..n);
        };
        let total = cdf.last().copied().unwrap_or(0.0);
        let u: f64 = rng.random::<f64>() * total;
        let rank = (cdf.partition_point(|&c| c < u) as u64).min(n - 1);
        const P: u128 = 2_147_483_647;
        let p = if (n as u128).is_multiple_of(P) {
            2_305_843_009_213_693_951
        } else {
            P
        };
        ((rank as u128 * p) % n as u128) as u64
    }
}

/// `--backend heap`: the phases through the heap backend vs BTreeMaps, then the snapshot.
fn run_heap(args: &OpsArgs) -> rockstate::Result<()> {
    let backend = KeyedBackend::heap_builder().open()?;
    let ours = bench_state(&backend, args.ttl)?;
    let raw = RawHeap::new(false);
    let raw_same = RawHeap::new(true);
    let workload = Workload::new(args)?;
    Line::header()
        .label("bench ops:")
        .int("keys", args.keys)
        .int("value_bytes", args.value_bytes as u64)
        .text("backend", "heap")
        .text("insert_order", args.insert_order.name())
        .note(
            "rockstate heap RawValueState vs a plain BTreeMap<Vec<u8>, Vec<u8>>; raw_same_layout \
             stores rockstate's key layout, so layout_ratio is rockstate's code overhead alone",
        )
        .print();
    for phase in Phase::ALL {
        let ops = run_phase(&[&ours, &raw, &raw_same], phase, &workload)?;
        phase_line(phase, &ops, &Default::default());
    }
    drop((raw, raw_same));

    // Snapshot the whole state (args.keys entries of args.value_bytes) into a savepoint on a
    // second thread while this thread, the task, keeps updating random keys.
    let dir = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    let path = dir.path().join("savepoint");
    // The machine is shared: also report the fastest of a few extra (discarded) snapshots, so
    // scheduler noise can be told from the cost of taking one.
    let mut blocked_min = std::time::Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        drop(backend.full_snapshot()?);
        blocked_min = blocked_min.min(t.elapsed());
    }
    let start = Instant::now();
    let snapshot = backend.full_snapshot()?;
    let blocked = start.elapsed();
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let stats = snapshot.write_savepoint(&path, &Default::default());
            (stats, start.elapsed())
        })
    };
    let mut rng = SmallRng::seed_from_u64(args.seed ^ 0x5eed);
    let mut updates = 0u64;
    while !writer.is_finished() {
        let key = rng.random_range(0..args.keys).to_be_bytes();
        ours.put(
            &key,
            &[],
            &workload.values[(updates as usize) % workload.values.len()],
        )?;
        updates += 1;
    }
    let updating = start.elapsed();
    let (stats, total) = writer.join().map_err(|_| rockstate::Error::Decode {
        what: "benchmark",
        detail: "snapshot thread panicked".into(),
    })?;
    let stats = stats?;
    Line::new()
        .label("heap_snapshot")
        .num("blocked_ms", blocked.as_secs_f64() * 1e3, 4)
        .num("total_ms", total.as_secs_f64() * 1e3, 0)
        .num("blocked_min_ms", blocked_min.as_secs_f64() * 1e3, 4)
        .int("entries", stats.entries)
        .int("file_bytes", stats.file_bytes)
        .int("task_updates_during", updates)
        .num(
            "task_update_ops_s_during",
            updates as f64 / updating.as_secs_f64(),
            0,
        )
        .print();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both orders write every key exactly once; the shuffled one, not in order.
    #[test]
    fn the_insert_phase_writes_every_key_once_in_either_order() {
        for n in [1u64, 2, 7, 1000, 4096] {
            for order in [InsertOrder::Shuffled, InsertOrder::Ascending] {
                let w = Workload::with(n, n, 8, None, 42, order).unwrap();
                let mut keys: Vec<u64> = (0..n).map(|i| w.inserted_key(i)).collect();
                let scattered = keys.windows(2).any(|p| p[0] > p[1]);
                // A shuffle of a thousand keys or more is never sorted by chance.
                match order {
                    InsertOrder::Ascending => assert!(!scattered, "{n}"),
                    InsertOrder::Shuffled => assert!(scattered || n < 1000, "{n}"),
                }
                keys.sort_unstable();
                assert!(keys.iter().copied().eq(0..n), "{n} {order:?}");
            }
        }
    }
}
