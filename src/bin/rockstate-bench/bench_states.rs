//! `rockstate-bench states`: list and map state operations in the shape of Flink's own state
//! benchmarks (apache/flink-benchmarks `ListStateBenchmark`, `MapStateBenchmark`: 8-byte
//! `Long` keys, lists of 100 `Long` elements, maps of 10 `Long` → `Double` entries per key;
//! `--map-value-bytes` makes the map values larger),
//! through rockstate alone, one line per phase. `scripts/flink-bench.sh --states` runs the
//! same phases through Flink's RocksDB backend (`benches/flink/FlinkStates.java`) in turns
//! with this and prints rockstate / Flink per phase.
//!
//! Phases, each timed on its own after an untimed flush and wait for compactions (so reads
//! start from SST files, as in `bench ops`):
//!
//! - `list_fill`: every key gets a list of `list_len` elements (one `update` per key);
//! - `list_append`: `ops` single-element appends to random existing lists;
//! - `list_get`: `ops` reads of a random key's whole list, every element visited;
//! - `list_update`: `ops` replacements of a random key's list by `list_len` elements;
//! - `map_fill`: `map_len` entries put per key;
//! - `map_update`: `ops` puts over existing entries of random keys;
//! - `map_get`: `ops` gets of existing entries;
//! - `map_contains`: `ops` lookups, half of them of user keys the map does not hold;
//! - `map_iterate`: `ops` visits of every entry of a random key's map;
//! - `map_is_empty`: `ops` emptiness checks of random keys;
//! - `map_remove`: `ops` removals of existing entries.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::{
    CodecId, DbOptions, KeyedBackend, MemoryBudget, MemoryBudgetConfig, RawListState, RawMapState,
};

use crate::bench_ops::{levels, parse_override};
use crate::report::Line;
use crate::support::io;

/// Arguments of `bench states`.
#[derive(clap::Args, Debug)]
pub struct StatesArgs {
    /// Number of keys (each with one list and one map).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Elements of each list (8 bytes each).
    #[arg(long, default_value_t = 100)]
    list_len: u64,
    /// Entries of each map (8-byte user keys and values).
    #[arg(long, default_value_t = 10)]
    map_len: u64,
    /// Bytes of each map value (at least 8; Flink's benchmark stores 8-byte `Double`s):
    /// the value's first 8 bytes, then bytes of a random pool that differ from entry to
    /// entry, so that compression does not shrink them.
    #[arg(long, default_value_t = 8)]
    map_value_bytes: usize,
    /// Operations of each phase after the fills.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Gives both states a TTL of a week (nothing expires during the run).
    #[arg(long)]
    ttl: bool,
    /// Overrides of the memory budget as JSON, e.g. `{"total_bytes":134217728}`.
    #[arg(long)]
    budget: Option<String>,
    /// Overrides of the RocksDB options as JSON, e.g. `{"block_size":4096}`.
    #[arg(long)]
    options: Option<String>,
    /// Runs only the phases whose name contains this (the fills always run).
    #[arg(long)]
    only: Option<String>,
}

/// The list phases, in order.
const LIST_PHASES: [&str; 4] = ["list_fill", "list_append", "list_get", "list_update"];
/// The map phases, in order; `append_and_iterate` interleaves a list append of one key with a
/// map iteration of another, as a join appends to its own side and reads the other's.
const MAP_PHASES: [&str; 8] = [
    "map_fill",
    "map_update",
    "map_get",
    "map_contains",
    "map_iterate",
    "map_is_empty",
    "append_and_iterate",
    "map_remove",
];

/// A state of the benchmark: named `name`, with a week's TTL when `ttl`.
fn descriptor(name: &str, ttl: bool) -> rockstate::StateDescriptor {
    let d = rockstate::StateDescriptor::new(name);
    if ttl {
        d.with_ttl(rockstate::TtlConfig::new(std::time::Duration::from_secs(
            7 * 24 * 3600,
        )))
    } else {
        d
    }
}

/// Runs the phases and prints one line per phase.
pub fn run(args: &StatesArgs) -> rockstate::Result<()> {
    if args.keys == 0 || args.list_len == 0 || args.map_len == 0 || args.map_value_bytes < 8 {
        return Err(rockstate::Error::InvalidOption {
            name: "states",
            detail: "--keys, --list-len and --map-len must be at least 1, --map-value-bytes \
                     at least 8"
                .into(),
        });
    }
    let dir = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    let budget: MemoryBudgetConfig = parse_override("--budget", args.budget.as_deref())?;
    let options: DbOptions = parse_override("--options", args.options.as_deref())?;
    let backend = KeyedBackend::builder(dir.path().join("rockstate"))
        .options(options)
        .memory_budget(MemoryBudget::new(budget)?)
        .open()?;
    let codec = CodecId::new("bytes", 1);
    let list = backend.raw_list_state(descriptor("list", args.ttl), codec.clone())?;
    let map = backend.raw_map_state(descriptor("map", args.ttl), codec)?;
    Line::header()
        .label("bench states:")
        .int("keys", args.keys)
        .int("list_len", args.list_len)
        .int("map_len", args.map_len)
        .int("map_value_bytes", args.map_value_bytes as u64)
        .int("ops", args.ops)
        .text("ttl", if args.ttl { "week" } else { "off" })
        .note(
            "list and map state in the shape of flink-benchmarks' ListStateBenchmark and \
             MapStateBenchmark (8-byte keys, elements and user keys, map values of \
             map_value_bytes); each phase starts after a flush and a wait for compactions",
        )
        .print();
    let w = Work {
        args,
        list,
        map,
        pool: MapValues::new(args.map_value_bytes, args.seed),
    };
    for phase in LIST_PHASES.iter().chain(MAP_PHASES.iter()) {
        let fill = phase.ends_with("_fill");
        if !fill && !args.only.as_deref().is_none_or(|o| phase.contains(o)) {
            continue;
        }
        backend.wait_for_compactions()?;
        // The phase's state's SST files per level: a scan seeks in each level holding files
        // over its key, so the tree's shape explains much of a read phase's speed.
        let state = if phase.starts_with("list") {
            "list"
        } else {
            "map"
        };
        let files = levels(|p| backend.state_property(state, p).ok().flatten());
        let (ops, secs) = w.phase(phase)?;
        // What the state holds once the phase's writes are flushed and compacted, untimed:
        // RocksDB's estimate of its entries (on lists, dead entries a blind `update` left
        // until a read or a compaction removes them count too) and its live SST bytes.
        backend.wait_for_compactions()?;
        let property = |p: &str| backend.state_property(state, p).ok().flatten().unwrap_or(0);
        Line::new()
            .text("solo_phase", *phase)
            .num("rockstate_ops_s", ops as f64 / secs, 0)
            .int("ops", ops)
            .text("files_before", &files)
            .int("entries_after", property("rocksdb.estimate-num-keys"))
            .int("sst_bytes_after", property("rocksdb.live-sst-files-size"))
            .print();
    }
    Ok(())
}

/// The states and the arguments the phases run with.
struct Work<'a> {
    args: &'a StatesArgs,
    list: RawListState,
    map: RawMapState,
    pool: MapValues,
}

/// Map values of `--map-value-bytes`: the 8 bytes a phase puts, then a window of a random
/// pool chosen by them, so entries side by side in a block do not repeat each other's bytes.
struct MapValues {
    bytes: usize,
    pool: Vec<u8>,
}

impl MapValues {
    /// Bytes of the random pool the windows are taken from.
    const POOL: usize = 1 << 20;

    fn new(bytes: usize, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6d61_7076);
        let pool = if bytes > 8 {
            (0..Self::POOL + bytes)
                .map(|_| rng.random::<u8>())
                .collect()
        } else {
            Vec::new()
        };
        MapValues { bytes, pool }
    }

    /// Writes the value whose first 8 bytes are `head` into `buf` and returns it.
    fn value<'b>(&self, head: [u8; 8], buf: &'b mut Vec<u8>) -> &'b [u8] {
        buf.clear();
        buf.extend_from_slice(&head);
        if self.bytes > 8 {
            let at = (u64::from_be_bytes(head) % Self::POOL as u64) as usize;
            buf.extend_from_slice(&self.pool[at..at + self.bytes - 8]);
        }
        buf
    }
}

impl Work<'_> {
    /// Runs `phase`; returns its operation count and the seconds it took. The random keys are
    /// drawn before the clock starts.
    fn phase(&self, phase: &str) -> rockstate::Result<(u64, f64)> {
        let a = self.args;
        let mut rng = SmallRng::seed_from_u64(a.seed ^ fnv(phase));
        let draws: Vec<(u64, u64)> = (0..a.ops)
            .map(|_| (rng.random_range(0..a.keys), rng.random::<u64>()))
            .collect();
        let element = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
        let elements: Vec<[u8; 8]> = (0..a.list_len).map(element).collect();
        let mut visited = 0u64;
        let mut buf = Vec::with_capacity(a.map_value_bytes);
        let start = Instant::now();
        let ops = match phase {
            "list_fill" => {
                for k in 0..a.keys {
                    self.list
                        .update(&k.to_be_bytes(), &[], elements.iter().map(|e| &e[..]))?;
                }
                a.keys
            }
            "list_append" => {
                for &(k, r) in &draws {
                    self.list.add(&k.to_be_bytes(), &[], &r.to_be_bytes())?;
                }
                a.ops
            }
            "list_get" => {
                for &(k, _) in &draws {
                    self.list.for_each(&k.to_be_bytes(), &[], |e| {
                        visited += u64::from(e.len() == 8);
                        Ok(true)
                    })?;
                }
                a.ops
            }
            "list_update" => {
                for &(k, _) in &draws {
                    self.list
                        .update(&k.to_be_bytes(), &[], elements.iter().map(|e| &e[..]))?;
                }
                a.ops
            }
            "map_fill" => {
                for k in 0..a.keys {
                    for u in 0..a.map_len {
                        let v = self.pool.value(element(u), &mut buf);
                        self.map.put(&k.to_be_bytes(), &[], &u.to_be_bytes(), v)?;
                    }
                }
                a.keys * a.map_len
            }
            "map_update" => {
                for &(k, r) in &draws {
                    let u = r % a.map_len;
                    let v = self.pool.value(r.to_be_bytes(), &mut buf);
                    self.map.put(&k.to_be_bytes(), &[], &u.to_be_bytes(), v)?;
                }
                a.ops
            }
            "map_get" => {
                for &(k, r) in &draws {
                    let u = r % a.map_len;
                    let v = self.map.get(&k.to_be_bytes(), &[], &u.to_be_bytes())?;
                    visited += u64::from(v.is_some_and(|v| v.len() == a.map_value_bytes));
                }
                a.ops
            }
            "map_contains" => {
                for &(k, r) in &draws {
                    // Half the lookups miss: user keys map_len.. are never put.
                    let u = r % (2 * a.map_len);
                    visited +=
                        u64::from(self.map.contains(&k.to_be_bytes(), &[], &u.to_be_bytes())?);
                }
                a.ops
            }
            "map_iterate" => {
                for &(k, _) in &draws {
                    self.map.for_each(&k.to_be_bytes(), &[], |_, v| {
                        visited += u64::from(v.len() == a.map_value_bytes);
                        Ok(true)
                    })?;
                }
                a.ops
            }
            "map_is_empty" => {
                for &(k, _) in &draws {
                    visited += u64::from(!self.map.is_empty(&k.to_be_bytes(), &[])?);
                }
                a.ops
            }
            "append_and_iterate" => {
                for &(k, r) in &draws {
                    self.list
                        .add(&(r % a.keys).to_be_bytes(), &[], &r.to_be_bytes())?;
                    self.map.for_each(&k.to_be_bytes(), &[], |_, v| {
                        visited += u64::from(v.len() == a.map_value_bytes);
                        Ok(true)
                    })?;
                }
                a.ops
            }
            "map_remove" => {
                for &(k, r) in &draws {
                    let u = r % a.map_len;
                    self.map.remove(&k.to_be_bytes(), &[], &u.to_be_bytes())?;
                }
                a.ops
            }
            other => {
                return Err(rockstate::Error::InvalidOption {
                    name: "states",
                    detail: format!("unknown phase {other}"),
                })
            }
        };
        let secs = start.elapsed().as_secs_f64();
        self.check(phase, visited)?;
        Ok((ops, secs))
    }

    /// Fails the run when a read phase saw fewer entries than the state must hold, so a
    /// broken state cannot pass for a fast one.
    fn check(&self, phase: &str, visited: u64) -> rockstate::Result<()> {
        let a = self.args;
        let expected_at_least = match phase {
            // Every list holds list_len elements at least (appends only add).
            "list_get" => a.ops * a.list_len,
            "map_get" | "map_is_empty" => a.ops,
            "map_iterate" | "append_and_iterate" => a.ops * a.map_len,
            _ => 0,
        };
        if visited < expected_at_least {
            return Err(rockstate::Error::Decode {
                what: "benchmark",
                detail: format!(
                    "phase {phase} saw {visited} entries, expected {expected_at_least}"
                ),
            });
        }
        Ok(())
    }
}

/// FNV-1a of `s`: a phase's seed offset.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
