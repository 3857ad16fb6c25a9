//! `rockstate-bench ttl`: what TTL costs and what it saves, measured in one run.
//!
//! 1. Churn: rounds of (insert fresh keys, advance the clock one round, full compaction as
//!    RocksDB's compaction would eventually do, incremental checkpoint) for a TTL
//!    state whose entries live 2.5 rounds and for the same state without TTL; prints live SST
//!    bytes per round. With TTL it stays bounded; without it grows linearly.
//! 2. `compaction_ratio`: full compaction of identical TTL data with the filter on vs off
//!    (throughput with / without; nothing is expired, so both keep every entry).
//! 3. `access_ratio`: get + update on a TTL value state vs a plain value state, each in a
//!    backend of its own with the same memory, in turns slice by slice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::ttl::Cleanup;
use rockstate::{
    KeyedBackend, ManualClock, MemoryBudget, MemoryBudgetConfig, StateDescriptor, TtlConfig,
};

use crate::report::Line;
use crate::support::io;

/// Arguments of `bench ttl`.
#[derive(clap::Args, Debug)]
pub struct TtlArgs {
    /// Churn rounds.
    #[arg(long, default_value_t = 20)]
    rounds: u64,
    /// Fresh keys per round.
    #[arg(long, default_value_t = 200_000)]
    keys_per_round: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Keys for the access phase.
    #[arg(long, default_value_t = 500_000)]
    access_keys: u64,
    /// Timed compactions per configuration (filter on, filter off), in alternating order.
    #[arg(long, default_value_t = 4)]
    compactions: u64,
}

const ROUND_MS: u64 = 1000;

fn open(dir: &std::path::Path, clock: &ManualClock) -> rockstate::Result<KeyedBackend> {
    KeyedBackend::builder(dir.join("db"))
        .clock(Arc::new(clock.clone()))
        .memory_budget(MemoryBudget::new(MemoryBudgetConfig::default())?)
        .checkpoint_storage(Arc::new(rockstate::storage::LocalStorage::new(
            dir.join("checkpoints"),
        )?))
        .open()
}

/// Runs all three parts and prints their lines.
pub fn run(args: &TtlArgs) -> rockstate::Result<()> {
    let tmp = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    // Incompressible values, so SST sizes reflect the data.
    let mut rng = SmallRng::seed_from_u64(42);
    let values: Vec<Vec<u8>> = (0..1024)
        .map(|_| (0..args.value_bytes).map(|_| rng.random::<u8>()).collect())
        .collect();
    let value_for = |k: u64| &values[(k % 1024) as usize];

    // 1. Churn.
    let clock = ManualClock::new(1_000_000);
    let with = open(&tmp.path().join("churn-ttl"), &clock)?;
    let without = open(&tmp.path().join("churn-plain"), &clock)?;
    let ttl = TtlConfig::new(Duration::from_millis(ROUND_MS * 5 / 2));
    let ttl_state = with.raw_value_state(
        StateDescriptor::new("s").with_ttl(ttl.clone()),
        rockstate::CodecId::new("bytes", 1),
    )?;
    let plain_state = without.raw_value_state("s", rockstate::CodecId::new("bytes", 1))?;
    Line::header()
        .label("bench ttl churn:")
        .int("rounds", args.rounds)
        .int("keys_per_round", args.keys_per_round)
        .int("value_bytes", args.value_bytes as u64)
        .text("ttl", "2.5 rounds")
        .print();
    let bar = crate::progress::bar(args.rounds, "rounds", "churn");
    let mut max_round_bytes = 0u64;
    let mut last_ttl_bytes = 0u64;
    for round in 0..args.rounds {
        for i in 0..args.keys_per_round {
            let k = round * args.keys_per_round + i;
            ttl_state.put(&k.to_be_bytes(), &[], value_for(k))?;
            plain_state.put(&k.to_be_bytes(), &[], value_for(k))?;
        }
        clock.advance(Duration::from_millis(ROUND_MS));
        let mut sizes = [0u64; 2];
        let mut uploaded = [0u64; 2];
        for (i, b) in [&with, &without].into_iter().enumerate() {
            b.flush()?;
            b.compact_state("s")?;
            sizes[i] = b
                .state_property("s", "rocksdb.live-sst-files-size")?
                .unwrap_or(0);
            let stats = b.checkpoint(round + 1)?;
            b.notify_checkpoint_complete(round + 1)?;
            uploaded[i] = stats.bytes_uploaded;
        }
        if round == 0 {
            max_round_bytes = sizes[1];
        }
        last_ttl_bytes = sizes[0];
        bar.inc(1);
        Line::new()
            .int("round", round + 1)
            .int("ttl_live_sst_bytes", sizes[0])
            .int("no_ttl_live_sst_bytes", sizes[1])
            .int("ttl_checkpoint_uploaded_bytes", uploaded[0])
            .int("no_ttl_checkpoint_uploaded_bytes", uploaded[1])
            .print_above(&bar);
    }
    bar.finish_and_clear();
    Line::new()
        .num(
            "churn_ttl_rounds_worth",
            last_ttl_bytes as f64 / max_round_bytes.max(1) as f64,
            2,
        )
        .int(
            "dropped_by_compaction",
            with.ttl_stats("s")?.dropped_by_compaction,
        )
        .print();
    drop((ttl_state, plain_state, with, without));

    // 2. Compaction with vs without the filter, same TTL data (nothing expired).
    let clock = ManualClock::new(1_000_000);
    let long = TtlConfig::new(Duration::from_secs(365 * 24 * 3600));
    // Each configuration `compactions` times, in alternating order, on a fresh database whose
    // background compactions have finished (untimed); the timed manual compaction then
    // rewrites every entry once, through the filter or not. A first, untimed run warms the
    // process up: the first compaction of a process runs slower, and with the filter always
    // first in the first pair, two identical configurations measured 0.905 and 0.939.
    let mut secs = [0f64; 2];
    let n = args.keys_per_round * 5;
    for round in 0..=args.compactions {
        let order: &[usize] = match round {
            0 => &[0],
            r if r % 2 == 1 => &[0, 1],
            _ => &[1, 0],
        };
        for &i in order {
            let filter = i == 0;
            let dir = tmp.path().join(format!("compact-{round}-{i}"));
            let b = open(&dir, &clock)?;
            let cfg = long.clone().cleanup(Cleanup {
                compaction_filter: filter,
                ..Cleanup::default()
            });
            let s = b.raw_value_state(
                StateDescriptor::new("s").with_ttl(cfg),
                rockstate::CodecId::new("bytes", 1),
            )?;
            for k in 0..n {
                s.put(&k.to_be_bytes(), &[], value_for(k))?;
            }
            b.wait_for_compactions()?;
            let start = Instant::now();
            b.compact_state("s")?;
            if round > 0 {
                secs[i] += start.elapsed().as_secs_f64();
            }
            drop((s, b));
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
    }
    Line::new()
        .int("compaction_entries", n)
        .num("with_filter_s", secs[0], 3)
        .num("without_filter_s", secs[1], 3)
        .num("compaction_ratio", secs[1] / secs[0], 3)
        .print();

    // 3. Access: get + update, TTL vs plain. Each state has a backend of its own with the
    // same memory budget, so neither evicts the other's values from its value cache (in one
    // backend, whichever state ran last would find the cache full of its own values and the
    // other none of its). The phase is cut into slices the two take in turns, the first of
    // each pair alternating, so a burst of load from elsewhere hits both alike.
    let backends = [
        open(&tmp.path().join("access-ttl"), &clock)?,
        open(&tmp.path().join("access-plain"), &clock)?,
    ];
    let states = [
        backends[0].value_state::<u64, (), Vec<u8>>(StateDescriptor::new("s").with_ttl(ttl))?,
        backends[1].value_state::<u64, (), Vec<u8>>("s")?,
    ];
    for k in 0..args.access_keys {
        for s in &states {
            s.put(&k, &(), value_for(k))?;
        }
    }
    for b in &backends {
        b.wait_for_compactions()?;
    }
    const SLICES: u64 = 20;
    let mut rngs = [SmallRng::seed_from_u64(7), SmallRng::seed_from_u64(7)];
    let mut secs = [0f64; 2];
    for slice in 0..SLICES {
        let per = args.access_keys * (slice + 1) / SLICES - args.access_keys * slice / SLICES;
        let order = if slice % 2 == 0 { [0usize, 1] } else { [1, 0] };
        for i in order {
            let (s, rng) = (&states[i], &mut rngs[i]);
            let start = Instant::now();
            for _ in 0..per {
                let k = rng.random_range(0..args.access_keys);
                let v = s.get(&k, &())?.unwrap_or_default();
                s.put(&k, &(), &v)?;
            }
            secs[i] += start.elapsed().as_secs_f64();
        }
    }
    let rates = secs.map(|s| 2.0 * args.access_keys as f64 / s);
    Line::new()
        .text("access_ops", "get+update")
        .num("ttl_ops_s", rates[0], 0)
        .num("plain_ops_s", rates[1], 0)
        .num("access_ratio", rates[0] / rates[1], 3)
        .print();
    Ok(())
}
