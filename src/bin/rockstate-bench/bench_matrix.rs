//! `rockstate-bench matrix`: `bench ops`'s phases over the workloads users run, rockstate's
//! value state against raw rust-rocksdb given the same memory, one line per cell, phase and
//! round, then each cell and phase's median over the rounds.
//!
//! The cells: state that fits the memory budget or is a multiple of it × existing keys
//! uniform or Zipf-distributed × 100-byte or 1 KiB values × a plain or a TTL value state. The
//! raw store is plain RocksDB opened with the options rockstate builds, on a memory budget of
//! the same size (block cache and write buffers), and writes the values as they are: in TTL
//! cells the ratio carries everything TTL costs (the 8-byte timestamp, the expiry check, the
//! compaction filter). Every round builds each cell's stores anew (the insert phase) and the
//! store that goes first rotates from round to round and slice to slice.
//!
//! Caveat for the cells beyond the budget: the budget bounds what RocksDB keeps in the
//! process (block cache, memtables, rockstate's caches); the kernel's page cache still holds
//! recently read SST files on a machine with more free memory than the state, for both stores
//! alike.

use rockstate::{DbOptions, KeyedBackend, MemoryBudget, MemoryBudgetConfig};

use crate::bench_ops::{
    bench_state, levels, parse_override, run_phase, InsertOrder, Phase, Raw, Store, Workload,
};
use crate::report::Line;
use crate::support::{io, median};

/// Arguments of `bench matrix`.
#[derive(clap::Args, Debug)]
pub struct MatrixArgs {
    /// Rounds; the summary gives each cell's median over them.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Memory budget of each store, MiB.
    #[arg(long, default_value_t = 128)]
    budget_mib: usize,
    /// State of the cells that fit, as a fraction of the budget.
    #[arg(long, default_value_t = 0.5)]
    fits: f64,
    /// State of the cells beyond memory, as a multiple of the budget.
    #[arg(long, default_value_t = 4.0)]
    beyond: f64,
    /// Operations per phase after the insert (at most the cell's key count).
    #[arg(long, default_value_t = 500_000)]
    ops: u64,
    /// Zipf exponent of the skewed cells.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Run only the cells whose name contains this (e.g. `beyond`, `zipf/1024B`, `ttl`).
    #[arg(long)]
    only: Option<String>,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Overrides of the RocksDB options (applied to both stores) as JSON, e.g.
    /// `{"value_cache_bytes":0}`.
    #[arg(long)]
    options: Option<String>,
    /// Also run raw RocksDB storing rockstate's key layout (key group first), a third store
    /// on a budget of its own: `layout_ratio` is rockstate against it, so what the layout
    /// costs and what rockstate's code costs can be told apart.
    #[arg(long)]
    same_layout: bool,
    /// The order the insert phase writes the keys in.
    #[arg(long, value_enum, default_value_t = InsertOrder::Shuffled)]
    insert_order: InsertOrder,
    /// Compacts every store fully before the read phases, so they read the same shape of
    /// LSM tree (one level) instead of whatever level-0 files their flushes left: what the
    /// read path costs apart from where the last flush fell. Not what a running job sees.
    #[arg(long)]
    compact_before_reads: bool,
}

/// One workload of the matrix.
#[derive(Clone, Copy)]
struct Cell {
    beyond: bool,
    zipf: bool,
    value_bytes: usize,
    ttl: bool,
}

impl Cell {
    fn all() -> Vec<Cell> {
        let mut cells = Vec::new();
        for beyond in [false, true] {
            for zipf in [false, true] {
                for value_bytes in [100, 1024] {
                    for ttl in [false, true] {
                        cells.push(Cell {
                            beyond,
                            zipf,
                            value_bytes,
                            ttl,
                        });
                    }
                }
            }
        }
        cells
    }

    fn name(&self) -> String {
        format!(
            "{}/{}/{}B/{}",
            if self.beyond { "beyond" } else { "fits" },
            if self.zipf { "zipf" } else { "uniform" },
            self.value_bytes,
            if self.ttl { "ttl" } else { "plain" }
        )
    }

    /// Keys whose entries (value, a 16-byte allowance for key and overhead) add up to the
    /// cell's state size; the same for the plain and the TTL cell of a shape.
    fn keys(&self, args: &MatrixArgs) -> u64 {
        let budget = (args.budget_mib << 20) as f64;
        let state = budget * if self.beyond { args.beyond } else { args.fits };
        (state / (self.value_bytes + 16) as f64) as u64
    }
}

/// A figure per round of one cell and phase.
struct Series {
    cell: String,
    phase: Phase,
    ours: Vec<f64>,
    raw: Vec<f64>,
    ratio: Vec<f64>,
}

/// Runs every selected cell `rounds` times and prints the lines and the summary.
pub fn run(args: &MatrixArgs) -> rockstate::Result<()> {
    if args.rounds == 0 || args.budget_mib < 8 || !(args.fits > 0.0 && args.beyond > 0.0) {
        return Err(rockstate::Error::InvalidOption {
            name: "bench matrix",
            detail: "--rounds >= 1, --budget-mib >= 8, --fits and --beyond > 0".into(),
        });
    }
    let cells: Vec<Cell> = Cell::all()
        .into_iter()
        .filter(|c| args.only.as_ref().is_none_or(|o| c.name().contains(o)))
        .collect();
    Line::header()
        .label("bench matrix:")
        .int("budget_bytes", (args.budget_mib << 20) as u64)
        .num("fits", args.fits, 2)
        .num("beyond", args.beyond, 1)
        .int("ops", args.ops)
        .num("zipf", args.zipf, 2)
        .text("insert_order", args.insert_order.name())
        .int("compact_before_reads", u64::from(args.compact_before_reads))
        .int("rounds", args.rounds as u64)
        .int("cells", cells.len() as u64)
        .text("options", args.options.as_deref().unwrap_or("{}"))
        .note(
            "rockstate RawValueState vs raw rust-rocksdb with rockstate's options on a budget of \
             the same size; cell = fits|beyond / uniform|zipf / value bytes / plain|ttl; every \
             store flushed and its pending compactions run, untimed, before each phase \
             (files_before, raw_files_before: each store's files per level then); the stores \
             take turns in 20 slices, the first rotating",
        )
        .print();
    // One series per cell and phase, cell by cell in the order `run_cell` returns phases.
    let mut series: Vec<Series> = cells
        .iter()
        .flat_map(|c| {
            Phase::ALL.into_iter().map(|phase| Series {
                cell: c.name(),
                phase,
                ours: Vec::new(),
                raw: Vec::new(),
                ratio: Vec::new(),
            })
        })
        .collect();
    for round in 0..args.rounds {
        for (c, cell) in cells.iter().enumerate() {
            let rates = run_cell(args, cell, round)?;
            for (p, (ours, raw)) in rates.into_iter().enumerate() {
                let s = &mut series[c * Phase::ALL.len() + p];
                s.ours.push(ours);
                s.raw.push(raw);
                s.ratio.push(ours / raw);
            }
        }
    }
    Line::header()
        .label("bench matrix summary:")
        .note("medians over the rounds; ratio = median of the rounds' rockstate / raw")
        .print();
    for s in &series {
        let lo = s.ratio.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = s.ratio.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Line::new()
            .label("median")
            .text("cell", &s.cell)
            .text("phase", s.phase.name())
            .num("rockstate_ops_s", median(s.ours.clone()), 0)
            .num("raw_ops_s", median(s.raw.clone()), 0)
            .num("ratio", median(s.ratio.clone()), 3)
            .num("ratio_min", lo, 3)
            .num("ratio_max", hi, 3)
            .print();
    }
    Ok(())
}

/// Builds one cell's two stores, runs the phases, prints a line per phase; returns each
/// phase's (rockstate, raw) ops/s.
fn run_cell(args: &MatrixArgs, cell: &Cell, round: usize) -> rockstate::Result<Vec<(f64, f64)>> {
    let dir = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    let keys = cell.keys(args);
    let mut w = Workload::with(
        keys,
        args.ops,
        cell.value_bytes,
        cell.zipf.then_some(args.zipf),
        args.seed,
        args.insert_order,
    )?;
    w.rotate = round;
    let budget_config = MemoryBudgetConfig {
        total_bytes: args.budget_mib << 20,
        ..MemoryBudgetConfig::default()
    };
    let options: DbOptions = parse_override("--options", args.options.as_deref())?;
    let backend = KeyedBackend::builder(dir.path().join("rockstate"))
        .options(options.clone())
        .memory_budget(MemoryBudget::new(budget_config.clone())?)
        .open()?;
    let ours = bench_state(&backend, cell.ttl)?;
    let partition =
        rockstate::keygroup::file_partition_prefix_len(128, rockstate::KeyGroupRange::all(128)?);
    let open_raw = |name: &str, same_layout: bool| -> rockstate::Result<Raw> {
        Ok(Raw {
            db: rockstate::RawRocksDb::open_like_rockstate(
                &dir.path().join(name),
                &options,
                &MemoryBudget::new(budget_config.clone())?,
                partition,
            )?,
            same_layout,
        })
    };
    let raw = open_raw("raw", false)?;
    let raw_same = args
        .same_layout
        .then(|| open_raw("raw-same-layout", true))
        .transpose()?;
    let mut rates = Vec::new();
    for phase in Phase::ALL {
        if args.compact_before_reads && phase == Phase::Get {
            backend.compact_state("bench")?;
            raw.db.compact_all();
            if let Some(r) = &raw_same {
                r.db.compact_all();
            }
        }
        backend.wait_for_compactions()?;
        raw.settle()?;
        let mut stores: Vec<&dyn Store> = vec![&ours, &raw];
        if let Some(r) = &raw_same {
            r.settle()?;
            stores.push(r);
        }
        let files = levels(|p| backend.state_property("bench", p).ok().flatten());
        let raw_files = raw.files();
        let ops = run_phase(&stores, phase, &w)?;
        let mut line = Line::new()
            .int("round", round as u64 + 1)
            .text("cell", cell.name())
            .int("keys", keys)
            .text("phase", phase.name())
            .num("rockstate_ops_s", ops[0], 0)
            .num("raw_ops_s", ops[1], 0)
            .num("ratio", ops[0] / ops[1], 3);
        if let Some(same) = ops.get(2) {
            line =
                line.num("raw_same_layout_ops_s", *same, 0)
                    .num("layout_ratio", ops[0] / same, 3);
        }
        line.text("files_before", files)
            .text("raw_files_before", raw_files)
            .print();
        rates.push((ops[0], ops[1]));
    }
    Ok(rates)
}
